# The fifty-second session's second call (bench/NOTES.md): the cluster merge's first barrier
# publishing shared memory only (MVLLM_ATTN_CLUSTER_FENCE=1) and its remote loads through
# shared::cluster addresses (MVLLM_ATTN_DSMEM_LD=1), by environment in one binary.
# .carry/s52b (git-ignored): mvllm.xz, test_cuda.xz, mvllm-atl.xz (the same code built with
# -DMVLLM_ATTN_TIMELINE=ON), lib.txz as .carry/s51a. Since session 53 the same rows run through ab05 /
# tests_env (bench/s40_common.sh), test_cuda after the 4K rows. MVLLM_ATTN_DSMEM_LD is gone from main.
. bench/s40_common.sh
C=${C:-.carry/s52b}
s40_setup $C
atl_unpack $C
B="MVLLM_ATTN_CLUSTER_FENCE=1 MVLLM_ATTN_DSMEM_LD=1"
model05
ab05 def both "$B"
# test_cuda in full with both switches on (the code a default flip would run)
tests_env both $B
atl05 128 def 8
atl05 128 both 8 $B
ab_b1_7b def both "$B"
