# The fortieth session's ninth call (bench/NOTES.md): the final tree (binaries in .carry/s40h):
# the F32 split rule of call 8 (splits of at least a tile a warp, at most 64 while shorter than 128 tokens);
# test_cuda, then B1 as
# BENCHMARKS.md specifies it (the whole table) and the torch anchor (.carry/s40h/attn_torch.py, a
# copy of the shared anchor) in the same run on the same card.
. bench/s40_common.sh
s40_setup .carry/s40h
s40_tests
s40_b1_anchor .carry/s40h
