# A call for the next session (bench/NOTES.md, thirty-ninth session, "Branch session39-next"): the
# branch's two CUDA changes, neither yet run on a GPU: the naive/grouped attention's PV over context
# chunks (with K rows read 16 bytes a load in the scores kernel), and the F32 fused kernel's copy
# pipeline (MVLLM_ATTN_F32_PIPE=0: the old loads, the same bits).
# Binaries of the branch, built here for sm_90 and carried in .carry/s40 (git-ignored):
#   cmake --build build -j2 --target mvllm test_cuda; mkdir -p .carry/s40
#   for b in mvllm test_cuda; do strip -o /tmp/$b build/bin/$b; xz -6 -c /tmp/$b > .carry/s40/$b.xz; done
#   cp .carry/s39/lib.txz .carry/s40/   (the runtime libraries: libpcre2-8 and friends, see s36-s39)
# Run with carry [".carry/s40"], the draft model and bench/results moved out of the tree (64 MiB).
# 1. The attention tests (naive / grouped / fused parity against float64, F32PipelineGivesTheSameBits).
# 2. B1's whole table (compare naive / grouped / fused with bench/results/h100/session39/call5/).
# 3. B1 --quick without the F32 pipeline (its F32 rows against step 2's).
. bench/s40_common.sh
s40_setup .carry/s40
s40_tests 'CudaAttention.*'
timeout 230 bin/mvllm bench attention --json-out $R/attn_b1.json > $R/attn_b1.log 2>&1; echo "B1 rc=$?"
grep -E "^qwen" $R/attn_b1.log | awk -F'|' '{print $1 "|" $2}' | head -60
MVLLM_ATTN_F32_PIPE=0 timeout 60 bin/mvllm bench attention --quick --json-out $R/attn_quick_pipe0.json > $R/attn_quick_pipe0.log 2>&1
echo "F32 without the pipeline:"; f32rows $R/attn_quick_pipe0.log
