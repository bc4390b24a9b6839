"""Synthesis with the small F5 and the trainer's progress probe.

:func:`synthesize` is F5's in-context inference: the prompt's mel and text come first, the model fills in
the target text's frames (duration from the prompt's frames per character), the embedded Vocos vocodes the
new part. :func:`probe_phone_error_rates` reads a few held-out test words that way, each prompted by a random training
reading, and returns each given recognizer's phone error rate against the phones espeak ``hi`` itself says
for the target (the Hindi base should read them the Hindi way).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping

import torch
import torchaudio.functional as AF
from torch import Tensor

from leakloss.constants import MEL_SAMPLE_RATE, SAMPLE_RATE

PROBE_TEXTS = 4
#: How the Hindi base is sampled (its probes, the fine-tune experiment, the demo's probe set): F5's Euler steps,
#: classifier-free guidance and sway sampling, as F5-TTS's own inference defaults except 16 steps instead of 32
#: (on training words of the 6,166-update base, 32 steps read no better: recognizer B's PER 0.61 both).
NFE = 16
CFG_STRENGTH = 2.0
SWAY_SAMPLING = -1.0


@torch.no_grad()
def infill(model, prompt_mel: Tensor, prompt_text: str, text: str, *, steps: int = NFE,
           cfg_strength: float = CFG_STRENGTH, seed: int = 0) -> Tensor:
    """``prompt_mel [n, 100]`` + texts -> the log mel of ``text`` alone ``[m, 100]`` (fp32, the prompt cut off);
    ``m`` from the prompt's frames per character."""
    n_prompt = prompt_mel.shape[0]
    frames = n_prompt + max(8, math.ceil(n_prompt * len(text) / max(len(prompt_text), 1)))
    device = next(model.parameters()).device
    out, _ = model.sample(prompt_mel[None].to(device), [f"{prompt_text} {text}"], frames, steps=steps,
                          cfg_strength=cfg_strength, sway_sampling_coef=SWAY_SAMPLING, seed=seed)
    return out[0, n_prompt:].float()


def vocode_16k(mel: Tensor, vocoder) -> Tensor:
    """``mel [n, 100]`` -> 16 kHz wave ``[t]`` (``MelToWave`` already resamples to its ``sample_rate_out``)."""
    wave = vocoder(mel[None].cpu())[0]
    rate = getattr(vocoder, "sample_rate_out", MEL_SAMPLE_RATE)
    return wave if rate == SAMPLE_RATE else AF.resample(wave, rate, SAMPLE_RATE)


def synthesize(model, prompt_mel: Tensor, prompt_text: str, text: str, vocoder, *, steps: int = NFE,
               cfg_strength: float = CFG_STRENGTH, seed: int = 0) -> Tensor:
    """``prompt_mel [n, 100]`` + texts -> 16 kHz wave ``[t]`` of ``text`` alone."""
    return vocode_16k(infill(model, prompt_mel, prompt_text, text, steps=steps, cfg_strength=cfg_strength,
                             seed=seed), vocoder)


def _with_weights(model, weights: Mapping[str, Tensor] | None):
    """A context that swaps ``weights`` (e.g. the EMA) into ``model`` and restores the training weights."""
    import contextlib

    @contextlib.contextmanager
    def swap():
        if weights is None:
            yield model
            return
        saved = {k: v.detach().clone() for k, v in model.state_dict().items() if k in weights}
        model.load_state_dict(weights, strict=False)
        try:
            yield model
        finally:
            model.load_state_dict(saved, strict=False)

    return swap()


def probe_phone_error_rates(model, weights: Mapping[str, Tensor] | None, corpus, recognizers: list[str], *, device,
                            n: int = PROBE_TEXTS, seed: int = 0) -> dict[str, float]:
    """Each recognizer's phone error rate on the same ``n`` syntheses of test-word phrases (see the module
    docstring): ``{name: PER}``. A recognizer that a content loss trains against hears its own teaching; the
    others are the independent figures."""
    from leakloss.acoustic.recognizer import Recognizer
    from leakloss.scorer import corpus_phone_error_rate
    from leakloss.speech.corpus import builtin_sentences, split_text_words
    from leakloss.speech.synth import HELDOUT_HINDI_VOICE, speak_text
    from leakloss.vocoder import MelToWave
    from train_f5.data import is_test_word

    rng = random.Random(seed)
    targets = sorted({w for s in builtin_sentences() for w in split_text_words(s) if is_test_word(w)})
    targets = targets[:: max(1, len(targets) // n)][:n]
    vocoder = MelToWave.embedded()
    waves, phones = [], []
    with _with_weights(model, weights):
        model.eval()
        for k, word in enumerate(targets):
            i = rng.randrange(len(corpus))
            waves.append(synthesize(model, corpus.mel(i), corpus.texts[i], word, vocoder, seed=seed + k))
            phones.append(speak_text(word, HELDOUT_HINDI_VOICE).phones)
    return {name: corpus_phone_error_rate(Recognizer.load(name), waves, phones) for name in recognizers}
