# The fortieth session's eighth call (bench/NOTES.md): the final tree's binary (.carry/s40g) with
# shorter F32 splits (MVLLM_ATTN_F32_MIN_SPLIT=32 / 16: twice / four times the CTAs at 1K-4K, more
# warps an SM, fewer tiles a warp) against the default floor of 64, F32 rows only, two rounds.
. bench/s40_common.sh
s40_setup .carry/s40g
for round in 1 2; do for ms in 64 32 16; do
  MVLLM_ATTN_F32_MIN_SPLIT=$ms timeout 100 bin/mvllm bench attention --quick --contexts 512,1024,2048,4096,16384 \
    --json-out $R/min${ms}_$round.json > $R/min${ms}_$round.log 2>&1
  echo "min split $ms round $round: $(f32rows $R/min${ms}_$round.log | tr '\n' ';' | tr -s ' ')"
done; done
