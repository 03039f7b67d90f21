# The forty-fourth session's third call (bench/NOTES.md): two Q4_K GEMV probes on 3e03126.
# .carry/s44d: mvllm.xz (3e03126), mvllm-kf.xz (+ bench/s44_kq_first.patch: the first Q4_K item
# loaded into registers before the PDL wait, as Q8_0's), mvllm-r4.xz (+ bench/s44_q4k_r4.patch: 4
# rows a warp for the one-column Q4_K GEMV), lib.txz.
# 1. `bench kernels` q4_k at one column, each binary. 2. 7B Q4_K_M batch-1 decode after 128 tokens,
# each binary, two rounds.
. bench/s40_common.sh
s40_setup .carry/s44d
for b in kf r4; do xz -dc .carry/s44d/mvllm-$b.xz > bin/mvllm-$b && chmod +x bin/mvllm-$b; done
for b in new kf r4; do
  bin=bin/mvllm-$b; [ $b = new ] && bin=bin/mvllm
  timeout 60 $bin bench kernels --types q4_k --tokens 1 --json-out $R/kernels_$b.json > $R/kernels_$b.log 2>&1
  echo "kernels $b rc=$?"; grep -E "^\| q4_K" $R/kernels_$b.log | awk -F'|' '{print $3 "|" $5 "|" $8}' | tr '\n' ';'; echo
done
M=/tmp/mvllm-models; mkdir -p $M
timeout 200 bin/mvllm make-model $M/qwen2.5-7b-q4_k_m.gguf --preset qwen2.5-7b --type q4_k_m > /dev/null 2>&1; echo "model rc=$?"
for round in 1 2; do
  for b in new kf r4; do
    bin=bin/mvllm-$b; [ $b = new ] && bin=bin/mvllm
    dec ${b}_qwen2.5-7b_128_$round $bin $M/qwen2.5-7b-q4_k_m.gguf 128
  done
done
