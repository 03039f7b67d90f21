# The forty-seventh session's third call (bench/NOTES.md). .carry/s47c: mvllm.xz and test_cuda.xz
# (branch cluster-exit: the relaxed exit by default; the push form, MVLLM_ATTN_CLUSTER_EXIT=push,
# now arriving at the barrier's first phase after its tiles instead of right after Q), mvllm-atl.xz
# (the same with -DMVLLM_ATTN_TIMELINE=ON), lib.txz. The shipped model stays behind (room).
# 1. test_cuda's attention tests with the push form. 2. Batch-1 decode after 128 (0.5B, two rounds)
# and 4K tokens (the 0.5B q4_0 file only: device time), relaxed / push. 3. B1 quick rows (F16, 4K and 32K), relaxed / push.
# 4. The attention timeline of the 0.5B after 128, push.
. bench/s40_common.sh
s40_setup .carry/s47c
xz -dc .carry/s47c/mvllm-atl.xz > bin/mvllm-atl && chmod +x bin/mvllm-atl
attn_tests push MVLLM_ATTN_CLUSTER_EXIT=push
mkdir -p /tmp/mvllm-models && timeout 100 bin/mvllm make-model $M5 --preset qwen2.5-0.5b --type q4_0 > /dev/null 2>&1  # the 0.5B only (device time)
P=MVLLM_ATTN_CLUSTER_EXIT=push
for round in 1 2; do
  dec new_05_128_$round bin/mvllm $M5 128
  dec push_05_128_$round bin/mvllm $M5 128 $P
done
dec new_05_4096 bin/mvllm $M5 4096
dec push_05_4096 bin/mvllm $M5 4096 $P
export QUICK_CONTEXTS=4096,32768 QUICK_KV=f16
quick_rows b1_new bin/mvllm
quick_rows b1_push bin/mvllm $P
atl05 128 push 3 $P
