# The next session's first call (bench/NOTES.md, thirty-seventh session, "What would move next"):
# the spread split merge (MVLLM_ATTN_SPREAD_MERGE=1) and the L2 prefetch of Q's inputs before the
# wait (MVLLM_ATTN_PREFETCH_Q=1), both off by default, on the binaries of the thirty-seventh
# session's final tree (.carry/s37: mvllm, test_cuda, a timeline build; sm_90, stripped, xz).
# test_cuda with the defaults and with both switches on; batch-1 decode after 128 and 32K tokens
# (both geometries) with each switch and both; the 0.5B's attention timeline after 32K with each
# switch and with the trigger at exit (MVLLM_ATTN_TRIGGER=4: no next kernel streaming during the
# merge); B1 at 4K / 16K / 32K with each switch.
export NEW_BIN=.carry/s37/mvllm.xz LIB_TXZ=.carry/s37/lib.txz ATL_BIN=.carry/s37/atl.xz TEST_BIN=.carry/s37/test_cuda.xz
O=$OUT
S=MVLLM_ATTN_SPREAD_MERGE=1 P=MVLLM_ATTN_PREFETCH_Q=1
OUT=$O/t STAGES=test bash bench/picks_device_run.sh
OUT=$O/t2 MVLLM_ATTN_SPREAD_MERGE=1 MVLLM_ATTN_PREFETCH_Q=1 STAGES=test bash bench/picks_device_run.sh
OUT=$O/a STAGES=atl ATL_PROMPT=32768 DEC_MODELS=0.5b ATL_VARS="$S $P MVLLM_ATTN_TRIGGER=4" bash bench/picks_device_run.sh
OUT=$O/b STAGES=decode DEC_MODELS="0.5b 7b" DEC_PROMPT="128 32768" ROUNDS=1 AB_VARS="$S $P $S,$P" \
  bash bench/picks_device_run.sh
OUT=$O/c STAGES=attn ATTN_CONTEXTS=4096,16384,32768 ATTN_VARS="$S $P" bash bench/picks_device_run.sh
