# The forty-third session's first call (bench/NOTES.md). .carry/s43a: mvllm.xz (main + bench/s43_call1_probes.patch:
# MVLLM_PAIR_EARLY_MAX_MB and MVLLM_SKIP_META_COPY), mvllm-tl.xz (the same built with -DMVLLM_STEP_TIMELINE=ON),
# mvllm-atl.xz (6788bc9 built with -DMVLLM_ATTN_TIMELINE=ON, session 42's call 4).
# 1. The 7B's O -> RMSNorm -> gate/up chain: batch-1 decode after 4K and 128 tokens with the gate/up
#    pair's early weight loads off (V1), and with the O projection (V2) or O and QKV (V3) also
#    triggering on entry; V4 is session 33's O-early alone. Two rounds.
# 2. The step timeline of V0 and V2 after 4K tokens (7B).
# 3. The metadata copy between two steps' graphs skipped (a timing probe, wrong outputs).
# 4. The decode attention's phases inside the step (session 42's call 4).
. bench/s40_common.sh
s40_setup .carry/s43a
for b in tl atl; do xz -dc .carry/s43a/mvllm-$b.xz > bin/mvllm-$b && chmod +x bin/mvllm-$b; done
q4_models
V1="MVLLM_PAIR_EARLY_MAX_MB=10"
for round in 1 2; do
  for p in 4096 128; do
    dec v0_7_${p}_$round bin/mvllm $M7 $p
    dec v1_7_${p}_$round bin/mvllm $M7 $p $V1
    dec v2_7_${p}_$round bin/mvllm $M7 $p $V1 MVLLM_GEMV_TRIGGER_MB=8
    dec v3_7_${p}_$round bin/mvllm $M7 $p $V1 MVLLM_GEMV_TRIGGER_MB=10
    [ $round = 2 ] || dec v4_7_${p}_$round bin/mvllm $M7 $p MVLLM_GEMV_TRIGGER_MB=8
  done
done
dec v0_05_4096 bin/mvllm $M5 4096
dec v2_05_4096 bin/mvllm $M5 4096 $V1 MVLLM_GEMV_TRIGGER_MB=8
# The gap between two steps' graphs: the metadata copy skipped on replays (bench/s43_call1_probes.patch,
# a timing probe built into this binary only: the positions stop advancing, so the outputs are wrong).
for round in 1 2; do
  for p in 128 4096; do
    dec m0_05_${p}_$round bin/mvllm $M5 $p
    dec m1_05_${p}_$round bin/mvllm $M5 $p MVLLM_SKIP_META_COPY=1
  done
done
dec m0_7_128 bin/mvllm $M7 128
dec m1_7_128 bin/mvllm $M7 128 MVLLM_SKIP_META_COPY=1
tl() {  # NAME ENV...: the step timeline of the 7B after 4K tokens
  local name=$1; shift
  env "$@" MVLLM_STEP_TIMELINE_OUT=$R/tl_$name.csv timeout 90 bin/mvllm-tl bench decode -m $M7 --device cuda \
    --kv-dtype f16 --prompt-len 4096 -n 127 > $R/tl_$name.log 2>&1
  echo "timeline $name rc=$?: $(tail -n1 $R/tl_$name.log | awk -F'|' '{print $3 "|" $10}')"
  python3 scripts/step_timeline.py $R/tl_$name.csv > $R/tl_$name.txt 2>&1
  xz -1 -T4 $R/tl_$name.csv
  sed -n 1,20p $R/tl_$name.txt
}
tl v0_7
tl v2_7 $V1 MVLLM_GEMV_TRIGGER_MB=8
for spec in "$M5 4096 05" "$M5 32768 05" "$M7 4096 7"; do
  set -- $spec
  MVLLM_ATTN_TIMELINE_OUT=$R/atl_$3_$2 timeout 90 bin/mvllm-atl bench decode -m $1 --device cuda \
    --kv-dtype f16 --prompt-len $2 -n 127 > $R/atl_$3_$2.log 2>&1
  echo "attention timeline $3 $2 rc=$?: $(tail -n1 $R/atl_$3_$2.log | awk -F'|' '{print $3 "|" $10}')"
  python3 scripts/attention_timeline.py $R/atl_$3_$2*.csv > $R/atl_$3_$2.txt 2>&1
  head -30 $R/atl_$3_$2.txt
  rm -f $R/atl_$3_$2*.csv
done
