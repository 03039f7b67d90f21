#!/usr/bin/env bash
# The serving benchmark in one command: starts `mvllm serve` on a free loopback port, runs
# `mvllm bench serve` against it at each concurrency level, stops the server (SIGTERM), and writes
# bench/results/serve_<name>.json and .svg. Extra arguments after -- go to `mvllm serve`.
#
#   scripts/bench_serve.sh                                   # default model, CPU, 1,16,64 clients
#   scripts/bench_serve.sh --name h200_q05 -m q05.gguf --device cuda -- --kv-cache-memory 8GiB
#
# Options: --mvllm PATH (build/bin/mvllm), -m MODEL (the default model), --device cpu|cuda,
# -t THREADS, --name NAME (<device>_<model file>), --concurrency LIST (1,16,64),
# --input-len N|MIN:MAX (128), --output-len N|MIN:MAX (128), --num-requests N (0: 4 x clients),
# --out DIR (bench/results)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mvllm="$root/build/bin/mvllm"; model=""; device="cpu"; threads=""; name=""; levels="1,16,64"
input_len=128; output_len=128; num_requests=0; out="$root/bench/results"; serve_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --mvllm) mvllm=$2; shift 2 ;;
    -m|--model) model=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    -t|--threads) threads=$2; shift 2 ;;
    --name) name=$2; shift 2 ;;
    --concurrency) levels=$2; shift 2 ;;
    --input-len) input_len=$2; shift 2 ;;
    --output-len) output_len=$2; shift 2 ;;
    --num-requests) num_requests=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; serve_args=("$@"); break ;;
    *) echo "bench_serve.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -x "$mvllm" ] || { echo "bench_serve.sh: $mvllm not built (cmake --build build --target mvllm)" >&2; exit 1; }
model_name=$(basename "${model:-mvllm-austen-q8_0.gguf}" .gguf)
name=${name:-${device}_${model_name}}
mkdir -p "$out"
args=(serve --port 0 --device "$device" --max-num-seqs 256)
[ -n "$model" ] && args+=(-m "$model")
[ -n "$threads" ] && args+=(-t "$threads")
log=$(mktemp)
"$mvllm" "${args[@]}" "${serve_args[@]}" 2>"$log" &
server=$!
trap 'kill "$server" 2>/dev/null || true; rm -f "$log"' EXIT
port=""
for _ in $(seq 1 3000); do  # up to 5 minutes: a large model loads first
  port=$(sed -n 's|^serving .* on http://127\.0\.0\.1:\([0-9]*\) .*|\1|p' "$log")
  [ -n "$port" ] && break
  kill -0 "$server" 2>/dev/null || break
  sleep 0.1
done
[ -n "$port" ] || { echo "bench_serve.sh: the server did not start:" >&2; cat "$log" >&2; exit 1; }
sed -n '1,/^serving/p' "$log" >&2
label="$device, $model_name"
rc=0
"$mvllm" bench serve --url "http://127.0.0.1:$port" --concurrency "$levels" --input-len "$input_len" \
  --output-len "$output_len" --num-requests "$num_requests" --label "$label" \
  --json-out "$out/serve_$name.json" || rc=$?
kill -TERM "$server"; wait "$server" || true
python3 "$root/scripts/plot_bench_serve.py" "$out/serve_$name.json" -o "$out/serve_$name.svg"
exit $rc
