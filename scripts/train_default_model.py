#!/usr/bin/env python3
"""Trains mvllm's default model: a small Qwen2-architecture model on Jane Austen's novels.

Runs on a machine with one GPU (torch, transformers 5.x, tokenizers, safetensors; no network):

    scripts/make_corpus.sh                      # .carry/corpus/{train,heldout}.txt (here)
    PYTHONUNBUFFERED=1 python3 scripts/train_default_model.py --corpus .carry/corpus --out $OUT

Steps (fixed seed throughout):
  1. byte-level BPE tokenizer (Hugging Face tokenizers), vocabulary 8192, Qwen2's pre-tokenizer
     expression (mvllm and GGUF know it as "qwen2"), specials <|endoftext|>, <|im_start|>,
     <|im_end|>, a ChatML chat template;
  2. Qwen2ForCausalLM: 14 query heads and 2 KV heads (Qwen2.5's 7:1 ratio), QKV bias, tied
     embeddings, context 1024; trained with AdamW, bf16 autocast, warm-up + cosine LR, residual
     and attention dropout, for a fixed wall-clock budget (--budget seconds) or --max-epochs,
     whichever ends first; the weights with the best validation loss (a slice of the training
     novels, not the held-out text) are kept;
  3. held-out perplexity (the last 5% of each novel) next to a unigram baseline on the same
     tokens; perplexity of tests/data/heldout.txt (the C++ test's sample); sample outputs;
  4. a Hugging Face folder WORK/mvllm-austen (config.json, bf16 safetensors shards <= 12 MB with
     an index, tokenizer.json, tokenizer_config.json, generation_config.json, metrics.json,
     loss.svg), packed as OUT/default_model.tar, split into OUT/default_model.tar.partN pieces of
     at most 15 MiB when larger (`cat default_model.tar.part* | tar x`); metrics.json and
     loss.svg are also written to OUT.

The step count is fixed after 30 steps from their measured time (budget / step time), capped at
--max-epochs; the shipped model's run measured 131 ms a step over those first steps (start-up
included) against about 40 ms later, so it trained 60 s, not the full budget (models/README.md).

Then, here: mvllm convert WORK/mvllm-austen models/mvllm-austen-q8_0.gguf --type q8_0

The speculative-decoding draft (models/README.md) is a smaller geometry trained the same way on the
same corpus but with the default model's own tokenizer (--tokenizer-vocab, the JSON that
scripts/gguf_vocab.py writes from its GGUF), so that both share one vocabulary exactly:
    --name mvllm-austen-draft --tar-name draft_model --layers 4 --hidden 256 --heads 8 --kv-heads 2 --ffn 768
"""
import argparse
import io
import json
import math
import os
import random
import sys
import tarfile
import time

T0 = time.time()

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
EOT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIALS = [EOT, IM_START, IM_END]
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
PART_BYTES = 15 * 1024 * 1024
SHARD_BYTES = 12 * 1000 * 1000


def log(*a):
    print("[%6.1fs]" % (time.time() - T0), *a, flush=True)


# ----------------------------------------------------------------------------------------------
# corpus


def read_corpus(corpus_dir, val_fraction):
    """-> (train_texts, val_texts, heldout_texts), one string per novel."""
    train = open(os.path.join(corpus_dir, "train.txt"), encoding="utf-8").read().split(EOT)
    held = open(os.path.join(corpus_dir, "heldout.txt"), encoding="utf-8").read().split(EOT)
    tr, va = [], []
    for novel in train:
        paras = novel.strip("\n").split("\n\n")
        cut = len(paras) - max(1, int(len(paras) * val_fraction))
        tr.append("\n\n".join(paras[:cut]) + "\n")
        va.append("\n\n".join(paras[cut:]) + "\n")
    return tr, va, [h.strip("\n") + "\n" for h in held]


def chat_documents(train_texts, n_pairs, rng):
    """ChatML exchanges made of consecutive paragraph pairs, so the model knows the template."""
    pairs = []
    for novel in train_texts:
        paras = novel.strip("\n").split("\n\n")
        for a, b in zip(paras, paras[1:]):
            if 20 <= len(a) <= 500 and 20 <= len(b) <= 800:
                pairs.append((a, b))
    rng.shuffle(pairs)
    docs = []
    for a, b in pairs[:n_pairs]:
        docs.append("%suser\n%s%s\n%sassistant\n%s%s\n" % (IM_START, a, IM_END, IM_START, b, IM_END))
    return docs


# ----------------------------------------------------------------------------------------------
# tokenizer


def pre_tokenized_bpe(bpe_model):
    """A byte-level BPE tokenizer around bpe_model with Qwen2's pre-tokenizer expression."""
    from tokenizers import Regex, Tokenizer, decoders, pre_tokenizers

    tok = Tokenizer(bpe_model)
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    return tok


def train_tokenizer(texts, vocab_size):
    from tokenizers import models, pre_tokenizers, trainers

    tok = pre_tokenized_bpe(models.BPE())
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, show_progress=False, special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    paras = [p for t in texts for p in t.split("\n\n")]
    tok.train_from_iterator(paras, trainer=trainer)
    return tok


def load_tokenizer(vocab_path):
    """The tokenizer of an existing model from its vocabulary (scripts/gguf_vocab.py writes it from
    a GGUF): the same tokens under the same ids and the same merges, so that a model trained with it
    shares the vocabulary exactly (a speculative-decoding draft must). Exits when anything differs."""
    from tokenizers import models

    v = json.load(open(vocab_path, encoding="utf-8"))
    if v.get("model") != "gpt2":
        sys.exit("%s: not a byte-level BPE vocabulary" % vocab_path)
    tokens = v["tokens"]
    merges = [tuple(m.split(" ", 1)) for m in v["merges"]]
    tok = pre_tokenized_bpe(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.add_special_tokens(SPECIALS)
    vocab = tok.get_vocab()
    bad = [t for i, t in enumerate(tokens) if vocab.get(t) != i]
    if len(vocab) != len(tokens) or bad:
        sys.exit("%s: the rebuilt tokenizer differs (%d tokens vs %d; first mismatches %r)" % (
            vocab_path, len(vocab), len(tokens), bad[:5]))
    for i, s in enumerate(SPECIALS):
        if tokens[i] != s:
            sys.exit("%s: token %d is %r, expected the special %r" % (vocab_path, i, tokens[i], s))
    return tok


def save_tokenizer(tok, out_dir):
    path = os.path.join(out_dir, "tokenizer.json")
    tok.save(path)
    saved = json.load(open(path, encoding="utf-8"))
    regex = saved["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
    if regex != QWEN2_PATTERN:
        log("WARNING: the saved pre-tokenizer expression differs from Qwen2's: %r" % regex)
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {str(ids[s]): {"content": s, "lstrip": False, "normalized": False,
                                               "rstrip": False, "single_word": False, "special": True}
                                 for s in SPECIALS},
        "additional_special_tokens": [IM_START, IM_END],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOT,
        "errors": "replace",
        "model_max_length": 1024,
        "pad_token": EOT,
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }
    json.dump(cfg, open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8"), indent=2)
    return ids


def encode_docs(tok, docs, eot_id):
    """Documents -> one id stream, each document followed by <|endoftext|>."""
    out = []
    for enc in tok.encode_batch(docs, add_special_tokens=False):
        out.extend(enc.ids)
        out.append(eot_id)
    return out


# ----------------------------------------------------------------------------------------------
# model


def make_config(args, vocab_size, eot_id):
    from transformers import Qwen2Config

    kw = dict(vocab_size=vocab_size, hidden_size=args.hidden, intermediate_size=args.ffn,
              num_hidden_layers=args.layers, num_attention_heads=args.heads,
              num_key_value_heads=args.kv_heads,
              max_position_embeddings=args.ctx, rms_norm_eps=1e-6, tie_word_embeddings=True,
              attention_dropout=args.dropout, initializer_range=0.02, use_sliding_window=False,
              bos_token_id=eot_id, eos_token_id=eot_id, pad_token_id=eot_id, use_cache=True)
    try:
        import inspect
        fields = set(getattr(Qwen2Config, "__dataclass_fields__", {}) or
                     inspect.signature(Qwen2Config.__init__).parameters)
    except (TypeError, ValueError):
        fields = set()
    if "rope_parameters" in fields:
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": args.rope_theta}
    else:
        kw["rope_theta"] = args.rope_theta
    return Qwen2Config(**kw)


def build_model(cfg):
    from transformers import Qwen2ForCausalLM

    try:
        return Qwen2ForCausalLM._from_config(cfg, attn_implementation="sdpa")
    except Exception as e:  # noqa: BLE001
        log("sdpa not taken (%r); default attention" % (e,))
        return Qwen2ForCausalLM(cfg)


def add_dropout(model, p_resid, p_embed):
    import torch.nn.functional as F

    def resid(mod, inp, out):
        if not mod.training or p_resid <= 0:
            return out
        if isinstance(out, tuple):
            return (F.dropout(out[0], p_resid, True),) + tuple(out[1:])
        return F.dropout(out, p_resid, True)

    def embed(mod, inp, out):
        return F.dropout(out, p_embed, True) if mod.training and p_embed > 0 else out

    for layer in model.model.layers:
        layer.self_attn.register_forward_hook(resid)
        layer.mlp.register_forward_hook(resid)
    model.model.embed_tokens.register_forward_hook(embed)


def amp(enabled):
    import contextlib

    import torch
    return torch.autocast("cuda", dtype=torch.bfloat16) if enabled else contextlib.nullcontext()


def nll_windows(model, ids, ctx, device, autocast):
    """Teacher-forced summed NLL and count over non-overlapping windows of ctx tokens (each
    window starts with an empty context; its first token is not predicted)."""
    import torch
    import torch.nn.functional as F

    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for s in range(0, len(ids) - 1, ctx):
            w = ids[s:s + ctx]
            if len(w) < 2:
                break
            x = torch.tensor([w], device=device)
            with amp(autocast):
                logits = model(input_ids=x, use_cache=False).logits[0, :-1].float()
            total += F.cross_entropy(logits, x[0, 1:], reduction="sum").item()
            count += len(w) - 1
    return total, count


def unigram_nll(train_ids, ids, vocab_size, ctx):
    """Add-one unigram model of the training stream, scored on the tokens nll_windows predicts."""
    counts = [1] * vocab_size
    for t in train_ids:
        counts[t] += 1
    n = sum(counts)
    total, count = 0.0, 0
    for s in range(0, len(ids) - 1, ctx):
        for t in ids[s + 1:s + ctx]:
            total -= math.log(counts[t] / n)
            count += 1
    return total, count


def sample(model, tok, prompt_ids, n, device, temperature, top_k, seed, stop_ids):
    import torch

    g = torch.Generator(device=device)
    g.manual_seed(seed)
    ids = list(prompt_ids)
    model.eval()
    with torch.no_grad():
        for _ in range(n):
            x = torch.tensor([ids[-1024:]], device=device)
            logits = model(input_ids=x, use_cache=False).logits[0, -1].float()
            if temperature <= 0:
                nxt = int(torch.argmax(logits))
            else:
                v, i = torch.topk(logits / temperature, top_k)
                nxt = int(i[torch.multinomial(torch.softmax(v, -1), 1, generator=g)])
            ids.append(nxt)
            if nxt in stop_ids:
                break
    return ids[len(prompt_ids):]


# ----------------------------------------------------------------------------------------------
# outputs


def save_weights(model, out_dir):
    """bf16 safetensors shards of at most SHARD_BYTES each, plus model.safetensors.index.json."""
    import torch
    from safetensors.torch import save_file

    sd = {k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in model.state_dict().items()
          if k.endswith(".weight") or k.endswith(".bias")}
    if getattr(model.config, "tie_word_embeddings", False):
        sd.pop("lm_head.weight", None)
    shards, cur, size = [], {}, 0
    for k in sorted(sd):
        nb = sd[k].numel() * 2
        if cur and size + nb > SHARD_BYTES:
            shards.append(cur)
            cur, size = {}, 0
        cur[k] = sd[k]
        size += nb
    shards.append(cur)
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        name = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
        save_file(shard, os.path.join(out_dir, name), metadata={"format": "pt"})
        for k, v in shard.items():
            weight_map[k] = name
            total += v.numel() * 2
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
              open(os.path.join(out_dir, "model.safetensors.index.json"), "w"), indent=2)
    return len(shards)


def save_config(model, out_dir, eot_id, im_end_id):
    path = os.path.join(out_dir, "config.json")
    try:
        model.config.save_pretrained(out_dir)
        d = json.load(open(path))
    except Exception as e:  # noqa: BLE001
        log("config.save_pretrained failed (%r); writing the fields by hand" % (e,))
        c = model.config
        d = {k: getattr(c, k, None) for k in (
            "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings",
            "bos_token_id", "eos_token_id", "hidden_act", "initializer_range", "use_sliding_window")}
        d["model_type"] = "qwen2"
        rp = getattr(c, "rope_parameters", None)
        d["rope_theta"] = (rp or {}).get("rope_theta", getattr(c, "rope_theta", 10000.0))
    d["architectures"] = ["Qwen2ForCausalLM"]
    d["attention_dropout"] = 0.0  # training-only
    d["dtype"] = "bfloat16"
    json.dump(d, open(path, "w"), indent=2)
    json.dump({"bos_token_id": eot_id, "eos_token_id": [eot_id, im_end_id], "pad_token_id": eot_id,
               "do_sample": True, "temperature": 0.8, "top_k": 40},
              open(os.path.join(out_dir, "generation_config.json"), "w"), indent=2)


def write_svg(path, steps, train_loss, val_steps, val_loss, title):
    W, H, L, R, T, B = 720, 420, 60, 20, 40, 50
    xs_max = max(steps + val_steps + [1])
    all_y = [y for y in train_loss + val_loss if math.isfinite(y)]
    y_lo, y_hi = math.floor(min(all_y)), math.ceil(min(max(all_y), min(all_y) + 8))
    if y_hi <= y_lo:
        y_hi = y_lo + 1

    def px(x):
        return L + (W - L - R) * x / xs_max

    def py(y):
        y = min(max(y, y_lo), y_hi)
        return T + (H - T - B) * (1 - (y - y_lo) / (y_hi - y_lo))

    def line(xs, ys, color):
        pts = " ".join("%.1f,%.1f" % (px(x), py(y)) for x, y in zip(xs, ys))
        return '<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>' % (color, pts)

    o = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
         'font-size="12">' % (W, H), '<rect width="100%" height="100%" fill="white"/>',
         '<text x="%d" y="22" font-size="14">%s</text>' % (L, title)]
    for i in range(6):
        y = y_lo + (y_hi - y_lo) * i / 5
        o.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (L, W - R, py(y), py(y)))
        o.append('<text x="%d" y="%.1f" text-anchor="end">%.1f</text>' % (L - 6, py(y) + 4, y))
    for i in range(6):
        x = xs_max * i / 5
        o.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (px(x), H - B + 16, x))
    o.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="black"/>' % (L, W - R, H - B, H - B))
    o.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="black"/>' % (L, L, T, H - B))
    o.append('<text x="%d" y="%d" text-anchor="middle">optimizer step</text>' % ((L + W - R) // 2, H - 12))
    o.append('<text x="16" y="%d" transform="rotate(-90 16 %d)" text-anchor="middle">loss (nats/token)'
             '</text>' % ((T + H - B) // 2, (T + H - B) // 2))
    o.append(line(steps, train_loss, "#1f77b4"))
    o.append(line(val_steps, val_loss, "#d62728"))
    o.append('<text x="%d" y="%d" fill="#1f77b4">train (mean over 10 steps)</text>' % (W - R - 250, T + 16))
    o.append('<text x="%d" y="%d" fill="#d62728">validation</text>' % (W - R - 250, T + 32))
    o.append("</svg>")
    open(path, "w").write("\n".join(o) + "\n")


def pack(model_dir, out, name):
    """OUT/NAME.tar, or OUT/NAME.tar.partN pieces when over PART_BYTES."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(model_dir, arcname=os.path.basename(model_dir))
    data = buf.getvalue()
    for f in os.listdir(out):
        if f.startswith(name + ".tar"):
            os.remove(os.path.join(out, f))
    if len(data) <= PART_BYTES:
        open(os.path.join(out, name + ".tar"), "wb").write(data)
        return 1
    n = 0
    for i in range(0, len(data), PART_BYTES):
        open(os.path.join(out, "%s.tar.part%d" % (name, n)), "wb").write(data[i:i + PART_BYTES])
        n += 1
    return n


# ----------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default=".carry/corpus")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"), help="what comes back: tar pieces, metrics")
    ap.add_argument("--work", default="/tmp/mvllm-train", help="the model folder is built here")
    ap.add_argument("--heldout-sample", default="tests/data/heldout.txt")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=448)
    ap.add_argument("--ffn", type=int, default=1536)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=14, help="query heads (hidden / heads is the head size)")
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--name", default="mvllm-austen", help="the model folder's name")
    ap.add_argument("--tar-name", default="default_model", help="OUT/TAR_NAME.tar[.partN]")
    ap.add_argument("--tokenizer-vocab", default="",
                    help="reuse an existing model's tokenizer (JSON of scripts/gguf_vocab.py) instead of training one")
    ap.add_argument("--check-sample-ids", default="",
                    help="metrics.json of the model whose tokenizer is reused: its heldout_sample.ids_head is "
                         "compared with this run's encoding of the sample (logged)")
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--dropout", type=float, default=0.15)
    ap.add_argument("--embed-dropout", type=float, default=0.1)
    ap.add_argument("--budget", type=float, default=180.0, help="training seconds")
    ap.add_argument("--deadline", type=float, default=300.0, help="script seconds; training ends early to meet it")
    ap.add_argument("--max-epochs", type=float, default=40.0)
    ap.add_argument("--max-steps", type=int, default=0, help="0: from budget and max-epochs")
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--chat-pairs", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--val-fraction", type=float, default=0.02)
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    autocast = device == "cuda"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    import tokenizers
    import transformers
    log("torch", torch.__version__, "transformers", transformers.__version__, "tokenizers",
        tokenizers.__version__, "device", torch.cuda.get_device_name(0) if device == "cuda" else "cpu")

    if args.hidden % args.heads or args.heads % args.kv_heads:
        sys.exit("--hidden must be a multiple of --heads, and --heads of --kv-heads")
    model_dir = os.path.join(args.work, args.name)
    os.makedirs(model_dir, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)

    # 1. corpus and tokenizer
    train_texts, val_texts, held_texts = read_corpus(args.corpus, args.val_fraction)
    tok = load_tokenizer(args.tokenizer_vocab) if args.tokenizer_vocab else train_tokenizer(train_texts, args.vocab)
    sid = save_tokenizer(tok, model_dir)
    V = tok.get_vocab_size()
    eot, im_end = sid[EOT], sid[IM_END]
    log("tokenizer: %d tokens, specials %s" % (V, sid))
    chat = chat_documents(train_texts, args.chat_pairs, random.Random(args.seed))
    train_ids = encode_docs(tok, train_texts + chat, eot)
    val_ids = encode_docs(tok, val_texts, eot)
    held_ids = encode_docs(tok, held_texts, eot)
    sample_text = open(args.heldout_sample, encoding="utf-8").read() if os.path.exists(args.heldout_sample) else ""
    sample_ids = tok.encode(sample_text, add_special_tokens=False).ids if sample_text else []
    if args.check_sample_ids:
        want = json.load(open(args.check_sample_ids))["heldout_sample"]["ids_head"]
        same = sample_ids[:len(want)] == want
        log("tokenizer check: the held-out sample's first %d ids %s %s's%s" % (
            len(want), "equal" if same else "DIFFER FROM", args.check_sample_ids,
            "" if same else ": %r vs %r" % (sample_ids[:len(want)], want)))
    held_bytes = sum(len(t.encode()) for t in held_texts)
    log("tokens: train %d (with %d chat exchanges), val %d, held-out %d (%.2f bytes/token), sample %d" % (
        len(train_ids), len(chat), len(val_ids), len(held_ids), held_bytes / len(held_ids), len(sample_ids)))

    # 2. model
    cfg = make_config(args, V, eot)
    model = build_model(cfg).to(device)
    tied = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    n_params = sum(p.numel() for p in model.parameters())
    log("model: %d parameters (tied embeddings: %s), attention %s" % (
        n_params, tied, getattr(model.config, "_attn_implementation", "?")))
    add_dropout(model, args.dropout, args.embed_dropout)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if device == "cuda" else {}))
    data = torch.tensor(train_ids, dtype=torch.long)
    B, T = args.batch, args.ctx
    steps_per_epoch = len(train_ids) / (B * T)
    gen = torch.Generator()
    gen.manual_seed(args.seed)

    def batch():
        starts = torch.randint(0, len(data) - T - 1, (B,), generator=gen)
        x = torch.stack([data[s:s + T] for s in starts.tolist()])
        y = torch.stack([data[s + 1:s + T + 1] for s in starts.tolist()])
        return x.to(device, non_blocking=True), y.to(device, non_blocking=True)

    def val_loss():
        tot, cnt = nll_windows(model, val_ids, T, device, autocast)
        model.train()
        return tot / cnt

    budget = min(args.budget, args.deadline - (time.time() - T0) - 45)
    total_steps = args.max_steps or 10 ** 9  # fixed once the step time is known (step 30)
    log("training: budget %.0fs, batch %dx%d, %.1f steps/epoch" % (budget, B, T, steps_per_epoch))

    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        f = min(1.0, (step - args.warmup) / max(1, total_steps - args.warmup))
        return args.lr * (args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * f)))

    hist_steps, hist_loss, val_steps, val_hist = [], [], [], []
    best = (float("inf"), -1, None)
    window = []
    model.train()
    t_start = time.time()
    step = 0
    while step < total_steps:
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        x, y = batch()
        with amp(autocast):
            logits = model(input_ids=x, use_cache=False).logits
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        window.append(loss.detach())
        if step % 10 == 0:
            lv = torch.stack(window).mean().item()
            window = []
            hist_steps.append(step)
            hist_loss.append(lv)
        if step == 30 and not args.max_steps:
            if device == "cuda":
                torch.cuda.synchronize()
            per_step = (time.time() - t_start) / step
            total_steps = int(min(budget / per_step, args.max_epochs * steps_per_epoch))
            log("step time %.1f ms -> %d steps (%.1f epochs, %.1fM tokens)" % (
                per_step * 1e3, total_steps, total_steps / steps_per_epoch, total_steps * B * T / 1e6))
        if step % args.eval_every == 0 or step == total_steps:
            vl = val_loss()
            val_steps.append(step)
            val_hist.append(vl)
            if vl < best[0]:
                best = (vl, step, {k: v.detach().clone() for k, v in model.state_dict().items()})
            log("step %5d  epoch %5.2f  lr %.2e  train %.3f  val %.3f (ppl %.1f)%s" % (
                step, step / steps_per_epoch, lr_at(step), hist_loss[-1] if hist_loss else float("nan"),
                vl, math.exp(vl), "  *" if best[1] == step else ""))
        if time.time() - t_start > budget + 20:  # a slower phase than measured: stop regardless
            log("over budget at step %d; stopping" % step)
            break
    train_seconds = time.time() - t_start
    log("trained %d steps in %.1fs; best validation %.4f at step %d" % (step, train_seconds, best[0], best[1]))

    # 3. the shipped weights: best validation, rounded to bf16
    if best[2] is not None:
        model.load_state_dict(best[2])
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    model.eval()
    n_shards = save_weights(model, model_dir)
    save_config(model, model_dir, eot, im_end)
    write_svg(os.path.join(model_dir, "loss.svg"), hist_steps, hist_loss, val_steps, val_hist,
              "%s: %d params, %d steps, batch %dx%d" % (args.name, n_params, step, B, T))
    log("saved %d shards; packed into %d file(s)" % (n_shards, pack(model_dir, args.out, args.tar_name)))

    # 4. metrics and samples
    metrics = {
        "parameters": n_params, "vocab_size": V, "special_ids": sid,
        "config": {k: getattr(args, k) for k in vars(args)},
        "tokens": {"train": len(train_ids), "val": len(val_ids), "heldout": len(held_ids),
                   "heldout_sample": len(sample_ids), "chat_exchanges": len(chat)},
        "steps": step, "train_seconds": round(train_seconds, 1), "epochs": round(step / steps_per_epoch, 2),
        "tokens_seen": step * B * T, "best_val_step": best[1], "best_val_loss": best[0],
        "loss_curve": {"steps": hist_steps, "train": hist_loss, "val_steps": val_steps, "val": val_hist},
    }
    try:
        tot, cnt = nll_windows(model, held_ids, T, device, False)
        utot, ucnt = unigram_nll(train_ids, held_ids, V, T)
        metrics["heldout"] = {"tokens_scored": cnt, "loss": tot / cnt, "ppl": math.exp(tot / cnt),
                              "unigram_ppl": math.exp(utot / ucnt)}
        if sample_ids:
            stot, scnt = nll_windows(model, sample_ids, T, device, False)
            sutot, sucnt = unigram_nll(train_ids, sample_ids, V, T)
            metrics["heldout_sample"] = {"path": args.heldout_sample, "tokens_scored": scnt,
                                         "ppl": math.exp(stot / scnt), "unigram_ppl": math.exp(sutot / sucnt),
                                         "ids_head": sample_ids[:32]}
        log("held-out: ppl %.2f vs unigram %.2f; sample ppl %s" % (
            metrics["heldout"]["ppl"], metrics["heldout"]["unigram_ppl"],
            metrics.get("heldout_sample", {}).get("ppl")))
    except Exception as e:  # noqa: BLE001
        log("evaluation failed: %r" % (e,))
    samples = []
    try:
        prompts = [("It is a truth universally acknowledged, that", 0.0),
                   ("Captain Wentworth", 0.8),
                   ("The weather was", 0.8)]
        for i, (p, temp) in enumerate(prompts):
            pid = tok.encode(p, add_special_tokens=False).ids
            out = sample(model, tok, pid, 120, device, temp, 40, args.seed + i, {eot, im_end})
            samples.append({"prompt": p, "temperature": temp, "top_k": 40 if temp > 0 else 1,
                            "prompt_ids": pid, "ids": out, "text": tok.decode(out, skip_special_tokens=False)})
            log("sample %d (%s, T=%.1f): %s%s" % (i, json.dumps(p), temp, p, samples[-1]["text"]))
        chat_prompt = "%suser\nWhat do you think of Mr. Darcy?%s\n%sassistant\n" % (IM_START, IM_END, IM_START)
        pid = tok.encode(chat_prompt, add_special_tokens=False).ids
        out = sample(model, tok, pid, 120, device, 0.8, 40, args.seed + 10, {eot, im_end})
        samples.append({"prompt": chat_prompt, "temperature": 0.8, "top_k": 40, "prompt_ids": pid, "ids": out,
                        "text": tok.decode(out, skip_special_tokens=False)})
        log("chat sample: %s" % samples[-1]["text"])
    except Exception as e:  # noqa: BLE001
        log("sampling failed: %r" % (e,))
    metrics["samples"] = samples
    metrics["total_seconds"] = round(time.time() - T0, 1)
    for d in (model_dir, args.out):
        json.dump(metrics, open(os.path.join(d, "metrics.json"), "w"), indent=2)
    import shutil
    shutil.copy(os.path.join(model_dir, "loss.svg"), os.path.join(args.out, "loss.svg"))
    log("packed into %d file(s); done" % pack(model_dir, args.out, args.tar_name))


if __name__ == "__main__":
    main()
