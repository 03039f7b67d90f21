# The thirty-ninth session's fourth call: test_cuda of the final tree with the shipped model in the
# tree (its batch-invariance test needs it; call 3 skipped it), and small batches (2-8 rows) with
# the new binary against dc7cd6a's (@old): bench throughput decode tok/s, two rounds.
export NEW_BIN=.carry/s39/mvllm.xz LIB_TXZ=.carry/s39/lib.txz TEST_BIN=.carry/s39/test_cuda.xz
export EXTRA_BINS="old=.carry/s38/mvllm.xz"
O=$OUT
OUT=$O/t STAGES=test bash bench/picks_device_run.sh
OUT=$O/s STAGES=batches BATCH_CASES="0.5b:4:2048 0.5b:8:4096 7b:2:2048 7b:8:2048" AB_VARS="@old" \
  bash bench/picks_device_run.sh
