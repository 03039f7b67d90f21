# Thirty-sixth session, call 2 (bench/NOTES.md): test_cuda of the refactored tree; the staged split
# merge against the warp merge: attention timeline of the 0.5B after 32K, decode after 32K (both
# geometries), B1 at 16K / 32K.
export NEW_BIN=.carry/s36/mvllm.xz LIB_TXZ=.carry/s36/lib.txz ATL_BIN=.carry/s36/atl.xz TEST_BIN=.carry/s36/test_cuda.xz
O=$OUT
OUT=$O/t STAGES=test bash bench/picks_device_run.sh
OUT=$O/a STAGES=atl ATL_PROMPT=32768 DEC_MODELS=0.5b ATL_VARS=MVLLM_ATTN_STAGED_MERGE=1 bash bench/picks_device_run.sh
OUT=$O/b STAGES=decode DEC_MODELS="0.5b 7b" DEC_PROMPT=32768 ROUNDS=1 AB_VARS=MVLLM_ATTN_STAGED_MERGE=1 \
  bash bench/picks_device_run.sh
OUT=$O/c STAGES=attn ATTN_CONTEXTS=16384,32768 ATTN_VARS=MVLLM_ATTN_STAGED_MERGE=1 bash bench/picks_device_run.sh
