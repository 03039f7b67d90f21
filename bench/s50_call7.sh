# The fiftieth session's seventh call (bench/NOTES.md): branch short-batch (decode_one_split for up
# to 16 rows at the 256 bucket; MVLLM_ATTN_SHORT_BATCH=0 is main's rule). .carry/s50e (git-ignored):
# mvllm.xz and test_cuda.xz stripped from the branch's build, lib.txz as .carry/s48b.
# 1. test_cuda in full. 2. B1 quick rows at 128 / 256 tokens, batches 2-64, new rule / main's.
# 3. Batched decode in the 256 bucket: bench throughput, 16 requests of 64-token prompts and 128
#    generated tokens, both q4_0 files, new rule / main's, two rounds (s40_common.sh's tp_short,
#    a function of this script when it ran).
. bench/s40_common.sh
C=${C:-.carry/s50e}
s40_setup $C
s40_tests
export QUICK_CONTEXTS=128,256 QUICK_KV="f16"
bq() { local name=$1; shift; env "$@" timeout 100 bin/mvllm bench attention --quick --contexts $QUICK_CONTEXTS \
  --batches 2,4,8,16,32,64 --json-out $R/$name.json > $R/$name.log 2>&1
  echo "$name:"; grep -E "^qwen.* (${QUICK_KV}) " $R/$name.log | awk -F'|' '{print $1 "|" $2}' | tr -s ' ' | paste - - - - ; }
bq b1_new
bq b1_main MVLLM_ATTN_SHORT_BATCH=0
q4_models
for round in 1 2; do
  tp_short tp_new_05_$round $M5 16
  tp_short tp_main_05_$round $M5 16 MVLLM_ATTN_SHORT_BATCH=0
  tp_short tp_new_7_$round $M7 16
  tp_short tp_main_7_$round $M7 16 MVLLM_ATTN_SHORT_BATCH=0
done
