# Shared steps of the fortieth session's device calls (bench/s40_call*.sh, bench/NOTES.md): each
# call sources this file from the repository root on the device, with $OUT set by the device tool.
#   s40_setup DIR [OLD.xz]  unpack the carried runtime libraries and binaries of DIR (.carry/s40x:
#                           lib.txz, mvllm.xz, test_cuda.xz if there) into bin/, an earlier mvllm as
#                           bin/mvllm-old; results go to $R ($OUT/r, one r.tgz back at exit)
#   s40_tests [FILTER]      test_cuda (a gtest filter optional)
#   f32rows LOG             the F32 rows of a `bench attention` log (geometry ... | µs)
#   s40_ncu_f32 CTX         ncu's full set of the F32 kernel in B1 (7B geometry first) at CTX
#                           tokens: the stall samples per SASS instruction (CSV), details, summary
#   s40_ncu_times [N]       the durations of the F32 kernel and its split merge at 4K under ncu
#   s40_b1_anchor DIR       B1's whole table, then the torch anchor (DIR/attn_torch.py) on the card
#   quick_rows NAME BIN [ENV...]  `BIN bench attention --quick` at $QUICK_CONTEXTS (default
#                           128,1024,4096,32768) with ENV set; log and JSON as $R/NAME.*; prints the
#                           rows of KV types $QUICK_KV (a regex, default f32)
#   q4_models               make-model the q4_0 files of both geometries: $M5 (0.5B), $M7 (7B)
#   model05                 (session 52) make-model the 0.5B q4_0 file ($M5) only
#   atl_unpack DIR          (session 52) DIR/mvllm-atl.xz (a -DMVLLM_ATTN_TIMELINE=ON build) as bin/mvllm-atl
#   atl05_setup DIR         (session 54) s40_setup DIR, atl_unpack DIR and model05: a 0.5B timeline call's start
#   dec NAME BIN MODEL PROMPT [ENV...]  batch-1 `BIN bench decode` (F16 KV, 127 steps, two runs)
#                           after PROMPT tokens with ENV set; log and JSON as $R/NAME.*
#   attn_tests NAME ENV...  (session 47) test_cuda's attention tests with ENV set, as $R/test_NAME.log
#   atl05 PROMPT NAME LINES [ENV...]  (session 47) the decode attention's timeline of the 0.5B q4_0
#                           file ($M5) after PROMPT tokens with bin/mvllm-atl and ENV set: the first
#                           LINES of scripts/attention_timeline.py's summary, as $R/atl_05_PROMPT_NAME.*
#   ab05 A B ENV            (session 49) the 0.5B q4_0 ($M5) after 128 tokens (two rounds, A and B
#                           interleaved) and after 4K: runs A with no ENV, B with ENV (dec's names)
#   tests_env NAME ENV...   (session 53) test_cuda in full with ENV set, as $R/test_cuda_NAME.log
#   ab_b1_7b A B ENV        (session 53) B1's F16 rows at 128 / 4K of A (no ENV) and B (ENV), then
#                           the 7B q4_0 file ($M7) after 4K tokens, A then B (dec's names)
#   tp_short NAME MODEL N [ENV...]  (session 50) `bench throughput`: N requests of 64-token prompts
#                           generating 128 tokens (every context in the 256 bucket), F16 KV, with ENV
#                           set; log and JSON as $R/NAME.*
#   early_ab DIR            (session 42) test_cuda, then B1's quick rows of bin/mvllm-old, bin/mvllm
#                           and bin/mvllm with MVLLM_ATTN_EARLY_ALL=0, two rounds
set -u
R=$OUT/r
s40_setup() {
  mkdir -p "$R" bin
  trap 'tar czf "$OUT/r.tgz" -C "$OUT" r 2>/dev/null; rm -rf "$R"' EXIT
  mkdir -p /tmp/carried && tar xJf "$1/lib.txz" -C /tmp/carried && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/tmp/carried/lib
  for b in mvllm test_cuda; do [ ! -f "$1/$b.xz" ] || { xz -dc "$1/$b.xz" > bin/$b && chmod +x bin/$b; }; done
  [ -z "${2:-}" ] || { xz -dc "$2" > bin/mvllm-old && chmod +x bin/mvllm-old; }
  nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
}
s40_tests() {
  local log=$R/test_cuda.log
  [ -z "${1:-}" ] || log=$R/test_attention.log
  timeout 200 bin/test_cuda ${1:+--gtest_filter=$1} > $log 2>&1
  echo "test_cuda rc=$? $(grep -E '^\[  (PASSED|FAILED)' $log | tr '\n' ' ')"; grep -E "FAILED|Failure" $log | head -20
}
f32rows() { grep -E "^qwen.* f32 " "$1" | awk -F'|' '{print $1 "|" $2}'; }
quick_rows() {
  local name=$1 bin=$2; shift 2
  env "$@" timeout 100 $bin bench attention --quick --contexts ${QUICK_CONTEXTS:-128,1024,4096,32768} \
    --json-out $R/$name.json > $R/$name.log 2>&1
  echo "$name: $(grep -E "^qwen.* (${QUICK_KV:-f32}) " $R/$name.log | awk -F'|' '{print $1 "|" $2}' | tr '\n' ';' | tr -s ' ')"
}
s40_ncu_f32() {
  local t=ncu_f32_$1
  timeout 120 ncu --clock-control none --kernel-name-base demangled -k "regex:fused_attention_kernel" \
    --launch-skip 40 --launch-count 1 --set full -f -o $R/$t bin/mvllm bench attention --quick --contexts $1 \
    --batches 1 > $R/$t.log 2>&1
  echo "$t rc=$?"
  ncu -i $R/$t.ncu-rep --page source --csv --print-source sass > $R/${t}_src.csv 2> $R/${t}_src.err
  ncu -i $R/$t.ncu-rep --page details > $R/$t.txt 2>&1
  grep -E "Duration|Registers Per|Warp Cycles Per Issued|Achieved Occupancy|Grid Size|DRAM Throughput|Issue Slots Busy|Dynamic Shared" $R/$t.txt | head -10
  python3 bench/ncu_stalls.py $R/${t}_src.csv 12
  rm -f $R/$t.ncu-rep
}
s40_ncu_times() {
  timeout 120 ncu --clock-control none --metrics gpu__time_duration.sum -k "regex:fused_attention|merge_splits" \
    --launch-skip 40 --launch-count ${1:-4} bin/mvllm bench attention --quick --contexts 4096 --batches 1 > $R/ncu_f32_times.txt 2>&1
  grep -E "fused_attention|merge_splits|gpu__time" $R/ncu_f32_times.txt | sed 's/(mvllm::cuda[^)]*)//' | cut -c1-100
}
s40_b1_anchor() {
  timeout 230 bin/mvllm bench attention --json-out $R/attn_b1.json > $R/attn_b1.log 2>&1; echo "bench attention rc=$?"
  f32rows $R/attn_b1.log
  OUT=$R timeout 200 python3 "$1/attn_torch.py" > $R/attn_anchor.log 2>&1; echo "anchor rc=$?"; tail -3 $R/attn_anchor.log
}
M5=/tmp/mvllm-models/qwen2.5-0.5b-q4_0.gguf; M7=/tmp/mvllm-models/qwen2.5-7b-q4_0.gguf
q4_models() {
  mkdir -p /tmp/mvllm-models
  timeout 100 bin/mvllm make-model $M5 --preset qwen2.5-0.5b --type q4_0 > /dev/null 2>&1
  timeout 150 bin/mvllm make-model $M7 --preset qwen2.5-7b --type q4_0 > /dev/null 2>&1; echo "models rc=$?"
}
model05() {
  mkdir -p /tmp/mvllm-models
  timeout 100 bin/mvllm make-model $M5 --preset qwen2.5-0.5b --type q4_0 > /dev/null 2>&1; echo "0.5B model rc=$?"
}
atl_unpack() { xz -dc "$1/mvllm-atl.xz" > bin/mvllm-atl && chmod +x bin/mvllm-atl; }
atl05_setup() { s40_setup "$1"; atl_unpack "$1"; model05; }
dec() {
  local name=$1 bin=$2 m=$3 p=$4; shift 4
  env "$@" timeout 60 $bin bench decode -m $m --device cuda --kv-dtype f16 --prompt-len $p -n 127 --repeat 2 \
    --json-out $R/$name.json > $R/$name.log 2>&1
  echo "$name: $(tail -n1 $R/$name.log | awk -F'|' '{print $3 "|" $10}')"
}
early_ab() {
  s40_setup $1 $1/mvllm-old.xz
  s40_tests
  export QUICK_CONTEXTS=1024,2048,4096,16384,32768 QUICK_KV="f32|f16|bf16"
  for round in 1 2; do
    quick_rows old_$round bin/mvllm-old
    quick_rows new_$round bin/mvllm
    quick_rows new_all0_$round bin/mvllm MVLLM_ATTN_EARLY_ALL=0
  done
}
atl05() {
  local p=$1 name=atl_05_$1_$2 lines=$3; shift 3
  env "$@" MVLLM_ATTN_TIMELINE_OUT=$R/$name timeout 90 bin/mvllm-atl bench decode -m $M5 --device cuda \
    --kv-dtype f16 --prompt-len $p -n 127 > $R/$name.log 2>&1
  echo "attention timeline $name rc=$?: $(tail -n1 $R/$name.log | awk -F'|' '{print $3 "|" $10}')"
  python3 scripts/attention_timeline.py --detail $R/$name*.csv > $R/$name.txt 2>&1
  head -$lines $R/$name.txt
  rm -f $R/$name*.csv
}
attn_tests() {
  local log=$R/test_$1.log; shift
  env "$@" timeout 200 bin/test_cuda --gtest_filter="CudaAttention.*" > $log 2>&1
  echo "test_cuda $(basename $log .log) rc=$? $(grep -E '^\[  (PASSED|FAILED)' $log | tr '\n' ' ')"; grep -E "FAILED|Failure" $log | head
}
tests_env() {
  local log=$R/test_cuda_$1.log; shift
  env "$@" timeout 250 bin/test_cuda > $log 2>&1
  echo "test_cuda $(basename $log .log) rc=$? $(grep -E '^\[  (PASSED|FAILED)' $log | tr '\n' ' ')"; grep -E "FAILED|Failure" $log | head -20
}
ab_b1_7b() {
  local a=$1 b=$2 e=$3
  QUICK_CONTEXTS=128,4096 QUICK_KV=f16 quick_rows b1_$a bin/mvllm
  QUICK_CONTEXTS=128,4096 QUICK_KV=f16 quick_rows b1_$b bin/mvllm $e
  timeout 150 bin/mvllm make-model $M7 --preset qwen2.5-7b --type q4_0 > /dev/null 2>&1; echo "7B model rc=$?"
  dec ${a}_7_4096 bin/mvllm $M7 4096
  dec ${b}_7_4096 bin/mvllm $M7 4096 $e
}
ab05() {
  local a=$1 b=$2 e=$3 round
  for round in 1 2; do
    dec ${a}_05_128_$round bin/mvllm $M5 128
    dec ${b}_05_128_$round bin/mvllm $M5 128 $e
  done
  dec ${a}_05_4096 bin/mvllm $M5 4096
  dec ${b}_05_4096 bin/mvllm $M5 4096 $e
}
tp_short() {
  local name=$1 m=$2 n=$3; shift 3
  env "$@" timeout 120 bin/mvllm bench throughput -m $m --device cuda --num-requests $n --max-seqs $n --input-len 64 \
    --output-len 128 --max-batched-tokens $((n * 64)) --kv-cache-memory 90% --kv-dtype f16 --json-out $R/$name.json \
    > $R/$name.log 2>&1
  echo "$name rc=$?: $(tail -n1 $R/$name.log)"
}
