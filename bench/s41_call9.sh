# The forty-first session's ninth call (bench/NOTES.md): the F16 decode kernel's split count at
# batch 1 (8 warps; MVLLM_ATTN_SPLITS=n forces n plain splits, no clusters; 0 = the default plan)
# at 1K / 2K / 4K / 16K tokens, on the final binary (.carry/s41f). Two rounds.
. bench/s40_common.sh
s40_setup .carry/s41f
for round in 1 2; do for ctx in 1024 2048 4096 16384; do for s in 0 4 8 16 32 64; do
  [ $((s * 16)) -le $ctx ] || continue
  MVLLM_ATTN_WARPS=8 MVLLM_ATTN_SPLITS=$s timeout 60 bin/mvllm bench attention --quick --contexts $ctx --batches 1 \
    > $R/s${s}_${ctx}_$round.log 2>&1
  echo "ctx $ctx splits $s r$round: $(grep -E '^qwen.* (f16|bf16) ' $R/s${s}_${ctx}_$round.log | awk -F'|' '{print $1 "|" $2}' | awk '{print $1, $2, $NF}' | tr '\n' ';')"
done; done; done
