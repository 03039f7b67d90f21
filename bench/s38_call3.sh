# The thirty-eighth session's third call: the spread merge on the 0.5B (two single runs, H200 and
# H100, each +2.4-3 % after 32K; the 7B lost ~1 % on both), two rounds after 16K and 32K tokens.
export NEW_BIN=.carry/s37/mvllm.xz LIB_TXZ=.carry/s37/lib.txz
O=$OUT
S=MVLLM_ATTN_SPREAD_MERGE=1 P=MVLLM_ATTN_PREFETCH_Q=1
OUT=$O/b STAGES=decode DEC_MODELS="0.5b" DEC_PROMPT="16384 32768" ROUNDS=2 AB_VARS="$P $S,$P" \
  bash bench/picks_device_run.sh
