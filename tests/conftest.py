"""Fixtures shared across the test tree: tiny locally built models of the real classes."""

from __future__ import annotations

import lightning  # noqa: F401  first imported here, not inside a CliRunner: its log handler keeps the stderr it
import pytest     # saw at import, and a CliRunner's stream is closed after the command ("--- Logging error ---")
import torch


def build_tiny_recognizer(seed: int = 0, conv: int = 16):
    from transformers import Wav2Vec2Config, Wav2Vec2ForCTC

    from leakloss.acoustic.recognizer import Recognizer
    from leakloss.acoustic.recognizer_training import build_vocab

    vocab = build_vocab([["ɛː", "ə", "ɪ", "uː", "eː", "ɾ", "ɔː", "aː", "iː"]])
    torch.manual_seed(seed)
    config = Wav2Vec2Config(
        vocab_size=len(vocab), pad_token_id=0, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, conv_dim=(conv,) * 7, conv_stride=(5, 2, 2, 2, 2, 2, 2),
        conv_kernel=(10, 3, 3, 3, 3, 2, 2), num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2,
        feat_extract_norm="layer", do_stable_layer_norm=True,
    )
    return Recognizer(Wav2Vec2ForCTC(config), vocab, name=f"tiny-{seed}")


@pytest.fixture(autouse=True, scope="session")
def _leakloss_cache(tmp_path_factory):
    """Synthesised references (and any other rebuildable cache) of the tests go to a temporary folder, never to
    the user's ~/.cache/leakloss."""
    import os

    previous = os.environ.get("LEAKLOSS_CACHE")
    os.environ["LEAKLOSS_CACHE"] = str(tmp_path_factory.mktemp("leakloss_cache"))
    yield
    if previous is None:
        os.environ.pop("LEAKLOSS_CACHE", None)
    else:
        os.environ["LEAKLOSS_CACHE"] = previous


@pytest.fixture(scope="module")
def fake_w(tmp_path_factory):
    """A tiny random Whisper recognizer (:func:`tests.acoustic.test_frame_features.fake_whisper_recognizer`), one
    per test module."""
    pytest.importorskip("transformers")
    from tests.acoustic.test_frame_features import fake_whisper_recognizer

    return fake_whisper_recognizer(tmp_path_factory.mktemp("fakew") / "enc")


@pytest.fixture(scope="session")
def tiny_rec():
    return build_tiny_recognizer()


def embedded_ready() -> bool:
    from leakloss.acoustic.recognizer import EMBEDDED_DIR
    from leakloss.scorer import SHIPPED_HEADS

    return all((EMBEDDED_DIR / k / "model.safetensors").exists() for k in ("a", "b")) and all(
        (SHIPPED_HEADS / f"{h}.safetensors").exists() for h in ("deletion", "quality", "rawconv"))


needs_embedded = pytest.mark.skipif(not embedded_ready(), reason="embedded recognizers/heads not built")


@pytest.fixture(scope="session")
def embedded_penalty():
    """The shipped penalty (embedded recognizer A + raw-conv head), loaded once; skips when not built."""
    if not embedded_ready():
        pytest.skip("embedded recognizers/heads not built")
    from leakloss.penalty import LeakPenalty

    return LeakPenalty.load()


def espeak_mel_batch(recognizer, sentences: int = 12):
    """The first ``sentences`` built-in sentences read by the espeak teacher voices in turn, as F5 mels
    ``[b, n, 100]`` with their lengths, and the sites ``recognizer`` places on each reading (at least 8 in all)."""
    import torchaudio.functional as AF

    from leakloss.constants import MEL_SAMPLE_RATE, SAMPLE_RATE
    from leakloss.site_placement import place_sites
    from leakloss.speech.corpus import builtin_sentences
    from leakloss.speech.synth import TRAIN_TEACHER_VOICES, speak_text
    from leakloss.vocoder import log_mel

    mels, sites = [], []
    for i, text in enumerate(builtin_sentences()[:sentences]):
        reading = speak_text(text, TRAIN_TEACHER_VOICES[i % len(TRAIN_TEACHER_VOICES)])
        sites.append(place_sites(reading.waveform, text, recognizer))
        mels.append(log_mel(AF.resample(reading.waveform, SAMPLE_RATE, MEL_SAMPLE_RATE)[None])[0])
    lengths = torch.tensor([m.shape[0] for m in mels])
    x = torch.stack([torch.nn.functional.pad(m, (0, 0, 0, int(lengths.max()) - m.shape[0])) for m in mels])
    assert sum(map(len, sites)) >= 8
    return x, lengths, sites


def load_benchmark(name: str):
    """``benchmarks/NAME.py`` imported as a module (benchmarks are scripts, not a package), registered in
    ``sys.modules`` as ``NAME_under_test`` so that its dataclasses and pickles resolve."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
