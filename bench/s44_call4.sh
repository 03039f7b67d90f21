# The forty-fourth session's fourth call (bench/NOTES.md): test_cuda of eb55ed1 (Q4_K's first item
# loaded before the PDL wait, bench/s44_kq_first.patch; the V-apart planes as one helper).
# .carry/s44e: test_cuda.xz of eb55ed1, lib.txz. (Trimmed to the tests: refused
# starts had used most of the device time; the kf decode figures are call 3's, same code.)
. bench/s40_common.sh
s40_setup .carry/s44e
s40_tests
