# The thirty-eighth session's second call (bench/NOTES.md, thirty-eighth session): call 1 found the
# Q prefetch a small gain or neutral everywhere and the timeline without a trigger (the next kernel
# launching as the CTAs exit) 3.4 % faster on the 0.5B after 32K. Same binaries (.carry/s37), env
# switches only: batch-1 decode after 128 / 2K / 32K tokens, both geometries, with the prefetch and
# each trigger point (2 after the tiles, 3 after the warp merge, 4 at exit), and with the spread
# merge; test_cuda (all but CudaOps) with the prefetch and no trigger; the 7B's timeline after 32K with the prefetch, with and without a trigger.
export NEW_BIN=.carry/s37/mvllm.xz LIB_TXZ=.carry/s37/lib.txz ATL_BIN=.carry/s37/atl.xz TEST_BIN=.carry/s37/test_cuda.xz
O=$OUT
S=MVLLM_ATTN_SPREAD_MERGE=1 P=MVLLM_ATTN_PREFETCH_Q=1
OUT=$O/t MVLLM_ATTN_PREFETCH_Q=1 MVLLM_ATTN_TRIGGER=4 GTEST_FILTER='-CudaOps.*' STAGES=test bash bench/picks_device_run.sh
OUT=$O/b STAGES=decode DEC_MODELS="0.5b 7b" DEC_PROMPT="128 2048 32768" ROUNDS=1 \
  AB_VARS="$P $P,MVLLM_ATTN_TRIGGER=2 $P,MVLLM_ATTN_TRIGGER=3 $P,MVLLM_ATTN_TRIGGER=4 $S,$P" \
  bash bench/picks_device_run.sh
OUT=$O/a STAGES=atl ATL_PROMPT=32768 DEC_MODELS=7b ATL_VARS="$P $P,MVLLM_ATTN_TRIGGER=4" bash bench/picks_device_run.sh
