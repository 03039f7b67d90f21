# The fifty-fifth session's fourth call (bench/NOTES.md): where the 7B's second RMSNorm spends its
# ~5 µs. The step timeline of the 7B q4_0 file after 128 tokens with main's triggers and with the O
# projection triggering on entry (MVLLM_GEMV_TRIGGER_MB=8: O is 7.2 MB, every other 7B GEMV stays
# late), then decode A/B of the two, two rounds. Carry .carry/s55b (call 2's).
. bench/s40_common.sh
s40_setup ${C:-.carry/s55b}
xz -dc ${C:-.carry/s55b}/mvllm-stl.xz > bin/mvllm-stl && chmod +x bin/mvllm-stl
mkdir -p /tmp/mvllm-models
timeout 150 bin/mvllm make-model $M7 --preset qwen2.5-7b --type q4_0 > /dev/null 2>&1; echo "7B model rc=$?"
for v in def o_early; do
  e=; [ $v = o_early ] && e=MVLLM_GEMV_TRIGGER_MB=8
  env $e MVLLM_STEP_TIMELINE_OUT=$R/tl7_$v.csv timeout 90 bin/mvllm-stl bench decode -m $M7 --device cuda \
    --kv-dtype f16 --prompt-len 128 -n 127 > $R/tl7_$v.log 2>&1
  echo "timeline $v rc=$?: $(tail -1 $R/tl7_$v.log | awk -F'|' '{print $10}')"
  python3 scripts/step_timeline.py $R/tl7_$v.csv > $R/tl7_$v.txt 2>&1; rm -f $R/tl7_$v*.csv
  sed -n 3,4p $R/tl7_$v.txt; sed -n 15,27p $R/tl7_$v.txt; tail -11 $R/tl7_$v.txt
done
for round in 1 2; do
  dec def_7_128_$round bin/mvllm $M7 128
  dec oearly_7_128_$round bin/mvllm $M7 128 MVLLM_GEMV_TRIGGER_MB=8
done
