# The forty-first session's sixth call (bench/NOTES.md): the F32 kernel held to 120 registers a
# thread (.carry/s41e), so that a split-merge CTA fits beside four of its CTAs, against the previous
# binary (128 registers; .carry/s40h). The attention tests first. Three rounds of the quick rows.
. bench/s40_common.sh
s40_setup .carry/s41e .carry/s40h/mvllm.xz
s40_tests 'CudaAttention.*'
export QUICK_CONTEXTS=128,1024,2048,4096,16384,32768
q() { quick_rows "$@"; }  # NAME BINARY [ENV...]
for round in 1 2 3; do
  q old_$round bin/mvllm-old
  q r120_$round bin/mvllm
done
