# The fortieth session's ninth call (bench/NOTES.md): the final tree (binaries in .carry/s40h):
# the F32 split rule of call 8 (splits of at least a tile a warp, at most 64 while shorter than 128 tokens);
# test_cuda, then B1 as
# BENCHMARKS.md specifies it (the whole table) and the torch anchor (.carry/s40h/attn_torch.py, a
# copy of the shared anchor) in the same run on the same card.
set -u
R=$OUT/r; mkdir -p $R bin
trap 'tar czf "$OUT/r.tgz" -C "$OUT" r 2>/dev/null; rm -rf "$R"' EXIT
mkdir -p /tmp/carried && tar xJf .carry/s40h/lib.txz -C /tmp/carried && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/tmp/carried/lib
for b in mvllm test_cuda; do xz -dc .carry/s40h/$b.xz > bin/$b && chmod +x bin/$b; done
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 200 bin/test_cuda > $R/test_cuda.log 2>&1
echo "test_cuda rc=$? $(grep -E '^\[  (PASSED|FAILED)' $R/test_cuda.log | tr '\n' ' ')"; grep -E "FAILED|Failure" $R/test_cuda.log | head -20
timeout 230 bin/mvllm bench attention --json-out $R/attn_b1.json > $R/attn_b1.log 2>&1; echo "bench attention rc=$?"
grep -E "^qwen.* f32 " $R/attn_b1.log | awk -F'|' '{print $1 "|" $2}'
OUT=$R timeout 200 python3 .carry/s40h/attn_torch.py > $R/attn_anchor.log 2>&1; echo "anchor rc=$?"; tail -3 $R/attn_anchor.log
