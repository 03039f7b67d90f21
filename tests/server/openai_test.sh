#!/usr/bin/env bash
# Starts `mvllm serve` (the default model) on a free loopback port and runs a node script that
# drives it through the official openai npm client (tests/server/openai_client/, installed by
# scripts/fetch_openai_client.sh). Exits 77 (CTest: skipped) only when node or the openai package
# is missing; any misbehaviour of the server is a failure. After the script, SIGTERM must drain
# and stop the server with exit status 0.
# Usage: openai_test.sh path/to/mvllm SCRIPT.mjs [server args...]
set -u
MVLLM=$1
SCRIPT=$2
shift 2
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
client_dir="$here/openai_client"

command -v node >/dev/null || { echo "SKIP: node not found"; exit 77; }
[ -f "$client_dir/node_modules/openai/package.json" ] ||
  { echo "SKIP: the openai npm package is not installed (scripts/fetch_openai_client.sh)"; exit 77; }

log=$(mktemp)
trap 'kill "$server" 2>/dev/null; rm -f "$log"' EXIT
"$MVLLM" serve --port 0 "$@" 2>"$log" &
server=$!
port=""
for _ in $(seq 1 600); do
  port=$(sed -n 's|^serving .* on http://127\.0\.0\.1:\([0-9]*\) .*|\1|p' "$log")
  [ -n "$port" ] && break
  kill -0 "$server" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$port" ]; then
  echo "FAIL: the server did not start"; cat "$log"; exit 1
fi
echo "server on port $port (pid $server)"

node "$client_dir/$SCRIPT" --base "http://127.0.0.1:$port" --mvllm "$MVLLM"
rc=$?

kill -TERM "$server"
wait "$server"
src=$?
if [ $src -ne 0 ]; then
  echo "FAIL: the server exited with status $src after SIGTERM"; rc=1
else
  echo "ok   SIGTERM: the server drained and exited 0"
fi
[ $rc -ne 0 ] && { echo "--- server log"; tail -n 50 "$log"; }
exit $rc
