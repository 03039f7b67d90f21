#!/usr/bin/env bash
# Thirty-fifth session: the one-cluster rule (MVLLM_ATTN_ONE_CLUSTER_TOKENS, default 1,024) at small
# batches, against the rule off. `bench throughput` with every request's prompt of P tokens and 256
# output tokens, so the batch decodes N rows together; prints decode tok/s. Needs bin/mvllm-new and
# the models the picks script writes. Usage: OUT=dir bash bench/s35_batches.sh
R=$OUT/r; mkdir -p $R
M=/tmp/mvllm-models
run() {  # model requests prompt tag env...
  local m=$1 n=$2 p=$3 tag=$4; shift 4
  env "$@" timeout 90 bin/mvllm-new bench throughput -m $M/$m.gguf --device cuda --num-requests $n \
    --input-len $p --output-len 256 --kv-dtype f16 --activation-dtype f16 --temperature 0 \
    --json-out $R/bt_${m}_${n}x${p}_$tag.json > $R/bt_${m}_${n}x${p}_$tag.log 2>&1
  echo "$m ${n}x$p $tag: decode $(tail -n1 $R/bt_${m}_${n}x${p}_$tag.log | awk -F'|' '{print $12}') tok/s"
}
for round in 1 2; do
  for c in "qwen2.5-0.5b-q4_0 2 4096" "qwen2.5-0.5b-q4_0 4 2048" "qwen2.5-0.5b-q4_0 8 2048" \
           "qwen2.5-0.5b-q4_0 8 4096" "qwen2.5-7b-q4_0 2 2048" "qwen2.5-7b-q4_0 3 4096"; do
    run $c on_$round MVLLM_NONE=0
    run $c off_$round MVLLM_ATTN_ONE_CLUSTER_TOKENS=0
  done
done
