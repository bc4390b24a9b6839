"""Shared fixtures for the acoustic tests: a tiny random recognizer, a phone vocabulary, peaky emissions."""

from __future__ import annotations

import pytest
import torch

from leakloss.acoustic.recognizer import EMBEDDED_DIR, Recognizer
from leakloss.acoustic.recognizer_training import build_vocab
from leakloss.text.phoneset import PhoneSet

HINDI_EXTRA = [["ɛː", "ə", "ɪ", "uː", "eː", "ɾ", "ɔː", "aː", "iː"]]


@pytest.fixture(scope="session")
def vocab() -> dict[str, int]:
    return build_vocab(HINDI_EXTRA)


@pytest.fixture(scope="session")
def phoneset(vocab) -> PhoneSet:
    return PhoneSet(vocab)


@pytest.fixture(scope="session")
def tiny_recognizer(vocab) -> Recognizer:
    from transformers import Wav2Vec2Config, Wav2Vec2ForCTC

    torch.manual_seed(0)
    config = Wav2Vec2Config(
        vocab_size=len(vocab), pad_token_id=0, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, conv_dim=(16,) * 7, conv_stride=(5, 2, 2, 2, 2, 2, 2),
        conv_kernel=(10, 3, 3, 3, 3, 2, 2), num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=2,
        feat_extract_norm="layer", do_stable_layer_norm=True,
    )
    return Recognizer(Wav2Vec2ForCTC(config), vocab, name="tiny")


@pytest.fixture(scope="session")
def trained_recognizer() -> Recognizer:
    if not (EMBEDDED_DIR / "a" / "model.safetensors").exists():
        pytest.skip("embedded recognizer 'a' is not built")
    return Recognizer.load("a")


def peaky_log_probs(script: list[str | None], phoneset: PhoneSet, sharp: float = 12.0) -> torch.Tensor:
    """One frame per entry: a phone name (its first token wins) or None (blank) -> ``[f, v]`` log-probs."""
    v = len(phoneset)
    logits = torch.zeros(len(script), v)
    for t, p in enumerate(script):
        tok = phoneset.blank if p is None else min(phoneset.tokens(p))
        logits[t, tok] = sharp
    return logits.log_softmax(-1)


def script_for(words: list[list[str]], frames_per_phone: int = 3,
               gap: int = 2) -> tuple[list[str | None], list[tuple[int, int]]]:
    """Blank gaps between phones; returns the script and each word's (first, last_exclusive) frame."""
    script: list[str | None] = [None] * gap
    spans = []
    for w in words:
        first = len(script)
        for p in w:
            script += [p] * frames_per_phone + [None] * gap
        spans.append((first, len(script) - gap))
    return script, spans


@pytest.fixture(scope="session")
def peaky():
    """``peaky(script, phoneset)`` -> peaky ``[f, v]`` log-probs (see :func:`peaky_log_probs`)."""
    return peaky_log_probs


@pytest.fixture(scope="session")
def scripted():
    """``scripted(words)`` -> (script, word frame spans) (see :func:`script_for`)."""
    return script_for
