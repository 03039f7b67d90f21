# The forty-seventh session's fourth call (bench/NOTES.md): test_cuda in full, the shipped model
# carried (its batch-invariance tests), on main's code after 6129909 (the relaxed cluster exit
# without the branch's push form). .carry/s47d: test_cuda.xz, lib.txz.
. bench/s40_common.sh
s40_setup .carry/s47d
s40_tests
