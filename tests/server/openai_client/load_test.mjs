// Load: 64 concurrent streaming clients (chat and completions alternating) through the official
// openai client, 7 of them (10 %, rounded up) disconnecting after a few chunks. Every other stream
// must complete correctly ([DONE] reached, finish_reason "length", the usage chunk's token count,
// text that is the concatenation of its deltas and non-empty), and afterwards /metrics must show
// nothing running or waiting, every KV block free, and exactly the disconnected requests aborted.
// Usage: node load_test.mjs --base URL [--clients 64] [--tokens 32]
import OpenAI from 'openai';
import { assert, assert_equal, check, idle, make_client, metrics, parse_args, run_checks, wait_metrics } from './common.mjs';

const args = parse_args(process.argv);
const base = args.base;
const n_clients = Number(args.clients ?? 64);
const n_tokens = Number(args.tokens ?? 32);
const client = make_client(base, 'unused');
const leaves = (i) => i % 10 === 0;  // clients 0, 10, ..., 60: 7 of 64

async function one_client(i) {
  const common = { model: 'mvllm', temperature: 0.8, seed: i, ignore_eos: true, stream: true,
                   stream_options: { include_usage: true } };
  // A leaving client asks for many tokens, so that it cannot finish before the server notices.
  const max_tokens = leaves(i) ? 600 : n_tokens;
  const chat = i % 2 === 1;
  const stream = chat
    ? await client.chat.completions.create({ ...common, max_tokens, messages: [{ role: 'user', content: `Tell me about letter ${i}.` }] })
    : await client.completions.create({ ...common, max_tokens, prompt: `Chapter ${i}. It was` });
  let text = '', finish = null, usage = null, n_chunks = 0;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += chat ? (c.delta.content ?? '') : c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
    if (leaves(i) && ++n_chunks === 3) return { i, left: true };  // leaving the loop aborts the request
  }
  return { i, left: false, text, finish, usage };
}

const n_leaving = Array.from({ length: n_clients }, (_, i) => i).filter(leaves).length;
check(`${n_clients} concurrent streams, ${n_leaving} of them disconnecting midway`, async () => {
  const before = await metrics(base);
  const t0 = Date.now();
  const results = await Promise.allSettled(Array.from({ length: n_clients }, (_, i) => one_client(i)));
  const seconds = (Date.now() - t0) / 1000;
  const failed = results.filter((r) => r.status === 'rejected').map((r) => String(r.reason));
  assert_equal(failed, [], 'failed clients');
  const done = results.map((r) => r.value).filter((r) => !r.left);
  const n_left = results.length - done.length;
  for (const r of done) {
    assert_equal(r.finish, 'length', `client ${r.i} finish_reason`);
    assert(r.usage !== null, `client ${r.i}: no usage chunk`);
    assert_equal(r.usage.completion_tokens, n_tokens, `client ${r.i} completion_tokens`);
    assert(r.text.length > 0, `client ${r.i}: empty text`);
  }
  console.log(`     ${done.length} streams completed, ${n_left} left midway, in ${seconds.toFixed(1)} s`);
  const after = await wait_metrics(base, idle, 5000);
  assert(idle(after), `not idle after the load: ${JSON.stringify(after)}`);
  const delta = (name) => after[name] - (before[name] ?? 0);
  assert_equal(delta('mvllm:request_success_total{finished_reason="abort"}'), n_left, 'aborted requests');
  assert_equal(delta('mvllm:request_success_total{finished_reason="length"}'), done.length, 'finished requests');
  assert_equal(after['mvllm:kv_blocks_used'], 0, 'KV blocks used');
});

process.exit((await run_checks()) ? 0 : 1);
