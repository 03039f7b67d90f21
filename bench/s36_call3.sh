# Thirty-sixth session, call 3 (bench/NOTES.md): what ~4 device minutes allow: test_cuda of the
# refactored tree (the staged merge's bit test among them), the 0.5B after 32K with the staged split
# merge against the warp merge: decode tok/s and the attention timeline (with the probe after the wait).
export NEW_BIN=.carry/s36/mvllm.xz LIB_TXZ=.carry/s36/lib.txz ATL_BIN=.carry/s36/atl.xz TEST_BIN=.carry/s36/test_cuda.xz
O=$OUT
OUT=$O/t STAGES=test bash bench/picks_device_run.sh
OUT=$O/b STAGES=decode DEC_MODELS=0.5b DEC_PROMPT=32768 ROUNDS=1 AB_VARS=MVLLM_ATTN_STAGED_MERGE=1 bash bench/picks_device_run.sh
OUT=$O/a STAGES=atl ATL_PROMPT=32768 DEC_MODELS=0.5b ATL_VARS=MVLLM_ATTN_STAGED_MERGE=1 bash bench/picks_device_run.sh
