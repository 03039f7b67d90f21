# The fiftieth session's eighth call (bench/NOTES.md): branch short-batch's final rule (one split at
# the 256 bucket for any batch of two rows or more). .carry/s50f (git-ignored): mvllm.xz and
# test_cuda.xz of that build, lib.txz as .carry/s48b.
# 1. test_cuda in full. 2. B1 quick rows at 256 tokens, batches 2-64, the rule / MVLLM_ATTN_SHORT_BATCH=0.
# 3. bench throughput, 32 requests of 64-token prompts generating 128 tokens, both q4_0 files, the
#    rule / main's (one round).
. bench/s40_common.sh
C=${C:-.carry/s50f}
s40_setup $C
s40_tests
bq() { local name=$1; shift; env "$@" timeout 100 bin/mvllm bench attention --quick --contexts 256 \
  --batches 2,16,32,64 --json-out $R/$name.json > $R/$name.log 2>&1
  echo "$name: $(grep -E "^qwen.* f16 " $R/$name.log | awk -F'|' '{print $1 "|" $2}' | tr -s ' ' | tr '\n' ';')"; }
bq b1_rule
bq b1_main MVLLM_ATTN_SHORT_BATCH=0
q4_models
tp_short tp32_rule_05 $M5 32
tp_short tp32_main_05 $M5 32 MVLLM_ATTN_SHORT_BATCH=0
tp_short tp32_rule_7 $M7 32
tp_short tp32_main_7 $M7 32 MVLLM_ATTN_SHORT_BATCH=0
