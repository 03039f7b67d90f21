#!/usr/bin/env python3
"""CPU benchmarks B6 (attention variants) and B7 (decode / pp128) of ../shared/BENCHMARKS.md.

Runs `mvllm bench decode` for each configuration, collects the JSON it writes, and writes
bench/results/<name>.json, a Markdown table and an SVG bar chart.

  scripts/bench_cpu.py b7 --mvllm build/bin/mvllm --model /tmp/qwen05-q4_0.gguf
  scripts/bench_cpu.py b6 --mvllm build/bin/mvllm --model /tmp/qwen05-q4_0.gguf [--prompt 1068 --gen 1024]
"""
import argparse, json, os, subprocess, sys, tempfile, time

def run(mvllm, model, args):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [mvllm, "bench", "decode", "-m", model, "--json-out", out] + args
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, stdout=sys.stderr)
    with open(out) as f:
        r = json.load(f)
    os.unlink(out)
    r["load_average"] = os.getloadavg()[0]
    return r

def svg_bars(title, labels, values, unit, path):
    w, h, left, bar_h, gap = 760, 40 + 28 * len(labels), 260, 20, 8
    vmax = max(values) or 1
    rows = []
    for i, (l, v) in enumerate(zip(labels, values)):
        y = 30 + i * (bar_h + gap)
        bw = (w - left - 90) * v / vmax
        rows.append(f'<text x="{left - 8}" y="{y + 15}" text-anchor="end" font-size="12">{l}</text>'
                    f'<rect x="{left}" y="{y}" width="{bw:.1f}" height="{bar_h}" fill="#4a7bd0"/>'
                    f'<text x="{left + bw + 6:.1f}" y="{y + 15}" font-size="12">{v:.1f} {unit}</text>')
    body = "\n".join(rows)
    with open(path, "w") as f:
        f.write(f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif">'
                f'<text x="10" y="18" font-size="14" font-weight="bold">{title}</text>\n{body}\n</svg>\n')

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("which", choices=["b6", "b7"])
    ap.add_argument("--mvllm", default="build/bin/mvllm")
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=1068)
    ap.add_argument("--gen", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default="bench/results")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    t = ["-t", str(a.threads)]
    results, labels = [], []
    if a.which == "b7":
        for threads in (1, 2):
            r = run(a.mvllm, a.model, ["--prompt-len", "128", "-n", "64", "-t", str(threads), "--repeat", str(a.repeat)])
            results.append(r); labels.append(f"{threads} thread(s)")
        title = "B7: qwen2.5-0.5b q4_0, CPU, pp128 and tg64 (tok/s)"
        print("| threads | pp128 tok/s | decode tok/s | load avg |\n|---|---|---|---|")
        for l, r in zip(labels, results):
            print(f"| {l} | {r['prefill_tok_s_median']:.1f} | {r['decode_tok_s_median']:.1f} | {r['load_average']:.1f} |")
        svg_bars(title, [f"decode, {l}" for l in labels] + [f"pp128, {l}" for l in labels],
                 [r["decode_tok_s_median"] for r in results] + [r["prefill_tok_s_median"] for r in results],
                 "tok/s", f"{a.out}/cpu_b7.svg")
    else:
        for attention in ("naive", "grouped", "fused"):
            for layout, block in (("paged", "16"), ("contiguous", str(a.prompt + a.gen + 16))):
                for dtype in ("f32", "f16"):
                    r = run(a.mvllm, a.model, t + ["--prompt-len", str(a.prompt), "-n", str(a.gen),
                                                   "--attention", attention, "--kv-dtype", dtype,
                                                   "--kv-block-size", block, "--repeat", "1"])
                    r["layout"] = layout
                    results.append(r); labels.append(f"{attention}, {layout}, {dtype}")
        title = f"B6: qwen2.5-0.5b q4_0 CPU decode after {a.prompt} tokens, {a.gen} generated (tok/s)"
        print("| attention | layout | KV dtype | decode tok/s | peak RSS growth MiB | load avg |\n|---|---|---|---|---|---|")
        for r in results:
            print(f"| {r['attention']} | {r['layout']} | {r['kv_dtype']} | {r['decode_tok_s_median']:.1f} | {r['rss_growth_mib']:.1f} | {r['load_average']:.1f} |")
        svg_bars(title, labels, [r["decode_tok_s_median"] for r in results], "tok/s", f"{a.out}/cpu_b6.svg")
    with open(f"{a.out}/cpu_{a.which}.json", "w") as f:
        json.dump({"benchmark": a.which, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "cpu": open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].strip(": \t"),
                   "results": results}, f, indent=2)

if __name__ == "__main__":
    main()
