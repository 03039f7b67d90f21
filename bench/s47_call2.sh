# The forty-seventh session's second call (bench/NOTES.md). .carry/s47b: mvllm.xz and test_cuda.xz
# (main + the cluster merge leaving through a relaxed arrive: MVLLM_ATTN_CLUSTER_EXIT=full restores
# the full cluster.sync, =push selects its push form: one barrier, remote stores into the owner), mvllm-atl.xz (the same built with -DMVLLM_ATTN_TIMELINE=ON: marks 11 and 12
# inside the cluster merge), lib.txz. The shipped model stays behind (room), so test_cuda runs
# without its two batch-invariance tests.
# 1. test_cuda on the new default, and its attention tests with the push form. 2. Batch-1 decode
# after 128 (0.5B) and 4K tokens (both q4_0 files), new / full / push. 3. B1 quick rows (F16, 4K and
# 32K), new / full / push. 4. The attention timeline of the 0.5B after 128 (new / full / push) and
# 4K (new / push).
. bench/s40_common.sh
s40_setup .carry/s47b
xz -dc .carry/s47b/mvllm-atl.xz > bin/mvllm-atl && chmod +x bin/mvllm-atl
s40_tests "-CudaBatchInvariance.*"
attn_tests push MVLLM_ATTN_CLUSTER_EXIT=push
q4_models
F=MVLLM_ATTN_CLUSTER_EXIT=full P=MVLLM_ATTN_CLUSTER_EXIT=push
for round in 1 2; do
  dec new_05_128_$round bin/mvllm $M5 128
  dec full_05_128_$round bin/mvllm $M5 128 $F
  dec push_05_128_$round bin/mvllm $M5 128 $P
done
for m in $M5 $M7; do
  n=$(basename $m .gguf)
  dec new_${n}_4096 bin/mvllm $m 4096
  dec full_${n}_4096 bin/mvllm $m 4096 $F
  dec push_${n}_4096 bin/mvllm $m 4096 $P
done
export QUICK_CONTEXTS=4096,32768 QUICK_KV=f16
quick_rows b1_new bin/mvllm
quick_rows b1_full bin/mvllm $F
quick_rows b1_push bin/mvllm $P
atl05 128 new 12
atl05 128 full 12 $F
atl05 128 push 12 $P
atl05 4096 new 12
atl05 4096 push 12 $P
