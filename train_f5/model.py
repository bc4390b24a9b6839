"""The small Hindi-base F5: F5-TTS's own ``DiT`` inside a ``CFM``, the Devanagari char vocab, vocos mels."""

from __future__ import annotations

import torch

from integrations.f5_tts import MEL_SPEC_KWARGS, LeakAwareCFM, devanagari_chars
from leakloss.constants import MEL_BINS


def devanagari_char_map() -> dict[str, int]:
    return {c: i for i, c in enumerate(devanagari_chars())}


def hindi_base_f5(dim: int = 192, depth: int = 4, heads: int = 4, dim_head: int = 48, ff_mult: int = 2,
                  text_dim: int = 128, conv_layers: int = 2, seed: int = 0, **leak: object) -> LeakAwareCFM:
    """A ``LeakAwareCFM`` with a freshly initialised ``DiT``; ``leak`` goes to :class:`LeakAwareCFM` (``leak_penalty``,
    ``leak_weight``, ``site_lookup``, ...; none: a plain ``CFM``)."""
    from f5_tts.model import DiT

    vocab = devanagari_char_map()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        transformer = DiT(dim=dim, depth=depth, heads=heads, dim_head=dim_head, ff_mult=ff_mult, text_dim=text_dim,
                          conv_layers=conv_layers, mel_dim=MEL_BINS, text_num_embeds=len(vocab))
    return LeakAwareCFM(transformer, mel_spec_kwargs=MEL_SPEC_KWARGS, vocab_char_map=vocab, **leak)
