"""Train the embedded tiny Vocos: ``python -m train_vocoder [minutes=6] [out=STEM]`` (Hydra, ``conf/train_vocoder.yaml``;
``out=models/voc`` writes ``models/voc.safetensors`` + ``models/voc.json``; the default is the embedded vocoder).

A small Vocos generator (ConvNeXt backbone + ISTFT head, the released 24 kHz model's I/O: 100 log-mel
bins, n_fft 1024, hop 256) fitted to espeak readings of the training sentences (teacher and Hindi-base
voices), so that the tiny-F5 demo and tests vocode mels into audio a recognizer can hear. No adversarial
loss (a CPU budget of minutes): multi-resolution STFT (spectral convergence + log magnitude) and
log-mel L1. It sounds buzzy; what matters here is that the recognizers still read it, which the card
records as recognizer A's phone error rate on vocoded held-out readings next to the originals'.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from pathlib import Path

import hydra
import torch
import torchaudio.functional as AF
from omegaconf import DictConfig
from torch import Tensor

from leakloss.acoustic.recognizer import Recognizer
from leakloss.atomic import output_folder_problem
from leakloss.checks import SettingsError, UntrainedError, check_config, check_trained
from leakloss.config import config_dir, instantiate_setting, run_unsaved_fit
from leakloss.constants import MEL_BINS, MEL_HOP, MEL_N_FFT, MEL_SAMPLE_RATE, SAMPLE_RATE
from leakloss.scorer import corpus_phone_error_rate
from leakloss.speech.corpus import builtin_sentences, split_sentences
from leakloss.speech.synth import (
    HELDOUT_TEACHER_VOICE,
    TRAIN_HINDI_VOICES,
    TRAIN_TEACHER_VOICES,
    speak_phones,
    speak_text,
)
from leakloss.text.sites import SiteFinder
from leakloss.vocoder import EMBEDDED_VOCODER, MelToWave, log_mel, save_vocoder, vocoder_sizes

RESOLUTIONS = ((512, 128), (1024, 256), (2048, 512))
#: Fewest mel frames a training segment may have: the largest STFT's reflect padding (n_fft / 2 each side) needs a
#: segment longer than n_fft / 2 samples (frames=2 failed in torch.stft after the whole synthesis).
MIN_FRAMES = max(n_fft for n_fft, _ in RESOLUTIONS) // (2 * MEL_HOP) + 1


def stft_loss(pred: Tensor, target: Tensor) -> Tensor:
    """Multi-resolution STFT loss of ``[b, t]`` waves: spectral convergence + L1 of log magnitudes."""
    total = pred.new_zeros(())
    for n_fft, hop in RESOLUTIONS:
        window = torch.hann_window(n_fft, dtype=pred.dtype, device=pred.device)
        p = torch.stft(pred, n_fft, hop, window=window, return_complex=True).abs().clamp(min=1e-7)
        t = torch.stft(target, n_fft, hop, window=window, return_complex=True).abs().clamp(min=1e-7)
        total = total + torch.linalg.norm(t - p) / torch.linalg.norm(t) + (t.log() - p.log()).abs().mean()
    return total / len(RESOLUTIONS)


def readings(sentences: list[str], voices, limit_s: float) -> list[Tensor]:
    """24 kHz waves of espeak readings (teacher phones and Hindi-base text), up to ``limit_s`` seconds."""
    finder = SiteFinder()
    out, total = [], 0.0
    for i, text in enumerate(sentences):
        voice = voices[i % len(voices)]
        if voice.language == "hi":
            wave = speak_text(text, voice).waveform
        else:
            wave = speak_phones([w.nepali for w in finder(text) if w.skipped is None], voice).waveform
        out.append(AF.resample(wave, SAMPLE_RATE, MEL_SAMPLE_RATE))
        total += wave.numel() / SAMPLE_RATE
        if total >= limit_s:
            break
    return out


def batches(waves: list[Tensor], batch: int, frames: int, rng: random.Random):
    seg = frames * MEL_HOP
    while True:
        chunk = []
        for _ in range(batch):
            w = rng.choice(waves)
            start = rng.randrange(0, max(w.numel() - seg, 1))
            piece = w[start: start + seg]
            chunk.append(torch.nn.functional.pad(piece, (0, seg - piece.numel())))
        yield torch.stack(chunk)


@torch.no_grad()
def heldout_per(vocoder: MelToWave, sentences: list[str]) -> tuple[float, float, int]:
    """What the recognizers hear: recognizer A's PER on held-out teacher readings, original and vocoded."""
    recognizer, finder = Recognizer.load("embedded:a"), SiteFinder()
    originals, vocoded, phones = [], [], []
    for text in sentences:
        words = [w for w in finder(text) if w.skipped is None]
        wave16 = speak_phones([w.nepali for w in words], HELDOUT_TEACHER_VOICE).waveform
        originals.append(wave16)
        vocoded.append(vocoder(log_mel(AF.resample(wave16, SAMPLE_RATE, MEL_SAMPLE_RATE)[None]))[0])
        phones.append([p for w in words for p in w.nepali])
    return corpus_phone_error_rate(recognizer, originals, phones), corpus_phone_error_rate(recognizer, vocoded, phones), len(sentences)


def output_stem(cfg: DictConfig) -> Path:
    """Where the vocoder goes: ``STEM.safetensors`` + ``STEM.json`` (``out``, or the embedded vocoder's stem)."""
    return Path(cfg.out) if cfg.out is not None else EMBEDDED_VOCODER


def check_settings(cfg: DictConfig) -> None:
    """:class:`~leakloss.checks.SettingsError` for a setting that cannot work (``batch=0``, ``lr=nan``, ``out`` in a
    folder that cannot be written, ...), before any audio is synthesised."""
    positive = (0.0, math.inf, False)
    check_config(cfg, whole={"batch": 1, "frames": MIN_FRAMES, "heldout_sentences": 1, "num_threads": 1},
                 numbers={"minutes": positive, "audio_minutes": positive, "lr": positive}, seeds=("seed",))
    stem = output_stem(cfg)
    if stem.name in ("", ".", "..") or stem.is_dir():
        raise SettingsError(f"out={cfg.out}: give a file stem (out=models/voc writes models/voc.safetensors), not a folder")
    if stem.suffix:  # run-0.5 would write run-0.safetensors, another stem's files
        raise SettingsError(f"out={cfg.out}: a file stem has no '.' in its last part (it would be cut at "
                            f"{stem.suffix!r}); e.g. out={stem.with_name(stem.name.replace('.', '_'))}")
    problem = output_folder_problem(stem.parent)
    if problem is not None:
        raise SettingsError(f"out: {problem}")
    for target in (stem.with_suffix(".safetensors"), stem.with_suffix(".json")):  # found after the training before
        if target.exists() and not target.is_file():
            raise SettingsError(f"out: {target} is in the way (not a regular file): the vocoder could not be saved")


def run(cfg: DictConfig) -> dict:
    """Fit the vocoder of ``cfg`` (a composed ``train_vocoder`` config) and save it with its card.

    Raises:
        SettingsError: a setting that cannot work (before any work).
        UntrainedError: no step ran, or the weights hold NaN/Inf (nothing saved).
    """
    check_settings(cfg)
    vocoder = instantiate_setting(cfg.vocoder, "vocoder")  # before the audio is synthesised
    if not any(p.requires_grad for p in vocoder.parameters()):  # failed in backward() after the synthesis
        raise SettingsError("vocoder: it has nothing to train (vocoder.frozen=true?): set vocoder.frozen=false")
    torch.set_num_threads(cfg.num_threads)
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    start = time.time()
    train, held = split_sentences(builtin_sentences())
    voices = list(TRAIN_TEACHER_VOICES) + list(TRAIN_HINDI_VOICES)
    waves = readings(train, voices, cfg.audio_minutes * 60)
    read = train[: len(waves)]  # one reading a sentence, in order, until audio_minutes is reached
    print(f"{len(waves)} readings, {sum(w.numel() for w in waves) / MEL_SAMPLE_RATE / 60:.1f} min, "
          f"{time.time() - start:.0f}s", flush=True)
    opt = torch.optim.AdamW(vocoder.parameters(), lr=cfg.lr, weight_decay=1e-4)
    budget, fit_start, step = cfg.minutes * 60, time.time(), 0
    for wave in batches(waves, cfg.batch, cfg.frames, rng):
        elapsed = time.time() - fit_start
        if elapsed > budget:
            break
        for group in opt.param_groups:  # cosine over the wall-time budget
            group["lr"] = cfg.lr * 0.5 * (1 + math.cos(math.pi * elapsed / budget))
        mel = log_mel(wave)  # [b, n, 100]
        pred = vocoder.generate(mel)[:, : wave.shape[-1]]
        loss = stft_loss(pred, wave) + (log_mel(pred) - mel).abs().mean()
        if not bool(torch.isfinite(loss)):  # stepping on would train NaN for the rest of the budget
            raise UntrainedError(f"the loss is not finite at step {step + 1} (the training diverged; try a lower "
                                 f"lr than {cfg.lr}): nothing saved")
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(vocoder.parameters(), 5.0)
        opt.step()
        step += 1
        if step % 200 == 0:
            print(f"step {step}  loss {loss.item():.3f}  {elapsed:.0f}s", flush=True)

    fit_minutes = (time.time() - fit_start) / 60
    stem = output_stem(cfg)
    check_trained(step, vocoder.state_dict(), str(stem))  # the default stem is the shipped vocoder
    per_original, per_vocoded, n_heldout = heldout_per(vocoder.eval(), held[: cfg.heldout_sentences])
    card = {
        "class": "Vocos (VocosBackbone + ISTFTHead)", **vocoder_sizes(vocoder), "n_fft": MEL_N_FFT, "hop_length": MEL_HOP, "n_mels": MEL_BINS,
        "sample_rate": MEL_SAMPLE_RATE, "parameters": sum(p.numel() for p in vocoder.parameters()),
        "steps": step, "training_minutes": round(fit_minutes, 1),  # the fit only: synthesis and check apart
        "run_minutes": round((time.time() - start) / 60, 1), "seed": cfg.seed,
        "training_audio_minutes": round(sum(w.numel() for w in waves) / MEL_SAMPLE_RATE / 60, 1),
        "train_sentences": len(read), "train_voices": sorted({voices[i % len(voices)].name for i in range(len(read))}),
        "train_sentences_sha256": hashlib.sha256("\n".join(read).encode()).hexdigest(),
        "heldout_per_recognizer_a": {"original": round(per_original, 4), "vocoded": round(per_vocoded, 4),
                                     "sentences": n_heldout, "voice": HELDOUT_TEACHER_VOICE.name},
    }
    save_vocoder(stem, vocoder, card)
    print(json.dumps(card, indent=1))
    return card


@hydra.main(version_base="1.3", config_path=config_dir(), config_name="train_vocoder")
def main(cfg: DictConfig) -> None:
    run_unsaved_fit(run, cfg)


if __name__ == "__main__":
    from leakloss.config import exit_on_bad_overrides

    exit_on_bad_overrides("train_vocoder")  # a mistyped override is one error line, not Hydra's report
    main()
