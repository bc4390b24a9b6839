import json
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leakloss.text.frontend import NepaliFrontend
from leakloss.text.g2p import SUFFIXES, inherent_vowel_pattern, iter_lexicon
from leakloss.text.morphology import Morphology
from leakloss.text.retention import (
    CATEGORICAL, CONTEXT_NAMES, CONTEXTS, FEATURE_NAMES, FEATURE_SCHEMA, FORMAT, SHIPPED_MODEL, UNSEEN_RATE,
    VERB_FORMS, VERB_ROOT_ENDINGS, VOCABULARY_NAMES, ContextMemory, RetentionModel, RetentionModelError,
    WordVocabulary, context_keys, load_retention_model, plan_phones, plan_word, slot_features,
    slot_by_slot, spelling_pieces, word_probability,
)
from leakloss.text.slots import _suffix_pattern

SHARED_LEXICON = Path(__file__).resolve().parents[3] / "shared" / "data" / "nepali-lexicon" / "lexicon-dev.tsv"
WORDS = ["नेकपा", "बजारको", "घरहरूमा", "रामप्रसाद", "गर्छ", "कमल", "सडकमा", "हुनसक्छ", "उपचार", "सुन्दरता",
         "अक्षरहरू", "अगाडिसम्म", "दुःख", "काठमाडौँमा", "पानीवाला", "सम्पादकहरूलाई"]
_EMPTY_MEMORY = ContextMemory({name: {} for name in CONTEXT_NAMES})
_EMPTY_VOCABULARY = WordVocabulary((), {}, {})
_EMPTY_MORPHOLOGY = Morphology({})


@pytest.fixture(scope="module")
def rules():
    return NepaliFrontend(use_builtin_exceptions=False, retention=None)


@pytest.fixture(scope="module")
def model_fe():
    return NepaliFrontend(use_builtin_exceptions=False)


def test_every_suffix_has_an_alignable_pattern():
    for suf, phones in SUFFIXES.items():
        assert _suffix_pattern(suf) == inherent_vowel_pattern(suf, phones), suf


@pytest.mark.parametrize("word", WORDS)
def test_plan_with_the_rules_decisions_gives_the_rules_phones(rules, word):
    plan = plan_word(word)
    assert plan_phones(plan, plan.rule_kept) == rules.pronounce(word).phones
    x = slot_features(plan, _EMPTY_MEMORY, _EMPTY_VOCABULARY, _EMPTY_MORPHOLOGY)
    assert x.shape == (len(plan.slots), len(FEATURE_NAMES)) and np.isfinite(x).all()
    assert all((x[:, i] >= 0).all() and (x[:, i] == np.round(x[:, i])).all() for i, c in enumerate(CATEGORICAL) if c)
    memory_columns = x[:, -2 * len(CONTEXTS):]
    assert (memory_columns[:, 0::2] == UNSEEN_RATE).all() and (memory_columns[:, 1::2] == 0).all()


def test_context_keys_mark_the_slot_and_anchor_the_word_edges():
    plan = plan_word("कमल")  # units क म ल, every one a slot
    keys = dict(zip(CONTEXT_NAMES, context_keys(plan)[1]))  # the slot म
    assert keys["window11"] == "क*ल" and keys["window22"] == "^|क*ल|$" and keys["window10"] == "क*"
    assert keys["prefix00"] == "^|क*" and keys["prefix01"] == "^|क*ल" and keys["suffix00"] == "*ल|$"
    assert keys["suffix20"] == "^|क*ल|$"
    # written vowels, nasal signs and visarga are part of a unit's spelling; the inherent vowel is not
    k = dict(zip(CONTEXT_NAMES, context_keys(plan_word("सिंहदरबार"))[0]))
    assert k["window11"] == "सिं*द"


def _naive_memory_rate(labelled, name, key, min_count, w):
    j = CONTEXT_NAMES.index(name)
    hits = [kept for plan, ref in labelled for keys, kept in zip(context_keys(plan), ref) if keys[j] == key]
    if len(hits) < min_count:
        return UNSEEN_RATE, 0
    return (sum(hits) + w / 2) / (len(hits) + w), len(hits)


@settings(max_examples=25, deadline=None)
@given(picks=st.lists(st.sampled_from(WORDS), min_size=1, max_size=8), bits=st.randoms(use_true_random=False),
       min_count=st.integers(1, 3))
def test_memory_counts_match_a_naive_count(picks, bits, min_count):
    labelled = []
    for w in picks:
        plan = plan_word(w)
        labelled.append((plan, tuple(bits.random() < 0.5 for _ in plan.slots)))
    memory = ContextMemory.count(labelled, min_count=min_count, prior_weight=1.0)
    probe = plan_word(picks[0])
    got = memory.features(probe)
    assert got.shape == (len(probe.slots), 2 * len(CONTEXTS))
    for s, keys in enumerate(context_keys(probe)):
        for j, name in enumerate(CONTEXT_NAMES):
            rate, n = _naive_memory_rate(labelled, name, keys[j], min_count, 1.0)
            assert got[s, 2 * j] == pytest.approx(rate) and got[s, 2 * j + 1] == n
    # the JSON form reads back to the same features
    again = ContextMemory.from_json(json.loads(json.dumps(memory.to_json(), ensure_ascii=False)))
    np.testing.assert_array_equal(again.features(probe), got)


def _naive_vocabulary_features(words, word, exclude_self):
    """The vocabulary features from plain spellings (no hashing, no counting tables)."""
    spell = ["".join(spelling_pieces(plan_word(w))) for w in words]
    plan = plan_word(word)
    pieces = spelling_pieces(plan)
    whole = "".join(pieces)
    vocab = set(spell) - ({whole} if exclude_self else set())

    def forms(root):
        return sum(root + e in vocab for e in VERB_FORMS) if root else 0

    root_forms, ending = 0, 0
    for e in VERB_ROOT_ENDINGS:
        if whole.endswith(e) and len(whole) > len(e) + 1 and forms(whole[: -len(e)]) > root_forms:
            root_forms, ending = forms(whole[: -len(e)]), len(e)
    rows = []
    for k in plan.slots:
        left, right = "".join(pieces[: k + 1]), "".join(pieces[k + 1:])
        rows.append([
            left in vocab, (right in vocab) if right else -1,
            np.log1p(sum(v.startswith(left) for v in vocab)), np.log1p(sum(v.endswith(right) for v in vocab)) if right else -1,
            "".join(pieces[:k]) in vocab, "".join(pieces[k:]) in vocab, forms(left), forms(whole), root_forms, ending,
        ])
    return np.asarray(rows, dtype=np.float64).reshape(len(plan.slots), len(VOCABULARY_NAMES))


VOCABULARY_WORDS = WORDS + ["जन", "पद", "जनपद", "बोल्नु", "बोल्यो", "बोल्छ", "बोलेको", "बोलिन", "बेसिन", "घर", "कमलमा"]


@settings(max_examples=40, deadline=None)
@given(words=st.lists(st.sampled_from(VOCABULARY_WORDS), min_size=0, max_size=12),
       probe=st.sampled_from(VOCABULARY_WORDS), exclude_self=st.booleans())
def test_vocabulary_features_match_plain_spellings(words, probe, exclude_self):
    if exclude_self:
        words = words + [probe]  # leave-one-out is asked of a training word, which the vocabulary holds
    vocabulary = WordVocabulary.count(words)
    got = vocabulary.features(plan_word(probe), exclude_self=exclude_self)
    np.testing.assert_allclose(got, _naive_vocabulary_features(words, probe, exclude_self))
    # leave-one-out is the vocabulary without the word
    if exclude_self:
        without = WordVocabulary.count([w for w in words if w != probe])
        np.testing.assert_allclose(got, without.features(plan_word(probe)))
    again = WordVocabulary.from_json(json.loads(json.dumps(vocabulary.to_json())))
    np.testing.assert_array_equal(again.features(plan_word(probe), exclude_self), got)


def test_vocabulary_sees_compound_members_and_verb_roots():
    vocabulary = WordVocabulary.count(["जन", "पद", "बोल्नु", "बोल्यो", "बोल्छ"])
    names = list(VOCABULARY_NAMES)
    jan = vocabulary.features(plan_word("जनपद"))[1]  # the slot न: जन + पद
    assert jan[names.index("vocab_left_is_word")] == 1 and jan[names.index("vocab_right_is_word")] == 1
    bolina = vocabulary.features(plan_word("बोलिन"))[-1]  # बोल takes 3 verb endings; बेस in बेसिन none
    assert bolina[names.index("vocab_root_verb_forms")] == 3 and bolina[names.index("vocab_root_ending_length")] == 2
    assert vocabulary.features(plan_word("बेसिन"))[-1][names.index("vocab_root_verb_forms")] == 0
    # no spelling is stored, only hashes
    assert "जन" not in json.dumps(vocabulary.to_json(), ensure_ascii=False)


def test_memory_of_other_contexts_is_a_typed_error():
    spec = _EMPTY_MEMORY.to_json()
    with pytest.raises(RetentionModelError, match="memory contexts"):
        ContextMemory.from_json({**spec, "contexts": spec["contexts"][:-1]})
    with pytest.raises(RetentionModelError, match="memory contexts"):
        ContextMemory({"window11": {}})


def _random_spec(rng: random.Random, n_trees: int = 4, depth: int = 3, n_cat_values: int = 12) -> dict:
    """Random complete binary trees over random features (categorical features get category splits)."""
    trees, cat_left, deepest = [], [], [0]  # max_depth is the deepest leaf's (all-leaf trees: 1, as validated)
    for _ in range(n_trees):
        t = {"feature": [], "threshold": [], "left": [], "right": [], "value": [], "cat": []}

        def grow(d: int) -> int:
            i = len(t["feature"])
            for k in t:
                t[k].append(None)
            if d == depth or rng.random() < 0.2:
                deepest[0] = max(deepest[0], d)
                t["feature"][i], t["threshold"][i], t["left"][i], t["right"][i] = 0, 0.0, -1, -1
                t["value"][i], t["cat"][i] = rng.uniform(-1, 1), -1
                return i
            f = rng.randrange(len(FEATURE_NAMES))
            t["feature"][i], t["value"][i] = f, 0.0
            if CATEGORICAL[f]:
                t["threshold"][i], t["cat"][i] = 0.0, len(cat_left)
                cat_left.append(sorted(rng.sample(range(n_cat_values), rng.randrange(1, n_cat_values))))
            else:
                t["threshold"][i], t["cat"][i] = rng.choice([-0.5, 0.5, 1.5, 3.5]), -1
            t["left"][i] = grow(d + 1)
            t["right"][i] = grow(d + 1)
            return i

        grow(0)
        trees.append(t)
    return {"format": FORMAT, "feature_schema": FEATURE_SCHEMA, "feature_names": list(FEATURE_NAMES),
            "baseline": rng.uniform(-1, 1), "max_depth": max(1, deepest[0]), "n_cat_values": n_cat_values,
            "cat_left": cat_left, "trees": trees, "thresholds": {"high": 0.9, "medium": 0.5},
            "memory": _EMPTY_MEMORY.to_json(), "vocabulary": _EMPTY_VOCABULARY.to_json(),
            "morphology": _EMPTY_MORPHOLOGY.to_json()}


def _naive_raw(spec: dict, row: list[float]) -> float:
    total = spec["baseline"]
    for t in spec["trees"]:
        i = 0
        while t["left"][i] >= 0:
            v = row[t["feature"][i]]
            if t["cat"][i] >= 0:
                go_left = int(v) in spec["cat_left"][t["cat"][i]]
            else:
                go_left = v <= t["threshold"][i]
            i = t["left"][i] if go_left else t["right"][i]
        total += t["value"][i]
    return total


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), rows=st.integers(1, 6))
def test_numpy_trees_match_a_naive_walk(seed, rows):
    rng = random.Random(seed)
    spec = _random_spec(rng)
    model = RetentionModel(spec)
    x = [[float(rng.randrange(12)) if c else float(rng.randrange(-1, 5)) for c in CATEGORICAL] for _ in range(rows)]
    got = model.raw(np.asarray(x))
    want = [_naive_raw(spec, r) for r in x]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    p = model.predict_proba(np.asarray(x))
    assert ((p > 0) & (p < 1)).all()


def test_malformed_or_foreign_models_are_typed_errors(tmp_path):
    spec = _random_spec(random.Random(0))
    with pytest.raises(RetentionModelError, match="feature schema"):
        RetentionModel({**spec, "feature_schema": FEATURE_SCHEMA + 1})
    with pytest.raises(RetentionModelError, match="format"):
        RetentionModel({**spec, "format": "pickle"})
    with pytest.raises(RetentionModelError, match="malformed"):
        RetentionModel({k: v for k, v in spec.items() if k != "trees"})
    with pytest.raises(RetentionModelError, match="malformed"):
        RetentionModel({k: v for k, v in spec.items() if k != "memory"})
    with pytest.raises(RetentionModelError, match="malformed"):
        RetentionModel({k: v for k, v in spec.items() if k != "vocabulary"})
    with pytest.raises(RetentionModelError, match="malformed"):
        RetentionModel({k: v for k, v in spec.items() if k != "morphology"})
    morphology = Morphology({1: 2, 3: 4}).to_json()
    with pytest.raises(RetentionModelError, match="hashed with"):
        RetentionModel({**spec, "morphology": {**morphology, "hash": "md5"}})
    with pytest.raises(RetentionModelError, match="2 hashes and 1 bit fields"):
        RetentionModel({**spec, "morphology": {**morphology, "bits": "AAAAAQ=="}})
    vocabulary = WordVocabulary.count(["जन", "पद"]).to_json()
    with pytest.raises(RetentionModelError, match="hashed with"):
        RetentionModel({**spec, "vocabulary": {**vocabulary, "hash": "md5"}})
    with pytest.raises(RetentionModelError, match="not base64"):
        RetentionModel({**spec, "vocabulary": {**vocabulary, "words": "not base64!"}})
    with pytest.raises(RetentionModelError, match="not base64"):  # 7 bytes: not a whole uint64
        RetentionModel({**spec, "vocabulary": {**vocabulary, "words": "AAAAAAAAAA=="}})
    with pytest.raises(RetentionModelError, match="hashes and 1 counts"):
        starts = vocabulary["starts"]
        RetentionModel({**spec, "vocabulary": {**vocabulary, "starts": {**starts, "counts": "AAAAAQ=="}}})
    bad = tmp_path / "m.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(RetentionModelError, match="cannot read"):
        load_retention_model(bad)
    with pytest.raises(RetentionModelError, match="cannot read"):
        NepaliFrontend(retention=tmp_path / "missing.json")


def test_word_probability():
    assert word_probability(np.array([0.9, 0.2])) == pytest.approx(0.9 * 0.8)
    assert word_probability(np.zeros(0)) == 1.0


def test_shipped_model_is_json_with_a_card():
    spec = json.loads(SHIPPED_MODEL.read_text(encoding="utf-8"))  # JSON, not a pickle
    # 11.5 MB of it the dictionary's 721k word-form hashes, 6.4 MB the phonotactic n-grams' hashes
    assert SHIPPED_MODEL.stat().st_size < 27_000_000
    assert set(spec["phonotactics"]["ngrams"]) == {"phones", "letters"}  # decisions rescored word by word
    # contexts, not words: every key leaves the slot's own letter out (one bare *, see context_keys), and
    # each is shared by at least min_count training vowels
    memory = spec["memory"]
    assert memory["min_count"] >= 2
    for table in memory["tables"].values():
        assert all(k.count("*") == 1 for k in table)
        assert all(n >= memory["min_count"] for n, _ in table.values())
    # the vocabulary holds hashes and counts, never a spelling
    assert set(spec["vocabulary"]) == {"hash", "words", "starts", "ends"}
    assert not any("\u0900" <= ch <= "\u097f" for ch in json.dumps(spec["vocabulary"], ensure_ascii=False))
    assert set(spec["morphology"]) == {"hash", "source", "forms", "bits"}
    assert not any("\u0900" <= ch <= "\u097f" for ch in json.dumps(spec["morphology"], ensure_ascii=False))
    model = load_retention_model()
    assert len(model.vocabulary) > 20_000
    assert 0 < model.thresholds["medium"] <= model.thresholds["high"] <= 1
    card = json.loads((SHIPPED_MODEL.parent / "retention.card.json").read_text(encoding="utf-8"))
    assert "LGPL-2.1" in card["morphology_data"]["license"] and "hunspell-ne" in card["morphology_data"]["source"]
    assert "CC BY 4.0" in card["training_data"]["license"] and "google/language-resources" in card["training_data"]["source"]
    assert card["calibration"]["high"]["threshold"] == spec["thresholds"]["high"]
    assert card["held_out_test"]["high_agreement"] >= 0.995


def test_model_decides_and_reports_each_vowel(model_fe):
    p = model_fe.pronounce("सडकमा")
    assert p.source == "model" and p.probability is not None and 0 < p.probability <= 1
    assert [v.step for v in p.vowels] == ["model"] * len(plan_word("सडकमा").slots)
    assert all(0 <= v.p_keep <= 1 and v.kept == (v.p_keep >= 0.5) for v in p.vowels)
    assert p.confidence == load_retention_model().confidence(p.probability)


def test_user_lexicon_wins_over_the_model(tmp_path):
    lex = tmp_path / "lex.tsv"
    lex.write_text("सडकमा\ts ʌ ɖ k m aː\n", encoding="utf-8")
    p = NepaliFrontend(lex, use_builtin_exceptions=False).pronounce("सडकमा")
    assert (p.phones, p.source, p.confidence) == (("s", "ʌ", "ɖ", "k", "m", "aː"), "lexicon", "high")
    assert [(v.letter, v.kept, v.step) for v in p.vowels] == [("स", True, "lexicon"), ("ड", False, "lexicon"),
                                                              ("क", False, "lexicon")]


def test_rules_fallback_reports_rule_steps(rules):
    p = rules.pronounce("सडकमा")
    assert p.source == "suffix" and p.probability is None and {v.step for v in p.vowels} == {"rule"}


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_LEXICON.exists(), reason="shared lexicon not present")
def test_model_beats_the_rules_on_held_out_words(model_fe, rules):
    from leakloss.text.train_retention import split_of

    held = [(w, p) for _, w, p in iter_lexicon(SHARED_LEXICON, strict=False) if p and split_of(w) == "test"]
    sample = random.Random(0).sample(held, 1500)
    ok = {"model": 0, "rules": 0}
    high = high_ok = 0
    for w, phones in sample:
        ref = inherent_vowel_pattern(w, phones)
        pm = model_fe.pronounce(w)
        good = ref is not None and inherent_vowel_pattern(w, pm.phones) == ref
        ok["model"] += good
        ok["rules"] += ref is not None and inherent_vowel_pattern(w, rules.pronounce(w).phones) == ref
        high += pm.confidence == "high"
        high_ok += good and pm.confidence == "high"
    assert ok["model"] / len(sample) >= 0.95 and ok["model"] > ok["rules"] + 30
    assert high_ok / high >= 0.99


def _mutated(mutate):
    import copy

    spec = copy.deepcopy(json.loads(SHIPPED_MODEL.read_text(encoding="utf-8")))
    spec.pop("net", None)  # the trees' tables alone (tests/text/test_retention_net.py checks the network's)
    mutate(spec)
    return spec


def _first_inner(spec):
    tree = spec["trees"][0]
    return tree, next(i for i, left in enumerate(tree["left"]) if left >= 0)


@pytest.mark.parametrize("name, mutate", [
    ("feature index", lambda s: (lambda t, i: t["feature"].__setitem__(i, 10**6))(*_first_inner(s))),
    ("feature index", lambda s: (lambda t, i: t["feature"].__setitem__(i, -500))(*_first_inner(s))),
    ("left child", lambda s: (lambda t, i: t["left"].__setitem__(i, 10**6))(*_first_inner(s))),
    ("thresholds must name", lambda s: s.__setitem__("thresholds", {"medium": 0.5})),
    ("malformed", lambda s: s.__setitem__("thresholds", [1, 2])),  # was an AttributeError
    ("max_depth", lambda s: s.__setitem__("max_depth", 10**5)),  # one word took 11 s
])
def test_a_malformed_tree_table_is_refused_at_load_not_at_the_first_word(name, mutate):
    """These loaded, then failed as IndexError / KeyError when a word was pronounced."""
    with pytest.raises(RetentionModelError, match=name):
        RetentionModel(_mutated(mutate), "m.json")


def test_slot_by_slot_keeps_forced_and_likely_vowels_and_multiplies_the_free_ones():
    d = slot_by_slot(np.array([0.2, 0.7, 0.5, 0.1]), [False, False, False, True])
    assert d.kept == (False, True, True, True)  # 0.5 keeps, as p >= 0.5 does; the forced slot is kept
    np.testing.assert_allclose(d.p_keep, [0.2, 0.7, 0.5, 1.0])
    assert d.probability == pytest.approx(0.8 * 0.7 * 0.5)  # the forced slot is not a decision
    assert slot_by_slot(np.zeros(0), []).probability == word_probability(np.zeros(0))
