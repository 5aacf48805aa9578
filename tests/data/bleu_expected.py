#!/usr/bin/env python3
"""Prints the expected corpus BLEU statistics that bleu_test.cpp checks tgc against.

Run with the real sacreBLEU (`pip install sacrebleu`; used for development only, never by
the build or the tests):  python3 tests/data/bleu_expected.py
The example sets here must stay identical to kSets and kZhSets in bleu_test.cpp.
"""
import sacrebleu
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a
from sacrebleu.tokenizers.tokenizer_zh import TokenizerZh

SETS = {
    "perfect": (
        ["the cat sat on the mat .", "forty-two million", "Hello, world!"],
        [["the cat sat on the mat .", "forty-two million", "Hello, world!"]],
    ),
    "empty_hypotheses": (
        ["", "one million two hundred thousand five", ""],
        [["one million ten", "one million two hundred thousand five", "twenty"]],
    ),
    "all_empty": (
        ["", ""],
        [["a b c d", "e f"]],
    ),
    "short_hypothesis": (
        ["the cat", "a dog ran in the park today"],
        [["the cat sat on the mat", "a dog ran in the big park today"]],
    ),
    "no_four_gram_match": (
        ["the quick brown dog jumps", "one two three"],
        [["the quick brown fox jumps", "one two four"]],
    ),
    "shorter_than_four": (
        ["hi there", "yes"],
        [["hi there", "no"]],
    ),
    "punctuation_13a": (
        ["It costs $3.50, doesn't it? (Tom's \"gift\") &amp; 1-2 e-mail",
         "Wait...she said:\"no!\" 10,000 x.y",
         "我有３本书，汤姆。 He\u00a0said\u3000hi  "],
        [["It costs $ 3.50 , doesn't it ? (Tom's gift) & 1 - 2 e-mail",
          "Wait... she said: \"no!\" 10,000 x. y",
          "我有3本书,汤姆. He said hi"]],
    ),
    "case_matters": (
        ["Hello World . How are you ?"],
        [["hello world . how are you ?"]],
    ),
    "two_references": (
        ["the cat is on the mat", "there is a cat on the mat"],
        [["the cat is on the mat", "a cat is on the mat"],
         ["there is a cat on the mat", "the mat has a cat on it"]],
    ),
}

# Chinese targets, scored with sacreBLEU's zh tokenizer (tokenize='zh').
ZH_SETS = {
    "zh_sentences": (
        ["我有三本书。", "他昨天去了北京，见了朋友。", "你好"],
        [["我有3本书。", "他昨天去北京见朋友了。", "你好！"]],
    ),
    "zh_mixed_script": (
        ["汤姆(Tom)说：\u201c不行。\u201d 2020年", "这是☃雪人\u2014好玩"],
        [["汤姆（Tom）说：\u201c不行！\u201d 2020 年", "这是雪人——好玩"]],
    ),
}


def show(name, s):
    print(f'{{"{name}", {s.score!r}, {{{", ".join(map(str, s.counts))}}}, '
          f'{{{", ".join(map(str, s.totals))}}}, {s.sys_len}, {s.ref_len}}},')


for name, (hyps, refs) in SETS.items():
    show(name, sacrebleu.corpus_bleu(hyps, refs))
print("zh:")
for name, (hyps, refs) in ZH_SETS.items():
    show(name, sacrebleu.corpus_bleu(hyps, refs, tokenize="zh"))
print("13a:")
tok = Tokenizer13a()
for line in SETS["punctuation_13a"][0] + SETS["punctuation_13a"][1][0] + [
        "", "a<skipped>b &lt;tag&gt; &amp;quot; x-\ny\nz"]:
    print(repr(tok(line.rstrip())))
print("zh tokenizer:")
for line in [ZH_SETS["zh_mixed_script"][0][0], "\u2000a\u2001b\u2a6d\u2a6e c\U00020000d"]:
    print(repr(TokenizerZh()(line.rstrip())))
