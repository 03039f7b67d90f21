# Session 48: bench/s48_call1.sh trimmed to the device time left after a morning of failed starts
# (carry .carry/s48b: mvllm, test_cuda and lib built from branch cluster-merge-vec): test_cuda in
# full and its attention tests with the direct form; batch-1 decode of the 0.5B q4_0 only (no 7B
# file to make) after 128 (vector / scalar / direct, two rounds) and 4K (vector / scalar); B1's
# quick F16 rows at 4K, vector / scalar.
. bench/s40_common.sh
s40_setup .carry/s48b
s40_tests
attn_tests direct MVLLM_ATTN_CLUSTER_MERGE=direct
mkdir -p /tmp/mvllm-models
timeout 100 bin/mvllm make-model $M5 --preset qwen2.5-0.5b --type q4_0 > /dev/null 2>&1; echo "model rc=$?"
S=MVLLM_ATTN_CLUSTER_MERGE=scalar D=MVLLM_ATTN_CLUSTER_MERGE=direct
for round in 1 2; do
  dec vec_05_128_$round bin/mvllm $M5 128
  dec scalar_05_128_$round bin/mvllm $M5 128 $S
  dec direct_05_128_$round bin/mvllm $M5 128 $D
done
dec vec_05_4096 bin/mvllm $M5 4096
dec scalar_05_4096 bin/mvllm $M5 4096 $S
export QUICK_CONTEXTS=4096 QUICK_KV=f16
quick_rows b1_vec bin/mvllm
quick_rows b1_scalar bin/mvllm $S
