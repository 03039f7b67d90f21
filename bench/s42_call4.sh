# The forty-second session's fourth call (bench/NOTES.md): no kernel change. .carry/s42e holds 6788bc9
# built with -DMVLLM_ATTN_TIMELINE=ON: the decode attention's phases (scripts/attention_timeline.py)
# inside batch-1 decode after 4K tokens on both geometries, and after 32K on the 0.5B.
. bench/s40_common.sh
s40_setup .carry/s42e
M=/tmp/mvllm-models; mkdir -p $M
for preset in qwen2.5-0.5b qwen2.5-7b; do
  timeout 150 bin/mvllm make-model $M/$preset-q4_0.gguf --preset $preset --type q4_0 > /dev/null 2>&1
  for p in 4096 32768; do
    [ $preset = qwen2.5-7b ] && [ $p = 32768 ] && continue
    MVLLM_ATTN_TIMELINE_OUT=$R/atl_${preset}_$p timeout 90 bin/mvllm bench decode -m $M/$preset-q4_0.gguf --device cuda \
      --kv-dtype f16 --prompt-len $p -n 127 > $R/atl_${preset}_$p.log 2>&1
    echo "attention timeline $preset $p rc=$?: $(tail -n1 $R/atl_${preset}_$p.log | awk -F'|' '{print $3 "|" $10}')"
    ls $R | grep "atl_${preset}_$p" | head
    python3 scripts/attention_timeline.py $R/atl_${preset}_${p}*.csv > $R/atl_${preset}_$p.txt 2>&1
    cat $R/atl_${preset}_$p.txt | head -30
    rm -f $R/atl_${preset}_${p}*.csv
  done
done
