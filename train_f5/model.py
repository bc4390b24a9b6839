"""The small Hindi-base F5: F5-TTS's own ``DiT`` inside a ``CFM``, the Devanagari char vocab, vocos mels."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from integrations.f5_tts import MEL_SPEC_KWARGS, LeakAwareCFM, devanagari_chars
from leakloss.checks import SettingsError, check_whole
from leakloss.constants import MEL_BINS


@dataclass(frozen=True)
class HindiBaseArch:
    """The Hindi base's ``DiT`` dims: the code's one home for them (the defaults of :func:`hindi_base_f5`).

    The configs have their own one home, ``leakloss/conf/f5/embedded.yaml`` ``arch`` (``train_f5.yaml``'s
    ``model`` interpolates it); ``tests/train_f5/test_model.py`` keeps the two equal. A saved model
    carries its dims in its card (``model.json`` ``architecture``), so changing these never breaks loading it."""

    dim: int = 192
    depth: int = 4
    heads: int = 4
    dim_head: int = 48
    ff_mult: int = 2
    text_dim: int = 128
    conv_layers: int = 2
    #: F5's own ZipVoice-style option: the text encoder's states spread evenly over the audio's frames instead
    #: of text-then-filler (F5's default), so the model starts near an alignment: from scratch it learned content
    #: in hundreds of updates where the filler layout had not in 18,905 (docs/f5_base.md, 2026-12-05).
    text_embedding_average_upsampling: bool = True


def devanagari_char_map() -> dict[str, int]:
    return {c: i for i, c in enumerate(devanagari_chars())}


def hindi_base_f5(dim: int = HindiBaseArch.dim, depth: int = HindiBaseArch.depth, heads: int = HindiBaseArch.heads,
                  dim_head: int = HindiBaseArch.dim_head, ff_mult: int = HindiBaseArch.ff_mult,
                  text_dim: int = HindiBaseArch.text_dim, conv_layers: int = HindiBaseArch.conv_layers,
                  text_embedding_average_upsampling: bool = HindiBaseArch.text_embedding_average_upsampling,
                  seed: int = 0, **leak: object) -> LeakAwareCFM:
    """A ``LeakAwareCFM`` with a freshly initialised ``DiT`` (dims: :class:`HindiBaseArch` unless given);
    ``leak`` goes to :class:`LeakAwareCFM` (``leak_penalty``, ``leak_weight``, ``site_lookup``, ...; none: a
    plain ``CFM``)."""
    from f5_tts.model import DiT

    sizes = dict(dim=dim, depth=depth, heads=heads, dim_head=dim_head, ff_mult=ff_mult, text_dim=text_dim)
    for name, value in sizes.items():  # dim=0 was a 74-line RuntimeError deep in the DiT
        check_whole(value, name)
    check_whole(conv_layers, "conv_layers", low=0)
    if not isinstance(text_embedding_average_upsampling, bool):
        raise SettingsError(f"text_embedding_average_upsampling must be true or false, got "
                            f"{text_embedding_average_upsampling!r}")
    vocab = devanagari_char_map()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        transformer = DiT(dim=dim, depth=depth, heads=heads, dim_head=dim_head, ff_mult=ff_mult, text_dim=text_dim,
                          conv_layers=conv_layers, mel_dim=MEL_BINS, text_num_embeds=len(vocab),
                          text_embedding_average_upsampling=text_embedding_average_upsampling)
    return LeakAwareCFM(transformer, mel_spec_kwargs=MEL_SPEC_KWARGS, vocab_char_map=vocab, **leak)
