# The forty-second session's first call (bench/NOTES.md): every pipeline stage of the decode
# attention kernels (F32 SIMT and F16/BF16 tensor-core) starts its tile copy before the PDL wait
# (.carry/s42a: this tree's binaries, mvllm-old.xz the binary of 6788bc9). test_cuda, B1's quick rows
# old / new / new with MVLLM_ATTN_EARLY_ALL=0, then batch-1 decode after 4K tokens, old against new.
. bench/s40_common.sh
s40_setup .carry/s42a .carry/s42a/mvllm-old.xz
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
  echo "$name: $(tail -n1 $R/$name.log)"
}
for round in 1 2; do
  dec d05_4k_old_$round bin/mvllm-old $M5 4096
  dec d05_4k_new_$round bin/mvllm $M5 4096
  dec d7_4k_old_$round bin/mvllm-old $M7 4096
  dec d7_4k_new_$round bin/mvllm $M7 4096
done
