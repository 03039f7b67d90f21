# The fortieth session's fourth call (bench/NOTES.md): the F32 fused kernel rewritten (4 dims a lane,
# the G heads' dots reduced by a reduce-scatter, one online-softmax update per tile of 4 row steps,
# 3-stage copy pipeline, 4 CTAs an SM) and the split merge over chunks of splits with independent
# loads; binaries in .carry/s40d, call 2's (.carry/s40b) as "old".
# Call 4: call 3 with rows past the split zero-filled (a NaN left in shared memory reached the sums), explicit
# FMA contractions (the same bits with and without the pipeline), Q loaded after the first copies, and the
# split merge in groups of splits (eight loads in flight a thread).
# 1. test_cuda. 2. B1 --quick (fused rows at 4K / 32K, batch 1 and 16), new then old.
# 3. the F32 rows over more contexts (new), and with MVLLM_ATTN_F32_MIN_SPLIT=128 / 256.
# 4. ncu of the new F32 kernel at 4K and 32K (stall samples per SASS instruction) and the
#    durations of the kernel and its merge at 4K.
S40_NEW=.carry/s40d bash bench/s40_call3.sh
