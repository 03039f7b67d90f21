# The fifty-third session's third call (bench/NOTES.md): the cluster merge's steps on their own
# (bench/probes/cluster_merge_probe.cu), then the one-part cluster merge by pushes into the first
# CTA (MVLLM_ATTN_CLUSTER_PUSH=1) against main's pull form, in one binary. .carry/s53c
# (git-ignored): mvllm.xz, test_cuda.xz, mvllm-atl.xz (-DMVLLM_ATTN_TIMELINE=ON) built from this
# commit, cluster_merge_probe (nvcc -O3 -std=c++20 -arch=sm_90), lib.txz as .carry/s51a. Since the
# call the same rows run through ab05 / tests_env (bench/s40_common.sh), test_cuda after the 4K rows.
. bench/s40_common.sh
C=${C:-.carry/s53c}
s40_setup $C
atl_unpack $C
timeout 60 $C/cluster_merge_probe 33 > $R/probe.txt 2>&1; echo "probe rc=$?"; cat $R/probe.txt
P=MVLLM_ATTN_CLUSTER_PUSH=1
model05
ab05 pull push $P
tests_env push $P
atl05 128 push 8 $P
ab_b1_7b pull push $P
