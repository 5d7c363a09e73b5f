#!/usr/bin/env python3
"""Writes the tokenizer.json fixtures under tests/data/tokenizers/<name>/ that
tests/unit/tokenizer_json_test.cc checks opfuse's tokenizer against.

Why it is built this way: the expected ids must come from Hugging Face's own `tokenizers` package,
not from opfuse, and the files must be small enough to commit. So each fixture is a tokenizer
TRAINED here on a small built-in multilingual corpus (vocab of a few hundred), wired exactly like
the real model family's tokenizer.json (the same normalizer / pre-tokenizer regex / decoder /
post-processor / added tokens, merges in the same on-disk form), and expected.json records, for a
few hundred test strings, `encode(s, add_special_tokens=False).ids` and
`decode(ids, skip_special_tokens=False)`, plus decodes of random id lists and "variants" (one
field of tokenizer.json changed, with the ids HF gives then).

    python3 -m venv /work/venv_tok && /work/venv_tok/bin/pip install tokenizers
    /work/venv_tok/bin/python tools/make_tokenizer_fixtures.py            # writes the fixtures
    /work/venv_tok/bin/python tools/make_tokenizer_fixtures.py --check    # compares, writes nothing
    # a real model directory: `opfuse tokenize` against HF on the test strings (one process each)
    /work/venv_tok/bin/python tools/make_tokenizer_fixtures.py --compare MODEL_DIR --opfuse build/cpu/opfuse

Fixtures: llama3_bpe (byte-level BPE, Llama-3's Split regex + ByteLevel, ignore_merges, string
merges, TemplateProcessing BOS), qwen2_bpe (NFC + Qwen2's regex, pair merges, no BOS),
spm_bpe (Llama-2 "legacy" SentencePiece-style BPE: Prepend/Replace normalizer, byte fallback,
Replace/ByteFallback/Fuse/Strip decoder, <s> template), metaspace_bpe (newer Llama-2/Mistral
style: Metaspace pre-tokenizer, unk without byte fallback, Metaspace decoder, add_bos_token false
in tokenizer_config.json), misc_bpe (every Split behaviour, GPT-2 ByteLevel regex, Replace with a
regex, lstrip/rstrip/normalized added tokens, no tokenizer_config.json).
"""
import argparse
import json
import os
import random
import sys
import unicodedata

from tokenizers import (AddedToken, Regex, Tokenizer, __version__, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "tokenizers")

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")

# ------------------------------------------------------------------------------------ the corpus
PROSE = [
    "The quick brown fox jumps over the lazy dog.",
    "An operator-fusion compiler groups elementwise operations into one kernel, so that the",
    "intermediate tensors never leave the registers. It's faster, and we've measured it: the fused",
    "kernel runs in 3.2 microseconds where the unfused chain took 11.7 microseconds.",
    "She said: \"I don't know what you're talking about.\" He'd already left; they'll be back at 10:30.",
    "We're going to the market tomorrow morning, then we'll cook dinner for everyone at home.",
    "In 1969, Apollo 11 landed on the Moon; 400,000 people worked on the program.",
    "Prices rose 12.5% in 2023, from $1,299.99 to $1,461.24 (an increase of $161.25).",
    "Call +1 (555) 010-2368 or write to help@example.com before 2024-06-30.",
    "The tokenizer splits text into words, numbers and punctuation before the merges apply.",
    "Machine learning models read tokens, not characters; the vocabulary decides the split.",
    "A café in São Paulo serves crème brûlée, jalapeño bagels and piña colada to naïve tourists.",
    "Zoë and Chloë visited the Ångström laboratory in Uppsala; the façade was being repainted.",
    "Über die Brücke gehen wir zur Straße, wo die Bäckerei frische Brötchen verkauft.",
    "El niño comió paella y bebió horchata en la playa de Málaga con su señora madre.",
    "Le garçon a mangé une crêpe à la crème; où est la bibliothèque, s'il vous plaît?",
    "Москва — столица России, а Київ — столиця України.",
    "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
]
CJK = [
    "今天天气很好，我们去公园散步吧。",
    "机器学习模型读取的是词元，而不是字符。",
    "东京是日本的首都，人口超过一千万。",
    "私は毎朝コーヒーを飲みます。今日はとても暑いですね。",
    "日本語の文章には漢字とひらがなとカタカナが混ざっています。",
    "안녕하세요, 만나서 반갑습니다. 오늘 날씨가 좋네요.",
    "中文、日本語、한국어が一つの文に出てくることもある。",
]
EMOJI = [
    "Great job! 🎉🎉 Thanks 👍 and see you soon 😀",
    "Family: 👨‍👩‍👧‍👦, flags: 🇺🇸 🇯🇵, skin tones: 👋🏽 👋🏿, hearts: ❤️ 💙",
    "Weather today: ☀️ then 🌧️, temperature 21°C ≈ 70°F.",
]
CODE = [
    "def fused_kernel(x, y):\n    return (x * y).sum(dim=-1)\n",
    "for (int i = 0; i < n; ++i) {\n\tout[i] = a[i] + b[i];\n}\n",
    "if __name__ == \"__main__\":\n    main()\n",
    "#include <vector>\nstd::vector<float> v(1024, 0.0f);\n",
    "SELECT name, count(*) FROM users WHERE age >= 18 GROUP BY name;\n",
    "x = [1, 2, 3]; y = {\"a\": 1, \"b\": 2}  # comment\n",
    "    indented line\n        more indented\n\t\ttabbed\n",
    "return a && b || !c ? x->y : z::w;\r\n",
]
NUMBERS = ["1 12 123 1234 12345 123456 1234567", "3.14159 2.71828 1.41421 0.5772",
           "2024-01-01 12:34:56", "100% 50% 25% 12.5%", "1st 2nd 3rd 4th 21st 22nd 103rd"]
SPACES = ["a  b   c    d", "   leading spaces", "trailing spaces   ", "tabs\tbetween\twords",
          "line one\nline two\n\nline four", "windows\r\nline endings\r\n", "mixed \t \n whitespace"]


def corpus():
    lines = PROSE + CJK + EMOJI + CODE + NUMBERS + SPACES
    rng = random.Random(1234)
    out = []
    for rep in range(6):  # enough repetition for a few hundred merges
        shuffled = lines[:]
        rng.shuffle(shuffled)
        out.extend(shuffled)
        out.append(" ".join(rng.choice(PROSE).split()[:8]) + f" {rng.randint(0, 99999)}")
    return out


# ------------------------------------------------------------------------------------ test strings
BASE_STRINGS = [
    "", " ", "  ", "\n", "\t", "\r\n", "a", "A", "Hello", "Hello world", "hello world!", " Hello", "Hello ",
    "  Hello  world  ", "Hello\nworld", "Hello\r\nworld\r\n", "tab\tseparated\tvalues", "\t\tindented",
    "multiple   spaces    here", "trailing newline\n", "\n\nleading newlines", "a \n b", " \n ", "\n \n",
    "The quick brown fox jumps over the lazy dog.", "the THE The tHe", "I don't know.", "DON'T STOP",
    "I'M HERE", "WE'LL SEE", "it'S fine", "they'RE here", "you'VE got", "she'D go", "'s 't 're 've 'm 'll 'd",
    "x'ſx", "rock'n'roll", "O'Brien's book", "isn't it", "can't won't shouldn't",
    "1", "12", "123", "1234", "12345", "123456", "1234567", "3.14159", "1,000,000", "v1.2.3", "0x1F",
    "2024-06-30T12:34:56Z", "+1 (555) 010-2368", "$1,299.99", "100%", "１２３ fullwidth digits", "٣٤٥ arabic digits",
    "Ⅻ ½ ¾ roman and fractions",
    "今天天气很好", "机器学习", "私は学生です", "안녕하세요", "中文English混合text", "日本語のテキスト、句読点。",
    "龘靐齉 rare hanzi", "𠀀𠀁 supplementary CJK",
    "😀", "🎉🎉🎉", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸🇯🇵", "❤️", "🦀 crab and 🧬 dna", "text😀text", "😀 😀  😀",
    "café", "cafe\u0301", "naïve", "nai\u0308ve", "Ångström", "A\u030angstro\u0308m", "\u212bngstr\u00f6m", "\u212a kelvin",
    "e\u0301\u0301", "a\u0308\u0301", "\u1100\u1161\u11a8 jamo", "ﬁ ligature", "Straße", "ǅ titlecase",
    "Привет, мир!", "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีครับ", "Xin chào thế giới",
    "∑∫√∞ ≤ ≥ ≠", "→ ← ↑ ↓", "© ® ™ § ¶", "«quotes» „German“ ‘single’ “double”",
    "\u00a0nbsp\u00a0", "ideographic\u3000space", "nel\u0085line", "line\u2028separator", "mongolian\u180evowel",
    "\u180e!!", "a \u180e b", "a  \u180e", "\u180e  x", "\t\u180e\n", "\u180e\u180e", "x\u180e\n", "!!\u180e?", "\u0085!!", " \u0085 x", "\u00a0!!", "\u3000\u3000x",
    "zero\u200bwidth", "\ufeffbom", "soft\u00adhyphen", "ctrl\x00\x01\x07\x1b\x7fchars", "\x1c\x1d\x1e\x1f",
    "def f(x):\n    return x * 2\n", "if (a && b) { return c; }", "x = [1, 2, 3]", "a->b::c", "#include <stdio.h>",
    "http://example.com/path?query=1&b=2#frag", "user@example.com", "C:\\Windows\\System32", "~/.bashrc",
    "....", "!!!", "???", "---", "___", "***", "===", "(((nested)))", "[brackets]", "{braces}", "<angle>",
    "a-b-c", "a--b", "-lead", "trail-", "a:b:c", "a::b", ":lead", "trail:", "a|b|c", "||", "|lead", "trail|",
    "a1b2c3", "abc123def456", "0a0b0", "x|1-2:3", " zyzzyva", "zyzzyva", " quux", "quux", " été", "été",
]

SPECIALS = {
    "llama3_bpe": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                   "<|reserved_special_token_0|>", "<|reserved_special_token_1|>", "<|python_tag|>"],
    "qwen2_bpe": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"],
    "spm_bpe": ["<s>", "</s>", "<unk>"],
    "metaspace_bpe": ["<s>", "</s>", "<unk>"],
    "misc_bpe": ["<mask>", "[NL]", "cafe\u0301", "tab\there", "<sep>"],
}


def strings_for(name, rng):
    sp = SPECIALS[name]
    out = list(BASE_STRINGS)
    a, b = sp[0], sp[-1]
    out += [a, a + a, a + "Hello", "Hello" + a, "Hello " + a + " world", " " + a + " ", a + "\n" + b,
            "x" + a[:-1], a[1:], a[:3] + a, "<" + a + ">", a.upper(), "  " + b + "  tail", b + b + b]
    if name == "llama3_bpe":
        out += ["<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n",
                "<|eot_id|<|eot_id|>", "<|reserved_special_token_0|><|reserved_special_token_1|>"]
    if name == "qwen2_bpe":
        out += ["<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n你好<|im_end|>\n",
                "<tool_call>{\"name\": \"f\"}</tool_call>", "<|im_start|><|im_end|>"]
    if name == "misc_bpe":
        out += ["hello <mask> world", "hello   <mask>   world", "<mask>", "  <mask>", "[NL]  next", "a[NL]\t\tb",
                "un café noir", "un cafe\u0301 noir", "CAFÉ café", "tab\there", "tab  here", "a tab\there b", "x <sep> y", "x   <sep>   y", "<mask><mask>",
                " <mask>[NL] ", "it\u2019s here", "\u2018quoted\u2019", "a|b-c:d1e", "||--::11"]
    # random mixtures of fragments: every category next to every other
    frags = (["Hello", " world", "  ", "\n", "\t", "\r\n", "123", "4567", "'s", "'LL", "DON'T", "café", "cafe\u0301",
              "今天", "です", "한국", "😀", "👨‍👩‍👧", "🦀", "é", " ", "-", ":", "|", "...", "ſ", "\u00a0", "\u0085",
              "नम", "\x00", "zyzzyva", "quux", "Ä"] + sp)
    for _ in range(170):
        out.append("".join(rng.choice(frags) for _ in range(rng.randint(1, 9))))
    return list(dict.fromkeys(out))  # unique, in order


# ------------------------------------------------------------------------------------ fixtures
def byte_level(s):
    """GPT-2 bytes_to_unicode applied to the UTF-8 bytes of s."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, map(chr, cs)))
    return "".join(table[b] for b in s.encode("utf-8"))


def train(tok, vocab_size, lines=None, **kw):
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False, **kw)
    tok.train_from_iterator(lines or corpus(), trainer)
    return json.loads(tok.to_str())


def limited_corpus(n):
    """The corpus with only its n most frequent characters (ties by code point) and spaces: the
    trainer's own limit_alphabet breaks ties differently from run to run."""
    lines = corpus()
    counts = {}
    for line in lines:
        for c in line:
            counts[c] = counts.get(c, 0) + 1
    keep = set(sorted(counts, key=lambda c: (-counts[c], c))[:n]) | {" "}
    return ["".join(c for c in line if c in keep) for line in lines]


def from_json(j):
    return Tokenizer.from_str(json.dumps(j, ensure_ascii=False))


def add_special(tok, contents, **kw):
    tok.add_special_tokens([AddedToken(c, special=True, normalized=False, **kw) for c in contents])


def llama3():
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    j = train(tok, 700, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    # Vocabulary entries no merge reaches: only ignore_merges=true emits them whole (as Llama-3 does).
    for extra in [" zyzzyva", "quux", " été"]:
        j["model"]["vocab"][byte_level(extra)] = len(j["model"]["vocab"])
    j["model"]["ignore_merges"] = True
    tok = from_json(j)
    add_special(tok, SPECIALS["llama3_bpe"])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "clean_up_tokenization_spaces": True,
              "model_input_names": ["input_ids", "attention_mask"], "model_max_length": 131072,
              "tokenizer_class": "PreTrainedTokenizerFast"}
    variants = [{"set": [["model.ignore_merges", False]]}]
    return tok, config, variants


def qwen2():
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    j = train(tok, 700, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    j["model"]["continuing_subword_prefix"] = ""  # as Qwen2's file has them
    j["model"]["end_of_word_suffix"] = ""
    tok = from_json(j)
    add_special(tok, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tok.add_tokens([AddedToken(c, special=False, normalized=False) for c in ["<tool_call>", "</tool_call>"]])
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    config = {"add_prefix_space": False, "bos_token": None, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
              "errors": "replace", "model_max_length": 32768, "split_special_tokens": False,
              "tokenizer_class": "Qwen2Tokenizer", "unk_token": None, "clean_up_tokenization_spaces": False}
    return tok, config, []


def sentencepiece_like(vocab_size, byte_fallback, limit_alphabet):
    """BPE trained on Metaspace words (so merges never cross a word start, as SentencePiece's), with
    <unk> <s> </s> first and, with byte_fallback, <0x00>..<0xFF> next, as Llama-2's vocabulary."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=byte_fallback))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    j = train(tok, vocab_size, limited_corpus(limit_alphabet), special_tokens=["<unk>", "<s>", "</s>"])
    trained = sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    if byte_fallback:
        for b in range(256):
            vocab[f"<0x{b:02X}>"] = len(vocab)
    for t, _ in trained:
        if t not in vocab:
            vocab[t] = len(vocab)
    j["model"]["vocab"] = vocab
    j["added_tokens"] = [{"id": vocab[c], "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for c in ["<unk>", "<s>", "</s>"]]
    return j


def spm():
    j = sentencepiece_like(500, True, 120)
    j["pre_tokenizer"] = None
    tok = from_json(j)
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(content=" ", left=1, right=0)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    added = {"__type": "AddedToken", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False}
    config = {"add_bos_token": True, "add_eos_token": False, "bos_token": dict(added, content="<s>"),
              "eos_token": dict(added, content="</s>"), "unk_token": dict(added, content="<unk>"), "legacy": True,
              "clean_up_tokenization_spaces": False, "model_max_length": 4096, "tokenizer_class": "LlamaTokenizer"}
    return tok, config, []


def metaspace():
    j = sentencepiece_like(300, False, 90)
    j["model"]["fuse_unk"] = False
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True}
    tok = from_json(j)
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    config = {"add_bos_token": False, "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    ms = "pre_tokenizer"
    variants = [{"set": [[ms + ".split", False]]}, {"set": [[ms + ".prepend_scheme", "always"]]},
                {"set": [[ms + ".prepend_scheme", "never"], ["decoder.prepend_scheme", "never"]]},
                {"set": [["model.fuse_unk", True]]}]
    return tok, config, variants


def misc():
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex("[\u2018\u2019]"), "'"),
                                           normalizers.Replace("\t", "  ")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split("|", behavior="removed"),
        pre_tokenizers.Split(Regex(r"\d"), behavior="contiguous"),
        pre_tokenizers.Split("-", behavior="merged_with_previous"),
        pre_tokenizers.Split(":", behavior="merged_with_next"),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    train(tok, 420, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.add_special_tokens([AddedToken("<mask>", special=True, normalized=False, lstrip=True)])
    # "cafe\u0301" (NFD) is matched, and decoded, as its normalized form "café"
    tok.add_tokens([AddedToken("[NL]", special=False, normalized=False, rstrip=True),
                    AddedToken("cafe\u0301", special=False, normalized=True),
                    AddedToken("tab\there", special=False, normalized=True)])
    tok.add_special_tokens([AddedToken("<sep>", special=True, normalized=False, lstrip=True, rstrip=True)])
    p = "pre_tokenizer.pretokenizers"
    variants = [{"set": [[f"{p}[{i}].behavior", b]]} for i, b in
                [(0, "Isolated"), (0, "MergedWithNext"), (1, "Removed"), (1, "MergedWithPrevious"), (2, "Contiguous"),
                 (3, "Isolated"), (2, "MergedWithNext")]]
    variants += [{"set": [[f"{p}[4].add_prefix_space", False]]}, {"set": [[f"{p}[4].use_regex", False]]},
                 {"set": [["decoder", None]]}, {"set": [["normalizer", None]]}]
    return tok, None, variants


VARIANT_CASES = 120

FIXTURES = {"llama3_bpe": llama3, "qwen2_bpe": qwen2, "spm_bpe": spm, "metaspace_bpe": metaspace, "misc_bpe": misc}
# Files whose merges are written as "a b" strings, as tokenizers < 0.20 wrote them (Llama-3's and
# Llama-2's published files); `tokenizers` itself now writes ["a", "b"] pairs (the others).
STRING_MERGES = {"llama3_bpe", "spm_bpe"}


def set_path(j, path, value):
    """ "a.b[2].c" -> j["a"]["b"][2]["c"] = value (the same walk the C++ test does)."""
    keys = []
    for part in path.split("."):
        name, _, rest = part.partition("[")
        keys.append(name)
        if rest:
            keys.append(int(rest.rstrip("]")))
    for k in keys[:-1]:
        j = j[k]
    j[keys[-1]] = value


def file_text(name, tok):
    j = json.loads(tok.to_str())
    if name in STRING_MERGES:
        j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
    return json.dumps(j, ensure_ascii=False, separators=(",", ":")) + "\n"


def expected_for(name, tok, config, variants):
    rng = random.Random(name)
    strings = strings_for(name, rng)
    cases = []
    for s in strings:
        ids = tok.encode(s, add_special_tokens=False).ids
        text = tok.decode(ids, skip_special_tokens=False)
        cases.append([s, ids] + ([] if text == s else [text]))
    tokens = [[s, tok.encode(s, add_special_tokens=False).tokens] for s in strings[:40]]
    n = tok.get_vocab_size(with_added_tokens=True)
    decode = []
    for _ in range(40):  # random ids: partial UTF-8, bytes, specials, out-of-order pieces
        ids = [rng.randrange(n) for _ in range(rng.randint(1, 12))]
        decode.append([ids, tok.decode(ids, skip_special_tokens=False), tok.decode(ids, skip_special_tokens=True)])
    with_special = [[s, tok.encode(s, add_special_tokens=True).ids] for s in ["Hello world", " x", ""]]
    # the pieces the model is given, for strings without added tokens (regex semantics made visible)
    pre = []
    added = [t.content for t in tok.get_added_tokens_decoder().values()]
    if tok.normalizer:
        added += [tok.normalizer.normalize_str(a) for a in added]
    for s in strings[:len(BASE_STRINGS)]:
        if any(a in s for a in added):
            continue
        norm = tok.normalizer.normalize_str(s) if tok.normalizer else s
        pieces = [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(norm)] if tok.pre_tokenizer else [norm] if norm else []
        pre.append([s, pieces])
    out_variants = []
    base = json.loads(file_text(name, tok))
    for v in variants:
        j = json.loads(json.dumps(base))
        for path, value in v["set"]:
            set_path(j, path, value)
        vt = from_json(j)
        # the first VARIANT_CASES cases are checked under the variant; only those whose ids or decoded
        # text change are stored: [case index, ids, decoded text if it differs from the case's]
        differ = []
        for i, (s, ids, *alt) in enumerate(cases[:VARIANT_CASES]):
            vids = vt.encode(s, add_special_tokens=False).ids
            vtext = vt.decode(vids, skip_special_tokens=False)
            if vids != ids or vtext != (alt[0] if alt else s):
                differ.append([i, vids] + ([] if vtext == (alt[0] if alt else s) else [vtext]))
        out_variants.append({"set": v["set"], "cases": min(VARIANT_CASES, len(cases)), "differ": differ})
    return {"tokenizers_version": __version__, "vocab_size": n, "cases": cases, "tokens": tokens, "decode": decode,
            "with_special_tokens": with_special, "pre_tokenize": pre, "variants": out_variants}


def dump(obj, pretty):
    if pretty:
        return json.dumps(obj, ensure_ascii=False, indent=2) + "\n"
    # one case per line: readable diffs, small files
    if isinstance(obj, dict) and "cases" in obj:
        lines = ["{"]
        items = list(obj.items())
        for k, (key, value) in enumerate(items):
            comma = "," if k + 1 < len(items) else ""
            if isinstance(value, list) and value and key != "set":
                lines.append(f"  {json.dumps(key)}: [")
                for i, v in enumerate(value):
                    lines.append("    " + json.dumps(v, ensure_ascii=False, separators=(",", ":")) +
                                 ("," if i + 1 < len(value) else ""))
                lines.append("  ]" + comma)
            else:
                lines.append(f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}{comma}")
        return "\n".join(lines) + "\n}\n"
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n"


def compare(model_dir, opfuse, count):
    """`opfuse tokenize --model DIR` against HF's tokenizer.json on the test strings."""
    import subprocess
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    added = [t.content for t in tok.get_added_tokens_decoder().values()]
    SPECIALS["compare"] = (added or ["<none>"])[:6]
    strings = strings_for("compare", random.Random(0))[:count]
    bad = 0
    for s in strings:
        want = tok.encode(s, add_special_tokens=False).ids
        r = subprocess.run([opfuse, "tokenize", "--model", model_dir, "--no-bos", "--json", "-"], input=s.encode(),
                           capture_output=True)
        got = json.loads(r.stdout)["ids"] if r.returncode == 0 else r.stderr.decode().strip()
        text = subprocess.run([opfuse, "tokenize", "--model", model_dir, "--decode", ",".join(map(str, want))],
                              capture_output=True).stdout.decode()[:-1] if want else ""
        if got != want or text != tok.decode(want, skip_special_tokens=False):
            bad += 1
            print(f"differ: {s!r}: opfuse {got} {text!r}, HF {want} {tok.decode(want)!r}", file=sys.stderr)
    print(f"{model_dir}: {len(strings) - bad}/{len(strings)} strings match HF tokenizers {__version__}", file=sys.stderr)
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the files on disk; write nothing")
    ap.add_argument("--compare", metavar="MODEL_DIR", help="check `opfuse tokenize` on a real model directory instead")
    ap.add_argument("--opfuse", default="build/cpu/opfuse", help="the opfuse binary for --compare")
    ap.add_argument("--strings", type=int, default=150, help="how many test strings --compare runs (default 150)")
    args = ap.parse_args()
    if args.compare:
        return compare(args.compare, args.opfuse, args.strings)
    differ = []
    for name, make in FIXTURES.items():
        tok, config, variants = make()
        text = file_text(name, tok)
        tok = Tokenizer.from_str(text)  # the expectations come from exactly the file written
        files = {"tokenizer.json": text, "expected.json": dump(expected_for(name, tok, config, variants), False)}
        if config is not None:
            files["tokenizer_config.json"] = dump(config, True)
        d = os.path.join(ROOT, name)
        for fname, text in files.items():
            path = os.path.join(d, fname)
            if args.check:
                old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
                if old != text:
                    differ.append(path)
                continue
            os.makedirs(d, exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        size = sum(len(t.encode()) for t in files.values())
        print(f"{name}: {size // 1024} KB", file=sys.stderr)
    if differ:
        print("differ: " + ", ".join(differ), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
