#!/usr/bin/env python3
"""Soak test of `mvllm serve` (tests/soak/README.md): many concurrent clients for a long time.

Starts the server with the shipped model, then N client threads send, at random, for DURATION
seconds: valid requests (completions and chat, streaming and not; some greedy, whose text must be
the same every time), streams the client drops after a few chunks, and invalid requests (bad JSON,
wrong types, an oversized body, absurd max_tokens, an unknown model, an unknown path) that must be
refused with their status. At the end every client has stopped and the server must hold no
request and no KV block (/metrics). Reports the counts, the server's RSS after warm-up and at the
end, and p50/p99 latencies of the first and the last window. Exit status 0 when every check holds.

The server runs with --batch-invariant so that a greedy answer cannot depend on the other
requests of its batches (--default-kernels: without it, and greedy differences are only counted).

Usage: tests/soak/soak.py [--mvllm build/bin/mvllm] [--duration 1800] [--clients 32] [--json-out F]
Python 3 standard library only.
"""
import argparse
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MAX_BODY = 1 << 20  # the server is started with --max-body-bytes 1MiB

PROMPTS = [
    "It is a truth universally acknowledged",
    "Mr. Darcy walked into the room and",
    "Elizabeth could not help",
    "The next morning, Mrs. Bennet",
    "Emma Woodhouse, handsome, clever, and rich,",
    "Captain Wentworth",
    "She was",
    "“My dear Mr. Bennet,” said his lady to him one day,",
]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def percentile(values, q):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.failures = []
        self.latencies = []  # (t_done, kind, seconds)
        self.greedy = {}     # (endpoint, prompt, max_tokens) -> text
        self.strict_greedy = True  # batch-invariant kernels: the same greedy text every time

    def count(self, key):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + 1

    def fail(self, what):
        with self.lock:
            self.counts["FAILED"] = self.counts.get("FAILED", 0) + 1
            if len(self.failures) < 50:
                self.failures.append(what)

    def latency(self, kind, seconds):
        with self.lock:
            self.latencies.append((time.monotonic(), kind, seconds))

    def check_greedy(self, key, text):
        with self.lock:
            first = self.greedy.setdefault(key, text)
        return first == text


class Client:
    def __init__(self, port, stats, rng, timeout):
        self.port, self.stats, self.rng, self.timeout = port, stats, rng, timeout

    def connect(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)

    def post(self, path, body, raw=None):
        conn = self.connect()
        try:
            data = raw if raw is not None else json.dumps(body).encode()
            conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    # ---- valid requests -----------------------------------------------------------------------
    def valid_body(self, chat):
        prompt = self.rng.choice(PROMPTS)
        greedy = self.rng.random() < 0.3
        body = {"max_tokens": self.rng.randint(1, 48)}
        if greedy:
            body["temperature"] = 0
        else:
            body.update(temperature=round(self.rng.uniform(0.2, 1.5), 2), top_p=0.95, seed=self.rng.randint(0, 1 << 30))
        if self.rng.random() < 0.5:
            body["model"] = "mvllm"
        if chat:
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        return body, greedy, prompt

    def check_result(self, name, body, greedy, prompt, text, finish, completion_tokens):
        if finish not in ("stop", "length"):
            return self.stats.fail("%s: finish_reason %r" % (name, finish))
        if not isinstance(text, str):
            return self.stats.fail("%s: text is %r" % (name, type(text)))
        if completion_tokens is not None and not (0 <= completion_tokens <= body["max_tokens"]):
            return self.stats.fail("%s: %s completion tokens for max_tokens %d" % (name, completion_tokens, body["max_tokens"]))
        if finish == "length" and completion_tokens is not None and completion_tokens != body["max_tokens"]:
            return self.stats.fail("%s: finish length after %s of %d tokens" % (name, completion_tokens, body["max_tokens"]))
        if greedy and not self.stats.check_greedy((name.split()[0], prompt, body["max_tokens"]), text):
            if self.stats.strict_greedy:
                return self.stats.fail("%s: greedy text differs from the first answer for %r" % (name, prompt))
            self.stats.count("greedy differs (default kernels)")
        self.stats.count(name)

    def valid(self, chat, stream):
        body, greedy, prompt = self.valid_body(chat)
        path = "/v1/chat/completions" if chat else "/v1/completions"
        name = ("chat" if chat else "completion") + (" stream" if stream else "")
        t0 = time.monotonic()
        if not stream:
            status, data = self.post(path, body)
            if status != 200:
                return self.stats.fail("%s: status %d %s" % (name, status, data[:200]))
            r = json.loads(data)
            choice = r["choices"][0]
            text = choice["message"]["content"] if chat else choice["text"]
            self.stats.latency("e2e", time.monotonic() - t0)
            return self.check_result(name, body, greedy, prompt, text, choice["finish_reason"],
                                     r["usage"]["completion_tokens"])
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        conn = self.connect()
        try:
            conn.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                return self.stats.fail("%s: status %d" % (name, resp.status))
            text, finish, usage, done, first = "", None, None, False, None
            for raw in resp:
                line = raw.decode("utf-8").rstrip("\n")
                if not line.startswith("data: "):
                    continue
                payload = line[6:]
                if payload == "[DONE]":
                    done = True
                    break
                chunk = json.loads(payload)
                if "error" in chunk:
                    return self.stats.fail("%s: error event %s" % (name, payload[:200]))
                if chunk.get("usage"):
                    usage = chunk["usage"]
                for c in chunk.get("choices", []):
                    piece = c["delta"].get("content", "") if chat else c.get("text", "")
                    if piece and first is None:
                        first = time.monotonic() - t0
                    text += piece or ""
                    finish = c.get("finish_reason") or finish
            if not done:
                return self.stats.fail("%s: stream ended without [DONE]" % name)
            self.stats.latency("e2e", time.monotonic() - t0)
            if first is not None:
                self.stats.latency("ttft", first)
            return self.check_result(name, body, greedy, prompt, text, finish,
                                     usage["completion_tokens"] if usage else None)
        finally:
            conn.close()

    def cancel(self):
        """A stream the client drops after 0-3 chunks."""
        chat = self.rng.random() < 0.5
        body, _, _ = self.valid_body(chat)
        body.update(stream=True, max_tokens=self.rng.randint(64, 400), ignore_eos=True)
        conn = self.connect()
        try:
            conn.request("POST", "/v1/chat/completions" if chat else "/v1/completions",
                         body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                return self.stats.fail("cancel: status %d" % resp.status)
            for _ in range(self.rng.randint(0, 3)):
                if not resp.fp.readline():
                    break
        finally:
            conn.sock and conn.sock.shutdown(socket.SHUT_RDWR)
            conn.close()
        self.stats.count("cancelled stream")

    # ---- invalid requests ---------------------------------------------------------------------
    INVALID = [
        ("bad json", "/v1/completions", None, b'{"prompt": "x", ', 400),
        ("bad json", "/v1/chat/completions", None, b"\xff\xfe not json", 400),
        ("wrong type", "/v1/completions", {"prompt": 5}, None, 400),
        ("wrong type", "/v1/completions", {"prompt": "x", "max_tokens": "16"}, None, 400),
        ("wrong type", "/v1/chat/completions", {"messages": "hello"}, None, 400),
        ("wrong type", "/v1/chat/completions", {"messages": [{"role": "user", "content": 3}]}, None, 400),
        ("wrong type", "/v1/completions", {"prompt": "x", "temperature": [1]}, None, 400),
        ("absurd max_tokens", "/v1/completions", {"prompt": "x", "max_tokens": 10 ** 9}, None, 400),
        ("absurd max_tokens", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": "x"}], "max_tokens": -5}, None, 400),
        ("unknown model", "/v1/completions", {"prompt": "x", "model": "gpt-17"}, None, 404),
        ("unknown model", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": "x"}], "model": "llama-99"}, None, 404),
        ("unknown path", "/v1/engines", {"prompt": "x"}, None, 404),
    ]

    def invalid(self):
        if self.rng.random() < 0.1:
            name, path, status_wanted = "oversized body", "/v1/completions", 413
            raw = json.dumps({"prompt": "x" * (MAX_BODY + 1000)}).encode()
            body = None
        else:
            name, path, body, raw, status_wanted = self.rng.choice(self.INVALID)
        try:
            status, data = self.post(path, body, raw)
        except (ConnectionError, http.client.HTTPException) as e:
            if name == "oversized body":  # the server may answer 413 and close before reading it all
                return self.stats.count(name + " (closed)")
            return self.stats.fail("%s: %s" % (name, e))
        if status != status_wanted:
            return self.stats.fail("%s %s: status %d, expected %d: %s" % (name, path, status, status_wanted, data[:200]))
        try:
            error = json.loads(data)["error"]
            assert isinstance(error["message"], str) and error["message"]
        except Exception:
            return self.stats.fail("%s: not an OpenAI error body: %s" % (name, data[:200]))
        self.stats.count(name)

    def one(self):
        r = self.rng.random()
        if r < 0.15:
            return self.invalid()
        if r < 0.25:
            return self.cancel()
        kind = self.rng.randrange(4)
        return self.valid(chat=kind >= 2, stream=kind % 2 == 1)


def metrics(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mvllm", default=os.path.join(ROOT, "build", "bin", "mvllm"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "mvllm-austen-q8_0.gguf"))
    ap.add_argument("--duration", type=float, default=1800, help="seconds of load (default 1800)")
    ap.add_argument("--warmup", type=float, default=None, help="seconds before the RSS baseline (default: 10%% of the run, at most 120)")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2, help="engine threads of the server")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json-out", help="write the report as JSON here too")
    ap.add_argument("--default-kernels", action="store_true",
                    help="serve without --batch-invariant: greedy answers may then differ with what shares their "
                         "batches, so differences are counted, not failed")
    args = ap.parse_args()
    warmup = args.warmup if args.warmup is not None else min(120.0, args.duration * 0.1)
    window = min(300.0, args.duration / 3)

    port = free_port()
    server = subprocess.Popen([args.mvllm, "serve", "-m", args.model, "--port", str(port), "-t", str(args.threads),
                               "--max-body-bytes", str(MAX_BODY), "--max-queue", "512"]
                              + ([] if args.default_kernels else ["--batch-invariant"]),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr_tail = []
    threading.Thread(target=lambda: stderr_tail.extend(server.stderr), daemon=True).start()
    deadline = time.monotonic() + 60
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                break
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            sys.exit("soak: the server did not come up: " + b"".join(stderr_tail).decode(errors="replace")[-2000:])
        time.sleep(0.2)

    stats = Stats()
    stats.strict_greedy = not args.default_kernels
    t_start = time.monotonic()
    t_end = t_start + args.duration
    stop = threading.Event()

    def client_loop(i):
        client = Client(port, stats, random.Random(args.seed * 1000 + i), timeout=600)
        while time.monotonic() < t_end:
            try:
                client.one()
            except Exception as e:  # a client-side exception is a failure to answer
                stats.fail("exception %s: %s" % (type(e).__name__, e))

    rss = []  # (seconds since start, KiB)

    def sample_rss():
        while not stop.is_set():
            rss.append((time.monotonic() - t_start, rss_kib(server.pid)))
            stop.wait(5)

    sampler = threading.Thread(target=sample_rss, daemon=True)
    sampler.start()
    clients = [threading.Thread(target=client_loop, args=(i,)) for i in range(args.clients)]
    for t in clients:
        t.start()
    for t in clients:
        t.join()
    time.sleep(3)  # the engine frees dropped streams' blocks at its next steps
    m = metrics(port)
    stop.set()
    sampler.join()
    rss.append((time.monotonic() - t_start, rss_kib(server.pid)))
    server.terminate()
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()

    after_warmup = [kib for t, kib in rss if t >= warmup]
    base, end, peak = after_warmup[0], rss[-1][1], max(kib for _, kib in rss)
    growth = (end - base) / base * 100

    def window_stats(lo, hi, kind):
        vals = [s for t, k, s in stats.latencies if k == kind and lo <= t - t_start < hi]
        return {"n": len(vals), "p50_s": round(percentile(vals, 0.5), 3), "p99_s": round(percentile(vals, 0.99), 3)}

    elapsed = time.monotonic() - t_start
    report = {
        "duration_s": args.duration, "clients": args.clients, "counts": dict(sorted(stats.counts.items())),
        "failures": stats.failures,
        "rss_kib": {"after_warmup": base, "end": end, "peak": peak, "growth_percent": round(growth, 2),
                    "warmup_s": warmup},
        "metrics_at_end": {k: m.get(k) for k in ("mvllm:kv_blocks_used", "mvllm:kv_blocks_total",
                                                  "mvllm:num_requests_running", "mvllm:num_requests_waiting")},
        "latency_first_window": {k: window_stats(0, window, k) for k in ("e2e", "ttft")},
        "latency_last_window": {k: window_stats(args.duration - window, elapsed, k) for k in ("e2e", "ttft")},
        "window_s": window, "batch_invariant": not args.default_kernels,
        "server_exit": server.returncode,
    }
    checks = {
        "no failed request": stats.counts.get("FAILED", 0) == 0,
        "RSS growth after warm-up < 5%": growth < 5,
        "no KV block held at the end": m.get("mvllm:kv_blocks_used") == 0,
        "no request running or waiting at the end": m.get("mvllm:num_requests_running") == 0
        and m.get("mvllm:num_requests_waiting") == 0,
        "server exited cleanly on SIGTERM": server.returncode == 0,
    }
    # Stable latencies: the last window's p99 within 1.5x of the first window's (+ 0.5 s for
    # windows of very short requests, where one scheduling hiccup is a large ratio).
    for kind in ("e2e", "ttft"):
        first, last = report["latency_first_window"][kind], report["latency_last_window"][kind]
        if first["n"] and last["n"]:
            checks["p99 %s stable (last window <= 1.5 x first + 0.5 s)" % kind] = \
                last["p99_s"] <= 1.5 * first["p99_s"] + 0.5
    report["checks"] = checks
    print(json.dumps(report, indent=1))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(report, f, indent=1)
    sys.exit(0 if all(checks.values()) else 1)


if __name__ == "__main__":
    main()
