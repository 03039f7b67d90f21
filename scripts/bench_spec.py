#!/usr/bin/env python3
"""Speculative-decoding benchmark (issue 9): runs `mvllm bench spec` and writes
bench/results/<name>.json and SVG bar charts (the SVG writer of scripts/bench_cpu.py) of decode
tok/s (<name>.svg) and of generated tokens per CPU-second (<name>_cpu.svg) per prompt and
configuration.

  scripts/bench_spec.py --mvllm build/bin/mvllm --draft models/mvllm-austen-draft-q8_0.gguf [-t 2]
"""
import argparse, json, os, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cpu import svg_bars  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mvllm", default="build/bin/mvllm")
    ap.add_argument("--model", default="", help="target (default: the shipped model)")
    ap.add_argument("--draft", default="models/mvllm-austen-draft-q8_0.gguf")
    ap.add_argument("--threads", "-t", type=int, default=2)
    ap.add_argument("--draft-tokens", type=int, default=4)
    ap.add_argument("--n-predict", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--name", default="cpu_spec")
    ap.add_argument("--out", default="bench/results")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        tmp = f.name
    cmd = [a.mvllm, "bench", "spec", "--draft-model", a.draft, "-t", str(a.threads), "--device", a.device,
           "--draft-tokens", str(a.draft_tokens), "-n", str(a.n_predict), "--repeat", str(a.repeat), "--json-out", tmp]
    if a.model:
        cmd += ["-m", a.model]
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True)
    with open(tmp) as f:
        r = json.load(f)
    os.unlink(tmp)
    r["load_average"] = os.getloadavg()[0]
    r["command"] = " ".join(["scripts/bench_spec.py"] + sys.argv[1:])
    with open(f"{a.out}/{a.name}.json", "w") as f:
        json.dump(r, f, indent=2)
    rows = r["results"]
    labels = [f"{x['prompt']}: {x['configuration']}" for x in rows]
    svg_bars(f"Speculative decoding ({r['device'].split(' (')[0]}): decode tok/s, K={r['draft_tokens']}, "
             f"{r['n_predict']} tokens greedy", labels, [x["decode_tok_s_median"] for x in rows], "tok/s",
             f"{a.out}/{a.name}.svg")
    svg_bars(f"Speculative decoding ({r['device'].split(' (')[0]}): generated tokens per CPU-second, "
             f"K={r['draft_tokens']}", labels, [x["tok_per_cpu_s_median"] for x in rows], "tok/CPU-s",
             f"{a.out}/{a.name}_cpu.svg")
    print(f"wrote {a.out}/{a.name}.json, .svg and _cpu.svg", file=sys.stderr)


if __name__ == "__main__":
    main()
