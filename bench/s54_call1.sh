# The fifty-fourth session's first call (bench/NOTES.md): where main stands on the card that comes
# (asked for an H200; the last H200 figures are session 38's), and session 53's owed checks.
# 1. test_cuda in full on main's final code (session 53 ran it only on its variants' binaries).
# 2. B2 / B3 / B5 (bench/cuda_decode_sweep.sh, all four files). 3. B1's whole table and the torch
# anchor. 4. If time is left, the cluster merge probe (session 53's call 4: staggered arrivals and a
# streaming kernel beside the merge). .carry/s54a (git-ignored): mvllm.xz and test_cuda.xz stripped
# from main's build at 131e106 (code as be8e010), lib.txz as .carry/s52d, attn_torch.py (the B1
# anchor, ../shared/anchors) and cluster_merge_probe as .carry/s53d. Move bench/results and the
# model files out of the tree first (64 MiB).
. bench/s40_common.sh
C=${C:-.carry/s54a}
t0=$(date +%s)
s40_setup $C
s40_tests
M=/tmp/mvllm-models; mkdir -p $M $R/sweeplog
RES=$R LOG=$R/sweeplog M=$M B=bin/mvllm timeout 330 bash bench/cuda_decode_sweep.sh
echo "sweep done at $(( $(date +%s) - t0 )) s"
s40_b1_anchor $C
echo "B1 done at $(( $(date +%s) - t0 )) s"
left=$(( 575 - ($(date +%s) - t0) ))
if [ $left -gt 20 ]; then timeout $left $C/cluster_merge_probe 33 > $R/probe.txt 2>&1; echo "probe rc=$?"; cat $R/probe.txt; fi
