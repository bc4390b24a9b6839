import json

import numpy as np
import pytest

from leakloss.text.morphology import Morphology
from leakloss.text.phonotactics import candidates, pattern_tokens, rescore
from leakloss.text.retention import (
    RetentionModel, forced_slots,
    CONTEXTS, ContextMemory, RetentionModelError, WordVocabulary, _load, load_retention_model,
    plan_phones, plan_word, slot_features,
)
from leakloss.text.retention_net import net_logits
from leakloss.text.train_retention import (
    CALIBRATION_FOLDS, KEEP_BONUSES, MEMORY_FOLDS, PHONOTACTIC_WEIGHTS, choose_rescoring, count_ngrams, fold_ngrams, agrees, build_matrix, calibration_fold, fit_net, fit_nets, fit_trees, labelled_plans,
    load_fold, memory_fold, model_with_net, out_of_fold_logits, run_key, save_fold,
    split_of, stem_consistency,
)
from leakloss.text.train_retention import main as train_main

WORDS = ["कमल", "कमलको", "सडक", "सडकमा", "नेकपा", "बजार", "बजारमा", "उपचार", "घरहरू", "रामप्रसाद", "गर्छ", "सुन्दरता"]


def _rows():
    # labels: every inherent vowel kept except a word-final one (a plausible, deterministic lexicon)
    rows = []
    for w in WORDS:
        plan = plan_word(w)
        rows.append((w, tuple(k != len(plan.units) - 1 for k in plan.slots)))
    return rows


def test_split_and_folds_are_fixed_by_the_spelling():
    assert {split_of(w) for w in WORDS} <= {"train", "calibration", "test"}
    assert split_of("कमल") == split_of("कमल") and 0 <= memory_fold("कमल") < MEMORY_FOLDS
    assert 0 <= calibration_fold("कमल") < CALIBRATION_FOLDS


def test_training_rows_never_remember_their_own_word():
    labelled = labelled_plans(_rows() + [("प्रकाशे", None)])
    assert all(w != "प्रकाशे" for w, _, _ in labelled)  # unaligned lexicon entries give no labels
    x, y, words = build_matrix(labelled, min_count=1)
    assert x.shape[0] == len(y) == len(words)
    row = 0
    for w, plan, ref in labelled:
        others = ContextMemory.count(((p, r) for v, p, r in labelled if memory_fold(v) != memory_fold(w)), min_count=1)
        # nor their own spelling: the vocabulary features are those of the other words' vocabulary
        without = WordVocabulary.count(v for v, _, _ in labelled if v != w)
        np.testing.assert_array_equal(x[row: row + len(ref)], slot_features(plan, others, without, Morphology({})))
        np.testing.assert_array_equal(y[row: row + len(ref)], np.asarray(ref, dtype=np.int64))
        row += len(ref)
    # with a memory given (calibration / test rows) every row reads that memory
    full = ContextMemory.count(((p, r) for _, p, r in labelled), min_count=1)
    vocabulary = WordVocabulary.count(w for w, _, _ in labelled)
    xc, _, _ = build_matrix(labelled, (full, vocabulary, Morphology({})))
    np.testing.assert_array_equal(xc[: len(labelled[0][2])], slot_features(labelled[0][1], full, vocabulary, Morphology({})))
    assert (xc[:, -2 * len(CONTEXTS) + 1::2] >= 1).all()  # the full memory has seen every context


def test_stem_consistency_counts_stems_said_differently_with_a_marker():
    patterns = {
        "जनता": (True, True), "जनतालाई": (True, False),  # inner न said differently: a disagreement
        "कमल": (True, True, False), "कमलको": (True, True, True),  # only the word-final ल changed: fine
        "घर": (True, False), "घरमा": (True, True),  # the inner घ agrees; the final र may change
        "सडक": None, "सडकमा": (True, False, False),  # unaligned stem: not counted
    }
    pairs, bad, examples = stem_consistency(patterns)
    assert (pairs, bad) == (3, 1) and examples == ["जनता/जनतालाई"]


def test_fit_trees_exports_the_trees_it_fitted():
    pytest.importorskip("sklearn")
    labelled = labelled_plans(_rows())
    fit = fit_trees(labelled, max_iter=5, min_samples_leaf=1, memory_min_count=1)
    n_vowels = sum(len(ref) for _, _, ref in labelled)
    assert fit.rows == n_vowels and fit.clf.n_iter_ == 5
    assert fit.keep_rate == pytest.approx(np.mean([v for _, _, ref in labelled for v in ref]))
    # the exported JSON trees give scikit-learn's probabilities on rows that read the full memory
    x, _, _ = build_matrix(labelled, (fit.memory, fit.vocabulary, fit.morphology), min_count=1)
    np.testing.assert_allclose(fit.model.predict_proba(x), fit.clf.predict_proba(x)[:, 1], atol=1e-9)
    assert fit.model.thresholds == {"high": 1.0, "medium": 0.0}  # not calibrated yet


def test_agrees_compares_kept_vowels_and_never_credits_an_unaligned_entry():
    plan = plan_word("कमल")
    kept = [True, True, False]
    pred = (plan_phones(plan, kept), 0.9, kept)
    assert agrees([("कमल", (True, True, False)), ("कमल", (True, False, False)), ("कमल", None)], [pred] * 3) == [
        True, False, False]


def test_out_of_fold_logits_come_from_models_that_never_saw_the_word():
    pytest.importorskip("sklearn")
    rows = _rows()
    from leakloss.text.morphology import NOMINAL, Morphology, form_bits
    from leakloss.text.tables import _hash

    # a table of word forms, so that each fold's networks must be given the fold's table to reproduce
    forms = Morphology({_hash(w): form_bits([(NOMINAL, 2)]) for w, _ in rows[::2]})
    kw = dict(max_iter=5, min_samples_leaf=1, memory_min_count=1, morphology=forms)
    net_kw = dict(epochs=1, hidden=8, embed=4, members=2)
    logits = out_of_fold_logits(rows, net_kw, **kw)
    assert len(logits) == len(rows)
    folds = {calibration_fold(w) for w, _ in rows}
    assert len(folds) > 1
    for k in folds:
        others = [r for r in rows if calibration_fold(r[0]) != k]
        train = labelled_plans(others)
        fit = fit_trees(train, vocabulary_words=[w for w, _ in others], **kw)
        model = model_with_net(fit, fit_nets(train, morphology=fit.morphology, **net_kw), 0.0)[2]
        held = [i for i, (w, _) in enumerate(rows) if calibration_fold(w) == k]
        for i in held:
            trees, net = model.plan_logits(plan_word(rows[i][0]))
            np.testing.assert_allclose(logits[i][0], trees, atol=1e-12)
            np.testing.assert_allclose(logits[i][1], net, atol=1e-5)
    # the full fit (which has seen every word) predicts differently somewhere: the folds are really held out
    full = fit_trees(labelled_plans(rows), **kw).model
    assert any(not np.allclose(full.plan_logits(plan_word(w))[0], logits[i][0]) for i, (w, _) in enumerate(rows))


def test_fold_ngrams_never_count_the_word_they_score():
    rows = _rows()
    models = fold_ngrams(rows, {"phones": 3, "letters": 2})
    labelled = labelled_plans(rows)
    for (w, _), m in zip(rows, models):
        own = calibration_fold(w)
        want = count_ngrams([(p, r) for v, p, r in labelled if calibration_fold(v) != own], {"phones": 3, "letters": 2})
        plan = plan_word(w)
        for kind in ("phones", "letters"):
            toks = pattern_tokens(plan, [True] * len(plan.slots), kind)
            assert m[kind].log_prob(toks) == want[kind].log_prob(toks)


def test_choose_rescoring_takes_the_lightest_setting_that_agrees_most():
    # two words with one free slot; the slots alone get the first wrong (by 0.5 in log-probability); the n-gram
    # score favours its lexicon pattern, and so does any keep bonus below -0.5; no rescoring: half agree
    rows = [("कम", (True, False)), ("घर", (True, False))]
    plans = [plan_word(w) for w, _ in rows]
    tables = []
    for plan, slot_keep in zip(plans, (0.4, 0.9)):
        c = candidates(plan, np.array([slot_keep, 0.1]), None, [True, False])
        # pattern (keep, keep) / (keep, drop): the n-gram prefers dropping the final vowel
        tables.append(c._replace(ngram_logp=np.where(c.kept[:, 1], -10.0, -1.0)[:, None],
                                 slot_logp=np.where(c.kept[:, 1], 0.0, -0.5) if slot_keep == 0.4 else c.slot_logp))
    (weights, bonus), agreement, plain = choose_rescoring(rows, plans, tables, ["phones"])
    assert plain == 0.5 and agreement == 1.0
    # a keep bonus of -0.75 fixes it without the n-gram: no weight is lighter, no fixing bonus nearer 0
    assert weights == (0.0,) and bonus == -0.75


def test_mixing_the_network_in_is_a_weighted_sum_of_log_odds():
    pytest.importorskip("sklearn")
    from leakloss.text.morphology import NOMINAL, Morphology, form_bits
    from leakloss.text.tables import _hash

    forms = Morphology({_hash("सडकमा"): form_bits([(NOMINAL, 2)]), _hash("सडक"): form_bits([(NOMINAL, 0)])})
    labelled = labelled_plans(_rows())
    fit = fit_trees(labelled, max_iter=5, min_samples_leaf=1, memory_min_count=1, morphology=forms)
    net = fit_net(labelled, morphology=forms, epochs=2, hidden=8, embed=4, seed=3)
    other = fit_net(labelled, morphology=forms, epochs=2, hidden=8, embed=4, seed=4)
    plan = plan_word("सडकमा")
    trees = fit.model.plan_logits(plan)[0]
    for weight in (0.0, 0.3, 1.0):
        _, _, model = model_with_net(fit, [net, other], weight)
        t, n = model.plan_logits(plan)
        np.testing.assert_allclose(t, trees)
        # the members' mean log-odds, reading the model's word forms
        np.testing.assert_allclose(n, (net_logits(net, [plan], forms)[0] + net_logits(other, [plan], forms)[0]) / 2,
                                   atol=1e-5)
        want = 1 / (1 + np.exp(-((1 - weight) * trees + weight * n)))
        np.testing.assert_allclose(model.predict_plan(plan), want)
    members = fit_nets(labelled, morphology=forms, members=2, epochs=2, hidden=8, embed=4, seed=3)
    np.testing.assert_array_equal(net_logits(members[1], [plan], forms)[0],
                                  net_logits(other, [plan], forms)[0])  # member i is seed + i
    # the same seed trains the same network
    again = fit_net(labelled, morphology=forms, epochs=2, hidden=8, embed=4, seed=3)
    np.testing.assert_array_equal(net_logits(again, [plan], forms)[0], net_logits(net, [plan], forms)[0])


def model_state(out):
    from safetensors.numpy import load_file

    return load_file(out / "retention_net.safetensors")


def test_training_script_writes_a_model_the_frontend_loads(tmp_path):
    pytest.importorskip("sklearn")
    lexicon = tmp_path / "lex.tsv"
    # a tiny lexicon: every word of the test list, its phones from the rules (labels need not be true here)
    from leakloss.text.frontend import NepaliFrontend

    rules = NepaliFrontend(use_builtin_exceptions=False, retention=None)
    words = WORDS + ["जन", "पद", "जनपद", "बोल्नु", "बोलिन", "घरमा", "घरको", "कमलमा", "सडकको", "बजारको", "नेपाल",
                     "नेपालमा", "उपचारमा", "अक्षर", "अक्षरमा", "सहर", "सहरमा", "सहरको", "बाटो", "बाटोमा"]
    lexicon.write_text("".join(f"{w}\t{' '.join(rules.pronounce(w).phones)}\n" for w in words), encoding="utf-8")
    out = tmp_path / "model"
    (tmp_path / "ne.dic").write_text("2\nबोल्/1\nघर/15\n", encoding="utf-8")  # a tiny hunspell pair
    (tmp_path / "ne.aff").write_text("SFX 1 Y 1\nSFX 1 ् िन ्\n\nSFX 15 Y 1\nSFX 15 0 मा .\n", encoding="utf-8")
    args = ["--lexicon", str(lexicon), "--out", str(out), "--checkpoints", str(tmp_path / "ck"), "--max-iter", "3", "--min-samples-leaf", "1",
            "--memory-min-count", "1", "--hunspell", str(tmp_path / "ne"), "--net-members", "2", "--net-epochs", "1"]
    assert train_main(args[:-8] + ["--hunspell", str(tmp_path / "missing")]) == 2  # no dictionary: an error
    assert not out.exists()
    assert train_main(args) == 0
    (run,) = (tmp_path / "ck").iterdir()  # one run's folds, named by its key
    assert any(run.glob("fold*.npz"))
    assert sorted(p.name for p in out.iterdir()) == ["retention.card.json", "retention.json", "retention.md",
                                                   "retention_net.safetensors"]
    model = load_retention_model(out / "retention.json")
    assert model.net is not None and len(model.net.members) == 2 and 0 <= model.net_weight <= 1
    assert len(model.morphology) == 4 and model.morphology.source == "ne"  # बोल् बोलिन घर घरमा
    p = NepaliFrontend(use_builtin_exceptions=False, retention=out / "retention.json").pronounce("सडकमा")
    assert p.source == "model" and all(v.step == "model" for v in p.vowels)
    # the phone n-gram rescoring is part of the model, and the frontend decides through it
    ph = model.phonotactics
    assert {k: m.order for k, m in ph.ngrams.items()} == {"phones": 6, "letters": 3}
    assert all(ph.weights[k] in PHONOTACTIC_WEIGHTS[k] for k in ph.ngrams) and ph.keep_bonus in KEEP_BONUSES
    plan = plan_word("सडकमा")
    want = rescore(candidates(plan, model.predict_plan(plan), ph.ngrams, forced_slots(plan)),
                   [ph.weights[k] for k in ph.ngrams], ph.keep_bonus)
    assert p.vowels and [v.kept for v in p.vowels] == list(want.kept) and p.probability == pytest.approx(want.probability)
    card = json.loads((out / "retention.card.json").read_text(encoding="utf-8"))
    assert set(card["phonotactics"]["out_of_fold_agreement"]) == {"rescored", "not_rescored"}
    spec = json.loads((out / "retention.json").read_text(encoding="utf-8"))
    for bad in ({"weights": {"phones": -1.0, "letters": 0.0}}, {"keep_bonus": float("nan")},
                {"ngrams": {"phones": {"hash": "md5"}, "letters": {}}}):
        with pytest.raises(RetentionModelError):
            RetentionModel(dict(spec, phonotactics=dict(spec["phonotactics"], **bad)), "t.json", model_state(out))
    # weights that are not the ones the JSON was exported with are refused
    (out / "retention_net.safetensors").write_bytes(b"x" + (out / "retention_net.safetensors").read_bytes())
    _load.cache_clear()  # the file changed under the same path
    with pytest.raises(RetentionModelError, match="sha256 differs"):
        load_retention_model(out / "retention.json")
    # trees alone: no network file is left beside the model; no rescoring when asked for none
    assert train_main(args[:-1] + ["0", "--phone-order", "0", "--letter-order", "0"]) == 0
    assert not (out / "retention_net.safetensors").exists()
    _load.cache_clear()
    alone = load_retention_model(out / "retention.json")
    assert alone.net is None and alone.phonotactics is None
    assert alone.decide(plan).kept == tuple(bool(v >= 0.5) for v in alone.predict_plan(plan))


def test_out_of_fold_folds_are_checkpointed_and_a_rerun_resumes_from_them(tmp_path, monkeypatch):
    pytest.importorskip("sklearn")
    import leakloss.text.train_retention as tr

    rows = _rows()
    kw = dict(max_iter=3, min_samples_leaf=1, memory_min_count=1)
    first = out_of_fold_logits(rows, None, tmp_path / "run", **kw)
    saved = sorted(p.name for p in (tmp_path / "run").iterdir())
    assert saved == sorted(f"fold{k}.npz" for k in {calibration_fold(w) for w, _ in rows})

    def no_fit(*a, **k):
        raise AssertionError("a checkpointed fold was refitted")

    monkeypatch.setattr(tr, "fit_trees", no_fit)
    again = out_of_fold_logits(rows, None, tmp_path / "run", **kw)
    for (t1, n1), (t2, n2) in zip(first, again):
        np.testing.assert_array_equal(t1, t2)
        assert n1 is None and n2 is None
    # a fold file of other words, or a damaged one, is not taken
    k = calibration_fold(rows[0][0])
    assert load_fold(tmp_path / "run" / f"fold{k}.npz", ["कमल", "other"]) is None
    (tmp_path / "run" / f"fold{k}.npz").write_bytes(b"not an npz")
    assert load_fold(tmp_path / "run" / f"fold{k}.npz", [rows[0][0]]) is None
    assert load_fold(tmp_path / "missing.npz", []) is None


def test_fold_round_trip_keeps_network_logits_and_empty_words(tmp_path):
    pairs = [(np.array([0.5, -1.0]), np.array([2.0, 3.0])), (np.zeros(0), np.zeros(0)), (np.array([1.5]), np.array([-2.0]))]
    save_fold(tmp_path / "f.npz", ["क", "ख", "ग"], pairs)
    back = load_fold(tmp_path / "f.npz", ["क", "ख", "ग"])
    assert len(back) == 3
    for (t1, n1), (t2, n2) in zip(pairs, back):
        np.testing.assert_array_equal(t1, t2)
        np.testing.assert_array_equal(n1, n2)
    assert run_key(b"lexicon", {"a": 1}) != run_key(b"lexicon", {"a": 2}) == run_key(b"lexicon", {"a": 2})
