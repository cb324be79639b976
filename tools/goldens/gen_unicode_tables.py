#!/usr/bin/env python3
"""Generate runtime/models/tokenizer_unicode_tables.cpp: the Unicode data the C++ tokenizer needs.

The C++ tokenizer must give the same ids as the Hugging Face `tokenizers` library, so the tables
describe what *that library* does, not what the newest Unicode standard says. They are measured
from the library itself wherever it is the authority, and from Python's unicodedata only where
the library agrees with it:

* `letter`, `number`, `pattern_space`: what `\\p{L}`, `\\p{N}` and `\\s` match in the library's
  regex engine (used by the GPT-2 / Llama-3 / Qwen2 split patterns). Measured by running a
  `Split` pre-tokenizer over every code point. The library's engine is newer than Python 3.11's
  Unicode 14 (it knows Unicode 16 letters such as Todhri U+105C0), so unicodedata is not used.
* `word`, `strip_space`: what the added-token matcher treats as a word character (`single_word`)
  and as whitespace (`lstrip` / `rstrip`). Measured through added tokens with those flags.
* NFC: full canonical decompositions (library NFD of every code point), canonical combining
  classes (unicodedata, except marks the library's older normalisation data does not know, which
  it treats as class 0), and primary compositions (unicodedata pairs the library composes). The
  script re-implements NFC from the emitted tables and checks it against the library on every
  code point and on random mark sequences before writing anything.

Usage: .venv-goldens/bin/python tools/goldens/gen_unicode_tables.py [--out PATH]
"""

import argparse
import os
import random
import sys
import unicodedata

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers, pre_tokenizers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_OUT = os.path.join(ROOT, "runtime", "models", "tokenizer_unicode_tables.cpp")

ALL_CPS = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
HANGUL_FIRST, HANGUL_LAST = 0xAC00, 0xD7A3


def regex_members(pattern):
    """Code points matched by a one-character `pattern` in the library's regex engine."""
    text = "".join(chr(c) for c in ALL_CPS)
    splitter = pre_tokenizers.Split(Regex(pattern), behavior="removed")
    kept = set()
    for _, (start, end) in splitter.pre_tokenize_str(text):
        kept.update(ALL_CPS[start:end])
    return set(ALL_CPS) - kept


def added_token_probe(flag):
    """Code points the added-token matcher treats as a word char (`single_word`) or a space."""
    tok = Tokenizer(models.BPE())
    if flag == "word":
        tok.add_tokens([AddedToken("[W]", single_word=True, normalized=False)])
        texts = [chr(c) + "[W]" for c in ALL_CPS]
        # single_word refuses the match when the text before it ends with a word character.
        hits = tok.encode_batch(texts, add_special_tokens=False)
        before = {c for c, e in zip(ALL_CPS, hits) if not e.tokens or e.tokens[-1] != "[W]"}
        texts = ["[W]" + chr(c) for c in ALL_CPS]
        hits = tok.encode_batch(texts, add_special_tokens=False)
        after = {c for c, e in zip(ALL_CPS, hits) if not e.tokens or e.tokens[0] != "[W]"}
        if before != after:
            sys.exit("single_word: the library's word test differs before and after the token")
        return before
    tok.add_tokens([AddedToken("[S]", lstrip=True, normalized=False)])
    texts = [chr(c) + "[S]" for c in ALL_CPS]
    hits = tok.encode_batch(texts, add_special_tokens=False)
    # lstrip swallows the whitespace before the token: the token's span then starts at 0.
    return {c for c, e in zip(ALL_CPS, hits) if e.offsets and e.offsets[-1][0] == 0}


def to_ranges(members):
    out = []
    for c in sorted(members):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def lib_ccc_known(c, lib_nfd):
    """Whether the library gives c the non-zero combining class unicodedata gives it."""
    k = unicodedata.combining(chr(c))
    moved_down = k > 1 and lib_nfd.normalize_str(chr(c) + "\u0334") == "\u0334" + chr(c)
    moved_up = k < 240 and lib_nfd.normalize_str("\u0345" + chr(c)) == chr(c) + "\u0345"
    return moved_down or moved_up


def nfc_tables():
    lib_nfd, lib_nfc = normalizers.NFD(), normalizers.NFC()
    decomp = {}
    for c in ALL_CPS:
        if HANGUL_FIRST <= c <= HANGUL_LAST:
            continue
        d = lib_nfd.normalize_str(chr(c))
        if d != chr(c):
            decomp[c] = [ord(x) for x in d]
    ccc = {}
    for c in ALL_CPS:
        if c in decomp or not unicodedata.combining(chr(c)):
            continue
        if lib_ccc_known(c, lib_nfd):
            ccc[c] = unicodedata.combining(chr(c))
    comp = {}
    for c in ALL_CPS:
        if HANGUL_FIRST <= c <= HANGUL_LAST or c not in decomp:
            continue
        fields = unicodedata.decomposition(chr(c)).split()
        if len(fields) != 2 or fields[0].startswith("<"):
            continue
        a, b = int(fields[0], 16), int(fields[1], 16)
        if lib_nfc.normalize_str(chr(a) + chr(b)) == chr(c):
            comp[(a, b)] = c
    return decomp, ccc, comp


# ---- NFC from the tables (mirrors the C++), to check them against the library ----
S_BASE, L_BASE, V_BASE, T_BASE, L_COUNT, V_COUNT, T_COUNT = 0xAC00, 0x1100, 0x1161, 0x11A7, 19, 21, 28
N_COUNT = V_COUNT * T_COUNT


def model_nfc(text, decomp, ccc, comp):
    cps = []
    for ch in text:
        c = ord(ch)
        if S_BASE <= c < S_BASE + L_COUNT * N_COUNT:
            s = c - S_BASE
            cps += [L_BASE + s // N_COUNT, V_BASE + (s % N_COUNT) // T_COUNT]
            if s % T_COUNT:
                cps.append(T_BASE + s % T_COUNT)
        else:
            cps += decomp.get(c, [c])
    i = 0
    while i < len(cps):  # stable sort of each run of non-starters by class
        if ccc.get(cps[i], 0) == 0:
            i += 1
            continue
        j = i
        while j < len(cps) and ccc.get(cps[j], 0):
            j += 1
        cps[i:j] = sorted(cps[i:j], key=lambda x: ccc.get(x, 0))
        i = j
    out, starter, last = [], -1, 0
    for c in cps:
        k = ccc.get(c, 0)
        if starter >= 0 and (len(out) - 1 == starter or (last != 0 and last < k)):
            s = out[starter]
            composed = None
            if L_BASE <= s < L_BASE + L_COUNT and V_BASE <= c < V_BASE + V_COUNT:
                composed = S_BASE + ((s - L_BASE) * V_COUNT + (c - V_BASE)) * T_COUNT
            elif S_BASE <= s < S_BASE + L_COUNT * N_COUNT and (s - S_BASE) % T_COUNT == 0 \
                    and T_BASE < c < T_BASE + T_COUNT:
                composed = s + (c - T_BASE)
            else:
                composed = comp.get((s, c))
            if composed is not None:
                out[starter] = composed
                continue
        if k == 0:
            starter = len(out)
        last = k
        out.append(c)
    return "".join(chr(c) for c in out)


def check_nfc(decomp, ccc, comp):
    lib = normalizers.NFC()
    for c in ALL_CPS:
        if model_nfc(chr(c), decomp, ccc, comp) != lib.normalize_str(chr(c)):
            sys.exit(f"NFC tables disagree with the library on U+{c:04X}")
    marks = sorted(set(ccc) | {b for (_, b) in comp})
    starters = sorted({a for (a, _) in comp}) + [0x1100, 0x1161, 0x11A8, 0xAC00, 0x61, 0x3042]
    rng = random.Random(20240601)
    for _ in range(200000):
        s = chr(rng.choice(starters)) + "".join(chr(rng.choice(marks)) for _ in range(rng.randint(0, 4)))
        if rng.random() < 0.3:
            s += chr(rng.choice(starters)) + chr(rng.choice(marks))
        if model_nfc(s, decomp, ccc, comp) != lib.normalize_str(s):
            sys.exit(f"NFC tables disagree with the library on {s!r}")


# ---- C++ output ----
def emit_array(decl, items, width=100):
    """`decl = {items};` with the items wrapped at `width` columns, never inside an item."""
    lines, line = [decl + " = {"], "   "
    for i, item in enumerate(items):
        piece = " " + item + ("," if i + 1 < len(items) else "")
        if len(line) + len(piece) > width:
            lines.append(line)
            line = "   "
        line += piece
    lines.append(line)
    lines.append("};")
    return "\n".join(lines) + "\n"


def emit(out_path, classes, decomp, ccc, comp):
    parts = [
        "// Generated by tools/goldens/gen_unicode_tables.py from the `tokenizers` "
        f"{tokenizers.__version__} library and\n"
        f"// Python {sys.version.split()[0]} unicodedata {unicodedata.unidata_version}. "
        "Do not edit; rerun the script.\n",
        '#include "runtime/models/tokenizer_unicode_tables.hpp"\n',
        "namespace mpakt::models::unicode_tables {\n",
    ]
    for name, members in classes:
        ranges = to_ranges(members)
        parts.append(emit_array(f"const code_range {name}[]", [f"{{0x{a:X}, 0x{b:X}}}" for a, b in ranges]))
        parts.append(f"const std::size_t {name}_size = {len(ranges)};\n")
    ccc_rows = []
    for c in sorted(ccc):
        if ccc_rows and ccc_rows[-1][1] == c - 1 and ccc_rows[-1][2] == ccc[c]:
            ccc_rows[-1][1] = c
        else:
            ccc_rows.append([c, c, ccc[c]])
    parts.append(emit_array("const ccc_range ccc_ranges[]", [f"{{0x{a:X}, 0x{b:X}, {k}}}" for a, b, k in ccc_rows]))
    parts.append(f"const std::size_t ccc_ranges_size = {len(ccc_rows)};\n")
    pool, rows = [], []
    for c in sorted(decomp):
        rows.append(f"{{0x{c:X}, {len(pool)}, {len(decomp[c])}}}")
        pool += decomp[c]
    parts.append(emit_array("const char32_t decomposition_pool[]", [f"0x{c:X}" for c in pool]))
    parts.append(emit_array("const decomposition decompositions[]", rows))
    parts.append(f"const std::size_t decompositions_size = {len(rows)};\n")
    parts.append(emit_array("const composition compositions[]",
                            [f"{{0x{a:X}, 0x{b:X}, 0x{c:X}}}" for (a, b), c in sorted(comp.items())]))
    parts.append(f"const std::size_t compositions_size = {len(comp)};\n")
    parts.append("}  // namespace mpakt::models::unicode_tables\n")
    with open(out_path, "w", encoding="utf-8") as f:
        f.write("\n".join(parts))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()
    letter, number, space = regex_members(r"\p{L}"), regex_members(r"\p{N}"), regex_members(r"\s")
    word, strip_space = added_token_probe("word"), added_token_probe("space")
    py_letter = {c for c in ALL_CPS if unicodedata.category(chr(c)).startswith("L")}
    print(f"\\p{{L}}: {len(letter)} code points ({len(letter - py_letter)} unknown to unicodedata "
          f"{unicodedata.unidata_version}, {len(py_letter - letter)} missing)")
    decomp, ccc, comp = nfc_tables()
    check_nfc(decomp, ccc, comp)
    print(f"NFC: {len(decomp)} decompositions, {len(ccc)} marks, {len(comp)} compositions; "
          "checked against the library")
    classes = [("letter_ranges", letter), ("number_ranges", number), ("pattern_space_ranges", space),
               ("word_ranges", word), ("strip_space_ranges", strip_space)]
    emit(args.out, classes, decomp, ccc, comp)
    print(f"wrote {os.path.relpath(args.out, ROOT)}")


if __name__ == "__main__":
    main()
