# The fifty-third session's second call (bench/NOTES.md): the cluster merge's remote loads
# predicated instead of branched around. .carry/s53a (git-ignored): mvllm.xz, test_cuda.xz,
# mvllm-atl.xz (-DMVLLM_ATTN_TIMELINE=ON) built from this commit, mvllm-old.xz (8693c3c, the
# loads branched around), lib.txz as .carry/s51a. Also brings back the disassembler (cuobjdump,
# nvdisasm: not on the build machine) and the SASS of the 0.5B's decode kernel instance.
. bench/s40_common.sh
C=${C:-.carry/s53a}
s40_setup $C $C/mvllm-old.xz
atl_unpack $C
for t in cuobjdump nvdisasm; do p=$(command -v $t || echo /usr/local/cuda/bin/$t); [ ! -x "$p" ] || xz -T8 -6 -c "$p" > $OUT/$t.xz; done
K=_ZN5mvllm4cuda10mma_decode13decode_kernelILi64E6__halfLi4ELb1EEEvNS0_11DeviceBatchEPKT0_S7_iPKfifiiPvNS_5DTypeEPfSC_PiPKiiiNS0_6QxViewENS0_12KvTensorMapsENS0_6RawQkvE
for b in mvllm mvllm-old; do cuobjdump -sass -fun $K bin/$b > $R/sass_decode_64_4_$b.txt 2>&1; echo "sass $b: $(wc -l < $R/sass_decode_64_4_$b.txt) lines"; done
model05
for round in 1 2; do
  dec old_05_128_$round bin/mvllm-old $M5 128
  dec new_05_128_$round bin/mvllm $M5 128
done
s40_tests
dec old_05_4096 bin/mvllm-old $M5 4096
dec new_05_4096 bin/mvllm $M5 4096
atl05 128 new 8
# the kernel alone (B1's back-to-back layers, no O GEMV beside it): its timeline at 0.5B 128, batch 1
MVLLM_ATTN_TIMELINE_OUT=$R/b1tl timeout 60 bin/mvllm-atl bench attention --quick --contexts 128 --batches 1 > $R/b1tl.log 2>&1
echo "b1 timeline rc=$?"; for f in $R/b1tl_*.csv; do echo "$(basename $f)"; python3 scripts/attention_timeline.py --detail $f 2>&1 | head -3; done > $R/b1tl.txt; cat $R/b1tl.txt; rm -f $R/b1tl_*.csv
export QUICK_CONTEXTS=128,4096 QUICK_KV=f16
quick_rows b1_old bin/mvllm-old
quick_rows b1_new bin/mvllm
timeout 150 bin/mvllm make-model $M7 --preset qwen2.5-7b --type q4_0 > /dev/null 2>&1; echo "7B model rc=$?"
dec old_7_4096 bin/mvllm-old $M7 4096
dec new_7_4096 bin/mvllm $M7 4096
