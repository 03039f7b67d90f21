#!/usr/bin/env python3
"""CPU benchmarks of ../shared/BENCHMARKS.md: B6 (attention variants), B7 (decode / pp128) and
the serving figures of the engine (prefix reuse, head-of-line, cost of --batch-invariant).

Runs `mvllm bench ...` for each configuration, collects the JSON it writes, and writes
bench/results/cpu_<name>.json, a Markdown table and SVG bar charts.

  scripts/bench_cpu.py b7 --mvllm build/bin/mvllm --model qwen05-q4_0.gguf
  scripts/bench_cpu.py b6 --mvllm build/bin/mvllm --model qwen05-q4_0.gguf [--prompt 1068 --gen 1024]
  scripts/bench_cpu.py b6-replot          (the SVGs of an existing cpu_b6.json: tok/s and peak RSS)
  scripts/bench_cpu.py prefix [--model M] (mvllm bench prefix: TTFT at 0..100% prefix overlap)
  scripts/bench_cpu.py hol [--model M]    (mvllm bench hol: short requests behind a long prompt)
  scripts/bench_cpu.py invariance [--model M]  (mvllm bench throughput with and without --batch-invariant)
The engine benchmarks default to the shipped model (no --model).
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

def run_engine(mvllm, which, args):
    """One `mvllm bench <which>` run; its JSON (the command writes it)."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [mvllm, "bench", which, "--json-out", out] + args
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, stdout=sys.stderr)
    with open(out) as f:
        r = json.load(f)
    os.unlink(out)
    r["load_average"] = os.getloadavg()[0]
    r["command"] = " ".join(["mvllm", "bench", which] + args)
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

def b6_svgs(doc, out):
    """cpu_b6.svg (decode tok/s) and cpu_b6_rss.svg (peak RSS growth) of B6 results."""
    results = doc["results"]
    labels = [f"{r['attention']}, {r['layout']}, {r['kv_dtype']}" for r in results]
    prompt, gen = results[0]["prompt_len"], results[0].get("decode_steps", results[0].get("n_predict", ""))
    svg_bars(f"B6: qwen2.5-0.5b q4_0 CPU decode after {prompt} tokens, {gen} generated (tok/s)", labels,
             [r["decode_tok_s_median"] for r in results], "tok/s", f"{out}/cpu_b6.svg")
    svg_bars(f"B6: peak RSS growth over the loaded model, {prompt}-token prompt (MiB)", labels,
             [r["rss_growth_mib"] for r in results], "MiB", f"{out}/cpu_b6_rss.svg")

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("which", choices=["b6", "b7", "b6-replot", "prefix", "hol", "invariance"])
    ap.add_argument("--mvllm", default="build/bin/mvllm")
    ap.add_argument("--model", default="")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=1068)
    ap.add_argument("--gen", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default="bench/results")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    t = ["-t", str(a.threads)]
    m = ["-m", a.model] if a.model else []
    results, labels = [], []
    if a.which in ("b6", "b7") and not a.model:
        ap.error("b6 and b7 need --model")
    if a.which == "b6-replot":
        b6_svgs(json.load(open(f"{a.out}/cpu_b6.json")), a.out)
        return
    if a.which == "prefix":
        r = run_engine(a.mvllm, "prefix", m + t + ["--prompt-len", "512", "--overlaps", "0,50,90,100", "--repeat", "5"])
        print("| overlap % | TTFT median ms | prefix tokens reused | cut vs 0% |\n|---|---|---|---|")
        for row in r["rows"]:
            cut = row["ttft_cut_vs_0"]
            print(f"| {row['overlap_pct']} | {1e3 * row['ttft_median_s']:.2f} | {row['prefix_tokens_reused']} | "
                  f"{'-' if cut is None else f'{100 * cut:.1f}%'} |")
        svg_bars(f"Prefix reuse: TTFT of a {r['prompt_len']}-token prompt by overlap with a cached one (ms)",
                 [f"{row['overlap_pct']}% overlap" for row in r["rows"]],
                 [1e3 * row["ttft_median_s"] for row in r["rows"]], "ms", f"{a.out}/cpu_prefix.svg")
        results = r
    elif a.which == "hol":
        r = run_engine(a.mvllm, "hol", m + t + ["--long-len", "1000", "--short-len", "16", "--num-short", "4",
                                                "--max-batched-tokens", "256", "--capped-chunk", "64", "--repeat", "5"])
        print("| config | short TTFT median ms | long TTFT ms | short cut vs fcfs |\n|---|---|---|---|")
        for row in r["rows"]:
            print(f"| {row['config']} | {1e3 * row['short_ttft_median_s']:.2f} | {1e3 * row['long_ttft_median_s']:.2f} | "
                  f"{100 * row['short_ttft_cut_vs_fcfs']:.1f}% |")
        svg_bars(f"Head-of-line: TTFT of {r['num_short']} x {r['short_len']}-token requests behind a "
                 f"{r['long_len']}-token prompt (ms)", [row["config"] for row in r["rows"]],
                 [1e3 * row["short_ttft_median_s"] for row in r["rows"]], "ms", f"{a.out}/cpu_hol.svg")
        results = r
    elif a.which == "invariance":
        results = []
        for flag in ([], ["--batch-invariant"]):
            r = run_engine(a.mvllm, "throughput", m + t + flag + ["--num-requests", "32", "--input-len", "32:512",
                                                             "--output-len", "16:128", "--max-batched-tokens", "512"])
            results.append(r)
        print("| kernels | output tok/s | prefill tok/s | decode tok/s | peak RSS MiB |\n|---|---|---|---|---|")
        names = ["default", "batch-invariant"]
        for n, r in zip(names, results):
            print(f"| {n} | {r['output_tok_s']:.1f} | {r['prefill_tok_s']:.1f} | {r['decode_tok_s']:.1f} | {r['peak_rss_mib']:.0f} |")
        svg_bars("Cost of --batch-invariant: engine throughput, 32 requests (tok/s)",
                 [f"{k}, {n}" for n in names for k in ("prefill", "decode")],
                 [r[f"{k}_tok_s"] for r in results for k in ("prefill", "decode")], "tok/s", f"{a.out}/cpu_invariance.svg")
    elif a.which == "b7":
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
        b6_svgs({"results": results, "prompt": a.prompt, "gen": a.gen}, a.out)
    if a.which in ("prefix", "hol", "invariance"):
        with open(f"{a.out}/cpu_{a.which}.json", "w") as f:
            json.dump(results, f, indent=2)
        return
    with open(f"{a.out}/cpu_{a.which}.json", "w") as f:
        json.dump({"benchmark": a.which, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "cpu": open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].strip(": \t"),
                   "results": results}, f, indent=2)

if __name__ == "__main__":
    main()
