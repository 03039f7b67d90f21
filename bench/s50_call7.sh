# The fiftieth session's seventh call (bench/NOTES.md): branch short-batch (decode_one_split for up
# to 16 rows at the 256 bucket; MVLLM_ATTN_SHORT_BATCH=0 is main's rule). .carry/s50e (git-ignored):
# mvllm.xz and test_cuda.xz stripped from the branch's build, lib.txz as .carry/s48b.
# 1. test_cuda in full. 2. B1 quick rows at 128 / 256 tokens, batches 2-64, new rule / main's.
# 3. Batched decode in the 256 bucket: bench throughput, 16 requests of 64-token prompts and 128
#    generated tokens, both q4_0 files, new rule / main's, two rounds.
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
tp() { local name=$1 m=$2; shift 2; env "$@" timeout 120 bin/mvllm bench throughput -m $m --device cuda \
  --num-requests 16 --max-seqs 16 --input-len 64 --output-len 128 --max-batched-tokens 1024 --kv-cache-memory 90% \
  --kv-dtype f16 --json-out $R/$name.json > $R/$name.log 2>&1; echo "$name rc=$?: $(tail -n1 $R/$name.log)"; }
for round in 1 2; do
  tp tp_new_05_$round $M5
  tp tp_main_05_$round $M5 MVLLM_ATTN_SHORT_BATCH=0
  tp tp_new_7_$round $M7
  tp tp_main_7_$round $M7 MVLLM_ATTN_SHORT_BATCH=0
done
