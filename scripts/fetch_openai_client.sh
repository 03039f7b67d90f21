#!/usr/bin/env bash
# Installs the official `openai` npm package (the version pinned in
# tests/server/openai_client/package.json) into tests/server/openai_client/node_modules, which is
# git-ignored. tests/server/openai_test.sh skips when it is absent.
# Usage: scripts/fetch_openai_client.sh [--force]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$root/tests/server/openai_client"
want="$(sed -n 's/.*"openai": *"\([^"]*\)".*/\1/p' "$dir/package.json")"
have="$(sed -n 's/.*"version": *"\([^"]*\)".*/\1/p' "$dir/node_modules/openai/package.json" 2>/dev/null | head -n 1 || true)"
if [[ "${1:-}" != "--force" && -n "$have" && "$have" == "$want" ]]; then
    echo "fetch_openai_client: openai $have already installed"
    exit 0
fi
command -v npm >/dev/null || { echo "fetch_openai_client: npm not found" >&2; exit 1; }
for attempt in 1 2 3; do
    if (cd "$dir" && npm install --silent --no-audit --no-fund --no-package-lock >/dev/null); then
        echo "fetch_openai_client: openai $want in $dir/node_modules"
        exit 0
    fi
    echo "fetch_openai_client: npm install failed (attempt $attempt)" >&2
    sleep $((attempt * 5))
done
exit 1
