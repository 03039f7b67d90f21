# The fifty-second session's third call (bench/NOTES.md): which of call 2's two switches the
# items phase's +0.24 us belongs to: the shared-memory fences alone against both (the
# shared::cluster loads added), 0.5B q4_0 after 128 tokens, two rounds, then the timeline of the
# fences alone and of both (builds from 8693c3c on mark the cluster merge's remote values back, so
# the items phase splits into cm_loads and cm_stores). .carry/s52d (git-ignored): mvllm.xz and
# mvllm-atl.xz (-DMVLLM_ATTN_TIMELINE=ON) built from 8693c3c (both on by default; the
# rows set the switches explicitly), lib.txz as .carry/s51a.
. bench/s40_common.sh
atl05_setup ${C:-.carry/s52d}
for round in 1 2; do
  dec both_05_128_$round bin/mvllm $M5 128 MVLLM_ATTN_CLUSTER_FENCE=1 MVLLM_ATTN_DSMEM_LD=1
  dec fence_05_128_$round bin/mvllm $M5 128 MVLLM_ATTN_CLUSTER_FENCE=1 MVLLM_ATTN_DSMEM_LD=0
done
atl05 128 fence 8 MVLLM_ATTN_CLUSTER_FENCE=1 MVLLM_ATTN_DSMEM_LD=0
atl05 128 both 8 MVLLM_ATTN_CLUSTER_FENCE=1 MVLLM_ATTN_DSMEM_LD=1
