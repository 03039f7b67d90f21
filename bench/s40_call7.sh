# The fortieth session's seventh call (bench/NOTES.md): the final tree (binaries in .carry/s40g):
# test_cuda, the quick F32 rows (the merge's parts ahead from 128 splits on), then B1 as
# BENCHMARKS.md specifies it (the whole table) and the torch anchor (.carry/s40g/attn_torch.py, a
# copy of the shared anchor) in the same run on the same card.
. bench/s40_common.sh
s40_setup .carry/s40g
s40_tests
timeout 100 bin/mvllm bench attention --quick --contexts 128,1024,4096,16384,32768 --json-out $R/quick.json > $R/quick.log 2>&1
echo "quick rc=$?"; f32rows $R/quick.log
s40_b1_anchor .carry/s40g
