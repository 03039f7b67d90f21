# The next session's first call (bench/NOTES.md, thirty-eighth session, "What would move next"):
# the final tree of the thirty-eighth session on a GPU (.carry/s38: mvllm, test_cuda; sm_90,
# stripped, xz). test_cuda with its defaults (the spread merge and the late trigger are now rules,
# not switches); B1 at 4K / 16K / 32K with the defaults, with the trigger after Q everywhere
# (MVLLM_ATTN_TRIGGER=1: the old default) and without the spread merge (MVLLM_ATTN_SPREAD_MERGE=0);
# batch-1 decode after 128 / 2K / 32K tokens, both geometries, the same three and the attention's
# first tiles only prefetched to L2 before the wait (MVLLM_EARLY_LOADS=6: does the 7B's Q wait
# ~2 us behind those loads, and do they pay for it after 32K?); the attention
# timeline after 32K, both geometries, whose marks 11-13 now time one line each of Q's row, bias
# and rotations in turn.
export NEW_BIN=.carry/s38/mvllm.xz LIB_TXZ=.carry/s38/lib.txz TEST_BIN=.carry/s38/test_cuda.xz ATL_BIN=.carry/s38/atl.xz
O=$OUT
OUT=$O/t STAGES=test bash bench/picks_device_run.sh
OUT=$O/c STAGES=attn ATTN_CONTEXTS=4096,16384,32768 ATTN_VARS="MVLLM_ATTN_TRIGGER=1 MVLLM_ATTN_SPREAD_MERGE=0" \
  bash bench/picks_device_run.sh
OUT=$O/b STAGES=decode DEC_MODELS="0.5b 7b" DEC_PROMPT="128 2048 32768" ROUNDS=1 \
  AB_VARS="MVLLM_ATTN_TRIGGER=1 MVLLM_ATTN_SPREAD_MERGE=0 MVLLM_EARLY_LOADS=6" bash bench/picks_device_run.sh
OUT=$O/a STAGES=atl ATL_PROMPT=32768 DEC_MODELS="0.5b 7b" bash bench/picks_device_run.sh
