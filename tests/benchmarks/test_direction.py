"""``benchmarks/direction.py``: its arguments, the judge-equals-penalty refusal, the last line and the unseen
family's Hindi-ward readings (the descent itself is run by ``benchmarks/run_all.py``)."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest
import torch

from leakloss.speech import festival
from leakloss.text.sites import SiteFinder, hindi_ward
from tests.conftest import load_benchmark

KEYS = ("flags_before", "flags_after", "flags_control", "sites", "steps", "domain", "deletion_before",
        "deletion_after", "quality_before", "quality_after", "control_within_10pct", "halved", "unscored_before",
        "unscored_after", "unscored_control", "unplaced", "voices", "penalty")


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("direction")


def parse(line: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in line.split())


def test_defaults_are_the_shipped_penalty_on_the_unseen_family(bench):
    args = bench.build_parser().parse_args([])
    assert (args.voices, args.head, args.recognizer, args.check_recognizer) == ("unseen", None, None, None)
    assert args.heads_dir.endswith("heads_w")  # the judge: heads on w, not the shipped ones on the penalty's wb
    args = bench.build_parser().parse_args(["--head", "h.safetensors", "--recognizer", "wb", "--voices", "espeak"])
    assert (args.head, args.recognizer, args.voices) == ("h.safetensors", "wb", "espeak")


@pytest.mark.parametrize("argv", [["--sentences", "0"], ["--steps", "-1"], ["--copies", "0"], ["--lr", "0"],
                                  ["--lr", "nan"], ["--voices", "festival"], ["--domain", "time"],
                                  ["--term", "ctc"]])
def test_bad_arguments_exit_2(bench, argv, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.build_parser().parse_args(argv)
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_check_judge_refuses_any_role_on_the_penalty_recognizer(bench):
    bench.check_judge("a@8eb29e95", {"quality head": "w@1", "deletion head": "w@1", "word check": "w@1"})  # passes
    bench.check_judge("wb@123", {"quality head": "w@1", "deletion head": "w@1", "word check": "w@1"})
    with pytest.raises(bench.JudgeError, match="word check.*recognizer a.*by itself"):
        bench.check_judge("a@8eb29e95", {"quality head": "b@2", "deletion head": "b@2", "word check": "a@other"})
    with pytest.raises(bench.JudgeError, match="quality head, deletion head, word check.*heads_espeak"):
        bench.check_judge("w@55714b26", {"quality head": "w@1", "deletion head": "w@1", "word check": "w@1"})
    with pytest.raises(bench.JudgeError, match="quality head, deletion head, word check.*heads_w"):
        bench.check_judge("wb@427360c1", {"quality head": "wb@1", "deletion head": "wb@1", "word check": "wb@1"})


def test_the_default_judge_is_not_on_the_shipped_penalty_recognizer(bench):
    # the shipped heads moved to wb, the penalty's recognizer: the default judge must stay on another one
    from leakloss.heads import SHIPPED_HEADS, W_HEADS, load_head

    assert bench.build_parser().parse_args([]).heads_dir == str(W_HEADS)
    judge = {kind: load_head(W_HEADS / f"{kind}.safetensors")[1].recognizer for kind in ("deletion", "quality")}
    penalty = load_head(SHIPPED_HEADS / "rawconv.safetensors")[1].recognizer
    bench.check_judge(penalty, {f"{k} head": v for k, v in judge.items()} | {"word check": "w@55714b26"})


class FakeScorer:
    def __init__(self, heads_dir=None, check_recognizer=None):
        self.recognizers = {"a": SimpleNamespace(name="w@55714b26"), "b": SimpleNamespace(name="w@55714b26")}
        self.check_recognizer_name = "w@55714b26"


def test_main_refuses_a_judge_on_the_penalty_recognizer_and_passes_head_and_recognizer(bench, monkeypatch, capsys):
    asked = {}

    def load(**kwargs):
        asked.update(kwargs)
        return SimpleNamespace(recognizer=SimpleNamespace(name="w@55714b26"))

    monkeypatch.setattr(bench.LeakPenalty, "load", load)
    monkeypatch.setattr(bench, "Scorer", FakeScorer)
    with pytest.raises(SystemExit) as exc:
        bench.main(["--voices", "espeak", "--head", "mine.safetensors", "--recognizer", "w"])
    assert exc.value.code == 2
    assert asked == {"recognizer": "w", "head_path": "mine.safetensors", "mel_bridge": None}
    err = capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["--voices", "espeak", "--mel-bridge"])
    assert asked["mel_bridge"] is True  # --mel-bridge loads the penalty with the shipped bridge
    assert "error:" in err and "grade the penalty by itself" in err and "Traceback" not in err


def test_main_refuses_when_no_unseen_voice_is_installed_before_loading_models(bench, monkeypatch, capsys):
    def load(**kwargs):
        raise AssertionError("the penalty was loaded before the voices were checked")

    monkeypatch.setattr(bench, "unseen_voices", lambda names=None: [])
    monkeypatch.setattr(bench.LeakPenalty, "load", load)
    with pytest.raises(SystemExit) as exc:
        bench.main([])
    assert exc.value.code == 2
    assert "no voice of the unseen family" in capsys.readouterr().err


def test_main_says_a_bad_head_file_clearly(bench, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--voices", "espeak", "--head", str(tmp_path / "missing.safetensors")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "error: the penalty:" in err and "Traceback" not in err


@pytest.mark.slow
def test_the_espeak_only_judge_is_refused_for_recognizer_as_penalty(bench, capsys):
    # heads on recognizers A/B, word check on A: the penalty's own recognizer A (its head by name's file)
    from leakloss.penalty import named_head_path

    with pytest.raises(SystemExit) as exc:
        bench.main(["--voices", "espeak", "--heads-dir", "leakloss/assets/heads_espeak",
                    "--head", str(named_head_path("rawconv_a"))])
    assert exc.value.code == 2
    assert "on recognizer a, the one the penalty descends" in capsys.readouterr().err


def test_last_line_keys_and_bars(bench):
    totals = {"before": {"deletion": (6, 1, 8), "quality": (2, 0, 3)},
              "after": {"deletion": (2, 2, 8), "quality": (2, 0, 3)},
              "control": {"deletion": (6, 0, 8), "quality": (1, 0, 3)}}
    line = bench.summary(totals, steps=100, domain="mel", voices="unseen", penalty="wb@1234", unplaced=3)
    got = parse(line)
    assert tuple(got) == KEYS
    assert got == {"flags_before": "8", "flags_after": "4", "flags_control": "7", "sites": "11", "steps": "100",
                   "domain": "mel", "deletion_before": "6", "deletion_after": "2", "quality_before": "2",
                   "quality_after": "2", "control_within_10pct": "False", "halved": "True", "unscored_before": "1",
                   "unscored_after": "2", "unscored_control": "0", "unplaced": "3", "voices": "unseen",
                   "penalty": "wb"}
    totals["control"]["quality"] = (2, 0, 3)  # control 8 of before 8: within 10%
    totals["after"]["deletion"] = (3, 0, 8)  # after 5 of 8: not halved
    assert parse(bench.summary(totals, steps=1, domain="mel", voices="unseen",
                               penalty="wb+mel_bridge"))["penalty"] == "wb+mel_bridge"  # --mel-bridge, said
    got = parse(bench.summary(totals, steps=1, domain="mel", voices="unseen", penalty="a"))
    assert (got["control_within_10pct"], got["halved"]) == ("True", "False")


def test_last_line_with_no_site_meets_no_bar(bench):
    empty = {"before": {}, "after": {}, "control": {}}
    got = parse(bench.summary(empty, steps=100, domain="mel", voices="unseen", penalty="a@8eb29e95", unplaced=52))
    assert tuple(got) == KEYS
    assert (got["sites"], got["control_within_10pct"], got["halved"], got["unplaced"]) == ("0", "n/a", "n/a", "52")


def held_sentences():
    from leakloss.speech.corpus import builtin_sentences, split_sentences

    return split_sentences(builtin_sentences())[1]


def test_unseen_readings_say_the_hindi_ward_phones_by_turns_and_count_failures(bench, monkeypatch):
    finder = SiteFinder()
    voices = [SimpleNamespace(name="v1"), SimpleNamespace(name="v2")]
    said = []

    def speak(phones, voice, cache_dir=None):
        said.append((voice.name, phones))
        if len(said) == 2:
            raise festival.SynthesisError("unreadable labels")
        return SimpleNamespace(waveform=torch.zeros(160))

    monkeypatch.setattr(festival, "speak_phones", speak)
    skipped = Counter()
    out = []
    for item in bench.hindi_ward_readings(held_sentences(), finder, "unseen", skipped, voices):
        out.append(item)
        if len(out) == 3:
            break
    assert [v for v, _ in said] == ["v1", "v2", "v1", "v2"]  # by turns, the failed reading included
    assert skipped == Counter({"v2: SynthesisError": 1})
    _, words, _, voice = out[0]
    assert voice == "v1" and any(w.testable_sites for w in words)
    assert said[0][1] == hindi_ward(words) != [w.nepali for w in words]


def test_readings_refuse_without_voices_or_with_an_unknown_kind(bench):
    with pytest.raises(festival.SynthesizerUnavailableError):
        next(bench.hindi_ward_readings(["x"], SiteFinder(), "unseen", Counter(), []))
    with pytest.raises(ValueError, match="voices must be one of"):
        next(bench.hindi_ward_readings(["x"], SiteFinder(), "teachers", Counter()))


@pytest.mark.slow
def test_an_unseen_voice_reads_a_held_out_sentence_hindi_ward(bench, monkeypatch, tmp_path):
    voices = bench.unseen_voices()
    if not voices:
        pytest.skip("no Festival voice of the unseen family installed")
    monkeypatch.setenv("LEAKLOSS_CACHE", str(tmp_path))
    skipped = Counter()
    _, _, wave, voice = next(bench.hindi_ward_readings(held_sentences(), SiteFinder(), "unseen", skipped,
                                                              voices[:1]))
    assert voice == voices[0].name and voice in festival.UNSEEN_VOICES
    assert wave.dim() == 1 and wave.numel() > 8000 and bool(torch.isfinite(wave).all()) and wave.abs().max() > 0
    assert list((tmp_path / "direction" / "festival").glob(f"{voice}-*.wav"))  # cached for the next run
    assert not skipped


def test_the_voiced_domain_is_an_option(bench):
    assert bench.build_parser().parse_args(["--domain", "voiced"]).domain == "voiced"


def test_the_margin_term_is_an_option(bench):
    assert bench.build_parser().parse_args([]).term == "head"
    assert bench.build_parser().parse_args(["--term", "margin"]).term == "margin"
    assert bench.build_parser().parse_args(["--term", "margin", "--mel-bridge"]).mel_bridge


def test_the_planned_margin_objective_scores_every_copy_on_one_plan(bench):
    seen = {}

    class Term:
        mel_bridge = None

        def __call__(self, waves, texts=None, wave_lengths=None, plans=None):
            seen["plans"], seen["texts"] = plans, texts
            return waves.sum() * 0.0, None

    objective = bench.planned_margin(Term(), "PLAN")
    loss, _ = objective(waves=torch.zeros(3, 10), sites=[["s"]] * 3)
    assert seen == {"plans": ["PLAN"] * 3, "texts": None} and float(loss) == 0.0


def test_the_planned_margin_objective_hears_the_vocos_mels_through_a_bridge(bench):
    from leakloss.mel_bridge import vocos_mels

    seen = {}

    class Term:
        mel_bridge = object()

        def __call__(self, waves=None, texts=None, wave_lengths=None, plans=None, *, mels=None, mel_lengths=None):
            seen.update(waves=waves, plans=plans, mels=mels, mel_lengths=mel_lengths)
            return mels.sum() * 0.0, None

    waves = torch.randn(2, 4000, generator=torch.Generator().manual_seed(0)) * 0.1
    bench.planned_margin(Term(), "PLAN")(waves=waves, sites=[["s"]] * 2)
    want, want_lengths = vocos_mels(waves)
    assert seen["waves"] is None and seen["plans"] == ["PLAN"] * 2
    assert torch.equal(seen["mels"], want) and torch.equal(seen["mel_lengths"], want_lengths)


def test_sentences_come_from_a_file_from_a_line_on_without_the_training_ones(bench, tmp_path):
    from leakloss.speech.corpus import builtin_sentences, split_sentences

    train, held = split_sentences(builtin_sentences())
    assert bench.sentences(None) == held
    path = tmp_path / "prompts.tsv"
    path.write_text(f"a\tपहिलो वाक्य\nb\t{train[0]}\nc\tदोस्रो वाक्य\r\nतेस्रो वाक्य\n\n", encoding="utf-8")
    assert bench.sentences(str(path)) == ["पहिलो वाक्य", "दोस्रो वाक्य", "तेस्रो वाक्य"]
    assert bench.sentences(str(path), 3) == ["दोस्रो वाक्य", "तेस्रो वाक्य"]
    with pytest.raises(ValueError, match="no sentence"):
        bench.sentences(str(path), 9)


def test_a_bad_texts_file_exits_2(bench, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--texts", str(tmp_path / "missing.tsv")])
    assert exc.value.code == 2 and "error: --texts: [Errno 2]" in capsys.readouterr().err
