# The fortieth session's sixth call (bench/NOTES.md): the F32 kernel with fewer instructions a
# token (Q held in reduce_scatter's order, so the exchange needs no selects; a token located by a
# shift and a mask for power-of-two blocks; the lane's base pointer and the stage index kept instead
# of recomputed). Binaries in .carry/s40f, call 5's (.carry/s40e) as "old".
# 1. test_cuda. 2. quick F32 rows: new, old, new with MVLLM_ATTN_F32_MERGE_BATCH=0 (the merge
# without its parts loaded ahead: the 4K question of call 5). 3. ncu of the new kernel at 32K
# (instructions per token, stalls).
set -u
R=$OUT/r; mkdir -p $R bin
trap 'tar czf "$OUT/r.tgz" -C "$OUT" r 2>/dev/null; rm -rf "$R"' EXIT
mkdir -p /tmp/carried && tar xJf .carry/s40f/lib.txz -C /tmp/carried && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/tmp/carried/lib
for b in mvllm test_cuda; do xz -dc .carry/s40f/$b.xz > bin/$b && chmod +x bin/$b; done
xz -dc .carry/s40e/mvllm.xz > bin/mvllm-old && chmod +x bin/mvllm-old
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 bin/test_cuda > $R/test_cuda.log 2>&1
echo "test_cuda rc=$? $(grep -E '^\[  (PASSED|FAILED)' $R/test_cuda.log | tr '\n' ' ')"; grep -E "FAILED|Failure" $R/test_cuda.log | head -20
for round in 1 2; do
  for v in mvllm mvllm-old batch0; do
    b=$v; e=""; [ $v = batch0 ] && { b=mvllm; e="MVLLM_ATTN_F32_MERGE_BATCH=0"; }
    env $e timeout 100 bin/$b bench attention --quick --contexts 128,1024,4096,16384,32768 --json-out $R/quick_${v}_$round.json > $R/quick_${v}_$round.log 2>&1
    echo "quick $v $round rc=$?"; grep -E "^qwen.* f32 " $R/quick_${v}_$round.log | awk -F'|' '{print $1 "|" $2}'
  done
done
t=ncu_f32_32768
timeout 120 ncu --clock-control none --kernel-name-base demangled -k "regex:fused_attention_kernel" \
  --launch-skip 40 --launch-count 1 --set full -f -o $R/$t bin/mvllm bench attention --quick --contexts 32768 \
  --batches 1 > $R/$t.log 2>&1
echo "$t rc=$?"
ncu -i $R/$t.ncu-rep --page source --csv --print-source sass > $R/${t}_src.csv 2> $R/${t}_src.err
ncu -i $R/$t.ncu-rep --page details > $R/$t.txt 2>&1
grep -E "Duration|Registers Per|Achieved Occupancy|DRAM Throughput|Issue Slots Busy" $R/$t.txt | head -6
python3 bench/ncu_stalls.py $R/${t}_src.csv 8
rm -f $R/$t.ncu-rep
