"""Fixtures for the F5 integration tests: a small F5-prepared dataset made with F5's own prepare_csv_wavs."""

from __future__ import annotations

from pathlib import Path

import pytest


def write_clips(root: Path, n: int = 20, words: int = 3) -> Path:
    """``n`` espeak teacher readings (Nepali voices) of short phrases of the built-in sentences as wavs + F5's
    ``metadata.csv`` (``audio_file|text``, absolute paths); returns the csv."""
    import soundfile as sf

    from leakloss.constants import SAMPLE_RATE
    from leakloss.speech.corpus import builtin_sentences
    from leakloss.speech.synth import TRAIN_TEACHER_VOICES, speak_text

    wavs = root / "wavs"
    wavs.mkdir(parents=True, exist_ok=True)
    lines = ["audio_file|text"]
    sentences = builtin_sentences()
    for i in range(n):
        tokens = sentences[i % len(sentences)].replace("।", "").split()
        text = " ".join(tokens[(i // len(sentences)) * words:][:words]) or tokens[0]
        reading = speak_text(text, TRAIN_TEACHER_VOICES[i % len(TRAIN_TEACHER_VOICES)])
        path = wavs / f"clip_{i:03d}.wav"
        sf.write(str(path), reading.waveform.numpy(), SAMPLE_RATE)
        lines.append(f"{path.resolve()}|{text}")
    csv = root / "metadata.csv"
    csv.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return csv


def prepare(csv: Path, out: Path) -> Path:
    """F5's own preparation (``--pretrain`` mode: it writes the dataset's own sorted char vocab)."""
    from f5_tts.train.datasets.prepare_csv_wavs import prepare_and_save_set

    prepare_and_save_set(str(csv), str(out), is_finetune=False, num_workers=1)
    return out


@pytest.fixture(scope="session")
def prepared_dir(tmp_path_factory) -> Path:
    """A 20-clip F5-prepared folder (raw.arrow, duration.json, vocab.txt)."""
    pytest.importorskip("f5_tts")
    root = tmp_path_factory.mktemp("f5_prepared")
    return prepare(write_clips(root), root / "data")


@pytest.fixture(scope="session")
def tiny_prepared_dir(tmp_path_factory) -> Path:
    """A 5-clip F5-prepared folder (the bad-input checks' ``DATA``): the end-to-end runs on it take seconds."""
    pytest.importorskip("f5_tts")
    root = tmp_path_factory.mktemp("f5_tiny")
    return prepare(write_clips(root, n=5), root / "data")
