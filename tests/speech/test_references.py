"""leakloss.speech.references: the teacher's readings of a text, cached by text, voice, frontend and synthesizer."""

from __future__ import annotations

from leakloss.speech import versions
from leakloss.speech.references import synthesised_references

TEXT = "नमस्ते"


def test_a_cached_reference_is_reused_until_espeak_changes(tmp_path, monkeypatch):
    # an upgraded espeak-ng reused the old one's references
    first = synthesised_references(TEXT, cache_dir=tmp_path)
    assert synthesised_references(TEXT, cache_dir=tmp_path) == first and all(p.is_file() for p in first)
    monkeypatch.setattr(versions, "espeak_version", lambda: "espeak-ng 9.9")
    upgraded = synthesised_references(TEXT, cache_dir=tmp_path)
    assert set(upgraded).isdisjoint(first) and all(p.is_file() for p in upgraded)
