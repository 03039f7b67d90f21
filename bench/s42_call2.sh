# The forty-second session's second call (bench/NOTES.md): call 1's loop order undone; the old loop
# with only the prologue changed (a tile for every stage may start before the wait, and the loop's
# first iteration then issues none). .carry/s42b: this tree's binaries and 6788bc9's (mvllm-old.xz).
# test_cuda, B1's quick rows old / new / new with MVLLM_ATTN_EARLY_ALL=0 (= old), then batch-1 decode
# after 4K and 32K tokens, old against new.
. bench/s40_common.sh
s40_setup .carry/s42b .carry/s42b/mvllm-old.xz
s40_tests
export QUICK_CONTEXTS=1024,2048,4096,16384,32768 QUICK_KV="f32|f16|bf16"
for round in 1 2; do
  quick_rows old_$round bin/mvllm-old
  quick_rows new_$round bin/mvllm
  quick_rows new_all0_$round bin/mvllm MVLLM_ATTN_EARLY_ALL=0
done
mkdir -p /tmp/mvllm-models
M5=/tmp/mvllm-models/qwen2.5-0.5b-q4_0.gguf; M7=/tmp/mvllm-models/qwen2.5-7b-q4_0.gguf
timeout 100 bin/mvllm make-model $M5 --preset qwen2.5-0.5b --type q4_0 > /dev/null 2>&1
timeout 150 bin/mvllm make-model $M7 --preset qwen2.5-7b --type q4_0 > /dev/null 2>&1; echo "models rc=$?"
dec() {  # NAME BIN MODEL PROMPT [ENV...]
  local name=$1 bin=$2 m=$3 p=$4; shift 4
  env "$@" timeout 60 $bin bench decode -m $m --device cuda --kv-dtype f16 --prompt-len $p -n 127 --repeat 2 \
    --json-out $R/$name.json > $R/$name.log 2>&1
  echo "$name: $(tail -n1 $R/$name.log | awk -F'|' '{print $3 "|" $10 "|" $11}')"
}
for round in 1 2; do
  dec d05_4k_old_$round bin/mvllm-old $M5 4096
  dec d05_4k_new_$round bin/mvllm $M5 4096
  dec d05_32k_old_$round bin/mvllm-old $M5 32768
  dec d05_32k_new_$round bin/mvllm $M5 32768
  dec d7_4k_old_$round bin/mvllm-old $M7 4096
  dec d7_4k_new_$round bin/mvllm $M7 4096
done
