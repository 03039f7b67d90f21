// Shared by the openai-client tests: arguments, a small sequential test runner that prints
// "ok"/"FAIL" lines like tests/cli/cli_test.sh, and /metrics scraping.
import OpenAI from 'openai';

export function parse_args(argv) {
  const args = {};
  for (let i = 2; i < argv.length; i += 2) args[argv[i].replace(/^--/, '')] = argv[i + 1];
  for (const required of ['base'])
    if (!args[required]) throw new Error(`missing --${required}`);
  return args;
}

export function make_client(base, api_key, options = {}) {
  // No retries: a 429 or a 5xx must reach the test, not be retried away.
  return new OpenAI({ baseURL: `${base}/v1`, apiKey: api_key, maxRetries: 0, timeout: 120_000, ...options });
}

// A run once ended without its summary line and without a FAIL line (ASan build, CI load): name
// whatever stops the process early instead of exiting silently. A rejection nobody awaits (the
// SDK's internals after an abort) is logged; the check that caused it still stands or falls by
// its own assertions.
let current = null;
let summarised = false;
process.on('unhandledRejection', (e) => console.log(`note: unhandled rejection during "${current}": ${e && e.stack ? e.stack : e}`));
process.on('exit', (code) => {
  if (!summarised) console.log(`FAIL node exited with status ${code} during "${current}", before the summary`);
});

const checks = [];
export function check(name, fn) {
  checks.push([name, fn]);
}

export async function run_checks() {
  let failed = 0;
  for (const [name, fn] of checks) {
    const t0 = Date.now();
    current = name;
    try {
      await fn();
      console.log(`ok   ${name} (${Date.now() - t0} ms)`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
    }
  }
  console.log(`${checks.length - failed} passed, ${failed} failed`);
  summarised = true;
  return failed === 0;
}

// /metrics as {"name{labels}": value}.
export async function metrics(base) {
  const res = await fetch(`${base}/metrics`);
  if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`);
  const out = {};
  for (const line of (await res.text()).split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    out[line.slice(0, at)] = Number(line.slice(at + 1));
  }
  return out;
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Polls /metrics until pred(m) holds (returns m) or the time is up (returns the last m).
export async function wait_metrics(base, pred, timeout_ms) {
  const until = Date.now() + timeout_ms;
  let m = await metrics(base);
  while (!pred(m) && Date.now() < until) {
    await sleep(10);
    m = await metrics(base);
  }
  return m;
}

export const idle = (m) =>
  m['mvllm:num_requests_running'] === 0 && m['mvllm:num_requests_waiting'] === 0 && m['mvllm:kv_blocks_used'] === 0;

export function assert(cond, message) {
  if (!cond) throw new Error(message);
}

export function assert_equal(actual, expected, what) {
  const a = JSON.stringify(actual), e = JSON.stringify(expected);
  if (a !== e) throw new Error(`${what}: got ${a}, expected ${e}`);
}

// Runs fn, which must throw an openai APIError with this status; returns the error.
export async function expect_api_error(status, fn) {
  try {
    await fn();
  } catch (e) {
    if (!(e instanceof OpenAI.APIError)) throw new Error(`expected an APIError ${status}, got ${e}`);
    assert_equal(e.status, status, `status (${e.message})`);
    return e;
  }
  throw new Error(`expected an APIError ${status}, the request succeeded`);
}
