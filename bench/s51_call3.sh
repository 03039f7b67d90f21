# The fifty-first session's third call (bench/NOTES.md): the decode attention's phase timeline
# inside the step, the 0.5B q4_0 after 128 tokens (the 256 bucket), default plan (4 splits, 4 warps,
# a cluster of 4) against one split with 8 warps (faster in B1, slower in the step: call 2).
# .carry/s51c (git-ignored): mvllm.xz (main's build, as .carry/s51b), mvllm-atl.xz (the same code
# built with -DMVLLM_ATTN_TIMELINE=ON), lib.txz as .carry/s51a.
. bench/s40_common.sh
C=${C:-.carry/s51c}
s40_setup $C
xz -dc $C/mvllm-atl.xz > bin/mvllm-atl && chmod +x bin/mvllm-atl
mkdir -p /tmp/mvllm-models
timeout 100 bin/mvllm make-model $M5 --preset qwen2.5-0.5b --type q4_0 > /dev/null 2>&1; echo "model rc=$?"
atl05 128 def 60
atl05 128 s1w8 60 MVLLM_ATTN_SPLITS=1 MVLLM_ATTN_WARPS=8
# Then decode A/B (main's binary), one round (device time): one split of 8 warps with the kernel
# triggering on entry (0) and after its merge (3) instead of after Q (1, the default's).
dec def_05_128_1 bin/mvllm $M5 128
for t in 0 3; do dec s1w8_t${t}_05_128_1 bin/mvllm $M5 128 MVLLM_ATTN_SPLITS=1 MVLLM_ATTN_WARPS=8 MVLLM_ATTN_TRIGGER=$t; done
