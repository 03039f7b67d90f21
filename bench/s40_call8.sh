# The fortieth session's eighth call (bench/NOTES.md): the final tree's binary (.carry/s40g) with
# shorter F32 splits (MVLLM_ATTN_F32_MIN_SPLIT=32 / 16: twice / four times the CTAs at 1K-4K, more
# warps an SM, fewer tiles a warp) against the default floor of 64, F32 rows only, two rounds.
set -u
R=$OUT/r; mkdir -p $R bin
trap 'tar czf "$OUT/r.tgz" -C "$OUT" r 2>/dev/null; rm -rf "$R"' EXIT
mkdir -p /tmp/carried && tar xJf .carry/s40g/lib.txz -C /tmp/carried && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/tmp/carried/lib
xz -dc .carry/s40g/mvllm.xz > bin/mvllm && chmod +x bin/mvllm
nvidia-smi --query-gpu=name --format=csv,noheader
for round in 1 2; do for ms in 64 32 16; do
  MVLLM_ATTN_F32_MIN_SPLIT=$ms timeout 100 bin/mvllm bench attention --quick --contexts 512,1024,2048,4096,16384 \
    --json-out $R/min${ms}_$round.json > $R/min${ms}_$round.log 2>&1
  echo "min split $ms round $round: $(grep -E '^qwen.* f32 ' $R/min${ms}_$round.log | awk -F'|' '{printf "%s%s;", $1, $2}' | tr -s ' ')"
done; done
