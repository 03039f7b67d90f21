# Thirty-seventh session, call 2 at its smallest (bench/NOTES.md): test_cuda (the spread merge's bit
# test among them), the 0.5B's decode and attention timeline after 32K, with the spread split merge
# and without.
export NEW_BIN=.carry/s37/mvllm.xz LIB_TXZ=.carry/s37/lib.txz ATL_BIN=.carry/s37/atl.xz TEST_BIN=.carry/s37/test_cuda.xz
O=$OUT
OUT=$O/t STAGES=test bash bench/picks_device_run.sh
OUT=$O/b STAGES=decode DEC_MODELS=0.5b DEC_PROMPT=32768 ROUNDS=1 AB_VARS=MVLLM_ATTN_SPREAD_MERGE=1 \
  bash bench/picks_device_run.sh
OUT=$O/a STAGES=atl ATL_PROMPT=32768 DEC_MODELS=0.5b ATL_VARS=MVLLM_ATTN_SPREAD_MERGE=1 bash bench/picks_device_run.sh
