# The forty-first session's eleventh call (bench/NOTES.md): the final tree's binaries (.carry/s41f)
# on whichever card comes: test_cuda (the shipped model in the copy), then B1's whole table and the
# torch anchor on the same card.
. bench/s40_common.sh
s40_setup .carry/s41f
s40_tests
s40_b1_anchor .carry/s41f
