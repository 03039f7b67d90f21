# The fifty-second session's second call (bench/NOTES.md): the cluster merge's first barrier
# publishing shared memory only (MVLLM_ATTN_CLUSTER_FENCE=1) and its remote loads through
# shared::cluster addresses (MVLLM_ATTN_DSMEM_LD=1), by environment in one binary.
# .carry/s52b (git-ignored): mvllm.xz, test_cuda.xz, mvllm-atl.xz (the same code built with
# -DMVLLM_ATTN_TIMELINE=ON), lib.txz as .carry/s51a.
. bench/s40_common.sh
C=${C:-.carry/s52b}
s40_setup $C
atl_unpack $C
B="MVLLM_ATTN_CLUSTER_FENCE=1 MVLLM_ATTN_DSMEM_LD=1"
model05
for round in 1 2; do
  dec def_05_128_$round bin/mvllm $M5 128
  dec both_05_128_$round bin/mvllm $M5 128 $B
done
# test_cuda in full with both switches on (the code a default flip would run)
env $B timeout 200 bin/test_cuda > $R/test_cuda_both.log 2>&1
echo "test_cuda both rc=$? $(grep -E '^\[  (PASSED|FAILED)' $R/test_cuda_both.log | tr '\n' ' ')"; grep -E "FAILED|Failure" $R/test_cuda_both.log | head -20
dec def_05_4096 bin/mvllm $M5 4096
dec both_05_4096 bin/mvllm $M5 4096 $B
atl05 128 def 8
atl05 128 both 8 $B
export QUICK_CONTEXTS=128,4096 QUICK_KV=f16
quick_rows b1_def bin/mvllm
quick_rows b1_both bin/mvllm $B
timeout 150 bin/mvllm make-model $M7 --preset qwen2.5-7b --type q4_0 > /dev/null 2>&1; echo "7B model rc=$?"
dec def_7_4096 bin/mvllm $M7 4096
dec both_7_4096 bin/mvllm $M7 4096 $B
