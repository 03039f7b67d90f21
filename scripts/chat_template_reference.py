#!/usr/bin/env python3
"""Reference renderings of the chat templates in tests/data/chat/templates/.

Each template is rendered over each conversation below, with add_generation_prompt off and on,
exactly as Hugging Face transformers' apply_chat_template(tokenize=False) renders it: through
transformers.utils.chat_template_utils.render_jinja_template when transformers is importable
(that is the function apply_chat_template calls), otherwise through a replica of it (jinja2's
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]),
HF's tojson filter, raise_exception and strftime_now). strftime_now is pinned to FIXED_NOW so the
output is deterministic; the C++ tests pass the same instant as now_unix.

Writes tests/data/chat/expected.json: the conversations, and per (template, conversation,
add_generation_prompt) either "output" or "error" (the template raised).

usage: scripts/chat_template_reference.py [--out PATH] [--replica-only]
"""
import argparse
import calendar
import datetime as _dt
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATE_DIR = os.path.join(ROOT, "tests", "data", "chat", "templates")
FIXED_NOW = _dt.datetime(2024, 7, 26, 12, 0, 0)
NOW_UNIX = calendar.timegm(FIXED_NOW.timetuple())
BOS, EOS = "<s>", "</s>"

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}

CONVERSATIONS = [
    {"name": "user_only", "messages": [{"role": "user", "content": "Hello!"}]},
    {"name": "system_user", "messages": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "What is 2+2?"}]},
    {"name": "multi_turn", "messages": [
        {"role": "user", "content": "Hi, who are you?"},
        {"role": "assistant", "content": "I am a helpful assistant."},
        {"role": "user", "content": "Tell me a joke."}]},
    {"name": "multi_turn_system", "messages": [
        {"role": "system", "content": "  Answer in French.  \n"},
        {"role": "user", "content": "Good morning"},
        {"role": "assistant", "content": "Bonjour !"},
        {"role": "user", "content": "How are you?"},
        {"role": "assistant", "content": "Très bien, merci."}]},
    {"name": "content_parts", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Describe "}, {"type": "text", "text": "this."}]}]},
    {"name": "unicode", "messages": [
        {"role": "system", "content": "Réponds en 日本語 😀"},
        {"role": "user", "content": "Ünïcödé: 👨‍👩‍👧 مرحبا שלום 你好\u00a0!"},
        {"role": "assistant", "content": "こんにちは 🌸"},
        {"role": "user", "content": "ñ\ttab\r\nCRLF"}]},
    {"name": "empty_content", "messages": [
        {"role": "user", "content": ""}]},
    {"name": "special_chars", "messages": [
        {"role": "user", "content": "Quotes ' \" backslash \\ html <b>&amp;</b> braces {{ x }} {% y %}"}]},
    {"name": "whitespace", "messages": [
        {"role": "user", "content": "\n\n  padded question  \n\n"},
        {"role": "assistant", "content": "\n answer \n"},
        {"role": "user", "content": "  next  "}]},
    {"name": "thinking", "messages": [
        {"role": "user", "content": "What is 3*7?"},
        {"role": "assistant", "content": "<think>\n3*7 is 21.\n</think>\n\n21"},
        {"role": "user", "content": "And 4*5?"}]},
    {"name": "no_thinking", "extra": {"enable_thinking": False}, "messages": [
        {"role": "user", "content": "Quick answer: capital of Italy?"}]},
    {"name": "non_alternating", "messages": [
        {"role": "user", "content": "first"},
        {"role": "user", "content": "second"}]},
    {"name": "system_only_then_assistant", "messages": [
        {"role": "system", "content": "sys"},
        {"role": "assistant", "content": "I speak first."}]},
    {"name": "tools", "tools": [WEATHER_TOOL], "messages": [
        {"role": "system", "content": "Use tools when needed."},
        {"role": "user", "content": "Weather in Paris?"}]},
    {"name": "tool_call_round", "tools": [WEATHER_TOOL], "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call12345", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
        {"role": "tool", "tool_call_id": "call12345", "content": "{\"temperature\": 21}"},
        {"role": "user", "content": "Thanks!"}]},
    {"name": "date_string", "extra": {"date_string": "01 Jan 2030"}, "messages": [
        {"role": "user", "content": "What day is it?"}]},
]


def pin_clock(module):
    class FixedDatetime(_dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return FIXED_NOW

    module.datetime = FixedDatetime


def replica_renderer():
    """HF's _compile_jinja_template + render_jinja_template, re-stated."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return FIXED_NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now

    def render(template, messages, tools, add_generation_prompt, extra):
        return env.from_string(template).render(
            messages=messages, tools=tools, documents=None, add_generation_prompt=add_generation_prompt,
            bos_token=BOS, eos_token=EOS, **extra)

    return render, "jinja2 %s replica of HF render_jinja_template" % jinja2.__version__


def transformers_renderer():
    import transformers
    from transformers.utils import chat_template_utils

    pin_clock(chat_template_utils)

    def render(template, messages, tools, add_generation_prompt, extra):
        rendered, _ = chat_template_utils.render_jinja_template(
            conversations=[messages], tools=tools, documents=None, chat_template=template,
            add_generation_prompt=add_generation_prompt, bos_token=BOS, eos_token=EOS, **extra)
        return rendered[0]

    return render, "transformers %s render_jinja_template" % transformers.__version__


def render_all(render):
    cases = []
    for template_name in sorted(os.listdir(TEMPLATE_DIR)):
        if not template_name.endswith(".jinja"):
            continue
        with open(os.path.join(TEMPLATE_DIR, template_name), encoding="utf-8") as f:
            template = f.read()
        for conv in CONVERSATIONS:
            for agp in (False, True):
                case = {"template": template_name, "conversation": conv["name"], "add_generation_prompt": agp}
                try:
                    case["output"] = render(template, json.loads(json.dumps(conv["messages"])), conv.get("tools"),
                                            agp, dict(conv.get("extra", {})))
                except Exception as e:  # the template rejected the conversation
                    case["error"] = "%s: %s" % (type(e).__name__, e)
                cases.append(case)
    return cases


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "chat", "expected.json"))
    parser.add_argument("--replica-only", action="store_true")
    args = parser.parse_args()

    replica, replica_name = replica_renderer()
    renderer, renderer_name = replica, replica_name
    if not args.replica_only:
        try:
            renderer, renderer_name = transformers_renderer()
        except Exception as e:
            print("transformers unavailable (%s); using the replica" % e, file=sys.stderr)
    cases = render_all(renderer)
    mismatches = []
    if renderer is not replica:  # check that the replica agrees with transformers
        for a, b in zip(cases, render_all(replica)):
            if a.get("output") != b.get("output") or ("error" in a) != ("error" in b):
                mismatches.append("%s/%s/%s" % (a["template"], a["conversation"], a["add_generation_prompt"]))
    doc = {
        "renderer": renderer_name,
        "replica_mismatches": mismatches,
        "now_unix": NOW_UNIX,
        "bos_token": BOS,
        "eos_token": EOS,
        "conversations": CONVERSATIONS,
        "cases": cases,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_err = sum("error" in c for c in cases)
    print("%s: %d cases (%d errors), renderer: %s, replica mismatches: %d"
          % (args.out, len(cases), n_err, renderer_name, len(mismatches)))


if __name__ == "__main__":
    main()
