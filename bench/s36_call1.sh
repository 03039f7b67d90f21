# Thirty-sixth session, call 1 (bench/NOTES.md): the attention timeline after 32K (0.5B, default and
# spread) and after 2K (both), decode after 16K / 32K, B1 at 4K / 16K / 32K.
# (Ran on 94d3913: MVLLM_ATTN_SPREAD existed then and was removed after this call.)
export NEW_BIN=.carry/s36/mvllm.xz LIB_TXZ=.carry/s36/lib.txz ATL_BIN=.carry/s36/atl.xz
O=$OUT
OUT=$O/a STAGES=atl ATL_PROMPT=32768 DEC_MODELS=0.5b ATL_VARS=MVLLM_ATTN_SPREAD=1 bash bench/picks_device_run.sh
OUT=$O/e STAGES=atl ATL_PROMPT=2048 DEC_MODELS="0.5b 7b" bash bench/picks_device_run.sh
OUT=$O/b STAGES=decode DEC_MODELS=0.5b DEC_PROMPT="16384 32768" ROUNDS=1 \
  AB_VARS="MVLLM_ATTN_SPREAD=1 MVLLM_ATTN_SPLITS=32 MVLLM_ATTN_SPLITS=96" bash bench/picks_device_run.sh
OUT=$O/c STAGES=attn ATTN_CONTEXTS=4096,16384,32768 ATTN_VARS="MVLLM_ATTN_SPREAD=1 MVLLM_ATTN_SPLITS=32" \
  bash bench/picks_device_run.sh
OUT=$O/d STAGES="atl decode" DEC_MODELS=7b ATL_PROMPT=32768 DEC_PROMPT=32768 ROUNDS=1 AB_VARS=none \
  bash bench/picks_device_run.sh
