# A call for the session after the fifty-third (bench/NOTES.md, "What would move next"): the
# cluster merge probe with its later variants (staggered arrivals, and a kernel streaming global
# memory beside it on every SM), to find what makes the kernel's merge take 1.2-1.9 us where the
# probe's took 0.22. .carry/s53d (git-ignored): cluster_merge_probe built from this commit
# (nvcc -O3 -std=c++20 -arch=sm_90 bench/probes/cluster_merge_probe.cu). Needs no libraries.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
timeout 120 ${C:-.carry/s53d}/cluster_merge_probe 33 2>&1 | tee $OUT/probe.txt
