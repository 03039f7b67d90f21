# The forty-ninth session's second call (bench/NOTES.md): branch warp-merge-own, whose decode kernel
# merges its warps with every thread computing its own head's weights (default) instead of n_g
# threads computing them once into shared memory behind a barrier (MVLLM_ATTN_WARP_MERGE=shared,
# main's form). .carry/s49a (git-ignored): mvllm.xz and test_cuda.xz stripped from the branch's
# build, lib.txz as .carry/s48b. Move bench/results and the draft model out of the tree first (64 MiB).
# 1. test_cuda in full (CudaAttention.WarpMergeFormsGiveTheSameBits compares the two forms' bits).
# 2. Batch-1 decode own / shared, interleaved: the 0.5B q4_0 after 128 (two rounds) and 4K, the 7B
#    after 128 and 4K. 3. B1 quick rows (F16, 4K and 32K), own / shared.
# TRIM=1 (little device time left): test_cuda's attention tests only, no 7B after 128, no 32K rows.
. bench/s40_common.sh
C=${C:-.carry/s49a}
s40_setup $C
if [ -n "${TRIM:-}" ]; then s40_tests 'CudaAttention.*'; else s40_tests; fi
q4_models
S=MVLLM_ATTN_WARP_MERGE=shared P7='128 4096' CTX=4096,32768
[ -z "${TRIM:-}" ] || { P7=4096; CTX=4096; }
ab05 own shared $S
for p in $P7; do
  dec own_7_$p bin/mvllm $M7 $p
  dec shared_7_$p bin/mvllm $M7 $p $S
done
export QUICK_CONTEXTS=$CTX QUICK_KV=f16
quick_rows b1_own bin/mvllm
quick_rows b1_shared bin/mvllm $S
