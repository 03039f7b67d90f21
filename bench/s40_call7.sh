# The fortieth session's seventh call (bench/NOTES.md): the final tree (binaries in .carry/s40g):
# test_cuda, the quick F32 rows (the merge's parts ahead from 128 splits on), then B1 as
# BENCHMARKS.md specifies it (the whole table) and the torch anchor (.carry/s40g/attn_torch.py, a
# copy of the shared anchor) in the same run on the same card.
set -u
R=$OUT/r; mkdir -p $R bin
trap 'tar czf "$OUT/r.tgz" -C "$OUT" r 2>/dev/null; rm -rf "$R"' EXIT
mkdir -p /tmp/carried && tar xJf .carry/s40g/lib.txz -C /tmp/carried && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/tmp/carried/lib
for b in mvllm test_cuda; do xz -dc .carry/s40g/$b.xz > bin/$b && chmod +x bin/$b; done
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 200 bin/test_cuda > $R/test_cuda.log 2>&1
echo "test_cuda rc=$? $(grep -E '^\[  (PASSED|FAILED)' $R/test_cuda.log | tr '\n' ' ')"; grep -E "FAILED|Failure" $R/test_cuda.log | head -20
timeout 100 bin/mvllm bench attention --quick --contexts 128,1024,4096,16384,32768 --json-out $R/quick.json > $R/quick.log 2>&1
echo "quick rc=$?"; grep -E "^qwen.* f32 " $R/quick.log | awk -F'|' '{print $1 "|" $2}'
timeout 230 bin/mvllm bench attention --json-out $R/attn_b1.json > $R/attn_b1.log 2>&1; echo "bench attention rc=$?"
grep -E "^qwen.* f32 " $R/attn_b1.log | awk -F'|' '{print $1 "|" $2}'
OUT=$R timeout 200 python3 .carry/s40g/attn_torch.py > $R/attn_anchor.log 2>&1; echo "anchor rc=$?"; tail -3 $R/attn_anchor.log
