import itertools
import json
import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leakloss.text.phonotactics import (
    BEAM, BOS, EOS, EXHAUSTIVE_SLOTS, Candidates, NgramModel, Phonotactics, candidates, pattern_tokens, rescore,
)
from leakloss.text.retention import RetentionModelError, forced_slots, plan_phones, plan_word, word_probability

PHONES = ["k", "ʌ", "m", "l", "aː", "r"]
words = st.lists(st.lists(st.sampled_from(PHONES), min_size=0, max_size=7), min_size=1, max_size=12)


def naive_prob(seqs, order, d, history, x):
    """The docstring's formula with plain tuples: no hashing, no tables."""
    grams, hist, follow, before = Counter(), Counter(), {}, {}
    for q in seqs:
        t = [BOS] * (order - 1) + list(q) + [EOS]
        for i in range(order - 1, len(t)):
            before.setdefault(t[i], set()).add(t[i - 1])
            for k in range(2, order + 1):
                h = tuple(t[i - k + 1:i])
                grams[h + (t[i],)] += 1
                hist[h] += 1
                follow.setdefault(h, set()).add(t[i])
    cont = {y: len(b) for y, b in before.items()}
    p = (cont.get(x, 0) + 0.5) / (sum(cont.values()) + 0.5 * len(cont))
    h = ((BOS,) * order + tuple(history))[-(order - 1):] if order > 1 else ()
    for k in range(2, order + 1):
        hk = h[len(h) - (k - 1):]
        if hist[hk]:
            p = max(grams[hk + (x,)] - d, 0) / hist[hk] + d * len(follow[hk]) / hist[hk] * p
    return p


@settings(max_examples=40, deadline=None)
@given(words, st.integers(1, 5), st.lists(st.sampled_from(PHONES), max_size=6))
def test_probabilities_equal_a_plain_reference_and_sum_to_one(seqs, order, history):
    lm = NgramModel.count(seqs, order, 0.75)
    seen = sorted({p for q in seqs for p in q} | {EOS})
    probs = [lm.prob(history, x) for x in seen]
    assert probs == pytest.approx([naive_prob(seqs, order, 0.75, history, x) for x in seen], rel=1e-12)
    assert sum(probs) == pytest.approx(1.0, abs=1e-12)
    assert 0 < lm.prob(history, "never-seen") < 1
    q = seqs[0]
    assert lm.log_prob(q) == pytest.approx(sum(math.log(naive_prob(seqs, order, 0.75, q[:i], x))
                                               for i, x in enumerate(list(q) + [EOS])), rel=1e-12)


def test_a_longer_history_tells_more():
    seqs = [["k", "ʌ", "m", "ʌ", "l"]] * 5 + [["k", "m", "l"]]
    lm3, lm1 = NgramModel.count(seqs, 3), NgramModel.count(seqs, 1)
    assert lm3.log_prob(["k", "ʌ", "m", "ʌ", "l"]) > lm1.log_prob(["k", "ʌ", "m", "ʌ", "l"])
    assert lm3.log_prob(["k", "ʌ", "m", "ʌ", "l"]) > lm3.log_prob(["l", "ʌ", "m", "ʌ", "k"])


def test_json_round_trip_and_malformed_tables_are_typed_errors():
    lm = NgramModel.count([["k", "ʌ", "m", "ʌ", "l"], ["k", "m", "l"], ["r", "aː"]], 4)
    spec = json.loads(json.dumps(lm.to_json()))
    assert "k ʌ" not in json.dumps(spec, ensure_ascii=False)  # hashes, not phone strings
    back = NgramModel.from_json(spec)
    for q in (["k", "ʌ", "m"], ["r", "aː", "l"], []):
        assert back.log_prob(q) == lm.log_prob(q)
    assert len(back) == len(lm) and back.order == 4
    bad = [dict(spec, hash="md5"), dict(spec, ngrams=spec["ngrams"][:-4] + "====", ngram_counts="not base64!"),
           dict(spec, ngram_counts=spec["ngram_counts"][:8]), {k: v for k, v in spec.items() if k != "histories"},
           dict(spec, order=0), dict(spec, order=True), dict(spec, order=2.5), dict(spec, discount=1.5),
           dict(spec, continuation=[1, 2]), dict(spec, continuation={}), dict(spec, continuation={"k": float("inf")}),
           dict(spec, continuation={"k": 1.7}), dict(spec, continuation={"k": -1})]
    keys = np.frombuffer(__import__("base64").b64decode(spec["ngrams"]), dtype=">u8")
    from leakloss.text.tables import _pack

    bad.append(dict(spec, ngrams=_pack(keys[::-1].astype(np.uint64), ">u8")))  # not sorted
    zero = np.zeros(len(keys), dtype=np.uint64)
    bad.append(dict(spec, ngram_counts=_pack(zero, ">u4")))
    for b in bad:
        with pytest.raises(RetentionModelError):
            NgramModel.from_json(b, "t.json")


def test_candidates_enumerate_every_pattern_of_the_free_slots():
    plan = plan_word("कमलनयन")  # six inherent vowels
    p = np.array([0.9, 0.2, 0.6, 0.5, 0.1, 0.3])
    forced = [False, True, False, False, False, False]
    c = candidates(plan, p, None, forced)
    assert c.kept.shape == (32, 6) and c.kept[:, 1].all()  # the forced slot is kept in every pattern
    assert len({tuple(r) for r in c.kept}) == 32
    for row, lp, n in zip(c.kept, c.slot_logp, c.n_kept):
        free = [i for i in range(6) if not forced[i]]
        assert lp == pytest.approx(sum(math.log(p[i] if row[i] else 1 - p[i]) for i in free))
        assert n == sum(row[i] for i in free)
    assert c.ngram_logp.shape == (32, 0)
    ph, le = NgramModel.count([plan_phones(plan, [True] * 6)]), NgramModel.count([pattern_tokens(plan, [True] * 6, "letters")], 3)
    c2 = candidates(plan, p, {"phones": ph, "letters": le}, forced)
    assert c2.ngram_logp[:, 0] == pytest.approx([ph.log_prob(plan_phones(plan, r)) for r in c2.kept])
    assert c2.ngram_logp[:, 1] == pytest.approx([le.log_prob(pattern_tokens(plan, r, "letters")) for r in c2.kept])


def test_a_word_with_many_slots_keeps_a_beam_that_holds_the_likeliest_patterns():
    plan = plan_word("कमलनयनसरसवत")
    n = len(plan.slots)
    assert n > EXHAUSTIVE_SLOTS
    rng = np.random.default_rng(0)
    p = rng.uniform(0.05, 0.95, n)
    c = candidates(plan, p, None)
    assert c.kept.shape == (BEAM, n)
    every = sorted((sum(math.log(p[i] if r[i] else 1 - p[i]) for i in range(n)) for r in
                    itertools.product((True, False), repeat=n)), reverse=True)
    assert sorted(c.slot_logp, reverse=True) == pytest.approx(every[:BEAM])
    # without n-grams the slots are independent: the exact values, not a softmax over the beam alone
    r = rescore(c, [], 0.0)
    assert r.kept == tuple(bool(v >= 0.5) for v in p) and r.probability == pytest.approx(word_probability(p), rel=1e-9)
    np.testing.assert_allclose(r.p_keep, p)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=3, max_size=3))
def test_without_the_ngram_rescoring_is_the_slot_by_slot_decision(p):
    plan = plan_word("कमलमा")
    assert len(plan.slots) == 3
    p = np.asarray(p)
    r = rescore(candidates(plan, p, None), [], 0.0)
    assert r.kept == tuple(bool(v >= 0.5) for v in p)  # a tie (p = 0.5) keeps, as p >= 0.5 does
    q = np.clip(p, 1e-12, 1 - 1e-12)
    assert r.probability == pytest.approx(word_probability(q), rel=1e-9)
    np.testing.assert_allclose(r.p_keep, q, rtol=1e-9, atol=1e-12)


def test_the_ngram_can_overrule_a_slot_and_the_marginals_are_the_posterior():
    plan = plan_word("कमल")
    p = np.array([0.9, 0.45, 0.1])  # alone: kamal is "k ʌ m l"
    assert rescore(candidates(plan, p, None), [], 0.0).kept == (True, False, False)
    lm = NgramModel.count([plan_phones(plan, [True, True, False])] * 20 + [plan_phones(plan_word("घर"), [True, False])])
    c = candidates(plan, p, {"phones": lm})
    r = rescore(c, [1.0], 0.0)
    assert r.kept == (True, True, False)
    same = Phonotactics({"phones": lm}, {"phones": 1.0}, 0.0).decide(plan, p)
    assert same.kept == r.kept and same.probability == r.probability
    s = c.slot_logp + c.ngram_logp[:, 0]
    post = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
    assert r.probability == pytest.approx(post.max())
    np.testing.assert_allclose(r.p_keep, post @ c.kept, rtol=1e-12)
    # a keep bonus that large makes every free slot kept
    assert rescore(candidates(plan, np.array([0.1, 0.1, 0.1]), None), [], 10.0).kept == (True, True, True)


def test_forced_slots_are_the_independent_vowel_and_the_nasal_sign():
    assert forced_slots(plan_word("अमर")) == [True, False, False]
    assert forced_slots(plan_word("संसार"))[0] is True
    assert not any(forced_slots(plan_word("कमल")))


def test_candidates_refuse_a_probability_per_slot_mismatch():
    with pytest.raises(ValueError, match="slots"):
        candidates(plan_word("कमल"), np.array([0.5]), None)
    assert isinstance(candidates(plan_word("का"), np.zeros(0), None), Candidates)
    assert rescore(candidates(plan_word("का"), np.zeros(0), None), [], 0.0).probability == 1.0


def test_letters_mark_each_inherent_vowel_and_the_suffix():
    plan = plan_word("कमलमा")
    assert pattern_tokens(plan, [True, True, False], "letters") == ["क+", "म+", "ल-", "#मा"]
    assert pattern_tokens(plan, [True, True, False], "phones") == list(plan_phones(plan, [True, True, False]))
    with pytest.raises(ValueError, match="kind"):
        pattern_tokens(plan, [True, True, False], "syllables")
    with pytest.raises(ValueError, match="decisions"):
        pattern_tokens(plan, [True], "letters")


def test_phonotactics_json_round_trip_and_refusals():
    plan = plan_word("कमल")
    ph = NgramModel.count([plan_phones(plan, [True, True, False])], 4)
    le = NgramModel.count([pattern_tokens(plan, [True, True, False], "letters")], 3)
    spec = json.loads(json.dumps(Phonotactics({"phones": ph, "letters": le}, {"phones": 0.2, "letters": 0.5}, -1.0).to_json()))
    back = Phonotactics.from_json(spec)
    p = np.array([0.7, 0.4, 0.2])
    a, b = back.decide(plan, p), Phonotactics({"phones": ph, "letters": le}, {"phones": 0.2, "letters": 0.5}, -1.0).decide(plan, p)
    assert a.kept == b.kept and a.probability == b.probability and a.p_keep.tolist() == b.p_keep.tolist()
    for bad in (dict(spec, weights={"phones": 0.2}), dict(spec, weights={"phones": -1.0, "letters": 0.5}),
                dict(spec, keep_bonus=float("inf")), dict(spec, keep_bonus="x"),
                dict(spec, ngrams=dict(spec["ngrams"], syllables=spec["ngrams"]["phones"]),
                     weights=dict(spec["weights"], syllables=1.0)),
                {k: v for k, v in spec.items() if k != "ngrams"}):
        with pytest.raises(RetentionModelError):
            Phonotactics.from_json(bad, "t.json")
