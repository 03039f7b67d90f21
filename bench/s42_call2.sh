# The forty-second session's second call (bench/NOTES.md): call 1's loop order undone; the old loop
# with only the prologue changed (a tile for every stage may start before the wait, and the loop's
# first iteration then issues none). .carry/s42b: this tree's binaries and 6788bc9's (mvllm-old.xz).
# test_cuda, B1's quick rows old / new / new with MVLLM_ATTN_EARLY_ALL=0 (= old), then batch-1 decode
# after 4K and 32K tokens, old against new.
. bench/s40_common.sh
early_ab .carry/s42b
q4_models
for round in 1 2; do
  for pk in 4096:4k 32768:32k; do
    dec d05_${pk#*:}_old_$round bin/mvllm-old $M5 ${pk%:*}
    dec d05_${pk#*:}_new_$round bin/mvllm $M5 ${pk%:*}
  done
  dec d7_4k_old_$round bin/mvllm-old $M7 4096
  dec d7_4k_new_$round bin/mvllm $M7 4096
done
