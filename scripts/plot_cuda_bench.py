#!/usr/bin/env python3
"""SVG plots of the CUDA decode results under bench/results/ (no plotting library needed):
cuda_kernels_gemv.svg (batch-1 GEMV, % of the copy bandwidth per type and shape),
cuda_decode.svg (decode tok/s of the committed bench decode runs against llama.cpp), and from
the H200 runs in h200/: h200/b4a.svg (BENCHMARKS.md B4(a) decode tok/s per batch against
llama.cpp), h200/b3.svg (B3: decode tok/s after prompts of 128..32768 tokens) and
h200/prefill/prefill.svg (prefill tok/s with the tiled prefill attention and without it), and b1.svg
in each run folder of B1_RUNS (BENCHMARKS.md B1: `bench attention` beside the torch anchor of the
same run).
Usage: scripts/plot_cuda_bench.py [results_dir]"""
import json
import os
import sys


def bars(title, rows, unit, path, vmax=None, line=None):
    """rows: (label, value, colour). line: (value, label) drawn as a vertical marker."""
    w, left, bar_h, gap = 820, 270, 16, 5
    h = 50 + (bar_h + gap) * len(rows)
    vmax = vmax or max(v for _, v, _ in rows) or 1
    span = w - left - 110
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif">',
           f'<text x="10" y="18" font-size="14" font-weight="bold">{title}</text>']
    for i, (label, v, colour) in enumerate(rows):
        y = 30 + i * (bar_h + gap)
        bw = span * min(v, vmax) / vmax
        out.append(f'<text x="{left - 8}" y="{y + 12}" text-anchor="end" font-size="11">{label}</text>'
                   f'<rect x="{left}" y="{y}" width="{bw:.1f}" height="{bar_h}" fill="{colour}"/>'
                   f'<text x="{left + bw + 5:.1f}" y="{y + 12}" font-size="11">{v:,.1f} {unit}</text>')
    if line:
        x = left + span * line[0] / vmax
        out.append(f'<line x1="{x:.1f}" y1="26" x2="{x:.1f}" y2="{h - 10}" stroke="#c33" stroke-dasharray="4 3"/>'
                   f'<text x="{x + 4:.1f}" y="{h - 12}" font-size="11" fill="#c33">{line[1]}</text>')
    out.append('</svg>')
    with open(path, 'w') as f:
        f.write('\n'.join(out) + '\n')


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..', 'bench', 'results')
    h = os.path.join(d, 'h200')
    latest = os.path.join(h, 'kernels_gemv_ksauto.json')
    k = json.load(open(latest if os.path.exists(latest) else os.path.join(d, 'cuda_kernels_gemv.json')))
    colours = {'q4_0': '#4a7bd0', 'q8_0': '#2a9d8f', 'q4_K': '#e9a03b', 'q6_K': '#c0612b', 'f16': '#7a5cc0', 'bf16': '#999'}
    rows = [(f"{c['type']} {c['n_in']}x{c['n_out']}", c['pct_of_copy'], colours.get(c['type'], '#4a7bd0'))
            for c in k['cases'] if c['n_tokens'] == 1]
    bars(f"Decode GEMV, batch 1, % of the copy bandwidth ({k['copy_gbps']:.0f} GB/s), {k['device']}", rows, '%',
         os.path.join(d, 'cuda_kernels_gemv.svg'), vmax=110, line=(85, '85 % goal'))
    runs, anchored = [], set()
    for name, label, anchor in [('cuda_decode_q05_q4_0_eager.json', '0.5B q4_0, eager steps', 915),
                                ('cuda_decode_q05_q4_0_graphs.json', '0.5B q4_0, CUDA graphs', 915),
                                ('cuda_decode_q7_q4_0_graphs.json', '7B q4_0, CUDA graphs', 357)]:
        p = os.path.join(d, name)
        if os.path.exists(p):
            r = json.load(open(p))
            runs.append((label, r['decode_tok_s_median'], '#4a7bd0'))
            geometry = label.split(',')[0]
            if geometry not in anchored:
                anchored.add(geometry)
                runs.append((geometry + ', llama.cpp', anchor, '#bbb'))
    runs.insert(0, ('0.5B q4_0, before (issue 4, f32 KV)', 383, '#999'))
    for name, label in [('decode_q05_q4_0.json', '0.5B q4_0, now'), ('decode_q7_q4_0.json', '7B q4_0, now')]:
        p = os.path.join(h, name)
        if os.path.exists(p):
            runs.append((label, json.load(open(p))['decode_tok_s_median'], '#2a9d8f'))
    bars('Decode tok/s after a 512-token prompt, batch 1, H200', runs, 'tok/s', os.path.join(d, 'cuda_decode.svg'))
    if os.path.isdir(h):
        plot_h200(h)
    for run in B1_RUNS:
        if os.path.isdir(os.path.join(d, run)):
            plot_b1(os.path.join(d, run))
    for run in SWEEP_RUNS:
        if os.path.isdir(os.path.join(d, run)):
            plot_b3(os.path.join(d, run), run.split('/')[0].upper())


# Runs of the whole B1 table with the torch anchor in the same call (attn_b1.json, attn_anchor_torch.json).
B1_RUNS = ['h100/session39/call5', 'h100/session40/call5', 'h100/session40/call7', 'h100/session40/call9',
           'h200/session41/call3', 'h100/session41/call7', 'h100/session41/call11', 'h100/session50/call3', 'h200/session54/call1']


def plot_b1(run):
    ours = json.load(open(os.path.join(run, 'attn_b1.json')))
    torch_rows = json.load(open(os.path.join(run, 'attn_anchor_torch.json')))['rows']
    dtypes = {'f16': 'float16', 'f32': 'float32'}
    anchor = {(r['geom'], r['dtype'], r['batch'], r['ctx']): r for r in torch_rows}
    rows = []
    for kv, batch in [('f16', 1), ('f16', 16), ('f32', 1)]:
        for r in ours['rows']:
            if r['kv'] != kv or r['batch'] != batch or r['ctx'] < 1024:
                continue
            a = anchor.get((r['geometry'], dtypes[kv], batch, r['ctx']))
            label = f"{r['geometry'].replace('qwen2.5-', '')} {kv} B={batch} {r['ctx']}"
            rows.append((label + ', mvllm fused', r['fused_us'], '#2a9d8f'))
            if a:
                rows.append((label + ', torch sdpa', a['sdpa_us'], '#bbb'))
                if kv == 'f32':
                    rows.append((label + ', torch naive', a['naive_us'], '#ddd'))
    bars(f"B1 decode attention, us per layer (lower is better; bars cut at 150 us), {ours.get('device', '')}", rows, 'us',
         os.path.join(run, 'b1.svg'), vmax=150)


# Folders holding one whole B2 / B3 / B5 sweep (bench/cuda_decode_sweep.sh) of one call: b3.svg there.
SWEEP_RUNS = ['h100/session42/call3', 'h100/session50/call2', 'h200/session54/call1']


def plot_b3(folder, card):
    """B3: decode tok/s after each prompt length, from the folder's b3_*.json files."""
    rows = []
    for geo, label in [('qwen2.5-0.5b', '0.5B'), ('qwen2.5-7b', '7B')]:
        for typ in ('q4_0', 'q4_k_m'):
            for prompt in (128, 512, 1024, 2048, 4096, 16384, 32768):
                p = os.path.join(folder, f'b3_{geo}_{typ}_p{prompt}.json')
                if os.path.exists(p):  # the run's date beside each bar: the files may come from several sessions
                    d = json.load(open(p))
                    rows.append((f'{label} {typ}, prompt {prompt} ({d.get("date", "")[5:10]})', d['decode_tok_s_median'],
                                 '#4a7bd0' if typ == 'q4_0' else '#e9a03b'))
    if rows:
        bars(f'B3 decode tok/s (127 steps) after a prompt, batch 1, F16 KV, {card}', rows, 'tok/s',
             os.path.join(folder, 'b3.svg'))


# llama.cpp on the same H200 (BENCHMARKS.md B4(a)), decode tok/s per batch size.
LLAMA_B4 = {('q05', 1): 768, ('q05', 16): 4204, ('q05', 64): 10210, ('q05', 256): 17853,
            ('q7', 1): 348, ('q7', 16): 2200, ('q7', 64): 5055}


def plot_h200(h):
    rows = []
    for model, label in [('q05', '0.5B q4_0'), ('q7', '7B q4_0')]:
        for b in (1, 16, 64, 256):
            p = os.path.join(h, f'b4a_{model}_b{b}.json')
            if not os.path.exists(p):
                continue
            rows.append((f'{label}, B={b}', json.load(open(p))['decode_tok_s'], '#2a9d8f'))
            rows.append((f'{label}, B={b}, llama.cpp', LLAMA_B4[(model, b)], '#bbb'))
    if rows:
        bars('B4(a) decode tok/s, 512-token prompts, 256 generated, F16 KV, H200', rows, 'tok/s',
             os.path.join(h, 'b4a.svg'))
    plot_b3(h, 'H200')

    rows = []
    pre = os.path.join(h, 'prefill')
    for geo, label in [('qwen2.5-0.5b', '0.5B q4_0'), ('qwen2.5-7b', '7B q4_0')]:
        for prompt in (4096, 32768):
            for suffix, how, colour in [('_tiled_off', 'decode kernel per row', '#bbb'), ('', 'tiled prefill', '#2a9d8f')]:
                p = os.path.join(pre, f'b3_{geo}_q4_0_p{prompt}{suffix}.json')
                if os.path.exists(p):
                    rows.append((f'{label}, {prompt} tokens, {how}', json.load(open(p))['prefill_tok_s_median'], colour))
    if rows:
        bars('Prefill tok/s of one prompt, F16 KV, H200 (same call, MVLLM_CUDA_TILED_PREFILL=0 for the grey bars)',
             rows, 'tok/s', os.path.join(pre, 'prefill.svg'))


if __name__ == '__main__':
    main()
