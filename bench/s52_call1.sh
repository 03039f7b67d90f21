# The fifty-second session's first call (bench/NOTES.md): session 51's call 3 (the decode
# attention's phase timeline in the step, default plan against one split of 8 warps, and two
# trigger points), then main's standing rows on whichever card came: the 7B q4_0 after 128 tokens
# and B1's quick F16 rows. Carry .carry/s51c as bench/s51_call3.sh says.
set -u
C=${C:-.carry/s51c}
. bench/s51_call3.sh
timeout 150 bin/mvllm make-model $M7 --preset qwen2.5-7b --type q4_0 > /dev/null 2>&1; echo "7B model rc=$?"
dec def_7_128_1 bin/mvllm $M7 128
dec def_05_128_2 bin/mvllm $M5 128
QUICK_KV=f16 quick_rows b1_quick bin/mvllm
