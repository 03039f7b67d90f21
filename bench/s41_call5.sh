# The forty-first session's fifth call (bench/NOTES.md): the F32 split merge staging its parts in
# shared memory (.carry/s41d; the default below 128 splits) against the previous binary
# (.carry/s40h) and against the new binary's loop (MVLLM_ATTN_F32_MERGE=0) and ahead (=1) ways.
# The attention tests first (the three ways give the same bits).
. bench/s40_common.sh
s40_setup .carry/s41d .carry/s40h/mvllm.xz
s40_tests 'CudaAttention.*'
q() {  # NAME BINARY [ENV...]: the quick rows at 128 / 1K / 4K / 32K tokens
  local name=$1 bin=$2; shift 2
  env "$@" timeout 100 $bin bench attention --quick --contexts 128,1024,4096,32768 --json-out $R/$name.json > $R/$name.log 2>&1
  echo "$name: $(f32rows $R/$name.log | tr '\n' ';' | tr -s ' ')"
}
for round in 1 2; do
  q old_$round bin/mvllm-old
  q staged_$round bin/mvllm
  q loop_$round bin/mvllm MVLLM_ATTN_F32_MERGE=0
  q ahead_$round bin/mvllm MVLLM_ATTN_F32_MERGE=1
done
