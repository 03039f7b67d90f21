# Session 48's last try, in the device time left (carry .carry/s48b, branch cluster-merge-vec):
# test_cuda in full (the vector form is the branch's default), then the 0.5B q4_0 after 128,
# vector / scalar / direct, one round.
. bench/s40_common.sh
s40_setup .carry/s48b
s40_tests
mkdir -p /tmp/mvllm-models
timeout 100 bin/mvllm make-model $M5 --preset qwen2.5-0.5b --type q4_0 > /dev/null 2>&1; echo "model rc=$?"
dec vec_05_128 bin/mvllm $M5 128
dec scalar_05_128 bin/mvllm $M5 128 MVLLM_ATTN_CLUSTER_MERGE=scalar
dec direct_05_128 bin/mvllm $M5 128 MVLLM_ATTN_CLUSTER_MERGE=direct
dec vec_05_128_b bin/mvllm $M5 128
