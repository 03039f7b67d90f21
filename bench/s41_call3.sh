# The forty-first session's third call (bench/NOTES.md), on the H200 that call 2 got: B1's whole
# table with the previous tree's binary (.carry/s40h, session 40's final kernel), then the torch
# anchor on the same card: the H200 figures for the session-40 kernel.
. bench/s40_common.sh
s40_setup .carry/s40h
s40_b1_anchor .carry/s40h
