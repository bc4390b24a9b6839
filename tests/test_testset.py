"""The shipped contrast test set (leakloss/testset.py, leakloss/data/testset_ne.tsv): its size, its hygiene (no
sentence any shipped model trained on, key words no model saw) and its sites (what the frontend and the site finder
find today)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from leakloss.paths import shared_path
from leakloss.schema import KINDS
from leakloss.speech.corpus import builtin_sentences, read_sentences, split_sentences, split_text_words
from leakloss.testset import KeySite, TestSetError, format_testset, load_testset, parse_testset, select_kind

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = Path(shared_path("data/nepali-prompts/prompts.tsv"))
LEXICON = Path(shared_path("data/nepali-lexicon/lexicon-dev.tsv"))
REAL_MANIFEST = Path(shared_path("data/real-nepali-speech/manifest.jsonl"))
#: Key words per reported group for a 95% Wilson interval of about +-10 points at p = 0.5
MIN_KEY_WORDS_PER_KIND = 96


def key_words_of(items, kind=None):
    return [k for i in items for k in i.key_words if kind is None or any(s.kind == kind for s in k.sites)]


def test_enough_key_words_per_kind_for_a_ten_point_interval():
    from leakloss.eval.stats import wilson_interval

    items = load_testset()
    for kind in KINDS:
        n = len(key_words_of(items, kind))
        assert n >= MIN_KEY_WORDS_PER_KIND, (kind, n)
        interval = wilson_interval(n // 2, n)
        assert interval.high - interval.low <= 0.2, (kind, n, interval)


def test_ids_and_key_words_unique_and_each_key_word_once_in_its_sentence():
    items = load_testset()
    assert len({i.id for i in items}) == len(items)
    words = [k.word for k in key_words_of(items)]
    assert len(set(words)) == len(words)
    for item in items:
        tokens = split_text_words(item.text)
        for k in item.key_words:
            assert tokens.count(k.word) == 1, (item.id, k.word)


def test_sentences_are_no_training_text():
    """Recognizers a, b, w and the vocoder trained on the built-in sentences' train split (their cards' hash);
    the heads on the built-in sentences and key words; the F5 base on phrases of the built-in sentences and the
    shared prompts; recognizer w also on real clips' transcripts. No test sentence is any of them."""
    builtin = builtin_sentences()
    train, _ = split_sentences(builtin, 0.1)
    digest = hashlib.sha256("\n".join(train).encode()).hexdigest()
    cards = sorted((ROOT / "leakloss" / "assets").glob("recognizers/*/card.json")) + [ROOT / "leakloss/assets/vocoder/tiny.json"]
    assert len(cards) >= 4
    for card in cards:
        assert json.loads(card.read_text(encoding="utf-8"))["train_sentences_sha256"] == digest, card
    training = set(builtin)
    if PROMPTS.is_file():
        training |= set(read_sentences(PROMPTS))
    if REAL_MANIFEST.is_file():
        training |= {json.loads(line)["text"] for line in REAL_MANIFEST.read_text(encoding="utf-8").splitlines() if line.strip()}
    normal = {" ".join(split_text_words(s)) for s in training}
    for item in load_testset():
        assert item.text not in training and " ".join(split_text_words(item.text)) not in normal, item.id


def test_key_words_are_words_no_model_trained_on():
    """Each key word: an F5 held-out test word (so in no F5 phrase), in no sentence or key-word list the heads and
    recognizers trained on, no curated exception of the frontend, and (when the shared lexicon is here) either
    absent from it or in the held-out split the retention model never saw."""
    from leakloss.text.g2p import BUILTIN_EXCEPTIONS, load_lexicon
    from leakloss.text.train_retention import split_of
    from train_f5.data import default_sentences, is_test_word, phrases

    seen = {w for s in builtin_sentences() for w in split_text_words(s)}
    key_file = ROOT / "leakloss" / "data" / "key_words_ne.tsv"
    seen |= {line.split("\t")[1] for line in key_file.read_text(encoding="utf-8").splitlines() if "\t" in line}
    exceptions = set(load_lexicon(BUILTIN_EXCEPTIONS))
    f5_words = {w for p in phrases(default_sentences()) for w in p.split()}
    lexicon = None
    if LEXICON.is_file():
        from leakloss.text.g2p import iter_lexicon

        lexicon = {w for _, w, _ in iter_lexicon(LEXICON, strict=False)}
    for k in key_words_of(load_testset()):
        assert is_test_word(k.word) and k.word not in f5_words, k.word
        assert k.word not in seen and k.word not in exceptions, k.word
        if lexicon is not None:
            assert k.word not in lexicon or split_of(k.word) == "test", k.word


@pytest.mark.slow
def test_key_words_are_high_and_carry_the_listed_sites():
    from leakloss.text.sites import SiteFinder

    finder = SiteFinder()
    for item in load_testset():
        words = {w.word: w for w in finder(item.text)}
        for k in item.key_words:
            w = words[k.word]
            assert w.confidence == "high", (item.id, k.word, w.confidence)
            found = tuple(KeySite(s.kind, s.contrast, s.position) for s in w.testable_sites)
            assert found == k.sites, (item.id, k.word, found, k.sites)


def test_select_kind_keeps_only_that_kind():
    items = load_testset()
    for kind in KINDS:
        chosen = load_testset(kind)
        assert chosen and all(s.kind == kind for i in chosen for k in i.key_words for s in k.sites)
        assert len(key_words_of(chosen)) == len(key_words_of(items, kind))
    assert select_kind(items, None) == items


def test_bad_kind_is_a_typed_error():
    with pytest.raises(TestSetError, match="deletion, quality"):
        load_testset("vowel")


def test_format_and_parse_round_trip():
    items = load_testset()
    assert parse_testset(format_testset(items)) == items


@pytest.mark.parametrize("line, match", [
    ("x\tआज घर\tघर", "4 tab-separated columns"),
    ('x\tआज घर\tघर\t{"घर": [["deletion", "ʌ->∅", 2]', "not JSON"),
    ('x\tआज घर\tघर\t{"आज": [["deletion", "ʌ->∅", 2]]}', "one entry per key word"),
    ('x\tआज घर\tबजार\t{"बजार": [["deletion", "ʌ->∅", 2]]}', "not a word of the text"),
    ('x\tआज घरमा\tघर\t{"घर": [["deletion", "ʌ->∅", 2]]}', "not a word of the text"),  # a substring passed
    ('x\tआज घर\tघर\t{"घर": [["deletion", "ʌ->∅", true]]}', "kind, contrast, position"),  # true was phone 1
    ('x\tआज घर\tघर\t{"घर": [["deletion", "ʌ->∅", -1]]}', "kind, contrast, position"),
    ('x\tआज घर\tघर\t{"घर": [["vowel", "ʌ->∅", 2]]}', "kind, contrast, position"),
    ('x\tआज घर\tघर\t{"घर": []}', "kind, contrast, position"),
])
def test_malformed_lines_are_named(line, match):
    with pytest.raises(TestSetError, match=match) as err:
        parse_testset("#header\n" + line + "\n", "mine.tsv")
    assert "mine.tsv:2" in str(err.value)


def test_repeated_id_is_an_error():
    line = 'x\tआज घर\tघर\t{"घर": [["deletion", "ʌ->∅", 2]]}'
    with pytest.raises(TestSetError, match="already on line 1"):
        parse_testset(line + "\n" + line + "\n")


def test_a_key_word_is_matched_as_the_scorer_writes_words_and_a_bom_is_no_content():
    # a ZWJ spelling passed read_testset and then failed here as "not in the text"; a BOM made line 1 "not JSON"
    line = 'x\tआज घ\u200dर।\tघ\u200dर\t{"घ\u200dर": [["deletion", "ʌ->∅", 2]]}'
    (item,) = parse_testset("\ufeff" + line + "\n", "mine.tsv")
    assert item.id == "x" and item.key_words[0].sites[0].position == 2
