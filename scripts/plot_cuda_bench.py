#!/usr/bin/env python3
"""SVG plots of the CUDA decode results under bench/results/ (no plotting library needed):
cuda_kernels_gemv.svg (batch-1 GEMV, % of the copy bandwidth per type and shape) and
cuda_decode.svg (decode tok/s of the committed bench decode runs against llama.cpp).
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
    k = json.load(open(os.path.join(d, 'cuda_kernels_gemv.json')))
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
    bars('Decode tok/s after a 512-token prompt, batch 1, H200', runs, 'tok/s', os.path.join(d, 'cuda_decode.svg'))


if __name__ == '__main__':
    main()
