# The thirty-ninth session's last call: B1 as BENCHMARKS.md specifies it (`bench attention`, the
# whole table: both geometries, contexts 128..32768, F32 / F16 / BF16, batch 1 and 16, the three
# variants) with the final tree's binary (.carry/s39/mvllm.xz), then the torch anchor
# (.carry/s39/attn_torch.py, a copy of the shared anchor) in the same run on the same card.
set -u
R=$OUT/r; mkdir -p $R bin
trap 'tar czf "$OUT/r.tgz" -C "$OUT" r 2>/dev/null; rm -rf "$R"' EXIT
mkdir -p /tmp/carried && tar xJf .carry/s39/lib.txz -C /tmp/carried && export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}:/tmp/carried/lib
xz -dc .carry/s39/mvllm.xz > bin/mvllm-new && chmod +x bin/mvllm-new
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 230 bin/mvllm-new bench attention --json-out $R/attn_b1.json > $R/attn_b1.log 2>&1; echo "bench attention rc=$?"
grep -E "^\|" $R/attn_b1.log | head -60
OUT=$R timeout 200 python3 .carry/s39/attn_torch.py > $R/attn_anchor.log 2>&1; echo "anchor rc=$?"; tail -40 $R/attn_anchor.log
