import json

import numpy as np
import pytest
import soundfile as sf

from leakloss.speech.real import default_dir, real_clips, speaker_split


def test_speaker_split_is_deterministic_and_keeps_other_sources_out_of_training():
    speakers = [f"slr54-{i:05x}" for i in range(300)]
    first = [speaker_split(s) for s in speakers]
    assert first == [speaker_split(s) for s in speakers]
    share = first.count("test") / len(first)
    assert 0.25 < share < 0.42  # a third, by hash
    assert speaker_split("juju2181") == "test" and speaker_split("anyone-else") == "test"


def test_real_clips_absent_folder_is_empty(tmp_path):
    assert real_clips(tmp_path / "nothing") == []


def test_real_clips_reads_a_manifest_and_filters_by_split(tmp_path):
    sf.write(tmp_path / "a.wav", (0.1 * np.sin(np.arange(8000) / 5)).astype(np.float32), 8000)
    rows = [{"id": "x1", "audio": "a.wav", "text": "नमस्ते", "speaker": "juju2181", "source": "t"},
            {"id": "x2", "audio": "a.wav", "text": "नमस्ते", "speaker": "slr54-00000", "source": "t"}]
    (tmp_path / "manifest.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                             encoding="utf-8")
    clips = real_clips(tmp_path)
    assert [c.id for c in clips] == ["x1", "x2"]
    assert [c.id for c in real_clips(tmp_path, split="test")] == [c.id for c in clips if c.split == "test"]
    wave = clips[0].load()
    assert wave.dim() == 1 and wave.numel() == 16000  # resampled to 16 kHz


@pytest.mark.skipif(not (default_dir() / "manifest.jsonl").is_file(), reason="shared real recordings absent")
def test_shared_real_recordings_split_by_speaker():
    clips = real_clips()
    assert len(clips) == 29
    train = {c.speaker for c in clips if c.split == "train"}
    test = {c.speaker for c in clips if c.split == "test"}
    assert train and test and not train & test


def test_a_speaker_id_in_another_case_or_with_spaces_keeps_its_split():
    # slr54-7F880 or 'slr54-7f880 ' made a test speaker a train speaker
    from leakloss.speech.real import speaker_split

    for speaker in ("slr54-7f880", "slr54-0a1b2", "juju2181"):
        assert {speaker_split(v) for v in (speaker, speaker.upper(), f" {speaker} ")} == {speaker_split(speaker)}
