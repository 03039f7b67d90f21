# The fifty-fourth session's second call (bench/NOTES.md): (1) bench/probes/phase_handoff_probe.cu,
# the hand-off between two phases of a step as a kernel boundary (graph, PDL) and as a barrier in
# one persistent kernel (cg grid.sync, a counter, per-CTA flags), 128 and 132 CTAs, then 264;
# (2) session 51's call 3 (bench/s51_call3.sh): the decode attention's phase timeline in the step,
# 0.5B q4_0 after 128 tokens, default plan against one split of 8 warps, and the trigger rows.
# .carry/s54b (git-ignored): phase_handoff_probe (nvcc -O3 -std=c++20 -arch=sm_90), mvllm.xz as
# .carry/s54a, mvllm-atl.xz (the same code built with -DMVLLM_ATTN_TIMELINE=ON), lib.txz as .carry/s52d.
set -u
C=${C:-.carry/s54b}
mkdir -p $OUT/r
timeout 60 $C/phase_handoff_probe 1 2>&1 | tee $OUT/r/handoff_1.txt
timeout 40 $C/phase_handoff_probe 2 2>&1 | tail -n +2 | grep -v "ctas  128" | tee $OUT/r/handoff_2.txt
C=$C bash bench/s51_call3.sh
