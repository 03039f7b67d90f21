# The fifty-fourth session's third call (bench/NOTES.md): call 2's timeline showed the one-split,
# 8-warp plan's two CTAs on one SM in the step (median 2 sharing; the default's 8 CTAs: 0). This
# binary makes that plan the default for one row at the 256 bucket at head_dim 64, asking for over
# half an SM's shared memory a CTA so that no SM takes two (one_row_spread; MVLLM_ATTN_ONE_SPREAD=0
# restores the 4-split cluster plan). 0.5B q4_0 after 128 tokens, two rounds: new, old, the one
# split unspread, new with the trigger after the merge; the new plan's timeline; B1's F16 rows at
# 128 / 256; test_cuda in full on the new default.
# Not run in session 54 (no device time left); main keeps the old rule. The binary is main with
# bench/s54_one_row_spread.patch applied (git apply). .carry/s54c (git-ignored): mvllm.xz,
# test_cuda.xz and mvllm-atl.xz (-DMVLLM_ATTN_TIMELINE=ON) built so, lib.txz as .carry/s52d.
. bench/s40_common.sh
atl05_setup ${C:-.carry/s54c}
for round in 1 2; do
  dec new_05_128_$round bin/mvllm $M5 128
  dec old_05_128_$round bin/mvllm $M5 128 MVLLM_ATTN_ONE_SPREAD=0
  dec s1w8_05_128_$round bin/mvllm $M5 128 MVLLM_ATTN_ONE_SPREAD=0 MVLLM_ATTN_SPLITS=1 MVLLM_ATTN_WARPS=8
  dec newt3_05_128_$round bin/mvllm $M5 128 MVLLM_ATTN_TRIGGER=3
done
atl05 128 new 8
export QUICK_CONTEXTS=128,256 QUICK_KV=f16
quick_rows b1_new bin/mvllm
quick_rows b1_old bin/mvllm MVLLM_ATTN_ONE_SPREAD=0
s40_tests
