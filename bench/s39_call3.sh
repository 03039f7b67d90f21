# The thirty-ninth session's third call (bench/NOTES.md): the final kernel (Q read once per CTA
# through shared memory, no per-warp path left; the 8-warp F16 head_dim-64 kernel bound to two CTAs
# an SM; B1 with the trigger after Q), .carry/s39, against dc7cd6a's binary (.carry/s38/mvllm.xz,
# "@old") in the same call. test_cuda; B1 at 4K / 16K / 32K: new, old, and new with the late trigger
# (MVLLM_ATTN_TRIGGER=3, what old runs in B1 at 16K / 32K); batch-1 decode of both geometries after
# 128 / 2K / 32K tokens, new and old, two rounds; the attention's phases after 32K (call 1 has old's).
export NEW_BIN=.carry/s39/mvllm.xz LIB_TXZ=.carry/s39/lib.txz TEST_BIN=.carry/s39/test_cuda.xz ATL_BIN=.carry/s39/atl.xz
export EXTRA_BINS="old=.carry/s38/mvllm.xz"
O=$OUT
OUT=$O/t STAGES=test bash bench/picks_device_run.sh
OUT=$O/c STAGES=attn ATTN_CONTEXTS=4096,16384,32768 ATTN_VARS="@old MVLLM_ATTN_TRIGGER=3" bash bench/picks_device_run.sh
OUT=$O/b STAGES=decode DEC_MODELS="0.5b 7b" DEC_PROMPT="128 2048 32768" ROUNDS=2 AB_VARS="@old" \
  bash bench/picks_device_run.sh
OUT=$O/a STAGES=atl ATL_PROMPT=32768 DEC_MODELS="0.5b 7b" bash bench/picks_device_run.sh
