# The forty-first session's tenth call (bench/NOTES.md): does call 9's B1 finding (plain splits
# taking about half the SMs beat the default one-cluster plan at 4K) hold in batch-1 decode? The
# final binary (.carry/s41f), `bench decode` after 4,096-token prompts (0.5B and 7B q4_0) and after
# 16,384 (0.5B), default plan against MVLLM_ATTN_SPLITS=16 (7B: 64 CTAs) / 32 (0.5B: 64 CTAs).
. bench/s40_common.sh
s40_setup .carry/s41f
mkdir -p /tmp/mvllm-models
M5=/tmp/mvllm-models/qwen2.5-0.5b-q4_0.gguf; M7=/tmp/mvllm-models/qwen2.5-7b-q4_0.gguf
timeout 100 bin/mvllm make-model $M5 --preset qwen2.5-0.5b --type q4_0 > /dev/null 2>&1
timeout 150 bin/mvllm make-model $M7 --preset qwen2.5-7b --type q4_0 > /dev/null 2>&1; echo "models rc=$?"
dec() {  # NAME MODEL PROMPT [ENV...]
  local name=$1 m=$2 p=$3; shift 3
  env "$@" timeout 60 bin/mvllm bench decode -m $m --device cuda --kv-dtype f16 --prompt-len $p -n 127 --repeat 2 \
    --json-out $R/$name.json > $R/$name.log 2>&1
  echo "$name: $(tail -n1 $R/$name.log)"
}
for round in 1 2; do
  dec d05_4k_def_$round $M5 4096
  dec d05_4k_s32_$round $M5 4096 MVLLM_ATTN_SPLITS=32
  dec d05_16k_def_$round $M5 16384
  dec d05_16k_s32_$round $M5 16384 MVLLM_ATTN_SPLITS=32
  dec d7_4k_def_$round $M7 4096
  dec d7_4k_s16_$round $M7 4096 MVLLM_ATTN_SPLITS=16
done
