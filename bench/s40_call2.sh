# The fortieth session's second call (bench/NOTES.md): main after the merge of session39-next, with
# the decode kernel's shared-Q fill reading each Q input once (raw_q_quad), binaries in .carry/s40b.
# 1. test_cuda (the shipped model in the tree, for its batch-invariance test).
# 2. ncu of the F32 fused kernel (fused_attention_kernel) in B1 (`bench attention --quick`), 7B
#    geometry batch 1 at 128, 4096 and 32768 tokens: the full set, warp-stall samples per SASS
#    instruction (CSV) and the details page; and the durations of the F32 kernel and its split merge.
# 3. batch-1 decode of the 0.5B after 128 tokens, new against session39-next's binary (.carry/s40),
#    two rounds (raw_q_quad: the same bits, maybe fewer loads).
. bench/s40_common.sh
s40_setup .carry/s40b .carry/s40/mvllm.xz
s40_tests
for ctx in 128 4096 32768; do s40_ncu_f32 $ctx; done
s40_ncu_times 6
M=/tmp/mvllm-models/qwen2.5-0.5b-q4_0.gguf; mkdir -p /tmp/mvllm-models
timeout 100 bin/mvllm make-model $M --preset qwen2.5-0.5b --type q4_0 > /dev/null 2>&1
for round in 1 2; do for v in mvllm mvllm-old; do
  timeout 60 bin/$v bench decode -m $M --device cuda --kv-dtype f16 --prompt-len 128 -n 127 --repeat 3 \
    --json-out $R/dec_${v}_$round.json > $R/dec_${v}_$round.log 2>&1
  echo "dec $v $round: $(tail -n1 $R/dec_${v}_$round.log)"
done; done
