# The forty-fifth session's first call (bench/NOTES.md). .carry/s45a: mvllm-old.xz (main 378ca5d),
# mvllm.xz (Q6_K's first item loaded before the PDL wait at one column), mvllm-f2.xz (its first two
# items), mvllm-tl.xz (the step-timeline build of mvllm.xz's tree), lib.txz.
# 1. `bench kernels` on the 0.5B's shapes, one column, old / new / f2, and old with the streaming
# GEMV forced. 2. Q4_K_M batch-1 decode after 128 tokens, old / new / f2, two rounds (both
# geometries). 3. The step timelines of the 0.5B q4_0 and Q4_K_M files after 128 tokens.
. bench/s40_common.sh
s40_setup .carry/s45a .carry/s45a/mvllm-old.xz
for b in tl f2; do xz -dc .carry/s45a/mvllm-$b.xz > bin/mvllm-$b && chmod +x bin/mvllm-$b; done
S=4864:896,896:4864,896:896,896:1152,3584:512
kb() {  # NAME BIN [ENV]
  local name=$1 bin=$2; shift 2
  env "$@" timeout 60 $bin bench kernels --types q4_0,q8_0,q4_k,q6_k --shapes $S --tokens 1 --json-out $R/kb_$name.json > $R/kb_$name.log 2>&1
  echo "kernels $name rc=$?"; grep -iE "^\| (q4_0|q8_0|q4_k|q6_k) |copy" $R/kb_$name.log | cut -c1-90 | head -24
}
kb old bin/mvllm-old; kb new bin/mvllm; kb f2 bin/mvllm-f2; kb old_stream bin/mvllm-old MVLLM_GEMV_STREAM=2
M=/tmp/mvllm-models; mkdir -p $M
timeout 100 bin/mvllm make-model $M5 --preset qwen2.5-0.5b --type q4_0 > /dev/null 2>&1; echo "model q4_0 rc=$?"
for preset in qwen2.5-0.5b qwen2.5-7b; do
  timeout 200 bin/mvllm make-model $M/$preset-q4_k_m.gguf --preset $preset --type q4_k_m > /dev/null 2>&1; echo "model $preset rc=$?"
done
for round in 1 2; do
  for preset in qwen2.5-0.5b qwen2.5-7b; do
    for b in old new f2; do
      bin=bin/mvllm; [ $b = new ] || bin=bin/mvllm-$b
      dec km_${preset}_${b}_$round $bin $M/$preset-q4_k_m.gguf 128
    done
  done
done
tl() {  # NAME MODEL
  MVLLM_STEP_TIMELINE_OUT=$R/tl_$1.csv timeout 90 bin/mvllm-tl bench decode -m $2 --device cuda \
    --kv-dtype f16 --prompt-len 128 -n 127 > $R/tl_$1.log 2>&1
  echo "timeline $1 rc=$?"
  python3 scripts/step_timeline.py $R/tl_$1.csv > $R/tl_$1.txt 2>&1; rm -f $R/tl_$1.csv
  sed -n 1,30p $R/tl_$1.txt; tail -16 $R/tl_$1.txt
}
tl q40_05 $M5
tl km_05 $M/qwen2.5-0.5b-q4_k_m.gguf
