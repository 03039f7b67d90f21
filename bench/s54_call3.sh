# The fifty-fourth session's third call (bench/NOTES.md): call 2's timeline showed the one-split,
# 8-warp plan's two CTAs on one SM in the step (median 2 sharing; the default's 8 CTAs: 0). Does the
# plan win B1's 1.27 us back once no SM can take two of them? MVLLM_ATTN_MIN_SMEM=120000 (a
# measurement switch of this binary) asks for over half an SM's shared memory a CTA.
# 0.5B q4_0 after 128 tokens, two rounds, then the timeline of the spread plan and B1's rows.
# .carry/s54c (git-ignored): mvllm.xz and mvllm-atl.xz (-DMVLLM_ATTN_TIMELINE=ON) built from this
# commit, lib.txz as .carry/s52d.
. bench/s40_common.sh
C=${C:-.carry/s54c}
s40_setup $C
atl_unpack $C
model05
S1="MVLLM_ATTN_SPLITS=1 MVLLM_ATTN_WARPS=8"
for round in 1 2; do
  dec def_05_128_$round bin/mvllm $M5 128
  dec s1w8_05_128_$round bin/mvllm $M5 128 $S1
  dec s1w8sp_05_128_$round bin/mvllm $M5 128 $S1 MVLLM_ATTN_MIN_SMEM=120000
  dec s1w8spt3_05_128_$round bin/mvllm $M5 128 $S1 MVLLM_ATTN_MIN_SMEM=120000 MVLLM_ATTN_TRIGGER=3
  dec defsp_05_128_$round bin/mvllm $M5 128 MVLLM_ATTN_MIN_SMEM=120000
done
atl05 128 s1w8sp 8 $S1 MVLLM_ATTN_MIN_SMEM=120000
export QUICK_CONTEXTS=128,256 QUICK_KV=f16
quick_rows b1_def bin/mvllm
quick_rows b1_s1w8 bin/mvllm $S1
quick_rows b1_s1w8sp bin/mvllm $S1 MVLLM_ATTN_MIN_SMEM=120000
