import pytest
import soundfile as sf
import torch

from leakloss.acoustic.extract import evidence_from_json, evidence_to_json, extract_evidence
from leakloss.speech.synth import TEACHER_VOICES, speak_phones
from leakloss.text.sites import SiteFinder

TEXT = "आज नेकपा र हैन।"


def test_predict_loop_caches_and_roundtrips(tmp_path, tiny_rec):
    words = [w.nepali for w in SiteFinder()(TEXT) if w.skipped is None]
    path = tmp_path / "a.wav"
    sf.write(path, speak_phones(words, TEACHER_VOICES[0]).waveform.numpy(), 16000)
    (tmp_path / "bad.wav").write_bytes(b"not audio")
    clips = [(str(path), TEXT), (str(path), TEXT), (str(tmp_path / "bad.wav"), TEXT)]
    out = extract_evidence(clips, "tiny", tmp_path / "cache", recognizer=tiny_rec, progress=False)
    assert len(out) == 2  # duplicates computed once
    assert out[(str(tmp_path / "bad.wav"), TEXT)].status == "bad_input"
    files = list((tmp_path / "cache" / "tiny").glob("*.json"))
    assert len(files) == 2 and not list((tmp_path / "cache").rglob("*.tmp"))
    mtimes = {f: f.stat().st_mtime_ns for f in files}
    again = extract_evidence(clips, "tiny", tmp_path / "cache", recognizer=tiny_rec, progress=False)
    assert {f: f.stat().st_mtime_ns for f in files} == mtimes  # reused, not recomputed
    ev = out[(str(path), TEXT)]
    assert again[(str(path), TEXT)].status == ev.status
    back = evidence_from_json(evidence_to_json(ev))
    for k, s in ev.sites.items():
        assert torch.allclose(back.sites[k].evidence, s.evidence.float(), atol=1e-5)


def test_the_cache_key_changes_with_the_level_clips_are_heard_at(tmp_path, monkeypatch):
    # cached evidence was heard at one level: evidence heard at another must not be reused
    from leakloss.acoustic import extract

    clip = tmp_path / "c.wav"
    clip.write_bytes(b"RIFF....")
    before = extract.clip_key(clip, "नेकपा", "wb")
    assert extract.clip_key(clip, "नेकपा", "wb") == before
    monkeypatch.setattr(extract, "RECOGNIZER_HEARING_PEAK", 0.5)
    assert extract.clip_key(clip, "नेकपा", "wb") != before


def test_a_clip_gives_the_same_evidence_at_any_gain(tmp_path, tiny_rec):
    # head-training features are heard as the scorer hears a reading: at one peak
    words = [w.nepali for w in SiteFinder()(TEXT) if w.skipped is None]
    wave = speak_phones(words, TEACHER_VOICES[0]).waveform
    clips = []
    for gain in (0.05, 0.9):
        path = tmp_path / f"g{gain}.wav"
        sf.write(path, (wave * gain / wave.abs().max()).numpy(), 16000, subtype="FLOAT")
        clips.append((str(path), TEXT))
    out = extract_evidence(clips, "tiny", tmp_path / "cache", recognizer=tiny_rec, progress=False)
    quiet, loud = (out[c] for c in clips)
    assert quiet.status == loud.status and quiet.alignment is not None
    assert quiet.alignment.fit == pytest.approx(loud.alignment.fit, rel=1e-6)
