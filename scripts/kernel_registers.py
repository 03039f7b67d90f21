#!/usr/bin/env python3
"""Registers and spills of every kernel in one CUDA source file, as ptxas reports them.

Compiles the file with the flags of an existing CMake build directory (CUDA enabled) for one
architecture, and prints one line per kernel: registers, spill stores/loads, static shared memory.
With --against REV it also compiles the file as it is at git revision REV and prints both columns,
so a change's register cost shows before any GPU time is spent on it.

  python3 scripts/kernel_registers.py src/backend/cuda/gemv.cu --build build --filter gemv
  python3 scripts/kernel_registers.py src/backend/cuda/gemv.cu --against HEAD
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile


def compile_report(src, build, arch, rsp):
    """{kernel name: (registers, spill stores, spill loads, smem bytes)} for one source file."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["nvcc", "-DMVLLM_HAVE_CUDA=1", "--options-file", rsp, "-O3", "-DNDEBUG",
               f"--generate-code=arch=compute_{arch},code=sm_{arch}", "--use_fast_math", "-std=c++20",
               "-Xptxas", "-v", "-c", src, "-o", os.path.join(tmp, "k.o")]
        run = subprocess.run(cmd, cwd=build, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"nvcc failed on {src}:\n{run.stderr[-3000:]}")
    kernels, name, spills = {}, None, (0, 0)
    for line in run.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            name, spills = m.group(1), (0, 0)
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and name:
            spills = (int(m.group(1)), int(m.group(2)))
        m = re.search(r"Used (\d+) registers.*?(?:(\d+) bytes smem)?$", line)
        if m and name:
            kernels[name] = (int(m.group(1)), *spills, int(m.group(2) or 0))
    return kernels


def demangle(names):
    filt = shutil.which("cu++filt") or shutil.which("c++filt")
    if not filt or not names:
        return {n: n for n in names}
    out = subprocess.run([filt], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return {n: short_name(d) for n, d in zip(names, out)}


def short_name(demangled):
    """The kernel with its template arguments: no return type, namespaces or parameter list."""
    d = demangled.strip().replace("(anonymous namespace)::", "")
    if d.endswith(")"):  # cut the parameter list at its matching parenthesis
        depth = 0
        for i in range(len(d) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(d[i], 0)
            if depth == 0:
                d = d[:i]
                break
    d = re.sub(r"^void ", "", d)
    return re.sub(r"\b(mvllm::cuda::|mvllm::)", "", d)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", help="a .cu file of the repository")
    ap.add_argument("--build", default="build", help="CMake build directory with CUDA enabled")
    ap.add_argument("--arch", default="90a", help="architecture, e.g. 90a")
    ap.add_argument("--target", default="mvllm_backend_cuda", help="CMake target whose include flags to use")
    ap.add_argument("--against", metavar="REV", help="also compile the file as of this git revision")
    ap.add_argument("--filter", default="", help="only kernels whose demangled name contains this")
    args = ap.parse_args()

    build = os.path.abspath(args.build)
    rsp = os.path.join(build, "CMakeFiles", f"{args.target}.dir", "includes_CUDA.rsp")
    if not os.path.exists(rsp):
        sys.exit(f"{rsp} not found: configure {args.build} with CUDA enabled first")
    source = os.path.abspath(args.source)
    now = compile_report(source, build, args.arch, rsp)
    before = {}
    if args.against:
        text = subprocess.run(["git", "show", f"{args.against}:{os.path.relpath(source, os.getcwd())}"],
                              capture_output=True, text=True, check=True).stdout
        # Beside the original, so that its relative includes resolve the same way.
        old = os.path.join(os.path.dirname(source), f".kernel_registers_{os.getpid()}.cu")
        try:
            with open(old, "w") as f:
                f.write(text)
            before = compile_report(old, build, args.arch, rsp)
        finally:
            os.remove(old)

    # Keyed by the demangled name: the mangled one of an anonymous namespace depends on the file name.
    names = demangle(sorted(set(now) | set(before)))
    now = {names[k]: v for k, v in now.items()}
    before = {names[k]: v for k, v in before.items()}
    def cell(r):
        return "-" if r is None else f"{r[0]} regs" + (f", spills {r[1]}/{r[2]} B" if r[1] or r[2] else "")
    for name in sorted(n for n in set(now) | set(before) if args.filter in n):
        line = f"{name}: {cell(now.get(name))}"
        if args.against:
            line += f"   ({args.against}: {cell(before.get(name))})"
        print(line)


if __name__ == "__main__":
    main()
