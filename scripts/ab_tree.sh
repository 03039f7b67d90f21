#!/usr/bin/env bash
# An A/B of two commits inside one GPU-machine call. Figures from different calls (different
# machines, or one machine at another time) drift by a few per cent, as much as many of the
# changes being measured; built side by side and run alternately, two binaries share the drift.
#   here:  scripts/ab_tree.sh pack REV   # REV's sources (no models, no results) -> .carry/ab/REV.tar.gz
#   there: scripts/ab_tree.sh build REV  # unpacked in $AB_DIR/REV and built like the working tree
#                                        # (bench/h200_run.sh's build stage); prints its bin/ folder
# Carry .carry (and .devdeps) to the machine. Then run the working tree's build-gpu/bin/mvllm and the
# printed folder's mvllm in turn, e.g. for r in 1 2; do for b in "$NEW" "$OLD"; do $b/mvllm bench ...
set -eu -o pipefail
AB_DIR=${AB_DIR:-/tmp/ab-tree}
usage() { echo "usage: scripts/ab_tree.sh pack REV | build REV" >&2; exit 2; }
[ $# -eq 2 ] || usage
rev=$2
case "$1" in
  pack)
    hash=$(git rev-parse --short "$rev^{commit}")
    mkdir -p .carry/ab
    git archive --format=tar "$hash" -- . ':(exclude)models' ':(exclude)bench/results' | gzip -1 > ".carry/ab/$rev.tar.gz"
    echo "$hash" > ".carry/ab/$rev.commit"
    echo ".carry/ab/$rev.tar.gz ($hash, $(du -k ".carry/ab/$rev.tar.gz" | cut -f1) KiB)" ;;
  build)
    src=$AB_DIR/$rev
    [ -f ".carry/ab/$rev.tar.gz" ] || { echo "no .carry/ab/$rev.tar.gz: run 'scripts/ab_tree.sh pack $rev' first" >&2; exit 1; }
    rm -rf "$src" && mkdir -p "$src"
    tar xzf ".carry/ab/$rev.tar.gz" -C "$src"
    export DEVDEPS=${DEVDEPS:-$PWD/.devdeps}  # the working tree's build dependencies (device_deps.sh)
    (cd "$src" && OUT="$src/out" STAGES=build COMMIT="$(cat "$OLDPWD/.carry/ab/$rev.commit")" \
      bash bench/h200_run.sh > "$src/build.txt" 2>&1) ||
      { tail -20 "$src/build.txt" >&2; exit 1; }
    echo "$src/build-gpu/bin" ;;
  *) usage ;;
esac
