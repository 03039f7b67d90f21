# The fiftieth session's second call (bench/NOTES.md): where main stands against the issues' goals on
# the card that comes (asked for an H200). .carry/s50b (git-ignored): mvllm.xz and test_cuda.xz
# stripped from main's build (b2557af: main's code as 18476e5), lib.txz as .carry/s48b, and
# attn_torch.py (the B1 anchor, ../shared/anchors). Move bench/results and the draft model out of
# the tree first (64 MiB).
# 1. test_cuda in full. 2. B2 / B3 / B5 (bench/cuda_decode_sweep.sh, all four files). 3. B1 quick
# rows (F32 and F16, 4K and 32K, batches 1 and 16). ANCHOR=1: 1 and 2 skipped, B1's whole table and
# the torch anchor instead (s40_b1_anchor).
. bench/s40_common.sh
C=${C:-.carry/s50b}
s40_setup $C
if [ -n "${ANCHOR:-}" ]; then s40_b1_anchor $C; exit 0; fi
s40_tests
M=/tmp/mvllm-models; mkdir -p $M $R/sweeplog
RES=$R LOG=$R/sweeplog M=$M B=bin/mvllm timeout 380 bash bench/cuda_decode_sweep.sh
export QUICK_CONTEXTS=4096,32768 QUICK_KV="f32|f16"
quick_rows b1_quick bin/mvllm
