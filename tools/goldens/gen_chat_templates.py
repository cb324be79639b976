#!/usr/bin/env python3
"""Generate chat-template fixtures into test/fixtures/chat_templates/.

mpakt runs chat templates with its own Jinja interpreter (runtime/models/jinja.hpp). These
fixtures hold what transformers' `apply_chat_template(messages, tokenize=False, ...)` renders,
so the C++ test (test/runtime/models/chat_template_test.cpp) can require byte-identical output,
and a refusal wherever transformers raised.

Two sets:

* hub/<template>.json: the real chat templates of current model families, as the Hub ships
  them. The Hub is not reachable from the test machines, but llama-cpp-python's source
  distribution on PyPI vendors llama.cpp's models/templates/ (templates fetched from the Hub
  with scripts/get_chat_template.py). Each fixture records the sdist, the path in it and the
  template's sha256, the family, the bos/eos tokens used (those of the family's
  tokenizer_config.json), and for every conversation of CORPUS (hub/conversations.json) what
  transformers rendered or raised. strftime_now is pinned to FIXED_NOW so dated templates
  (Llama 3.1+) render the same every day; the C++ test passes the same time.
* <variant>.json: small templates written here that state the layouts of four families and
  stress whitespace, Unicode and refusals (about 60 conversations each). A self-check
  re-renders each case with an independent Python model of the layout.

transformers is pinned (TRANSFORMERS_VERSION); run from a venv outside the repo:
    python3 -m venv ~/.cache/mpakt-goldens
    ~/.cache/mpakt-goldens/bin/pip install transformers==5.24.0 jinja2==3.1.6
    ~/.cache/mpakt-goldens/bin/python tools/goldens/gen_chat_templates.py [--sdist PATH] [--check-only]
"""

import argparse
import json
import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
OUT_DIR = os.path.join(REPO, "test", "fixtures", "chat_templates")
TOKENIZER_JSON_CANDIDATES = [
    os.path.join(REPO, "shared", "models", "stories260K", "tokenizer.json"),
    os.path.join(REPO, "..", "shared", "models", "stories260K", "tokenizer.json"),
]

# ---- the Jinja templates (one per family variant) ----------------------------------------
#
# Raise messages name the offending message as messages[<index>]; the generator records that
# index and the C++ test requires the C++ refusal to name the same one.

ROLE_CHECK = r"""
    {%- if message['role'] not in ['system', 'user', 'assistant'] -%}
        {{- raise_exception('messages[' ~ index ~ '] has role ' ~ message['role'] ~ ': only system, user and assistant are rendered') -}}
    {%- endif -%}"""

CHATML = r"""
{%- for message in messages -%}
    {%- set index = loop.index0 -%}""" + ROLE_CHECK + r"""
    {{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
"""

CHATML_DEFAULT_SYSTEM_TEXT = "You are a helpful assistant running on volunteer machines. Answer briefly."

# Qwen style: the default system turn is one literal, used when messages[0] is not a system turn.
CHATML_DEFAULT_SYSTEM = r"""
{%- if messages[0]['role'] != 'system' -%}
    {{- '<|im_start|>system\n""" + CHATML_DEFAULT_SYSTEM_TEXT + r"""<|im_end|>\n' -}}
{%- endif -%}""" + CHATML

LLAMA3 = r"""
{{- bos_token -}}
{%- for message in messages -%}
    {%- set index = loop.index0 -%}""" + ROLE_CHECK + r"""
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
{%- endif -%}
"""

# After an optional leading system message (kept aside in ns.fold), roles alternate
# user/assistant starting with user. `expected` is the role due at this position.
ALTERNATION = r"""
    {%- set index = loop.index0 + ns.first -%}
    {%- set expected = 'user' if loop.index0 % 2 == 0 else 'assistant' -%}""" + ROLE_CHECK + r"""
    {%- if message['role'] != expected -%}
        {{- raise_exception('messages[' ~ index ~ '] has role ' ~ message['role'] ~ ' where ' ~ expected ~ ' is due: after an optional leading system message, roles alternate user/assistant') -}}
    {%- endif -%}"""

FOLD_SYSTEM = r"""
{%- set ns = namespace(fold='', first=0) -%}
{%- if messages[0]['role'] == 'system' -%}
    {%- set ns.fold = messages[0]['content'] + '\n\n' -%}
    {%- set ns.first = 1 -%}
    {%- if messages | length == 1 -%}
        {{- raise_exception('messages[0] has role system but no user turn follows to fold it into') -}}
    {%- endif -%}
{%- endif -%}"""

# Gemma 3 style: the system text (untrimmed) plus a blank line opens the first user turn.
GEMMA = r"""
{{- bos_token -}}""" + FOLD_SYSTEM + r"""
{%- for message in messages[ns.first:] -%}""" + ALTERNATION + r"""
    {{- '<start_of_turn>' + ('model' if message['role'] == 'assistant' else 'user') + '\n' + (ns.fold if loop.first else '') + message['content'] | trim + '<end_of_turn>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<start_of_turn>model\n' -}}
{%- endif -%}
"""

# Gemma 1/2 style: no system role at all.
GEMMA_NO_SYSTEM = r"""
{{- bos_token -}}
{%- set ns = namespace(first=0) -%}
{%- for message in messages -%}
    {%- if message['role'] == 'system' -%}
        {{- raise_exception('messages[' ~ loop.index0 ~ '] has role system, which this template does not support') -}}
    {%- endif -%}""" + ALTERNATION + r"""
    {{- '<start_of_turn>' + ('model' if message['role'] == 'assistant' else 'user') + '\n' + message['content'] | trim + '<end_of_turn>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<start_of_turn>model\n' -}}
{%- endif -%}
"""

# Mistral v0.1 layout; the system text plus a blank line opens the first [INST].
MISTRAL = r"""
{{- bos_token -}}""" + FOLD_SYSTEM + r"""
{%- for message in messages[ns.first:] -%}""" + ALTERNATION + r"""
    {%- if message['role'] == 'user' -%}
        {{- '[INST] ' + (ns.fold if loop.first else '') + message['content'] + ' [/INST]' -}}
    {%- else -%}
        {{- message['content'] + eos_token -}}
    {%- endif -%}
{%- endfor -%}
"""


def added_token(content):
    """A special token in the object form tokenizer_config.json files often use."""
    return {"__type": "AddedToken", "content": content, "lstrip": False, "normalized": False,
            "rstrip": False, "single_word": False, "special": True}


VARIANTS = [
    {"name": "chatml", "format": "chatml",
     "config": {"bos_token": None, "eos_token": "<|im_end|>", "chat_template": CHATML},
     "expect": {"stop_tokens": ["<|im_end|>"], "adds_bos": False}},
    # The list-of-named-templates form, with "default" not first.
    {"name": "chatml_default_system", "format": "chatml",
     "config": {"bos_token": None, "eos_token": "<|endoftext|>",
                "chat_template": [{"name": "tool_use", "template": CHATML},
                                  {"name": "default", "template": CHATML_DEFAULT_SYSTEM}]},
     "expect": {"stop_tokens": ["<|im_end|>", "<|endoftext|>"], "adds_bos": False,
                "default_system": CHATML_DEFAULT_SYSTEM_TEXT}},
    {"name": "llama3", "format": "llama3",
     "config": {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>", "chat_template": LLAMA3},
     "expect": {"stop_tokens": ["<|eot_id|>", "<|end_of_text|>"], "adds_bos": True}},
    {"name": "gemma", "format": "gemma",
     "config": {"bos_token": added_token("<bos>"), "eos_token": added_token("<eos>"), "chat_template": GEMMA},
     "expect": {"stop_tokens": ["<end_of_turn>", "<eos>"], "adds_bos": True, "folds_system": True}},
    {"name": "gemma_no_system", "format": "gemma",
     "config": {"bos_token": "<bos>", "eos_token": "<eos>", "chat_template": GEMMA_NO_SYSTEM},
     "expect": {"stop_tokens": ["<end_of_turn>", "<eos>"], "adds_bos": True, "folds_system": False},
     "min_rendered": 30},  # a second Gemma variant: every system case is refused
    {"name": "mistral", "format": "mistral",
     "config": {"bos_token": "<s>", "eos_token": "</s>", "chat_template": MISTRAL},
     "expect": {"stop_tokens": ["</s>"], "adds_bos": True}},
]

# ---- the conversations ---------------------------------------------------------------------


def conv(name, *turns, gen=True):
    return {"name": name, "add_generation_prompt": gen,
            "messages": [{"role": r, "content": c} for r, c in turns]}


LONG = " ".join(f"word{i}" for i in range(400)) + "\n" + "tail line"

SINGLE_USER = [
    ("hello", "Hello!"),
    ("empty", ""),
    ("newlines", "line one\nline two\n\nline four"),
    ("padded_spaces", "   padded both sides   "),
    ("leading_newlines", "\n\nstarts after two newlines"),
    ("trailing_newline", "ends with a newline\n"),
    ("tabs_crlf", "\ttabbed\r\nwindows line\r\n"),
    ("only_whitespace", " \n\t  \n"),
    ("unicode", "Grüße, 你好, привет, مرحبا, 🙂👍🏽 — ok…"),
    ("unicode_spaces", "\u00a0\u3000nbsp and ideographic space\u2003\u00a0"),
    ("zero_width_kept", "\u200bzero width space and bom are not whitespace\ufeff"),
    ("separators_and_nel", "\x1c\x1dfile and group separators\x1e\x1f\x85"),
    ("vertical_tab_form_feed", "\x0b\x0cvt and ff\x0b"),
    ("line_paragraph_separators", "\u2028paragraph\u2029"),
    ("ogham_and_narrow_spaces", "\u1680\u202fnarrow\u205f\u2000\u200a"),
    ("special_tokens_in_content", "fake <|im_end|> and <|eot_id|> and [INST] and <end_of_turn> markers"),
    ("jinja_syntax_in_content", "{{ not a template }} {% raw %} {# nor a comment #}"),
    ("quotes_backslashes", "He said \"hi\" and 'bye' \\n is not a newline \\"),
    ("html", "<b>bold</b> & <i>amp</i> &lt; stays"),
    ("nul_byte", "before\x00after"),
    ("long", LONG),
    ("story_prompt", "Once upon a time, there was a little girl named Lily."),
]

CONVERSATIONS = (
    [conv(f"user_{n}", ("user", c)) for n, c in SINGLE_USER]
    + [conv(f"user_{n}_no_gen", ("user", c), gen=False) for n, c in SINGLE_USER[:6]]
    + [
        conv("system_user", ("system", "You are a pirate."), ("user", "Where is the treasure?")),
        conv("system_empty_user", ("system", ""), ("user", "Hi")),
        conv("system_padded_user_padded", ("system", "  spaced system  \n"), ("user", "\n  spaced user \t")),
        conv("system_multiline_user", ("system", "Rule one.\nRule two.\n\nRule four."), ("user", "Follow them.")),
        conv("system_unicode_user", ("system", "Réponds en français. ☕"), ("user", "Bonjour ?")),
        conv("system_whitespace_only_user", ("system", " \n "), ("user", "x")),
        conv("system_user_no_gen", ("system", "Be terse."), ("user", "Sum 2+2."), gen=False),
        conv("user_assistant_user", ("user", "Hi"), ("assistant", "Hello! How can I help?"), ("user", "Tell a joke.")),
        conv("system_user_assistant_user", ("system", "Be kind."), ("user", "Hi"), ("assistant", "Hello."),
             ("user", "Thanks")),
        conv("user_assistant_ending_gen", ("user", "Q?"), ("assistant", "A.")),
        conv("user_assistant_ending_no_gen", ("user", "Q?"), ("assistant", "A."), gen=False),
        conv("assistant_padded", ("user", "  q  "), ("assistant", "  answer with spaces \n"), ("user", "and?")),
        conv("assistant_empty", ("user", "Say nothing."), ("assistant", ""), ("user", "Good.")),
        conv("multi_turn_unicode", ("user", "日本語で"), ("assistant", "はい、どうぞ。"), ("user", "ありがとう 🙏")),
        conv("multi_turn_newlines", ("user", "a\nb"), ("assistant", "\nc\n"), ("user", "d\n\n")),
        conv("ten_turns", *[("user" if i % 2 == 0 else "assistant", f"turn {i}") for i in range(9)]),
        conv("system_ten_turns_no_gen", ("system", "Count."),
             *[("user" if i % 2 == 0 else "assistant", f" {i} ") for i in range(10)], gen=False),
        conv("code_block", ("user", "```python\ndef f():\n    return 1\n```\n"),
             ("assistant", "```\n  indented\n```"), ("user", "  ")),
    ]
    # Orders ChatML and Llama 3 render but Gemma and Mistral refuse.
    + [
        conv("two_users_in_a_row", ("user", "one"), ("user", "two")),
        conv("assistant_first", ("assistant", "I speak first."), ("user", "ok")),
        conv("system_only", ("system", "Nobody answers.")),
        conv("system_in_middle", ("user", "hi"), ("system", "late rule"), ("user", "again")),
        conv("two_systems", ("system", "first"), ("system", "second"), ("user", "hi")),
        conv("two_assistants", ("user", "hi"), ("assistant", "a"), ("assistant", "b")),
        conv("system_then_assistant", ("system", "s"), ("assistant", "a")),
    ]
    # Roles no template here renders.
    + [
        conv("role_tool", ("user", "call it"), ("assistant", "calling"), ("tool", "42")),
        conv("role_empty", ("", "who am I")),
        conv("role_capitalised", ("User", "Hi")),
        conv("role_model", ("user", "Hi"), ("model", "Gemma's internal name is not a role")),
        conv("role_unknown_after_system", ("system", "s"), ("developer", "d")),
    ]
)

# ---- rendering with transformers ------------------------------------------------------------


def find_tokenizer_json():
    for path in TOKENIZER_JSON_CANDIDATES:
        if os.path.isfile(path):
            return path
    sys.exit("stories260K tokenizer.json not found (looked in shared/ and ../shared/)")


def render_variant(variant, tokenizer_json):
    import jinja2
    import transformers
    from transformers import AutoTokenizer

    transformers.logging.set_verbosity_error()
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(tokenizer_json, os.path.join(tmp, "tokenizer.json"))
        config = dict(variant["config"], tokenizer_class="PreTrainedTokenizerFast", model_max_length=512)
        with open(os.path.join(tmp, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, ensure_ascii=False, indent=2)
        tok = AutoTokenizer.from_pretrained(tmp)
        cases = []
        for c in CONVERSATIONS:
            case = dict(c)
            try:
                text = tok.apply_chat_template(c["messages"], tokenize=False,
                                               add_generation_prompt=c["add_generation_prompt"])
                assert isinstance(text, str), type(text)
                case["expected"] = text
            except jinja2.exceptions.TemplateError as e:
                m = re.match(r"messages\[(\d+)\]", str(e))
                assert m, f"{variant['name']}/{c['name']}: raise message does not name a message: {e}"
                case["raises"] = str(e)
                case["refused_index"] = int(m.group(1))
            cases.append(case)
    return {"variant": variant["name"], "format": variant["format"],
            "transformers": transformers.__version__, "jinja2": jinja2.__version__,
            "tokenizer_config": variant["config"], "expect": variant["expect"], "cases": cases}


# ---- the self-check: an independent model of each layout ---------------------------------------

ROLES = ("system", "user", "assistant")


class Refused(Exception):
    def __init__(self, index):
        super().__init__(f"messages[{index}]")
        self.index = index


def token_text(t):
    return t["content"] if isinstance(t, dict) else (t or "")


def alternation(msgs, folds):
    """First index after an optional leading system message; raises where roles misbehave."""
    first = 0
    if msgs[0]["role"] == "system":
        if not folds or len(msgs) == 1:
            raise Refused(0)
        first = 1
    for i in range(first, len(msgs)):
        due = "user" if (i - first) % 2 == 0 else "assistant"
        if msgs[i]["role"] != due:
            raise Refused(i)
    return first


def model_render(variant, msgs, gen):
    fmt, cfg, exp = variant["format"], variant["tokenizer_config"], variant["expect"]
    bos, eos = token_text(cfg.get("bos_token")), token_text(cfg.get("eos_token"))
    for i, m in enumerate(msgs):
        if m["role"] not in ROLES and fmt in ("chatml", "llama3"):
            raise Refused(i)
    if fmt == "chatml":
        out = ""
        if "default_system" in exp and msgs[0]["role"] != "system":
            out += f"<|im_start|>system\n{exp['default_system']}<|im_end|>\n"
        out += "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in msgs)
        return out + ("<|im_start|>assistant\n" if gen else "")
    if fmt == "llama3":
        out = bos + "".join(f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n{m['content'].strip()}<|eot_id|>"
                            for m in msgs)
        return out + ("<|start_header_id|>assistant<|end_header_id|>\n\n" if gen else "")
    first = alternation(msgs, exp.get("folds_system", True))
    fold = msgs[0]["content"] + "\n\n" if first else ""
    out = bos
    for i in range(first, len(msgs)):
        m, prefix = msgs[i], fold if i == first else ""
        if fmt == "gemma":
            role = "model" if m["role"] == "assistant" else "user"
            out += f"<start_of_turn>{role}\n{prefix}{m['content'].strip()}<end_of_turn>\n"
        elif m["role"] == "user":
            out += f"[INST] {prefix}{m['content']} [/INST]"
        else:
            out += m["content"] + eos
    if fmt == "gemma" and gen:
        out += "<start_of_turn>model\n"
    return out


def check(path, min_rendered):
    with open(path, encoding="utf-8") as f:
        fx = json.load(f)
    name = os.path.basename(path)
    assert fx["format"] in ("chatml", "llama3", "gemma", "mistral"), name
    names = [c["name"] for c in fx["cases"]]
    assert len(names) == len(set(names)), f"{name}: duplicate case names"
    rendered = 0
    for c in fx["cases"]:
        assert re.fullmatch(r"[a-z0-9_]+", c["name"]), c["name"]
        assert ("expected" in c) != ("raises" in c), f"{name}/{c['name']}: needs exactly one of expected/raises"
        try:
            got = model_render(fx, c["messages"], c["add_generation_prompt"])
            assert "expected" in c, f"{name}/{c['name']}: transformers raised, the layout model rendered"
            assert got == c["expected"], f"{name}/{c['name']}: layout model {got!r} != transformers {c['expected']!r}"
            rendered += 1
        except Refused as r:
            assert "raises" in c, f"{name}/{c['name']}: layout model refused messages[{r.index}], transformers rendered"
            assert r.index == c["refused_index"], f"{name}/{c['name']}: refused index {r.index} != {c['refused_index']}"
    assert rendered >= min_rendered, f"{name}: only {rendered} rendered cases"
    return rendered, len(fx["cases"]) - rendered


# ---- hub templates from the llama-cpp-python sdist ---------------------------------------------

TRANSFORMERS_VERSION = "5.24.0"
JINJA2_VERSION = "3.1.6"
SDIST_DEFAULT = os.path.expanduser("~/.cache/mpakt-peer/sdist/llama_cpp_python-0.3.36.tar.gz")
SDIST_TEMPLATES = "vendor/llama.cpp/models/templates/"
HUB_DIR = os.path.join(OUT_DIR, "hub")
# 2026-03-14 09:26:53: what strftime_now() reads while the goldens are rendered. The C++ test
# renders with the same time (as seconds since 1970, read as UTC).
FIXED_NOW = (2026, 3, 14, 9, 26, 53)

LLAMA3 = ("<|begin_of_text|>", "<|eot_id|>")
CHATML = (None, "<|im_end|>")
DEEPSEEK = ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>")
MISTRAL = ("<s>", "</s>")
GRANITE = ("<|end_of_text|>", "<|end_of_text|>")
COHERE = ("<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>")

# template file -> (family, (bos_token, eos_token)). Files of the sdist not listed are skipped.
HUB_TEMPLATES = {
    "meta-llama-Llama-3.1-8B-Instruct.jinja": ("Llama 3.1", LLAMA3),
    "meta-llama-Llama-3.2-3B-Instruct.jinja": ("Llama 3.2", LLAMA3),
    "meta-llama-Llama-3.3-70B-Instruct.jinja": ("Llama 3.3", LLAMA3),
    "Qwen-Qwen2.5-7B-Instruct.jinja": ("Qwen2.5", CHATML),
    "Qwen-QwQ-32B.jinja": ("QwQ", CHATML),
    "Qwen-Qwen3-0.6B.jinja": ("Qwen3", CHATML),
    "Qwen3-Coder.jinja": ("Qwen3-Coder", CHATML),
    "Qwen3.5-4B.jinja": ("Qwen3.5", CHATML),
    "google-gemma-2-2b-it.jinja": ("Gemma 2", ("<bos>", "<eos>")),
    "google-gemma-4-31B-it.jinja": ("Gemma 4", ("<bos>", "<eos>")),
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": ("Mistral Nemo", MISTRAL),
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": ("Mistral Small 3.2", MISTRAL),
    "unsloth-mistral-Devstral-Small-2507.jinja": ("Devstral", MISTRAL),
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja": ("Ministral 3", MISTRAL),
    "microsoft-Phi-3.5-mini-instruct.jinja": ("Phi-3.5", ("<s>", "<|endoftext|>")),
    "deepseek-ai-DeepSeek-V3.1.jinja": ("DeepSeek-V3.1", DEEPSEEK),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja": ("DeepSeek-R1 (Llama distill)", DEEPSEEK),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": ("DeepSeek-R1 (Qwen distill)", DEEPSEEK),
    "deepseek-ai-DeepSeek-V3.2.jinja": ("DeepSeek-V3.2", DEEPSEEK),
    "HuggingFaceTB-SmolLM3-3B.jinja": ("SmolLM3", CHATML),
    "ibm-granite-granite-3.3-2B-Instruct.jinja": ("Granite 3.3", GRANITE),
    "ibm-granite-granite-4.0.jinja": ("Granite 4.0", GRANITE),
    "CohereForAI-c4ai-command-r-plus-tool_use.jinja": ("Command R+ (tool_use)", COHERE),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja": ("Command R7B (tool_use)", COHERE),
    "Cohere2MoE.jinja": ("Cohere 2 MoE", COHERE),
    "GLM-4.6.jinja": ("GLM-4.6", (None, "<|endoftext|>")),
    "GLM-4.7-Flash.jinja": ("GLM-4.7", (None, "<|endoftext|>")),
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja": ("Hermes 2 Pro", ("<|begin_of_text|>", "<|im_end|>")),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": ("Hermes 3", ("<|begin_of_text|>", "<|im_end|>")),
    "meetkai-functionary-medium-v3.1.jinja": ("Functionary v3.1", LLAMA3),
    "meetkai-functionary-medium-v3.2.jinja": ("Functionary v3.2", LLAMA3),
    "fireworks-ai-llama-3-firefunction-v2.jinja": ("FireFunction v2", LLAMA3),
    "openai-gpt-oss-120b.jinja": ("gpt-oss", ("<|startoftext|>", "<|return|>")),
    "moonshotai-Kimi-K2.jinja": ("Kimi K2", ("[BOS]", "[EOS]")),
    "Kimi-K2-Thinking.jinja": ("Kimi K2 Thinking", ("[BOS]", "[EOS]")),
    "LFM2-8B-A1B.jinja": ("LFM2", ("<|startoftext|>", "<|im_end|>")),
    "LFM2.5-Instruct.jinja": ("LFM2.5", ("<|startoftext|>", "<|im_end|>")),
    "NVIDIA-Nemotron-Nano-v2.jinja": ("Nemotron Nano v2", ("<SPECIAL_10>", "<SPECIAL_12>")),
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja": ("Nemotron 3 Nano", ("<s>", "<|im_end|>")),
    "MiniMax-M2.jinja": ("MiniMax-M2", ("]~!b[", "[e~[")),
    "ByteDance-Seed-OSS.jinja": ("Seed-OSS", ("<seed:bos>", "<seed:eos>")),
    "Apertus-8B-Instruct.jinja": ("Apertus", ("<s>", "<|assistant_end|>")),
    "Bielik-11B-v3.0-Instruct.jinja": ("Bielik", ("<s>", "<|im_end|>")),
    "GigaChat3-10B-A1.8B.jinja": ("GigaChat 3", ("<s>", "</s>")),
    "MiMo-VL.jinja": ("MiMo-VL", CHATML),
    "unsloth-Apriel-1.5.jinja": ("Apriel 1.5", ("<s>", "<|end|>")),
    "upstage-Solar-Open-100B.jinja": ("Solar Open", ("<s>", "</s>")),
    "inclusionai-ling-3.0-flash.jinja": ("Ling 3.0", ("<|startoftext|>", "<|endoftext|>")),
    "openbmb-MiniCPM5-1B.jinja": ("MiniCPM 5", ("<s>", "<|im_end|>")),
    "tencent-Hy3.jinja": ("Hunyuan 3", ("<｜hy_begin_of_sentence｜>", "<｜hy_eos｜>")),
    "StepFun3.5-Flash.jinja": ("Step 3.5", ("<｜begin▁of▁sentence｜>", "<|im_end|>")),
    "llama-cpp-deepseek-r1.jinja": ("DeepSeek-R1 (llama.cpp's)", DEEPSEEK),
}

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}

TOOL_CALL = {"type": "function", "id": "call_1", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}


def hub_conv(name, messages, gen=True, **extra):
    c = {"name": name, "add_generation_prompt": gen, "messages": messages}
    c.update(extra)
    return c


def m(role, content, **extra):
    d = {"role": role, "content": content}
    d.update(extra)
    return d


HUB_CORPUS = [
    hub_conv("user", [m("user", "Hello!")]),
    hub_conv("user_no_gen", [m("user", "Hello!")], gen=False),
    hub_conv("system_user", [m("system", "You are a pirate."), m("user", "Where is the treasure?")]),
    hub_conv("system_user_no_gen", [m("system", "Be terse."), m("user", "Sum 2+2.")], gen=False),
    hub_conv("multi_turn", [m("user", "Hi"), m("assistant", "Hello! How can I help?"), m("user", "Tell a joke.")]),
    hub_conv("system_multi_turn", [m("system", "Be kind."), m("user", "Hi"), m("assistant", "Hello."),
                                   m("user", "Thanks")]),
    hub_conv("ends_with_assistant", [m("user", "Q?"), m("assistant", "A.")], gen=False),
    hub_conv("long", [m("system", "Count."), *[m("user" if i % 2 == 0 else "assistant", f"turn {i}") for i in range(7)]]),
    hub_conv("whitespace_unicode", [m("user", "  Grüße, 你好 🙂\n\nsecond line  \n"), m("assistant", "\n ok \n"),
                                    m("user", "\tthird\t")]),
    hub_conv("quotes_and_syntax", [m("user", "He said \"hi\" and 'bye' \\n {{ x }} {% if %} <|im_end|> </s>")]),
    hub_conv("empty_content", [m("user", "")]),
    hub_conv("two_users", [m("user", "one"), m("user", "two")]),
    hub_conv("thinking_off", [m("user", "Hi"), m("assistant", "Hello."), m("user", "2+2?")], enable_thinking=False),
    hub_conv("thinking_on", [m("user", "2+2?")], enable_thinking=True),
    hub_conv("reasoning_content", [m("user", "2+2?"), m("assistant", "4", reasoning_content="Two and two make four."),
                                   m("user", "And 3+3?")]),
    hub_conv("tools", [m("user", "What is the weather in Paris?")], tools=[WEATHER_TOOL]),
    hub_conv("tool_call_round_trip", [
        m("user", "What is the weather in Paris?"),
        {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temperature\": 18}"}],
        tools=[WEATHER_TOOL]),
    hub_conv("content_parts", [{"role": "user", "content": [{"type": "text", "text": "Describe "},
                                                            {"type": "text", "text": "this."}]}]),
]


def read_sdist(path):
    import tarfile
    out = {}
    with tarfile.open(path) as tar:
        for member in tar.getmembers():
            rel = member.name.split("/", 1)[1] if "/" in member.name else member.name
            if rel.startswith(SDIST_TEMPLATES) and rel.endswith(".jinja"):
                out[rel[len(SDIST_TEMPLATES):]] = (rel, tar.extractfile(member).read().decode("utf-8"))
    return out


def fixed_datetime():
    import datetime as real

    class Fixed(real.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(*FIXED_NOW)
    return Fixed


def render_hub(file_name, rel_path, text, family, tokens, sdist_name, tokenizer_json):
    import hashlib
    import calendar
    import jinja2
    import transformers
    import transformers.utils.chat_template_utils as ctu
    from transformers import AutoTokenizer

    ctu.datetime = fixed_datetime()  # strftime_now reads the module's datetime at call time
    bos, eos = tokens
    config = {"bos_token": bos, "eos_token": eos, "chat_template": text}
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(tokenizer_json, os.path.join(tmp, "tokenizer.json"))
        with open(os.path.join(tmp, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(dict(config, tokenizer_class="PreTrainedTokenizerFast", model_max_length=512), f)
        tok = AutoTokenizer.from_pretrained(tmp)
        variables = dict(tok.special_tokens_map)
        expected_vars = {k: v for k, v in (("bos_token", bos), ("eos_token", eos)) if v is not None}
        assert variables == expected_vars, f"{file_name}: special tokens {variables} != {expected_vars}"
        cases = []
        compile_error = None
        try:
            ctu._compile_jinja_template(text)
        except jinja2.exceptions.TemplateError as e:
            compile_error = f"{type(e).__name__}: {e}"
        for c in HUB_CORPUS if compile_error is None else []:
            kwargs = {k: v for k, v in c.items() if k not in ("name", "messages", "add_generation_prompt", "tools")}
            case = {"name": c["name"]}
            try:
                out = tok.apply_chat_template(json.loads(json.dumps(c["messages"])), tools=c.get("tools"),
                                              tokenize=False, add_generation_prompt=c["add_generation_prompt"],
                                              **kwargs)
                assert isinstance(out, str), type(out)
                case["expected"] = out
            except Exception as e:  # the template raised, or jinja2 failed inside it
                case["raises"] = f"{type(e).__name__}: {e}"
            cases.append(case)
    fx = {"template": file_name, "family": family,
          "source": {"sdist": sdist_name, "path": rel_path, "sha256": hashlib.sha256(text.encode()).hexdigest()},
          "transformers": transformers.__version__, "jinja2": jinja2.__version__,
          "now_utc_seconds": calendar.timegm(FIXED_NOW + (0, 0, 0)),
          "tokenizer_config": config, "cases": cases}
    if compile_error:
        fx["compile_error"] = compile_error
    return fx


def generate_hub(sdist):
    import jinja2
    import transformers
    if transformers.__version__ != TRANSFORMERS_VERSION or jinja2.__version__ != JINJA2_VERSION:
        sys.exit(f"needs transformers=={TRANSFORMERS_VERSION} and jinja2=={JINJA2_VERSION}, found "
                 f"{transformers.__version__} and {jinja2.__version__}")
    templates = read_sdist(sdist)
    missing = sorted(set(HUB_TEMPLATES) - set(templates))
    if missing:
        sys.exit(f"not in {sdist}: {missing}")
    tokenizer_json = find_tokenizer_json()
    os.makedirs(HUB_DIR, exist_ok=True)
    with open(os.path.join(HUB_DIR, "conversations.json"), "w", encoding="utf-8") as f:
        json.dump(HUB_CORPUS, f, ensure_ascii=False, indent=1)
        f.write("\n")
    for name, (family, tokens) in HUB_TEMPLATES.items():
        rel, text = templates[name]
        fx = render_hub(name, rel, text, family, tokens, os.path.basename(sdist), tokenizer_json)
        with open(os.path.join(HUB_DIR, name[:-len(".jinja")] + ".json"), "w", encoding="utf-8") as f:
            json.dump(fx, f, ensure_ascii=False, indent=0)
            f.write("\n")
        rendered = sum("expected" in c for c in fx["cases"])
        print(f"{name:56s} {rendered:3d} rendered, {len(fx['cases']) - rendered:2d} raised"
              + (f"  (does not compile: {fx['compile_error'][:60]})" if "compile_error" in fx else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check-only", action="store_true", help="only re-check the synthetic files already written")
    ap.add_argument("--sdist", default=SDIST_DEFAULT, help="the llama-cpp-python source distribution")
    ap.add_argument("--hub-only", action="store_true", help="only the hub templates")
    args = ap.parse_args()
    if not args.check_only:
        generate_hub(args.sdist)
    if args.hub_only:
        return
    if not args.check_only:
        tokenizer_json = find_tokenizer_json()
        os.makedirs(OUT_DIR, exist_ok=True)
        for variant in VARIANTS:
            fx = render_variant(variant, tokenizer_json)
            with open(os.path.join(OUT_DIR, variant["name"] + ".json"), "w", encoding="utf-8") as f:
                json.dump(fx, f, ensure_ascii=False, indent=1)
                f.write("\n")
    for variant in VARIANTS:
        rendered, refused = check(os.path.join(OUT_DIR, variant["name"] + ".json"), variant.get("min_rendered", 40))
        print(f"{variant['name']:24s} {rendered:3d} rendered, {refused:2d} refused")


if __name__ == "__main__":
    main()
