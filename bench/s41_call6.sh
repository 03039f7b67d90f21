# The forty-first session's sixth call (bench/NOTES.md): the F32 kernel held to 120 registers a
# thread (.carry/s41e), so that a split-merge CTA fits beside four of its CTAs, against the previous
# binary (128 registers; .carry/s40h). The attention tests first. Three rounds of the quick rows.
. bench/s40_common.sh
s40_setup .carry/s41e .carry/s40h/mvllm.xz
s40_tests 'CudaAttention.*'
q() {  # NAME BINARY [ENV...]: the quick rows at 128 / 1K / 2K / 4K / 16K / 32K tokens
  local name=$1 bin=$2; shift 2
  env "$@" timeout 100 $bin bench attention --quick --contexts 128,1024,2048,4096,16384,32768 --json-out $R/$name.json > $R/$name.log 2>&1
  echo "$name: $(f32rows $R/$name.log | tr '\n' ';' | tr -s ' ')"
}
for round in 1 2 3; do
  q old_$round bin/mvllm-old
  q r120_$round bin/mvllm
done
