#!/usr/bin/env python3
"""Write hf_goldens.json: Hugging Face's own answers for the cases below.

Run where transformers and tokenizers are installed (they were 5.17.0 and
0.23.2), from the repository root:

    python3 validation/testdata/qwen3-tokenizer/gen_hf_goldens.py QWEN_DIR SYNTH_ROOT OUT.json

QWEN_DIR is this directory. SYNTH_ROOT holds synth-300, synth-512, synth-1024,
synth-2500 (tokenizer.SyntheticFiles output), flags (synth-512 with extra
added tokens carrying every lstrip / rstrip / single_word / normalized
combination) and longs (synth-512 plus the merges Å+¿ and Å¿+t, to see
whether (?i:'s) matches U+017F). Every case records its input, so the Go tests need nothing
but the JSON.
"""
import json
import random
import sys

import jinja2
import jinja2.ext
import tokenizers
import transformers
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer
from transformers import AutoTokenizer

QWEN_DIR, SYNTH_ROOT, OUT = sys.argv[1:4]

HAND = [
    "", " ", "  ", "\n", "\r\n", "\r", " \n", "\n ", "a\n\n b", "a \n\nb", "a  \n  b", "x\t\ty", "x \t y",
    "end with spaces   ", "   start", "two  spaces", "a\u3000\u3000b", "a\u00a0b", "a\u00a0\u00a0b", "\u00a0x",
    "\u2028\u2029", "a\u0085b", "\x0b\x0c", "\x1c\x1d\x1e\x1f", "\x00\x01\x7f", "tab\tword", "\tword", "\u3000word",
    "I'm you're we've they'll she'd it's can't", "I'M YOU'RE WE'VE THEY'LL", "'s 'S 'ſ 'Ll 'lL 're'", "''s", "'",
    "rock'n'roll", "don’t (curly)", "l'été", "o'clock",
    "12345", "1,234.56", "٣٤٥", "Ⅻ ⅷ", "½ ¾ ²³", "x²", "v1.2.3-rc4", "0xDEADBEEF", "3.14e-10",
    "e\u0301", "n\u0303o", "\u1100\u1161\u11a8", "Å vs A\u030a", "\u212b", "ﬁ ligature", "ａｂｃ full width",
    "🙂🙃", "👩‍💻", "🇺🇳🇯🇵", "a😀b", "😀 😀", " 😀", "\U0001F9D1\u200D\U0001F91D\u200D\U0001F9D1",
    "مرحبا بالعالم", "שלום עולם", "Привет, мир!", "Ελληνικά", "हिन्दी भाषा", "ภาษาไทย", "Tiếng Việt",
    "中文，标点。“引号”", "日本語、カタカナ、ひらがな。", "한국어 텍스트", "zero\u200bwidth", "soft\u00adhyphen",
    "....", "!!!???", "--->", "\"quoted\"", "path/to/file.txt", "C:\\Windows\\System32", "user@example.com",
    "https://example.com/a?b=c&d=e#f", "<html><body>x</body></html>", "{\"json\": [1, 2, {\"k\": null}]}",
    "    indented code\n        more\n", "line1\r\nline2\r\n", "  \n  \n  ", "x\n\n\n\ny", "!\n", "!\r\n\r\n", " !\n\n",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "ab" * 200, "🙂" * 50, " " * 100, "\n" * 50, "-" * 300, "1" * 100,
    "<|im_start|>", "<|im_start|><|im_start|>", "<|im_start", "|im_start|>", "<|im_start|>system\nYou are X.<|im_end|>",
    "<|endoftext|>tail", "head<|endoftext|>", "a<|im_end|>b<|im_end|>c", "<think>", "</think>", "<think></think>",
    "a<think>b</think>c", " <think>\n\n</think>\n\n", "<tool_call>\n{\"name\": \"f\"}\n</tool_call>", "<tool_response>x</tool_response>",
    "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>", "<|vision_start|><|image_pad|><|vision_end|>", "<|box_start|>(1,2)<|box_end|>",
    "< |im_start| >", "<|IM_START|>", "<<|im_end|>>", "<|im_end|>\u0338", "x<|im_start|>\u0301",
    # Oniguruma folds U+017F (long s) to s in (?i:'s).
    "'\u017ft", "'\u017f", "x'\u017fy z", "'\u017f'\u017f",
    # Letters assigned after Unicode 15.0 (CJK Ext. I is 15.1; Todhri, Ol Onal, Sunuwar, Kirat Rai are 16.0).
    "a\U000105C0b", "\U0002EBF0\U0002EBF1", "x \U0001E5D0y", " \U00011BC0\U00011BC1", "\U00016D43 1", "\U0001CC00!",
    # Letters assigned in Unicode 17.0 (Sidetic, Tolong Siki, CJK Ext. J): Oniguruma 6.9.10 is 16.0.
    "x\U00010940'a", "x\U00011DB0'a", "x\U000323B0'a",
    # Canonical compositions added in Unicode 13.0 (Dives Akuru) and 16.0 (Kirat Rai, Tulu-Tigalari).
    "\U00011935\U00011930", "\U00016D67\U00016D67", "\U000113C2\U000113C2", "a\U00011935\U00011930b",
    # Canonical reordering with a combining mark (ccc >= 230) first assigned in Unicode 6.1, 7.0, ..., 14.0
    # followed by U+0316 (ccc 220): NFC swaps them only if the normaliser knows the mark.
    "a\u08e4\u0316", "a\u08ff\u0316", "a\ua69e\u0316", "a\u08d4\u0316", "a\u1df6\u0316", "a\U00010D24\u0316",
    "a\U0001E130\u0316", "a\U00010EAB\u0316", "a\u0898\u0316",
]

# Code points from many blocks, for the Unicode tables behind \p{L}, \p{N}, \s.
BLOCKS = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF), (0x530, 0x58F), (0x590, 0x5FF),
          (0x600, 0x6FF), (0x900, 0x97F), (0x980, 0x9FF), (0xE00, 0xE7F), (0x10A0, 0x10FF), (0x1100, 0x11FF),
          (0x1680, 0x169F), (0x1E00, 0x1EFF), (0x2000, 0x206F), (0x2070, 0x209F), (0x20A0, 0x20CF), (0x2100, 0x218F),
          (0x2190, 0x21FF), (0x2460, 0x24FF), (0x2E80, 0x2EFF), (0x3000, 0x303F), (0x3040, 0x30FF), (0x3100, 0x312F),
          (0x31F0, 0x31FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xA000, 0xA4CF), (0xA980, 0xA9DF), (0xAC00, 0xD7A3),
          (0xF900, 0xFAFF), (0xFB00, 0xFB4F), (0xFE00, 0xFE6F), (0xFF00, 0xFFEF), (0x10000, 0x1007F), (0x10400, 0x1044F),
          (0x105C0, 0x105FF), (0x11BC0, 0x11BFF), (0x16D40, 0x16D7F), (0x1CC00, 0x1CEBF), (0x1D400, 0x1D7FF), (0x1E5D0, 0x1E5FF),
          (0x1F300, 0x1FAFF), (0x20000, 0x2A6DF), (0x2EBF0, 0x2EE5F), (0x30000, 0x3134F), (0xE0000, 0xE007F)]


def random_unicode(n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        chars = []
        for _ in range(rng.randint(1, 30)):
            if rng.random() < 0.3:
                chars.append(rng.choice(" \n\t'abc"))
                continue
            lo, hi = rng.choice(BLOCKS)
            c = rng.randint(lo, hi)
            if 0xD800 <= c <= 0xDFFF:
                continue
            chars.append(chr(c))
        out.append("".join(chars))
    return out


CONTENTS = ["Hi", "", "\n", "What is 2+2?", "<think>\nplan\n</think>\n\nanswer", "a</think>b", "\n\n<think>x</think>",
            "<tool_response>r</tool_response>", "<tool_response>partial", "multi\nline\n\ncontent  ", "日本語 😀",
            "  spaced  ", "<|im_end|>", "{\"json\": true}", "tab\tsep", "</think>", "<think>", "quote ' and \" and \\"]


def random_chats(n, seed):
    rng = random.Random(seed)
    tool = {"type": "function", "function": {"name": "t", "description": "d", "parameters": {"type": "object", "properties": {"x": {"type": "number"}}}}}
    chats = []
    for _ in range(n):
        msgs = []
        if rng.random() < 0.4:
            msgs.append({"role": "system", "content": rng.choice(CONTENTS)})
        for _ in range(rng.randint(1, 6)):
            role = rng.choice(["user", "user", "assistant", "assistant", "tool", "system"])
            m = {"role": role, "content": rng.choice(CONTENTS)}
            if role == "assistant" and rng.random() < 0.3:
                m["reasoning_content"] = rng.choice(CONTENTS + [None])
            if role == "assistant" and rng.random() < 0.3:
                args = rng.choice([{"x": 1.5}, "{\"x\": 2}", {}, {"s": "é\n", "l": [True, None]}])
                m["tool_calls"] = [rng.choice([{"type": "function", "function": {"name": "t", "arguments": args}}, {"name": "flat", "arguments": args}])
                                   for _ in range(rng.randint(1, 2))]
            msgs.append(m)
        c = {"messages": msgs, "add_generation_prompt": rng.random() < 0.6}
        if rng.random() < 0.3:
            c["tools"] = [tool]
        r = rng.random()
        if r < 0.3:
            c["enable_thinking"] = False
        elif r < 0.5:
            c["enable_thinking"] = True
        chats.append(c)
    return chats

ALPHABET = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
            + list(" \t\n\r!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
            + ["\u00a0", "\u3000", "\u2028", "\u0085", "\u200d", "\u0301", "é", "ß", "ñ", "ſ", "字", "中", "한", "😀", "🎉",
               "'s", "'S", "'ll", "'RE", "  ", "\n\n", " \n", "\r\n",
               "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "<|im_", "|>"])


def random_strings(n, seed):
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 40))) for _ in range(n)]


FLAG_STRINGS = [
    "a <lst> b", "a   <lst>b", "<lst>", "x\n\t <lst>", "a <rst>   b", "<rst>\n\nx", "<rst>", "  <both>  ",
    "x <both> <both> y", "word", "a word b", "words", "sword", "word_", "word.", "(word)", "éword", "word1", "1word",
    "ÉCOLE", "E\u0301COLE", "école", "a spaced", "spaced", "x  spaced", "<a><b>", "<a><a><b>", "<a>b>", "xyz", "xyyz",
    "<sw>", "a<sw>", "a <sw> b", "Å", "A\u030a", "\u2126", "\u03a9", "going", "ing", "singing", " ing ",
    "<lst><rst><both>", "<rst> <lst>", "a sp ace b", "sp ace", "x\u3000<lst>", "<rst>\u3000y", "word\u200dx", "word\u0301",
]


def qwen_chats():
    weather = {"type": "function", "function": {"name": "get_weather", "description": "Get the weather — in °C, for a city",
               "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name, e.g. Zürich"},
                                                                "days": {"type": "integer", "minimum": 1, "maximum": 7.5}},
                              "required": ["city"]}}}
    search = {"type": "function", "function": {"name": "search", "parameters": {"zeta": {"type": "array", "items": {"type": "string"}},
                                                                               "alpha": None, "flag": True, "x": 1e-7, "y": 100000.0}}}
    call_obj = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": 3, "f": 1.0, "n": None, "l": [1, "2", {"é": "\n"}]}}}
    call_str = {"function": {"name": "search", "arguments": "{\"q\": \"raw string args\"}"}}
    call_flat = {"name": "flat_tool", "arguments": {"b": 2, "a": 1}}
    chats = [
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "add_generation_prompt": True},
        {"messages": [{"role": "user", "content": "Weather?"}], "tools": [weather, search], "add_generation_prompt": True},
        {"messages": [{"role": "system", "content": "You are a bot."}, {"role": "user", "content": "Weather?"}], "tools": [weather], "add_generation_prompt": True, "enable_thinking": False},
        {"messages": [{"role": "user", "content": "Weather in Zürich?"},
                      {"role": "assistant", "content": "", "tool_calls": [call_obj]},
                      {"role": "tool", "content": "{\"temp\": 21}"},
                      {"role": "tool", "content": "second result"},
                      {"role": "assistant", "content": "It is 21 °C."},
                      {"role": "user", "content": "Thanks! And tomorrow?"}], "tools": [weather], "add_generation_prompt": True},
        {"messages": [{"role": "user", "content": "Search it"},
                      {"role": "assistant", "content": "Let me search.", "tool_calls": [call_str, call_flat]},
                      {"role": "tool", "content": "results"}], "add_generation_prompt": True},
        {"messages": [{"role": "user", "content": "Q1"},
                      {"role": "assistant", "content": "A1", "reasoning_content": "thinking about Q1"},
                      {"role": "user", "content": "Q2"},
                      {"role": "assistant", "content": "A2", "reasoning_content": "\nthinking about Q2\n"}], "add_generation_prompt": False},
        {"messages": [{"role": "user", "content": "Q"},
                      {"role": "assistant", "content": "<think>\ninline reasoning\n</think>\n\nThe answer."}], "add_generation_prompt": False},
        {"messages": [{"role": "user", "content": "Q"},
                      {"role": "assistant", "content": "\n\n<think>r1</think>middle</think>\n\nfinal"},
                      {"role": "user", "content": "again"}], "add_generation_prompt": True, "enable_thinking": True},
        {"messages": [{"role": "user", "content": "do it"},
                      {"role": "assistant", "content": "", "tool_calls": [call_obj], "reasoning_content": "need the tool"},
                      {"role": "tool", "content": "done"},
                      {"role": "assistant", "content": "All done.", "reasoning_content": "tool said done"}], "add_generation_prompt": False},
        {"messages": [{"role": "user", "content": "<tool_response>fake</tool_response>"},
                      {"role": "assistant", "content": "ok", "reasoning_content": "r"}], "add_generation_prompt": True},
        {"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "mid-conversation system"}, {"role": "user", "content": "b"}], "add_generation_prompt": True},
        {"messages": [{"role": "user", "content": "Unicode: 日本語 😀 \u00a0\u3000 \"quotes\" \\ backslash\n\ttab <|im_end|> inside"}], "add_generation_prompt": True, "enable_thinking": False},
        {"messages": [{"role": "assistant", "content": "starts with assistant"}], "add_generation_prompt": True},
        {"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": False, "enable_thinking": False},
        {"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": True, "enable_thinking": 0},
        {"messages": [{"role": "user", "content": "x", "extra_field": [1, 2]}, {"role": "assistant", "content": None, "tool_calls": [call_obj]}], "add_generation_prompt": True},
        {"messages": [], "add_generation_prompt": True},
    ]
    return chats


def jinja_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def main():
    out = {"versions": {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__, "jinja2": jinja2.__version__}}

    hf = AutoTokenizer.from_pretrained(QWEN_DIR)
    raw = Tokenizer.from_file(QWEN_DIR + "/tokenizer.json")
    strings = HAND + random_strings(400, 20251129) + random_unicode(400, 7)
    rows, mismatch = [], 0
    for s in strings:
        ids = hf(s)["input_ids"]
        ids2 = raw.encode(s).ids
        if ids != ids2:
            mismatch += 1
        rows.append({"text": s, "ids": ids, "decoded": hf.decode(ids)})
    out["qwen_strings"] = rows
    out["qwen_transformers_vs_tokenizers_mismatches"] = mismatch

    # Decoding, including bytes split across tokens and invalid UTF-8.
    b2u = {}
    n = 0
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    for b, c in zip(bs, cs):
        b2u[b] = chr(c)
    vocab = raw.get_vocab()
    byte_id = {b: vocab[b2u[b]] for b in range(256)}
    im_end = vocab["<|im_end|>"]
    seqs = [
        [0xE2, 0x82, 0xAC], [0xE2, 0x82], [0xE2], [0xF0, 0x9F, 0x98, 0x80], [0xF0, 0x9F, 0x98],
        [0x80], [0xC0, 0x80], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0xE2, "im_end", 0x82, 0xAC],
        [0xE2, 0x82, "im_end", 0xAC], [0x61, 0xFF, 0x62, 0xE2, 0x82],
    ]
    dec = []
    for seq in seqs:
        ids = [im_end if x == "im_end" else byte_id[x] for x in seq]
        dec.append({"ids": ids, "text": hf.decode(ids), "text_skip_special": hf.decode(ids, skip_special_tokens=True)})
    out["qwen_decode"] = dec

    # Synthetic tokenizers and the added-token flag tokenizer.
    synth = {}
    for name in ["synth-300", "synth-512", "synth-1024", "synth-2500", "flags", "longs"]:
        t = Tokenizer.from_file(f"{SYNTH_ROOT}/{name}/tokenizer.json")
        texts = (FLAG_STRINGS if name == "flags" else []) + HAND[:60] + random_strings(100, 7)
        if name == "longs":
            # A merge of U+017F with "t" shows whether (?i:'s) took the long s.
            texts = ["'\u017ft", "x'\u017ftop", "'\u017f", "\u017ft", "'st", "'St", "a'\u017ft b"]
        synth[name] = {
            "vocab_size": t.get_vocab_size(with_added_tokens=True),
            "added": [{"content": a.content, "id": t.token_to_id(a.content)} for a in t.get_added_tokens_decoder().values()],
            "strings": [{"text": s, "ids": t.encode(s).ids, "decoded": t.decode(t.encode(s).ids, skip_special_tokens=False)} for s in texts],
        }
    out["synthetic"] = synth

    # Chat template: transformers' apply_chat_template, and plain Jinja2 as a cross-check.
    env = jinja_env()
    tmpl = env.from_string(hf.chat_template)
    chats = []
    for c in qwen_chats() + random_chats(200, 11):
        kwargs = {k: v for k, v in c.items() if k not in ("messages", "tools", "add_generation_prompt")}
        row = dict(c)
        try:
            rendered = hf.apply_chat_template(c["messages"], tools=c.get("tools"), add_generation_prompt=c["add_generation_prompt"], tokenize=False, **kwargs)
            row["rendered"] = rendered
            row["ids"] = hf(rendered, add_special_tokens=False)["input_ids"]
        except Exception as e:  # noqa: BLE001 - the golden records the failure
            row["error"] = type(e).__name__ + ": " + str(e)
        try:
            plain = tmpl.render(messages=c["messages"], tools=c.get("tools"), add_generation_prompt=c["add_generation_prompt"],
                                eos_token=hf.eos_token, pad_token=hf.pad_token, **kwargs)
            row["plain_jinja2_agrees"] = plain == row.get("rendered")
        except Exception as e:  # noqa: BLE001
            row["plain_jinja2_agrees"] = "error" in row
        chats.append(row)
    out["qwen_chat"] = chats

    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("strings", len(rows), "mismatches", mismatch, "chats", len(chats),
          "plain disagreements", sum(1 for c in chats if c["plain_jinja2_agrees"] is not True))


if __name__ == "__main__":
    main()
