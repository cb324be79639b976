#!/usr/bin/env python3
"""Generate tokenizer fixtures: tokenizer.json files and expected ids from Hugging Face `tokenizers`.

Builds small tokenizers configured as the model families mpakt serves ship them (GPT-2, Llama 3,
Qwen2 byte-level BPE; Llama 2 / Mistral SentencePiece-style BPE with byte fallback; two more that
exercise added-token flags and the Metaspace pre-tokenizer), trains their BPE models on a generated
text, and records, for one shared corpus of varied strings, what the library produces:

    test/fixtures/tokenizers/corpus.json           the strings (shared by every kind)
    test/fixtures/tokenizers/<kind>.tokenizer.json the tokenizer, as the library saves it
    test/fixtures/tokenizers/<kind>.json           per string: ids without and with special tokens,
                                                   decodes; plus decodes of random id sequences

The real TinyStories tokenizer (../shared/models/stories260K/tokenizer.json) gets a <kind>.json too
(kind "stories260K"), pointing at the shared file instead of a copy.

Everything is deterministic (fixed seeds; the trainer is deterministic), so rerunning gives the
same files. The C++ test (test/runtime/models/tokenizer_test.cpp) needs none of this Python.

Usage: .venv-goldens/bin/python tools/goldens/gen_tokenizers.py [--out DIR] [--shared DIR]
"""

import argparse
import json
import os
import random
import sys
import unicodedata

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOKENIZERS_VERSION = "0.23.3"

GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# ---------------------------------------------------------------------------------------------
# Text: fragments the corpus and the training text are made of
# ---------------------------------------------------------------------------------------------

WORDS = """the of and to in is was he for it with as his on be at by had are but from or have an they
which one you were her all she there would their we him been has when who will more no if out so
said what up its about into than them can only other new some could time these two may then do
first any my now such like our over man me even most made after also did many before must through
back years where much your way well down should because each just those people how too little
state good very make world still own see men work long get here between both life being under
never day same another know while last might us great old year off come since against go came
right used take three story little girl boy cat dog happy sad sun tree house water big small
once upon lily tim mom friend play ball park garden bird fish red blue green fast slow jump run
model token server graph tensor kernel matrix vector cache memory thread queue actor request
reply session worker volunteer machine network latency throughput benchmark compiler runtime""".split()

CONTRACTIONS = ["don't", "I'm", "you're", "we've", "they'll", "she'd", "it's", "can't", "won't", "isn't",
                "DON'T", "I'M", "You'Re", "WE'VE", "They'LL", "SHE'D", "IT'S", "Can'T", "wOn'T", "we'Ve",
                "'s", "'S", "'t", "'T", "'re", "'RE", "'rE", "'ve", "'VE", "'m", "'M", "'ll", "'LL", "'Ll",
                "'d", "'D", "'ſ", "'ſt", "''s", "x's", "'re'", "rock'n'roll", "O'Neil", "l'été", "’s",
                "don’t", "' s", "'", "''", "'''", "'sss", "'lll", "'dd", "'mm", "'tt", "'veve", "'x"]

SCRIPTS = [
    "Привет, как дела? Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Καλημέρα κόσμε, ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
    "مرحبا بالعالم، كيف حالك؟ أنا بخير والحمد لله.",
    "שלום עולם, מה שלומך? אני בסדר.",
    "नमस्ते दुनिया, आप कैसे हैं? मैं ठीक हूँ।",
    "สวัสดีชาวโลก คุณสบายดีไหม",
    "안녕하세요 세계, 잘 지내세요? 저는 잘 지내요.",
    "こんにちは世界、お元気ですか？カタカナとひらがな、漢字。",
    "你好，世界！今天天气很好。我们一起去吃饭吧。",
    "繁體中文：臺灣的夜市非常熱鬧。",
    "გამარჯობა მსოფლიო", "Բարեւ աշխարհ", "ሰላም ለዓለም", "வணக்கம் உலகம்", "হ্যালো বিশ্ব",
    "Xin chào thế giới, bạn khỏe không?", "İstanbul'da ışık, ĞÜŞÖÇ ğüşöç", "Größe, Straße, Äpfel, Übermäßig",
    "Ça va? L'été dernier, j'ai mangé des crêpes.", "Zażółć gęślą jaźń", "Сайн байна уу", "ᠮᠣᠩᠭᠣᠯ ᠬᠡᠯᠡ",
    "བཀྲ་ཤིས་བདེ་ལེགས།", "សួស្តីពិភពលោក", "ສະບາຍດີ", "မင်္ဂလာပါ", "ආයුබෝවන්", "નમસ્તે", "నమస్కారం",
    "ನಮಸ್ಕಾರ", "നമസ്കാരം", "ਸਤ ਸ੍ਰੀ ਅਕਾਲ", "Ἐν ἀρχῇ ἦν ὁ λόγος", "ᚠᚢᚦᚨᚱᚲ", "ꦲꦏ꧀ꦱꦫ",
    # scripts newer than Python 3.11's Unicode 14 (the library's regex knows them):
    "\U000105c0\U000105c1\U000105c2 todhri", "\U00010d50\U00010d51 garay \U00010d40\U00010d41",
    "\U00011f04\U00011f05\U00011f06 kawi", "\U0001e4d0\U0001e4d1\U0001e4f0\U0001e4f1 nag mundari",
    "\U000116d0\U000116d1\U000116d2", "\U00011bf0\U00011bf1",
]

NUMBER_SAMPLES = ["٠١٢٣٤٥٦٧٨٩", "०१२३४५६७८९", "０１２３４５", "²³¹⁴", "½¾⅓", "ⅫⅣⅨ", "①②③", "๑๒๓", "১২৩",
                  "𝟎𝟏𝟐𝟑", "1,234,567.89", "3.14159265358979", "-42", "+1-555-0100", "2024-06-01", "12:30:45",
                  "1e10", "0x1F", "0b1010", "007", "v1.2.3", "10%", "$1,000", "€5", "¥100", "1st 2nd 3rd",
                  "٣.١٤", "१२.५"]

EMOJI = ["😀", "👍🏽", "👍🏿", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵🇺🇸", "1️⃣", "❤️", "🧑🏿‍💻", "👩🏼‍❤️‍💋‍👨🏾",
         "☺︎", "🫠", "🫨", "🙂‍↔️", "⚽", "🤷‍♀️", "👁‍🗨", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "✌🏻", "🔥🔥🔥"]

COMBINING = ["e\u0301", "a\u0308\u0323", "a\u0323\u0308", "\u1100\u1161\u11a8", "\u1100\u1161", "o\u0302\u0301",
             "A\u030a", "\u212b", "\u00c5", "\u0344", "ﬁ", "\u0958", "q\u0307\u0323", "\u0915\u093c",
             "Xin cha\u0300o the\u0302\u0301 gio\u031b\u0301i", "\u0627\u0653", "\u05d1\u05bc",
             "\U00011935\U00011930", "\u0b47\u0b3e", "\u1112\u1161\u11ab\u1100\u1173\u11af",
             "s\u0323\u0307", "\u1e69", "\u0041\u0301\u0302\u0303", "i\u0307", "\u00e9\u0301",
             "\u0301start", "\u0300\u0301\u0302", "\uac00\u11a8", "\u3099\u304b", "\u304b\u3099"]

WHITESPACE = ["a  b", "a\tb", "a\n\nb", "line\r\nline", " \t\n ", "a\u00a0b", "a\u3000b", "a\u2003b",
              "hello   ", "   hello", "     ", "\n", "\n\n\n", " \n \n", "\x0b\x0c", "a\u2028b", "a\u0085b",
              "\t\tindented", "x \n y", "end.\n", " ", "  ", "\t", "\r", "\r\n\r\n", "a \u00a0 b", "  \n\n  x"]

CODE = [
    "def add(a, b):\n    return a + b\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += v[i];\n}",
    '{"key": [1, 2, 3], "nested": {"x": null, "y": true}}',
    "<div class=\"main\"><p>Hello &amp; welcome</p></div>",
    "if [ -f ~/.bashrc ]; then source ~/.bashrc; fi",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "    x = y ** 2  # square\n        z = x // 3",
    "std::vector<std::int32_t> ids{1, 2, 3};",
    "fn main() { println!(\"{}\", 42); }",
    "$ echo \"hello\" | tr a-z A-Z",
    "a=>b->c<=d!=e==f&&g||h",
    "/* comment */ // another\n#include <stdio.h>",
]

SPECIAL_SNIPPETS = [
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>",
    "<s>[INST] What is 2+2? [/INST] 4</s>", "</s>", "<|endoftext|>", "<unk>", "<|im_st", "<s<s>>",
    " <s> ", "<s><s>", "<|eot_id|><|eot_id|>", "<mask>", "  <mask>  ", "a<mask>b", "x\t<mask>\ty",
    "a[W]b", "a [W] b", "é[W]", "[W]", "[W][W]", "9[W]", "_[W]", "-[W]-", "<R>  x", "x <R>", "<both>",
    " <both> ", "café", "cafe\u0301", "\u212b", "A\u030a", "Å", "<|café|>", "<sp ace>", "hello world",
    "say hello world!", "[INST]", "[/INST]", "<|reserved_special_token_0|>", "<|end_of_text|>",
    "<0x41>", "<0xE2><0x82><0xAC>", "▁", "▁▁hello", "Ġ", "ĠĠx", "<|im_start|><|im_start|>",
    "<|im_end|>text", "text<|im_start|>", "<s>", "<s> hello", "hello <s>", "<mask><mask>",
]

CONTROL = ["\x00", "\x1b[31mred\x1b[0m", "\x7f", "\ufeffBOM", "zero\u200bwidth", "\u200d", "\ufffd",
           "\U0010ffff", "\ue000", "\ufdd0", "\x01\x02\x03", "tab\there", "\u202eevil", "\u00ad"]


def random_code_point(rng):
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
              (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x2000, 0x206F), (0x2190, 0x23FF),
              (0x3000, 0x30FF), (0x4E00, 0x4FFF), (0xAC00, 0xAD00), (0xFF00, 0xFFEF), (0x1F300, 0x1F6FF),
              (0x10000, 0x1007F), (0x1D400, 0x1D7FF), (0x20000, 0x2007F), (0x105C0, 0x105F3), (0x10D40, 0x10D8F),
              (0x11F00, 0x11F5F), (0xE0000, 0xE007F), (0xF0000, 0xF00FF)]
    while True:
        lo, hi = rng.choice(ranges)
        c = rng.randint(lo, hi)
        if not 0xD800 <= c <= 0xDFFF:
            return chr(c)


def sentence(rng, n=None):
    words = [rng.choice(WORDS) for _ in range(n or rng.randint(3, 14))]
    if rng.random() < 0.5:
        words[0] = words[0].capitalize()
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words)), rng.choice(CONTRACTIONS))
    text = " ".join(words)
    return text + rng.choice([".", "!", "?", ",", "", "...", ";", ":"])


def zalgo(rng):
    base = rng.choice("aeiouxyzAEO")
    marks = "".join(chr(rng.randint(0x300, 0x36F)) for _ in range(rng.randint(3, 25)))
    return base + marks


def number(rng):
    kind = rng.random()
    if kind < 0.5:
        return str(rng.randint(0, 10 ** rng.randint(1, 25)))
    if kind < 0.8:
        return f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 8)}f}"
    return rng.choice(NUMBER_SAMPLES)


FRAGMENT_MAKERS = [
    lambda r: sentence(r), lambda r: sentence(r), lambda r: sentence(r), lambda r: r.choice(CONTRACTIONS),
    lambda r: r.choice(SCRIPTS), lambda r: number(r), lambda r: r.choice(EMOJI), lambda r: r.choice(COMBINING),
    lambda r: r.choice(WHITESPACE), lambda r: r.choice(CODE), lambda r: r.choice(SPECIAL_SNIPPETS),
    lambda r: r.choice(CONTROL), lambda r: zalgo(r),
    lambda r: "".join(random_code_point(r) for _ in range(r.randint(1, 12))),
]
SEPARATORS = [" ", "", "\n", "  ", "\t", " \n", ", ", "\n\n", "   ", "\u3000", "\r\n"]


def mixed(rng, parts):
    out = ""
    for _ in range(parts):
        out += rng.choice(FRAGMENT_MAKERS)(rng) + rng.choice(SEPARATORS)
    return out if rng.random() < 0.7 else out.strip()


def make_corpus(seed=1234):
    rng = random.Random(seed)
    fixed = ["", " ", "a", "A", "0", "\n", "Hello", "Hello world", "hello world!", "Once upon a time, there was a little girl named Lily."]
    fixed += CONTRACTIONS + SCRIPTS + NUMBER_SAMPLES + EMOJI + COMBINING + WHITESPACE + CODE + SPECIAL_SNIPPETS + CONTROL
    fixed += [" " * n + "x" for n in range(1, 6)] + ["x" + " " * n for n in range(1, 6)] + ["9" * n for n in range(1, 22)]
    fixed += ["a" * n for n in (1, 2, 3, 7, 16, 50)] + ["\n" * n + "x" for n in (1, 2, 3)] + ["x" + "\t" * n + "y" for n in (1, 2, 3)]
    fixed += [unicodedata.normalize("NFD", s) for s in SCRIPTS[:20]]
    # Contractions glued to words that Llama 3's vocabulary holds whole (see build_llama3): the
    # case-insensitive contraction, ſ folding to s included, decides where the word starts.
    fixed += [c + w for c in ("'ſ", "'S", "'Re", "'s", "'LL", "'ve") for w in WORDS[::7][:6]]
    strings = list(dict.fromkeys(fixed))
    while len(strings) < 2000:
        r = rng.random()
        if r < 0.25:
            s = sentence(rng)
        elif r < 0.87:
            s = mixed(rng, rng.randint(1, 4))
        elif r < 0.99:
            s = "".join(random_code_point(rng) for _ in range(rng.randint(1, 20)))
        else:
            s = mixed(rng, rng.randint(8, 16))  # a few long strings
        if rng.random() < 0.05:
            s = unicodedata.normalize("NFD", s)
        strings.append(s)
    return strings


def make_training_text(seed=99, lines=30000):
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        r = rng.random()
        if r < 0.6:
            out.append(" ".join(sentence(rng) for _ in range(rng.randint(1, 4))))
        elif r < 0.75:
            out.append(rng.choice(SCRIPTS) + " " + rng.choice(SCRIPTS))
        elif r < 0.85:
            out.append(rng.choice(CODE))
        else:
            out.append(mixed(rng, rng.randint(1, 4)))
    return out


# ---------------------------------------------------------------------------------------------
# Tokenizers, configured as each family ships them
# ---------------------------------------------------------------------------------------------

def train_byte_level(pre_tokenizer, normalizer, vocab_size, text):
    tok = Tokenizer(models.BPE())
    if normalizer:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(text, trainer)
    return tok


def finish(tok, decoder, post, specials=(), others=()):
    tok.decoder = decoder
    if post is not None:
        tok.post_processor = post
    tok.add_special_tokens(list(specials))
    tok.add_tokens(list(others))
    return tok


def string_merges(tok):
    """The same tokenizer with its merges in the older "a b" string form."""
    data = json.loads(tok.to_str())
    data["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in data["model"]["merges"]]
    return Tokenizer.from_str(json.dumps(data, ensure_ascii=False))


def template(single, specials, tok):
    return processors.TemplateProcessing(single=single, special_tokens=[(s, tok.token_to_id(s)) for s in specials])


def build_gpt2(text):
    tok = train_byte_level(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), None, 1200, text)
    finish(tok, decoders.ByteLevel(), processors.ByteLevel(trim_offsets=True), [AddedToken("<|endoftext|>", special=True)])
    return string_merges(tok)


def build_bytelevel_flags(text):
    """A GPT-2 model behind add_prefix_space, NFC, and added tokens with every flag."""
    tok = train_byte_level(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), None, 1000, text)
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    specials = [AddedToken("<s>", special=True), AddedToken("</s>", special=True),
                AddedToken("<mask>", special=True, lstrip=True), AddedToken("<R>", special=True, rstrip=True),
                AddedToken("<|café|>", special=True), AddedToken("<sp ace>", special=True)]
    others = [AddedToken("[W]", single_word=True, normalized=False), AddedToken("café", normalized=True),
              AddedToken("\u212b", normalized=True), AddedToken("hello world", normalized=False),
              AddedToken("<both>", lstrip=True, rstrip=True, normalized=False), AddedToken("ĠĠ", normalized=False)]
    finish(tok, decoders.ByteLevel(), None, specials, others)
    tok.post_processor = template("<s> $A </s>", ["<s>", "</s>"], tok)
    return tok


def build_llama3(text):
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok = train_byte_level(pre, None, 1500, text)
    # Llama 3 sets ignore_merges: a word that is a token is taken whole, even where the merges
    # would split it. Give the vocabulary whole words the merges cannot build, so that it matters.
    data = json.loads(tok.to_str())
    data["model"]["ignore_merges"] = True
    vocab = data["model"]["vocab"]
    for word in WORDS[::7]:
        for token in (word, "Ġ" + word, "Ġ" + word.capitalize()):
            if len(tok.encode(token.replace("Ġ", " ")).ids) > 1:
                vocab.setdefault(token, len(vocab))
    tok = Tokenizer.from_str(json.dumps(data, ensure_ascii=False))
    specials = [AddedToken(s, special=True) for s in
                ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                 "<|reserved_special_token_0|>"]]
    finish(tok, decoders.ByteLevel(), None, specials)
    tok.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=False),
                                              template("<|begin_of_text|> $A", ["<|begin_of_text|>"], tok)])
    return tok


def build_qwen2(text):
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok = train_byte_level(pre, normalizers.NFC(), 1200, text)
    specials = [AddedToken(s, special=True) for s in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]]
    return finish(tok, decoders.ByteLevel(), processors.ByteLevel(trim_offsets=False), specials)


def train_sentencepiece_bpe(text):
    """A Llama-2-style vocabulary: <unk> <s> </s>, the 256 byte tokens, then BPE pieces over ▁-words."""
    # The 150 most frequent characters (ties by code point), chosen here rather than with the
    # trainer's limit_alphabet, whose ties fall in hash order and would change the vocabulary from
    # run to run. Other characters are left out of the training text, so they fall back to bytes.
    counts = {}
    for line in text:
        for ch in line:
            counts[ch] = counts.get(ch, 0) + 1
    alphabet = set(sorted(counts, key=lambda ch: (-counts[ch], ord(ch)))[:150]) | {" "}
    text = ["".join(ch for ch in line if ch in alphabet) for line in text]
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    trainer = trainers.BpeTrainer(vocab_size=700, show_progress=False)
    tok.train_from_iterator(text, trainer)
    trained = json.loads(tok.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for token, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(token, len(vocab))
    merges = [" ".join(m) if isinstance(m, list) else m for m in trained["merges"]]
    return vocab, merges


def spm_tokenizer(vocab, merges, normalizer, pre_tokenizer, decoder, byte_fallback=True, unk_fuse=True, extra_specials=()):
    model = {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": unk_fuse, "byte_fallback": byte_fallback, "ignore_merges": False,
             "vocab": vocab, "merges": merges}
    added = [{"id": vocab[s], "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for s in ("<unk>", "<s>", "</s>")]
    for i, s in enumerate(extra_specials):
        added.append({"id": len(vocab) + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": True})
    post = {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    data = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": normalizer,
            "pre_tokenizer": pre_tokenizer, "post_processor": post, "decoder": decoder, "model": model}
    return Tokenizer.from_str(json.dumps(data, ensure_ascii=False))


SPM_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}


def build_llama2(spm):
    normalizer = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                      {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
    return spm_tokenizer(*spm, normalizer, None, SPM_DECODER)


def build_mistral(spm):
    pre = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    tok = spm_tokenizer(*spm, None, pre, SPM_DECODER, extra_specials=["[INST]", "[/INST]"])
    # Merges as [a, b] arrays, as newer files store them.
    data = json.loads(tok.to_str())
    data["model"]["merges"] = [m.split(" ") if isinstance(m, str) else m for m in data["model"]["merges"]]
    return Tokenizer.from_str(json.dumps(data, ensure_ascii=False))


def build_metaspace_split(spm):
    """Metaspace splitting words, the Metaspace decoder, and unk without byte fallback."""
    pre = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
    dec = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True}
    return spm_tokenizer(*spm, None, pre, dec, byte_fallback=False, unk_fuse=False)


# ---------------------------------------------------------------------------------------------
# Expectations
# ---------------------------------------------------------------------------------------------

def affixes(tok):
    """The ids the post-processor puts around a text (from encoding the empty string)."""
    return tok.encode("", add_special_tokens=True).ids


def expectations(tok, corpus, rng):
    wrap = affixes(tok)
    cases = []
    for text in corpus:
        ids = tok.encode(text, add_special_tokens=False).ids
        ids_special = tok.encode(text, add_special_tokens=True).ids
        decode = tok.decode(ids, skip_special_tokens=False)
        decode_skip = tok.decode(ids_special, skip_special_tokens=True)
        case = {"ids": ids}
        # Stored only when they are not what the test can derive: the BOS-style wrapping of ids,
        # the text itself, and the plain decode.
        if ids_special != wrapped(wrap, ids, tok):
            case["ids_special"] = ids_special
        if decode != text:
            case["decode"] = decode
        if decode_skip != decode:
            case["decode_skip"] = decode_skip
        cases.append(case)
    size = tok.get_vocab_size(with_added_tokens=True)
    randoms = []
    for _ in range(200):
        ids = [rng.randrange(size) for _ in range(rng.randint(1, 12))]
        randoms.append({"ids": ids, "decode": tok.decode(ids, skip_special_tokens=False),
                        "decode_skip": tok.decode(ids, skip_special_tokens=True)})
    return cases, randoms


def wrapped(wrap, ids, tok):
    """Where the template is <prefix> $A <suffix>, the expected encoding with special tokens."""
    prefix, suffix = split_wrap(wrap, tok)
    return prefix + ids + suffix


def split_wrap(wrap, tok):
    processor = json.loads(tok.to_str()).get("post_processor") or {}
    templates = [processor] if processor.get("type") == "TemplateProcessing" else \
        [p for p in processor.get("processors", []) if p.get("type") == "TemplateProcessing"]
    if not templates:
        return wrap, []
    single = templates[0]["single"]
    cut = next(i for i, item in enumerate(single) if "Sequence" in item)
    prefix_len = sum(len(templates[0]["special_tokens"][item["SpecialToken"]["id"]]["ids"]) for item in single[:cut])
    return wrap[:prefix_len], wrap[prefix_len:]


def added_facts(tok):
    """Per added token: its content (token_to_id), its token (id_to_token, normalized for
    normalized tokens), and whether decode(skip_special_tokens=True) drops it."""
    facts = []
    for id_, token in sorted(tok.get_added_tokens_decoder().items()):
        dropped = tok.decode([id_], skip_special_tokens=True) == "" != tok.decode([id_], skip_special_tokens=False)
        facts.append({"id": id_, "content": token.content, "token": tok.id_to_token(id_), "skipped": dropped})
    return facts


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "test", "fixtures", "tokenizers"))
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(ROOT), "shared"))
    args = ap.parse_args()
    if tokenizers.__version__ != TOKENIZERS_VERSION:
        sys.exit(f"tokenizers {tokenizers.__version__} is installed; the fixtures are made with {TOKENIZERS_VERSION}")
    os.makedirs(args.out, exist_ok=True)

    corpus = make_corpus()
    text = make_training_text()
    spm = train_sentencepiece_bpe(text)
    kinds = {
        "gpt2": build_gpt2(text),
        "bytelevel_flags": build_bytelevel_flags(text),
        "llama3": build_llama3(text),
        "qwen2": build_qwen2(text),
        "llama2": build_llama2(spm),
        "mistral": build_mistral(spm),
        "metaspace_split": build_metaspace_split(spm),
    }
    write_json(os.path.join(args.out, "corpus.json"), {"strings": corpus})
    stories = os.path.join(args.shared, "models", "stories260K", "tokenizer.json")
    sources = {kind: (f"{kind}.tokenizer.json", tok) for kind, tok in kinds.items()}
    sources["stories260K"] = ("shared:models/stories260K/tokenizer.json", Tokenizer.from_file(stories))

    for index, (kind, (file, tok)) in enumerate(sources.items()):
        if not file.startswith("shared:"):
            with open(os.path.join(args.out, file), "w", encoding="utf-8") as f:
                f.write(tok.to_str())
                f.write("\n")
            tok = Tokenizer.from_file(os.path.join(args.out, file))  # the oracle is the file as written
        cases, randoms = expectations(tok, corpus, random.Random(1000 + index))
        prefix, suffix = split_wrap(affixes(tok), tok)
        write_json(os.path.join(args.out, f"{kind}.json"), {
            "kind": kind, "tokenizers": tokenizers.__version__, "tokenizer": file,
            "vocab_size": tok.get_vocab_size(with_added_tokens=True), "special_prefix": prefix,
            "special_suffix": suffix, "added_tokens": added_facts(tok), "cases": cases, "random_decodes": randoms})
        print(f"{kind}: {len(cases)} strings, vocab {tok.get_vocab_size(with_added_tokens=True)}")
    total = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    print(f"wrote {os.path.relpath(args.out, ROOT)} ({total / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
