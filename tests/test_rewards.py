import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from leakloss.rewards import (LeakRewardProvider, RerankChoice, RewardInput, RewardOutput, RewardProvider, rerank,
                              to_16k_mono)

ROOT = Path(__file__).resolve().parents[1]
TEXT = "आज नेकपा र अरू दलका प्रतिनिधि बैठकमा आए।"  # two testable sites
PLAIN = "किसानले धान रोपे"  # no testable site


def test_imports_without_f5_tts():
    code = ("import sys; sys.modules['f5_tts'] = None\n"  # any `import f5_tts...` now fails
            "from leakloss.rewards import LeakRewardProvider, RewardInput, RewardOutput, rerank\n"
            "assert 'f5_tts' not in [m.split('.')[0] for m in sys.modules if sys.modules[m] is not None]\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_the_interface_mirrors_f5_tts_reward_types():
    from dataclasses import fields

    assert [f.name for f in fields(RewardInput)] == ["audio", "text", "speaker_ref", "sample_rate", "meta", "lang"]
    assert RewardInput(torch.zeros(3)).sample_rate == 24_000
    assert [f.name for f in fields(RewardOutput)] == ["total_reward", "components", "logs"]
    assert issubclass(LeakRewardProvider, RewardProvider) and LeakRewardProvider.name == "leakloss_leak"
    provider = LeakRewardProvider()  # F5's registry: no arguments, then setup(cfg)
    provider.setup({"max_per": 0.3, "device": "cpu"})
    assert provider.max_per == 0.3 and provider.penalty is None  # loads lazily
    with pytest.raises(ValueError, match="unknown leakloss_leak setting"):
        provider.setup({"max_pre": 0.3})
    for bad in ("nan", "inf", -1, "x", True):  # NaN turned the word check off; True was read as 1.0
        with pytest.raises(ValueError, match="setup max_per"):
            LeakRewardProvider().setup({"max_per": bad})
        if not isinstance(bad, str):  # given to the constructor: refused there, not at the first reading
            with pytest.raises(ValueError, match="max_per must be"):
                LeakRewardProvider(max_per=bad)
            with pytest.raises(ValueError, match="max_per must be"):  # before any penalty loads
                rerank({"": [torch.zeros(10)]}, penalty="never loaded", max_per=bad)
    null = LeakRewardProvider(max_per=0.5)
    null.setup({"max_per": None})  # YAML null: the default, as not giving it
    assert null.max_per == 0.5
    assert provider.supports_language(None) and provider.supports_language("ne") and provider.supports_language("ne-NP")
    assert not provider.supports_language("hi") and not provider.supports_language("en")
    assert provider.compute([]) == []


def test_the_provider_loads_the_recognizer_it_is_set_up_with(monkeypatch):
    from leakloss.rewards import LeakRewardProvider

    seen = []
    monkeypatch.setattr("leakloss.penalty.LeakPenalty.load",
                        classmethod(lambda cls, **kwargs: seen.append(kwargs) or "penalty"))
    provider = LeakRewardProvider()
    provider.setup({"recognizer": "b"})  # was dropped unless head_path was set too
    assert provider._penalty() == "penalty"
    assert seen == [{"recognizer": "b", "head_path": None, "device": "cpu"}]
    provider.setup({"recognizer": "a"})  # a second setup reloads with its settings (it kept b's penalty)
    provider._penalty()
    assert seen[-1] == {"recognizer": "a", "head_path": None, "device": "cpu"}


def test_a_second_setup_starts_from_the_constructor_s_arguments():
    from leakloss.rewards import LeakRewardProvider

    provider = LeakRewardProvider()
    provider.setup({"max_per": 0.3})
    provider.setup({})
    assert provider.max_per is None  # the 0.3 of the earlier setup stayed
    given = LeakRewardProvider(penalty="given", max_per=0.5)
    given.setup({})
    assert given.penalty == "given" and given.max_per == 0.5
    with pytest.raises(ValueError, match="setup device, recognizer: this provider was given its penalty"):
        given.setup({"recognizer": "a", "device": "cuda"})  # they were ignored without a word


def test_to_16k_mono():
    t = torch.arange(24_000) / 24_000
    stereo = torch.stack([torch.sin(2 * torch.pi * 440 * t), torch.sin(2 * torch.pi * 440 * t)])
    mono = to_16k_mono(stereo, 24_000)
    assert mono.shape == (16_000,) and mono.dtype == torch.float32
    ref = torch.sin(2 * torch.pi * 440 * torch.arange(16_000) / 16_000)
    assert torch.allclose(mono[100:-100], ref[100:-100], atol=2e-3)
    assert torch.equal(to_16k_mono(ref, 16_000), ref) and to_16k_mono(torch.zeros(0), 24_000).shape == (0,)
    with pytest.raises(ValueError, match="samples"):
        to_16k_mono(torch.zeros(1, 1, 5), 16_000)
    with pytest.raises(ValueError, match=r"\[samples, channels\]"):
        to_16k_mono(stereo.T, 24_000)  # the usual layout mistake, not a 2-sample clip
    assert to_16k_mono(torch.zeros(1, 0), 24_000).shape == (0,)  # an empty generation stays empty (too_short)
    import numpy as np

    assert to_16k_mono(ref, np.int64(16_000)).shape == (16_000,)
    for rate in (100, 0, 16_000.0):
        with pytest.raises(ValueError, match="sample_rate"):
            to_16k_mono(ref, rate)
    with pytest.raises(ValueError, match="tensor or numpy array of samples, got NoneType"):
        to_16k_mono(None, 16_000)  # was RuntimeError: Could not infer dtype of NoneType
    with pytest.raises(ValueError, match="has no channel"):
        to_16k_mono(torch.zeros(0, 100), 16_000)  # its mean was 100 NaNs: "NaN/Inf samples"
    with pytest.raises(ValueError, match="real float samples"):
        to_16k_mono(torch.ones(100, dtype=torch.bool), 16_000)
    assert torch.equal(to_16k_mono(ref.numpy(), 16_000), ref)
    loud = torch.stack([ref / ref.abs().max() * 3e38] * 2)  # finite; its fp32 channel sum overflowed to inf
    out = to_16k_mono(loud, 16_000)
    assert torch.isfinite(out).all() and torch.allclose(out, ref / ref.abs().max(), atol=1e-6)
    assert torch.isfinite(to_16k_mono(ref.double() * 1e39, 16_000)).all()  # beyond fp32: brought to full scale


@pytest.fixture(scope="module")
def penalty(embedded_penalty):
    return embedded_penalty


@pytest.fixture(scope="module")
def readings():
    from leakloss.speech.synth import HINDI_VOICES, TEACHER_VOICES, speak_text

    return {"nepali": speak_text(TEXT, TEACHER_VOICES[0]).waveform, "hindi": speak_text(TEXT, HINDI_VOICES[0]).waveform,
            "other": speak_text("सरकारले नयाँ बजेट ल्यायो", TEACHER_VOICES[0]).waveform,
            "plain": speak_text(PLAIN, TEACHER_VOICES[0]).waveform}


def test_provider_wraps_leak_reward(penalty, readings):
    import torchaudio.functional as AF

    from leakloss.penalty import leak_reward

    provider = LeakRewardProvider(penalty)
    nepali_24k = AF.resample(readings["nepali"], 16_000, 24_000)
    noise = torch.randn(24_000, generator=torch.Generator().manual_seed(0)) * 0.1
    batch = [RewardInput(nepali_24k, TEXT), RewardInput(readings["hindi"][None], TEXT, sample_rate=16_000),
             RewardInput(noise, TEXT), RewardInput(nepali_24k, None), RewardInput(readings["plain"], PLAIN, sample_rate=16_000)]
    out = provider.compute(batch)
    assert len(out) == 5 and all(isinstance(o, RewardOutput) for o in out)
    assert all(o.total_reward.shape == () and o.total_reward.dtype == torch.float32 for o in out)
    expected = leak_reward([to_16k_mono(nepali_24k, 24_000), readings["hindi"]], [TEXT, TEXT], penalty)
    assert torch.allclose(torch.stack([out[0].total_reward, out[1].total_reward]), expected)
    assert out[0].logs["status"] == "scored" and out[0].components["sites"] == 2 and out[0].components["judged"] == 1
    assert 0 <= float(out[0].components["phone_error_rate"]) <= 0.45
    assert (float(out[2].total_reward), out[2].logs["status"], float(out[2].components["judged"])) == (
        0.0, "unintelligible", 0.0)
    assert (float(out[3].total_reward), out[3].logs["reason"]) == (0.0, "no text given")
    assert (float(out[4].total_reward), out[4].logs["status"]) == (1.0, "no_testable_site")
    # F5's combiner stacks total_reward over the batch
    assert torch.stack([o.total_reward for o in out]).shape == (5,)


def test_rerank_keeps_the_best_judged_candidate_with_reasons(penalty, readings):
    noise = torch.randn(32_000, generator=torch.Generator().manual_seed(1)) * 0.1
    choices = rerank({TEXT: [noise, readings["hindi"], readings["nepali"], torch.zeros(16_000)],
                      "सरकारले नयाँ बजेट ल्यायो": [torch.zeros(16_000), noise],
                      PLAIN: [readings["other"], readings["plain"]],
                      "घर": []}, penalty)
    assert [type(c) for c in choices] == [RerankChoice] * 4
    first, none_judged, plain, empty = choices
    assert [r.status for r in first.candidates] == ["unintelligible", "scored", "scored", "silent"]
    rewards = [r.reward for r in first.candidates]
    assert first.best == 2 and first.reward == max(rewards) == rewards[2] > rewards[1]
    assert first.reason.startswith("candidate 2 of 4: reward") and "0: unintelligible 0.000" in first.reason
    assert none_judged.best is None and none_judged.reward == 0.0 and "no candidate could be judged" in none_judged.reason
    assert plain.best == 1 and plain.reward == 1.0 and plain.candidates[0].status == "unintelligible"
    assert empty.best is None and empty.reason == "no candidate given"


def test_rerank_ties_keep_the_first_and_pairs_may_repeat_a_text(penalty, readings):
    choices = rerank([(PLAIN, [readings["plain"], readings["plain"]]), (PLAIN, [readings["other"]])], penalty)
    assert choices[0].best == 0 and choices[0].reward == 1.0
    assert choices[1].best is None


def test_rerank_says_why_nan_and_empty_waves_cannot_be_kept(penalty, readings):
    nan = torch.full((16_000,), float("nan"))
    (choice,) = rerank({TEXT: [nan, torch.zeros(0), torch.zeros(2, 0), readings["nepali"]]}, penalty)
    assert [r.status for r in choice.candidates] == ["not_finite", "too_short", "too_short", "scored"]
    assert choice.best == 3 and choice.not_scored == {}
    (none,) = rerank({TEXT: [nan, torch.zeros(0)]}, penalty)
    assert none.best is None and "0: not_finite, 1: too_short" in none.reason


@pytest.mark.parametrize("wave, message", [
    (None, "candidate 1: reward audio must be a tensor"),
    (torch.zeros(100, dtype=torch.int16), "candidate 1: reward audio must be real float"),
    (torch.zeros(1, 1, 100), "candidate 1: reward audio must be [samples] or [channels, samples]"),
    (torch.zeros(0, 100), "candidate 1: reward audio of shape (0, 100) has no channel"),
])
def test_rerank_refuses_a_wave_that_is_not_audio_before_any_scoring(monkeypatch, wave, message):
    def no_scoring(*args, **kwargs):
        raise AssertionError("a candidate was scored before the bad one was found")

    monkeypatch.setattr(LeakRewardProvider, "score", no_scoring)
    with pytest.raises(ValueError, match=r"text 1 \('घर'\), " + re.escape(message)):
        rerank([(TEXT, [torch.zeros(16_000)]), ("घर", [torch.zeros(16_000), wave])])
    with pytest.raises(ValueError, match="must be a list of waves"):
        rerank({TEXT: torch.zeros(16_000)})  # one wave, not a list: was read as 16000 one-sample candidates


def test_choose_places_candidates_that_were_not_scored():
    from leakloss.reward import RewardResult
    from leakloss.rewards import choose

    scored = RewardResult(0.8, "scored", 0.1, 2)
    c = choose(TEXT, [None, RewardResult(0.0, "silent", reason="quiet"), scored], {0: "x.wav cannot be read"})
    assert c.best == 2 and c.reward == 0.8 and c.not_scored == {0: "x.wav cannot be read"}
    assert c.reason.startswith("candidate 2 of 3: reward 0.800") and "0: not scored (x.wav cannot be read)" in c.reason
    none = choose(TEXT, [None, None], {0: "a: damaged", 1: "b: missing"})
    assert none.best is None and none.reward == 0.0 and none.reason == "no candidate could be scored (0: a: damaged; 1: b: missing)"
    unjudged = choose(TEXT, [None, RewardResult(0.0, "silent")], {0: "damaged"})
    assert unjudged.best is None and unjudged.reason == "no candidate could be judged (0: not scored (damaged), 1: silent)"
    with pytest.raises(ValueError, match="not_scored with its reason"):
        choose(TEXT, [None, scored])  # a candidate dropped without a word
    with pytest.raises(ValueError, match="not_scored with its reason"):
        choose(TEXT, [scored], {0: "why"})


@pytest.mark.parametrize("pairs, message", [
    ([(TEXT, [torch.zeros(16_000)]), (5, [torch.zeros(16_000)])], r"text 1 must be a string, got int"),
    ([(TEXT, [torch.zeros(16_000)]), (b"x", [torch.zeros(16_000)])], r"text 1 must be a string, got bytes"),
    (["ab"], r"entry 0 must be a \(text, \[wave, \.\.\.\]\) pair"),
    ([(TEXT, [torch.zeros(16_000)], 1)], r"entry 0 must be a \(text, \[wave, \.\.\.\]\) pair"),
    ([(TEXT, [np.array(["0.1", "0.2"])])], r"candidate 0: reward audio must be an array of numbers"),
    ([(TEXT, [np.zeros(100, np.longdouble)])], r"candidate 0: reward audio must be an array of numbers torch reads"),
])
def test_rerank_refuses_a_malformed_entry_before_any_scoring(monkeypatch, pairs, message):
    # a text of another type was refused after the texts before it were scored; a wrong shape was an unpacking error
    monkeypatch.setattr(LeakRewardProvider, "score", lambda *a, **k: pytest.fail("scored before the check"))
    with pytest.raises(ValueError, match=message):
        rerank(pairs)


@pytest.mark.parametrize("text", [None, "", TEXT])
def test_the_provider_refuses_unusable_audio_whatever_the_text(monkeypatch, text):
    # without a text the audio was never looked at: a caller's int16 PCM got "no text given" instead of the error
    monkeypatch.setattr(LeakRewardProvider, "_penalty", lambda self: pytest.fail("loaded before the check"))
    provider = LeakRewardProvider()
    with pytest.raises(ValueError, match=r"input 1: reward audio must be real float"):
        provider.score([RewardInput(torch.zeros(100), TEXT), RewardInput(torch.zeros(100, dtype=torch.int16), text)])
    with pytest.raises(ValueError, match=r"input 0: sample_rate must be"):
        provider.score([RewardInput(torch.zeros(100), text, sample_rate=3)])
    with pytest.raises(ValueError, match=r"input 0: text must be a string or None, got int"):
        provider.score([RewardInput(torch.zeros(100), 5)])


def test_choose_refuses_a_result_that_is_not_a_reward_result():
    from leakloss.rewards import choose

    with pytest.raises(ValueError, match=r"must be a RewardResult or None, got dict"):
        choose(TEXT, [{"reward": 1.0}])


@pytest.mark.parametrize("lang, supported", [(None, True), ("", True), ("ne-NP", True), ("hi", False), (5, False),
                                             (b"ne", False)])
def test_supports_language_is_a_yes_or_no_for_any_value(lang, supported):
    assert LeakRewardProvider().supports_language(lang) is supported


def test_an_input_in_another_language_is_not_judged_and_says_so():
    # F5's RewardCombiner calls compute() without supports_language: a Hindi item got a Nepali leak reward
    provider = LeakRewardProvider(penalty="never loaded")  # no input reaches the penalty
    hindi, english = (RewardInput(torch.zeros(1600), "घर आयो", sample_rate=16_000, lang=lang) for lang in ("hi", "en"))
    results = provider.score([hindi, english])
    assert [r.status for r in results] == ["unsupported_language"] * 2 and all(r.reward == 0.0 for r in results)
    assert results[0].reason == "lang 'hi': the leak reward judges Nepali readings only"
    (out,) = provider.compute([hindi])
    assert float(out.total_reward) == 0.0 and out.logs["status"] == "unsupported_language"
    assert float(out.components["judged"]) == 0.0
