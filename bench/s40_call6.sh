# The fortieth session's sixth call (bench/NOTES.md): the F32 kernel with fewer instructions a
# token (Q held in reduce_scatter's order, so the exchange needs no selects; a token located by a
# shift and a mask for power-of-two blocks; the lane's base pointer and the stage index kept instead
# of recomputed). Binaries in .carry/s40f, call 5's (.carry/s40e) as "old".
# 1. test_cuda. 2. quick F32 rows: new, old, new with MVLLM_ATTN_F32_MERGE_BATCH=0 (the merge
# without its parts loaded ahead: the 4K question of call 5). 3. ncu of the new kernel at 32K
# (instructions per token, stalls).
. bench/s40_common.sh
s40_setup .carry/s40f .carry/s40e/mvllm.xz
s40_tests
for round in 1 2; do
  for v in mvllm mvllm-old batch0; do
    b=$v; e=""; [ $v = batch0 ] && { b=mvllm; e="MVLLM_ATTN_F32_MERGE_BATCH=0"; }
    env $e timeout 100 bin/$b bench attention --quick --contexts 128,1024,4096,16384,32768 --json-out $R/quick_${v}_$round.json > $R/quick_${v}_$round.log 2>&1
    echo "quick $v $round rc=$?"; f32rows $R/quick_${v}_$round.log
  done
done
s40_ncu_f32 32768
