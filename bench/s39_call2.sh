# The thirty-ninth session's second call (bench/NOTES.md, thirty-ninth session): the tree with Q read
# once per CTA into shared memory (kSharedQ, on by default; MVLLM_ATTN_SHARED_Q=0 is the old
# per-warp loads) and B1's trigger after Q (AttentionNext::Attention), binaries built here for sm_90
# in .carry/s39 (mvllm, test_cuda, the attention-timeline build; the runtime libraries).
# test_cuda (the RoPE-fold test now also checks that shared Q gives the same bits); B1 at 4K / 16K /
# 32K with and without shared Q; batch-1 decode of both geometries after 128 / 2K / 32K tokens
# with and without it; the attention's phases after 2K tokens with and without it.
export NEW_BIN=.carry/s39/mvllm.xz LIB_TXZ=.carry/s39/lib.txz TEST_BIN=.carry/s39/test_cuda.xz ATL_BIN=.carry/s39/atl.xz
O=$OUT
OUT=$O/t STAGES=test bash bench/picks_device_run.sh
OUT=$O/c STAGES=attn ATTN_CONTEXTS=4096,16384,32768 ATTN_VARS="MVLLM_ATTN_SHARED_Q" bash bench/picks_device_run.sh
OUT=$O/b STAGES=decode DEC_MODELS="0.5b 7b" DEC_PROMPT="128 2048 32768" ROUNDS=1 \
  AB_VARS="MVLLM_ATTN_SHARED_Q" bash bench/picks_device_run.sh
OUT=$O/a STAGES=atl ATL_PROMPT=2048 DEC_MODELS="0.5b 7b" ATL_VARS="MVLLM_ATTN_SHARED_Q" bash bench/picks_device_run.sh
