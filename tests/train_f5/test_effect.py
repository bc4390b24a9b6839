"""The fine-tune experiment's parts: equal arms, best-of-N, intervals, one tiny run."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch

pytest.importorskip("f5_tts")

from leakloss.timing import TimedSite
from train_f5.data import joined_batches
from train_f5.effect import (
    EffectSettings,
    arm_model,
    base_factory,
    best_of_n,
    finetune,
    flow_loss,
    mean_interval,
)

TINY = {"dim": 32, "depth": 1, "heads": 2, "dim_head": 16, "text_dim": 16, "conv_layers": 1}


def _items(n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    texts = ["नेकपा", "घर", "भात खान्छु", "किताब", "बजार", "हैन"]
    return [(torch.randn(20 + 7 * i, 100, generator=g) - 5, texts[i % len(texts)],
             [TimedSite(0.05, 0.1, "deletion", "ʌ->∅")] if i % 3 == 0 else []) for i in range(n)]


VOICES = [f"v{i % 2}" for i in range(6)]


def _tiny_base():
    from train_f5.model import hindi_base_f5

    base = hindi_base_f5(**TINY)
    return TINY, {k: v.clone() for k, v in base.state_dict().items()}


def _terms(kind: str | None, weight: float, table: dict) -> dict:
    """arm_model's keywords for an arm with the reference-free penalty or the paired term at ``weight``."""
    from leakloss.paired_penalty import PairedPosteriorPenalty
    from leakloss.penalty import LeakPenalty
    from leakloss.vocoder import MelToWave

    if kind is None:
        return {}
    term = ({"penalty": LeakPenalty.load(), "leak_weight": weight} if kind == "penalty" else
            {"paired_penalty": PairedPosteriorPenalty.load("wb"), "paired_weight": weight})
    return term | {"vocoder": MelToWave.tiny(0), "site_lookup": lambda t: table.get(t, [])}


def test_arms_share_weights_batches_and_noise():
    """Two plain runs give the same weights; the penalty and the paired arms at weight 0 give the plain arm's
    weights too (their terms measured, without gradient)."""
    from tests.conftest import embedded_ready

    base, state = _tiny_base()
    settings = EffectSettings(steps=3, warmup_steps=1, max_frames=200)
    runs = []
    for kind in (None, None, "penalty", "paired"):
        if kind and not embedded_ready():
            continue
        table: dict = {}
        model = arm_model(base, state, **_terms(kind, 0.0, table))
        out = finetune(model, joined_batches(VOICES, _items().__getitem__, 200, 0.5, seed=0), settings, seed=0, site_table=table)
        assert len(out["losses"]) == 3 and all(math.isfinite(x) for x in out["losses"])
        if kind:  # the term is there and was measured on the updates whose span held a site
            name = "leak" if kind == "penalty" else "paired"
            assert set(out) & {"leak", "paired"} == {name} and len(out[name]) == 3
            assert all(v is None or math.isfinite(v) for v in out[name])
        runs.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    for other in runs[1:]:
        for k in runs[0]:
            torch.testing.assert_close(other[k], runs[0][k], rtol=0, atol=1e-6)
    assert any(not torch.equal(runs[0][k], state[k]) for k in state)  # it did train


def test_the_paired_arm_carries_its_weight_and_measures_its_term():
    """The paired arm's model holds the paired term at the arm's weight (no reference-free penalty) and
    ``finetune`` reports what the term measured on the updates it acted on (its gradient: tests/integrations)."""
    from tests.conftest import embedded_ready

    if not embedded_ready():
        pytest.skip("embedded models not built")
    base, state = _tiny_base()
    table: dict = {}
    model = arm_model(base, state, **_terms("paired", 0.5, table))
    assert model.paired_weight == 0.5 and model.leak_penalty is None and model.leak_weight == 0.0
    out = finetune(model, joined_batches(VOICES, _items().__getitem__, 200, 0.5, seed=0),
                   EffectSettings(steps=3, warmup_steps=1, max_frames=200), seed=0, site_table=table)
    assert "leak" not in out and any(v is not None for v in out["paired"])
    assert all(v is None or (math.isfinite(v) and v >= 0) for v in out["paired"])


def test_the_margin_arm_carries_its_weight_and_measures_its_term():
    """The margin arm's model holds the path-margin term at the arm's weight and ``finetune`` reports what it measured
    (a stand-in term that always plans: random mels cannot be aligned; the real term: tests/integrations)."""
    from leakloss.vocoder import MelToWave
    from tests.integrations.test_f5_margin import RecordingMargin

    base, state = _tiny_base()
    table: dict = {}
    term = RecordingMargin()
    model = arm_model(base, state, margin_penalty=term, margin_weight=2.5, vocoder=MelToWave.tiny(0),
                      site_lookup=lambda t: table.get(t, []))
    assert model.margin_weight == 2.5 and model.leak_penalty is None and model.paired_penalty is None
    out = finetune(model, joined_batches(VOICES, _items().__getitem__, 200, 0.5, seed=0),
                   EffectSettings(steps=3, warmup_steps=1, max_frames=200), seed=0, site_table=table)
    assert set(out) & {"leak", "paired", "margin"} == {"margin"} and len(out["margin"]) == 3
    assert any(v is not None for v in out["margin"]) and term.calls
    assert all(v is None or (math.isfinite(v) and v >= 0) for v in out["margin"])


def test_base_factory_builds_independent_copies_of_the_saved_base(tmp_path):
    # the demo's fine-tune stage builds its two runs with it (integrations.f5_tts.penalty_comparison's make_model)
    from safetensors.torch import save_file

    arch, state = _tiny_base()
    save_file(state, str(tmp_path / "model.safetensors"))
    (tmp_path / "model.json").write_text(json.dumps({"architecture": arch, "steps": 7}), encoding="utf-8")
    make_model, card = base_factory(tmp_path)
    assert card["steps"] == 7
    first, second = make_model(seed=0), make_model(seed=1, leak_weight=0.5)
    assert second.leak_weight == 0.5 and first.leak_weight == 0.0
    for k, v in state.items():
        torch.testing.assert_close(first.state_dict()[k], v, rtol=0, atol=0)
        torch.testing.assert_close(second.state_dict()[k], v, rtol=0, atol=0)
    name, weight = next(first.named_parameters())
    with torch.no_grad():
        weight.add_(1.0)
    assert torch.equal(dict(second.named_parameters())[name], state[name])  # a copy each, not a shared tensor


def test_best_of_n_keeps_the_best_scored_sample_and_leaves_the_rng_alone(monkeypatch):
    from types import SimpleNamespace

    import leakloss.reward as reward_module
    from leakloss.vocoder import MelToWave

    def RewardResult(reward, status):  # noqa: N802 - stand-ins: a real RewardResult refuses an unjudged 0.9
        return SimpleNamespace(reward=reward, status=status)

    # the filter is by status: an "unintelligible" 0.9 (impossible from leak_reward_details) is never kept
    rewards = iter([
        [RewardResult(0.9, "unintelligible"), RewardResult(0.3, "scored"), RewardResult(0.7, "scored")],
        [RewardResult(0.0, "unintelligible"), RewardResult(0.0, "alignment_failed"), RewardResult(1.0, "too_short")],
        [RewardResult(0.4, "scored"), RewardResult(0.45, "scored"), RewardResult(0.2, "scored")],
    ])
    monkeypatch.setattr(reward_module, "leak_reward_details", lambda waves, texts, penalty: next(rewards))
    base, state = _tiny_base()
    model = arm_model(base, state)
    settings = EffectSettings(reward_samples=3, nfe=2, reward_min=0.5)
    prompt = (torch.randn(30, 100), "नेकपा")
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    kept = best_of_n(model, ["घर", "भात", "किताब"], prompt, None, MelToWave.tiny(0),
                     settings, seed=1)
    assert torch.equal(torch.rand(3), expected)  # sampling seeds itself inside fork_rng
    assert [(t, r) for _, t, r in kept] == [("घर", 0.7)]  # best scored; not the unintelligible 0.9; 0.45 < min
    assert kept[0][0].dim() == 2 and kept[0][0].shape[1] == 100


def test_flow_loss_is_fixed_for_a_model_and_moves_with_its_weights():
    base, state = _tiny_base()
    readings = [(mel, text) for mel, text, _ in _items(3)]
    model = arm_model(base, state)
    a = flow_loss(model, readings, repeats=4, seed=0)
    for _ in range(7):  # whatever the caller drew before (F5 draws its CFG drops from Python's random)
        random.random()
    after = random.getstate()
    b = flow_loss(model, readings, repeats=4, seed=0)
    assert a == b and math.isfinite(a)
    assert random.getstate() == after  # and the caller's generator is left where it was
    with torch.no_grad():
        model.transformer.proj_out.bias.add_(0.5)
    assert flow_loss(model, readings, repeats=2, seed=0) != a


def test_matched_vowel_seconds_sums_sites_matched_one_to_one():
    from train_f5.effect import matched_vowel_seconds

    truth = [TimedSite(0.1, 0.2, "deletion", "ʌ->∅"), TimedSite(0.5, 0.55, "quality", "ʌi̯->ɛː")]
    said = [TimedSite(0.2, 0.26, "deletion", "ʌ->∅"), TimedSite(0.7, 0.8, "quality", "ʌi̯->ɛː")]
    a, b, n = matched_vowel_seconds(said, truth)
    assert n == 2 and math.isclose(a, 0.06 + 0.1) and math.isclose(b, 0.1 + 0.05)
    assert matched_vowel_seconds(said[:1], truth) == (0.0, 0.0, 0)  # an alignment that lost a site: not compared
    assert matched_vowel_seconds(said[::-1], truth) == (0.0, 0.0, 0)  # other kinds in order: not compared
    assert matched_vowel_seconds([], []) == (0.0, 0.0, 0)


def test_mean_interval_matches_scipy():
    from scipy import stats

    xs = [0.2, 0.35, 0.3, None]
    m, lo, hi = mean_interval(xs)
    ref = stats.t.interval(0.95, 2, loc=sum(xs[:3]) / 3, scale=stats.sem(xs[:3]))
    assert m == pytest.approx(0.85 / 3) and (lo, hi) == pytest.approx(ref)
    assert mean_interval([0.4]) == (0.4, 0.4, 0.4)
    assert mean_interval([None]) is None


@pytest.mark.slow
def test_tiny_experiment_runs_the_default_arms_and_reports_the_judges_figures(tmp_path):
    from tests.conftest import embedded_ready
    from train_f5.effect import DEFAULT_ARMS, run_effect

    if not embedded_ready():
        pytest.skip("embedded models not built")
    from safetensors.torch import save_file

    _, state = _tiny_base()
    (tmp_path / "base").mkdir()
    save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / "base" / "model.safetensors"))
    (tmp_path / "base" / "model.json").write_text(json.dumps({"architecture": TINY, "steps": 0}))
    settings = EffectSettings(base_dir=str(tmp_path / "base"), cache_dir=str(tmp_path / "cache"), finetune_texts=6,
                              test_words=2, reward_texts=1, steps=2, warmup_steps=1, reward_every=1, reward_samples=2,
                              nfe=2, flow_repeats=1, max_frames=600, leak_start_step=0)
    out = run_effect(settings, seeds=(0,), log=lambda *_: None)
    assert set(out["arms"]) == set(DEFAULT_ARMS) and all(len(v) == 1 for v in out["arms"].values())
    for result in [out["ceiling"], out["base"], *(r for v in out["arms"].values() for r in v)]:
        assert 0 <= result.per and (result.flagged is None or 0 <= result.flagged <= 1)
        assert result.judged + result.quarantined <= 2
        assert result.site_score is None or 0 <= result.site_score <= 1
        assert result.signal_score is None or (0 <= result.signal_score <= 1 and result.signal_sites >= 1)
    assert out["ceiling"].per < out["base"].per  # a random model does not say the words
    ceiling, hindi = out["ceiling"], out["hindi_truth"]  # the signal's own view of the vocoded truths: placed, apart
    assert ceiling.signal_sites >= 1 and hindi.signal_sites >= 1 and ceiling.signal_score < hindi.signal_score
    ceiling = out["ceiling"]  # the vocoded ground truth: as long as the ground truth, its vowels as long
    assert math.isclose(ceiling.duration_ratio, 1.0, abs_tol=0.05), ceiling.duration_ratio
    assert ceiling.vowel_sites >= 1 and 0.7 < ceiling.vowel_ratio < 1.3, (ceiling.vowel_ratio, ceiling.vowel_sites)
    assert all(math.isfinite(r.flow) for v in out["arms"].values() for r in v)
    assert isinstance(out["arms"]["reward"][0].accepted, int)
    assert len(out["test_words"]) == 2 and all(w["kinds"] for w in out["test_words"])


def test_validation_words_are_kept_apart_from_every_test_split():
    from leakloss.speech.corpus import builtin_sentences
    from train_f5.effect import held_out_words

    sentences = builtin_sentences()
    test = held_out_words(10_000, sentences)
    validation = held_out_words(10_000, sentences, split="validation")
    assert test and validation and not {w.word for w in test} & {w.word for w in validation}
    assert len(validation) <= (len(test) + len(validation)) // 3  # at most a third of the words is reserved
    # the first test words do not depend on how many are asked for (the reported sets nest)
    assert [w.word for w in held_out_words(4, sentences)] == [w.word for w in test[:4]]
    assert [w.word for w in held_out_words(3, sentences, split="validation")] == [w.word for w in validation[:3]]
    with pytest.raises(ValueError, match="split"):
        held_out_words(2, sentences, split="dev")


def test_run_effect_refuses_unknown_arms_before_any_work(tmp_path):
    from train_f5.effect import run_effect

    for arms in [("plain", "bogus"), ()]:
        with pytest.raises(ValueError, match="arms"):
            run_effect(EffectSettings(base_dir=str(tmp_path / "none"), arms=arms), log=lambda *_: None)
    for fraction in (0.0, 1.5, math.nan):
        with pytest.raises(ValueError, match="leak_item_fraction"):
            run_effect(EffectSettings(base_dir=str(tmp_path / "none"), leak_item_fraction=fraction), log=lambda *_: None)


def test_the_arms_score_the_item_share_finetune_f5_ships():
    """The experiment tests what finetune-f5 runs by default: the same leak.item_fraction, passed to the model."""
    from importlib import resources

    from omegaconf import OmegaConf

    shipped = OmegaConf.create(resources.files("leakloss.conf").joinpath("finetune_f5.yaml").read_text(encoding="utf-8"))
    assert EffectSettings().leak_item_fraction == shipped.leak.item_fraction
    from tests.conftest import embedded_ready

    if not embedded_ready():
        pytest.skip("embedded models not built")
    base, state = _tiny_base()
    terms = _terms("penalty", 0.1, {}) | {"leak_item_fraction": 0.25}
    assert arm_model(base, state, **terms).leak_item_fraction == 0.25


def test_the_signals_view_tells_nepali_readings_from_hindi_ones():
    """signal_view: the penalty's own mean site probability over the test words' sites, lower on the held-out
    teacher's Nepali readings than on the held-out Hindi voice's readings of the same phrases."""
    from tests.conftest import embedded_ready

    if not embedded_ready():
        pytest.skip("embedded models not built")
    from leakloss.penalty import LeakPenalty
    from leakloss.speech.corpus import teacher_reading
    from leakloss.speech.synth import HELDOUT_HINDI_VOICE, HELDOUT_TEACHER_VOICE, speak_text
    from train_f5.effect import held_out_words, signal_view

    words = held_out_words(4)
    penalty = LeakPenalty.load()
    nepali = {w.word: teacher_reading(w.phrase, HELDOUT_TEACHER_VOICE).waveform for w in words}
    hindi = {w.word: speak_text(w.phrase, HELDOUT_HINDI_VOICE).waveform for w in words}
    (p_nepali, n_nepali), (p_hindi, n_hindi) = signal_view(penalty, nepali, words), signal_view(penalty, hindi, words)
    assert n_nepali >= 2 and n_hindi >= 2
    assert p_nepali < 0.5 < p_hindi, (p_nepali, p_hindi)
    assert signal_view(penalty, {w.word: torch.zeros(1600) for w in words}, words) == (None, 0)  # nothing placed


def test_kept_readings_are_synthesised_once_and_read_back_bit_for_bit(tmp_path, monkeypatch):
    """espeak is not bit-stable between calls: with a cache the judge's references are the same in every run;
    the phones and waves come back as synthesised, and another text or voice is another file."""
    import train_f5.effect as effect
    from leakloss.speech import synth
    from leakloss.speech.synth import HELDOUT_HINDI_VOICE, TRAIN_TEACHER_VOICES

    jobs = [("नेकपा घर", TRAIN_TEACHER_VOICES[0], True), ("नेकपा घर", HELDOUT_HINDI_VOICE, False)]
    first = effect.kept_readings(jobs, tmp_path)
    assert len(list(tmp_path.glob("readings-*.safetensors"))) == 1
    assert first[0][1] and first[1][1] and all(w.dtype == torch.float32 and w.numel() > 1000 for w, _ in first)

    def refuse(*a, **k):
        raise AssertionError("synthesised again")

    monkeypatch.setattr(synth, "speak_phones", refuse)
    monkeypatch.setattr(synth, "speak_text", refuse)
    monkeypatch.setattr("leakloss.speech.corpus.teacher_reading", refuse)
    again = effect.kept_readings(jobs, tmp_path)
    for (w1, p1), (w2, p2) in zip(first, again):
        assert torch.equal(w1, w2) and p1 == p2
    monkeypatch.undo()
    effect.kept_readings(jobs[:1], tmp_path)  # another job list: another key
    assert len(list(tmp_path.glob("readings-*.safetensors"))) == 2
    assert len(effect.kept_readings(jobs, None)) == 2  # no cache: synthesised, nothing written
    assert len(list(tmp_path.glob("readings-*"))) == 2
