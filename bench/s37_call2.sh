# Thirty-seventh session, call 2 (bench/NOTES.md): the split merge spread over a row's last CTAs (a
# head each) against the last CTA's warp merge: test_cuda (the spread merge's bit test among them),
# the attention timeline of the 0.5B after 32K, decode after 16K / 32K (both geometries), B1 at 16K / 32K.
export NEW_BIN=.carry/s37/mvllm.xz LIB_TXZ=.carry/s37/lib.txz ATL_BIN=.carry/s37/atl.xz TEST_BIN=.carry/s37/test_cuda.xz
O=$OUT
OUT=$O/t STAGES=test bash bench/picks_device_run.sh
OUT=$O/a STAGES=atl ATL_PROMPT=32768 DEC_MODELS=0.5b ATL_VARS=MVLLM_ATTN_SPREAD_MERGE=1 bash bench/picks_device_run.sh
OUT=$O/b STAGES=decode DEC_MODELS="0.5b 7b" DEC_PROMPT="16384 32768" ROUNDS=1 AB_VARS=MVLLM_ATTN_SPREAD_MERGE=1 \
  bash bench/picks_device_run.sh
OUT=$O/c STAGES=attn ATTN_CONTEXTS=16384,32768 ATTN_VARS=MVLLM_ATTN_SPREAD_MERGE=1 bash bench/picks_device_run.sh
