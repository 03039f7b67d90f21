#!/usr/bin/env python3
"""SVG of `mvllm bench serve` results: TTFT, inter-token latency (p50 and p99) and output tok/s
per concurrency level, one panel each, for one or more JSON files (e.g. two models or devices).
The panels are scripts/bench_cpu.py's bar charts, stacked in one file.

  scripts/plot_bench_serve.py bench/results/serve_cpu_austen.json [more.json ...] -o out.svg
"""
import argparse, json, os, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cpu import svg_bars  # noqa: E402

def panel(title, labels, values, unit):
    with tempfile.NamedTemporaryFile("r", suffix=".svg", delete=False) as f:
        path = f.name
    svg_bars(title, labels, values, unit, path)
    with open(path) as f:
        text = f.read()
    os.unlink(path)
    height = int(text.split('height="', 1)[1].split('"', 1)[0])
    return text, height

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json", nargs="+")
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args()
    runs = [json.load(open(p)) for p in a.json]
    def name(r):
        return r.get("label") or r["model"]
    prefix = (lambda r: f"{name(r)}, ") if len(runs) > 1 else (lambda r: "")
    labels = [f"{prefix(r)}{l['concurrency']} client(s)" for r in runs for l in r["levels"]]
    levels = [l for r in runs for l in r["levels"]]
    shape = f"input {runs[0]['input_len']}, output {runs[0]['output_len']} tokens"
    if len(runs) == 1:
        shape = f"{name(runs[0])}; {shape}"
    panels = [
        panel(f"Time to first token, p50 / p99 (ms); {shape}",
              [f"{x}, p50" for x in labels] + [f"{x}, p99" for x in labels],
              [l["ttft"]["p50_ms"] for l in levels] + [l["ttft"]["p99_ms"] for l in levels], "ms"),
        panel("Inter-token latency, p50 / p99 (ms)",
              [f"{x}, p50" for x in labels] + [f"{x}, p99" for x in labels],
              [l["itl"]["p50_ms"] for l in levels] + [l["itl"]["p99_ms"] for l in levels], "ms"),
        panel("Output tokens/s (all clients)", labels, [l["output_tok_s"] for l in levels], "tok/s"),
    ]
    y, parts = 0, []
    for text, height in panels:
        parts.append(text.replace("<svg ", f'<svg y="{y}" ', 1))
        y += height + 10
    with open(a.out, "w") as f:
        f.write(f'<svg xmlns="http://www.w3.org/2000/svg" width="760" height="{y}">\n' + "".join(parts) + "</svg>\n")
    print(a.out)

if __name__ == "__main__":
    main()
