# The fifty-third session's third call (bench/NOTES.md): the cluster merge's steps on their own
# (bench/probes/cluster_merge_probe.cu), then the one-part cluster merge by pushes into the first
# CTA (MVLLM_ATTN_CLUSTER_PUSH=1) against main's pull form, in one binary. .carry/s53c
# (git-ignored): mvllm.xz, test_cuda.xz, mvllm-atl.xz (-DMVLLM_ATTN_TIMELINE=ON) built from this
# commit, cluster_merge_probe (nvcc -O3 -std=c++20 -arch=sm_90), lib.txz as .carry/s51a.
. bench/s40_common.sh
C=${C:-.carry/s53c}
s40_setup $C
atl_unpack $C
timeout 60 $C/cluster_merge_probe 33 > $R/probe.txt 2>&1; echo "probe rc=$?"; cat $R/probe.txt
P=MVLLM_ATTN_CLUSTER_PUSH=1
model05
for round in 1 2; do
  dec pull_05_128_$round bin/mvllm $M5 128
  dec push_05_128_$round bin/mvllm $M5 128 $P
done
env $P timeout 250 bin/test_cuda > $R/test_cuda_push.log 2>&1
echo "test_cuda push rc=$? $(grep -E '^\[  (PASSED|FAILED)' $R/test_cuda_push.log | tr '\n' ' ')"; grep -E "FAILED|Failure" $R/test_cuda_push.log | head -20
dec pull_05_4096 bin/mvllm $M5 4096
dec push_05_4096 bin/mvllm $M5 4096 $P
atl05 128 push 8 $P
export QUICK_CONTEXTS=128,4096 QUICK_KV=f16
quick_rows b1_pull bin/mvllm
quick_rows b1_push bin/mvllm $P
timeout 150 bin/mvllm make-model $M7 --preset qwen2.5-7b --type q4_0 > /dev/null 2>&1; echo "7B model rc=$?"
dec pull_7_4096 bin/mvllm $M7 4096
dec push_7_4096 bin/mvllm $M7 4096 $P
