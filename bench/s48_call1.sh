# Prepared in the forty-seventh session for the next one's first call (bench/NOTES.md, "What would
# move next"). .carry/s48a (git-ignored; rebuilt from branch cluster-merge-vec if gone): mvllm.xz and
# test_cuda.xz (main + two forms of the cluster merge: the vector form, the default there, stages the
# cluster's (max, sum) pairs by one remote load a thread, then four dims a thread with one vector
# load a split; MVLLM_ATTN_CLUSTER_MERGE=direct merges the warps' partials in the cluster merge with
# no warp merge first (one-part 4-warp plans); =scalar is main's form), mvllm-atl.xz (the same with
# -DMVLLM_ATTN_TIMELINE=ON), lib.txz. The shipped model travels: move bench/results and the draft
# model out first (64 MiB). Even so, the tree with all three binaries is over 64 MiB: C=.carry/s48b
# holds all but mvllm-atl.xz, and the call then skips step 4.
# 1. test_cuda, all of it, and its attention tests with the direct form. 2. Batch-1 decode vector /
# scalar / direct: the 0.5B q4_0 after 128 (two rounds) and 4K, the 7B after 4K. 3. B1 quick rows
# (F16, 4K and 32K), vector / scalar. 4. The attention timeline of the 0.5B after 128, vector / direct.
. bench/s40_common.sh
C=${C:-.carry/s48a}
s40_setup $C
[ -f $C/mvllm-atl.xz ] && xz -dc $C/mvllm-atl.xz > bin/mvllm-atl && chmod +x bin/mvllm-atl
s40_tests
attn_tests direct MVLLM_ATTN_CLUSTER_MERGE=direct
q4_models
S=MVLLM_ATTN_CLUSTER_MERGE=scalar D=MVLLM_ATTN_CLUSTER_MERGE=direct
for round in 1 2; do
  dec vec_05_128_$round bin/mvllm $M5 128
  dec scalar_05_128_$round bin/mvllm $M5 128 $S
  dec direct_05_128_$round bin/mvllm $M5 128 $D
done
dec vec_05_4096 bin/mvllm $M5 4096
dec scalar_05_4096 bin/mvllm $M5 4096 $S
dec vec_7_4096 bin/mvllm $M7 4096
dec scalar_7_4096 bin/mvllm $M7 4096 $S
export QUICK_CONTEXTS=4096,32768 QUICK_KV=f16
quick_rows b1_vec bin/mvllm
quick_rows b1_scalar bin/mvllm $S
if [ -x bin/mvllm-atl ]; then
  atl05 128 vec 3
  atl05 128 direct 3 $D
fi
