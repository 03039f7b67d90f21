# The forty-first session's seventh call (bench/NOTES.md): the final tree (.carry/s41f: the F32
# kernel at 120 registers for head_dim <= 64, 128 as before for head_dim 128): test_cuda, two
# rounds of the quick rows against the previous binary (.carry/s40h), then B1's whole table and the
# torch anchor (.carry/s41f/attn_torch.py, a copy of the shared anchor) on the same card.
. bench/s40_common.sh
s40_setup .carry/s41f .carry/s40h/mvllm.xz
s40_tests
export QUICK_CONTEXTS=128,1024,2048,4096,16384,32768
q() { quick_rows "$@"; }  # NAME BINARY [ENV...]
for round in 1 2; do
  q old_$round bin/mvllm-old
  q new_$round bin/mvllm
done
s40_b1_anchor .carry/s41f
