#!/usr/bin/env python3
"""Prints the expected corpus BLEU statistics that bleu_test.cpp checks tgc against.

Run with the real sacreBLEU (`pip install sacrebleu`; used for development only, never by
the build or the tests):  python3 tests/data/bleu_expected.py
The example sets here must stay identical to kSets in bleu_test.cpp.
"""
import sacrebleu
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

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

for name, (hyps, refs) in SETS.items():
    s = sacrebleu.corpus_bleu(hyps, refs)
    print(f'{{"{name}", {s.score!r}, {{{", ".join(map(str, s.counts))}}}, '
          f'{{{", ".join(map(str, s.totals))}}}, {s.sys_len}, {s.ref_len}}},')
print("13a:")
tok = Tokenizer13a()
for line in SETS["punctuation_13a"][0] + SETS["punctuation_13a"][1][0] + [
        "", "a<skipped>b &lt;tag&gt; &amp;quot; x-\ny\nz"]:
    print(repr(tok(line.rstrip())))
