"""Fit the mel bridge: ``python -m train_bridge [minutes=10] [out=STEM]`` (Hydra, ``conf/train_bridge.yaml``;
``out=models/bridge`` writes ``models/bridge.safetensors`` + ``.json``; the default is the shipped bridge).

The bridge (:class:`leakloss.mel_bridge.MelBridge`) maps an F5 / Vocos log mel to Whisper's log-mel of the same
audio, so that the leak penalty on a Whisper recognizer need not vocode (docs/penalty.md). It is fitted on the
training corpus of recognizer wb (espeak teacher/Hindi/variant voices, Piper, the Festival/flite training voices:
``per_voice`` readings each); the unseen family and its twin are refused, real recordings never read. Input: the
Vocos log mel of each reading resampled to 24 kHz (:func:`leakloss.mel_bridge.vocos_mels`); target: Whisper's
log-mel of the reading at unit RMS x ``WHISPER_FRAME_RMS``, on its own length (what ``WhisperRecognizer.
frame_features`` hears). The linear part is fitted first in closed form (ridge, lambda chosen on the held-back
readings), then Adam on both parts for ``minutes`` of wall time, MSE in log10 units; the checkpoint with the lowest
held-back error is kept. Minutes long: no checkpoint is kept between runs (a rerun starts afresh).
"""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path

import hydra
import soundfile as sf
import torch
from omegaconf import DictConfig, OmegaConf

from leakloss.atomic import output_folder_problem
from leakloss.checks import SettingsError, UntrainedError, check_config, check_trained
from leakloss.config import config_dir, instantiate_setting, run_unsaved_fit
from leakloss.mel_bridge import EMBEDDED_BRIDGE, MelBridge, vocos_mels
from leakloss.speech.corpus import ROLES as CORPUS_ROLES

#: the largest ridge lambda tried: its penalty term (lambda x readings' frames / 1000) stays far from float64's range
RIDGE_LAMBDA_MAX = 1e12


def kept_out() -> set[str]:
    """The unseen family and its speaker twin: never in the bridge's fitting data."""
    from leakloss.speech import festival

    return set(festival.UNSEEN_VOICES) | set(festival.UNSEEN_SPEAKER_TWINS)


def output_stem(cfg: DictConfig) -> Path:
    return Path(cfg.out) if cfg.out is not None else EMBEDDED_BRIDGE


def check_settings(cfg: DictConfig) -> None:
    """:class:`~leakloss.checks.SettingsError` for a setting that cannot work, before any audio is read."""
    positive = (0.0, math.inf, False)
    check_config(cfg, whole={"per_voice": 2, "batch": 1, "eval_every": 1, "num_threads": 1, "recorded_readings": 0},
                 numbers={"minutes": positive, "lr": positive, "heldback_fraction": (0.0, 1.0, False)},
                 seeds=("seed",))
    if cfg.heldback_fraction >= 1:  # nothing would be left to fit on
        raise SettingsError(f"heldback_fraction must be a finite number in (0, 1), got {cfg.heldback_fraction!r}")
    lambdas = cfg.ridge_lambdas
    # a number or null was a TypeError; inf (or 1e308, whose ridge overflows) poisoned the choice of lambda
    if not OmegaConf.is_list(lambdas) or not lambdas or any(
            isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= RIDGE_LAMBDA_MAX for v in lambdas):
        shown = list(lambdas) if OmegaConf.is_list(lambdas) else lambdas
        raise SettingsError(f"ridge_lambdas must be a list of numbers in (0, {RIDGE_LAMBDA_MAX:g}], got {shown!r}")
    roles = cfg.roles
    allowed = [r for r in CORPUS_ROLES if r != "recorded"]  # recorded voices come through recorded_readings
    if not OmegaConf.is_list(roles) or not roles or any(r not in allowed for r in roles):
        raise SettingsError(f"roles must be a list of {', '.join(allowed)}, got {roles!r} (recorded voices: "
                            "recorded_readings)")
    stem = output_stem(cfg)
    if stem.name in ("", ".", "..") or stem.is_dir() or stem.suffix:
        raise SettingsError(f"out={cfg.out}: give a file stem without '.' (out=models/bridge writes "
                            "models/bridge.safetensors), not a folder")
    for path in (stem.with_suffix(".json"), stem.with_suffix(".safetensors")):
        if path.is_dir():  # refused after the whole fit, by the write
            raise SettingsError(f"out={cfg.out}: {path} is a folder; give another stem")
    problem = output_folder_problem(stem.parent)
    if problem is not None:
        raise SettingsError(f"out: {problem}")


def fitting_readings(cfg: DictConfig) -> list[tuple[str, Path]]:
    """``(voice, audio path)`` of up to ``per_voice`` readings of each training voice, drawn with the seed from
    recognizer wb's training corpora (built, or read from the cache)."""
    from leakloss.speech.corpus import build_corpus, builtin_sentences, split_for_training
    from train_recognizers.whisper import recorded_training_voices

    train, _ = split_for_training(builtin_sentences(), 0.1)
    cache = Path(cfg.cache_dir).expanduser() / "corpus"
    corpora = [build_corpus(train, cache, roles=list(cfg.roles), seed=0)]
    voices = recorded_training_voices(None) if cfg.recorded_readings else []
    if voices:
        corpora.append(build_corpus(train, cache, roles=["recorded"], recorded_voices=voices,
                                    readings_per_sentence=cfg.recorded_readings, seed=0))
    by_voice: dict[str, list[Path]] = {}
    for corpus in corpora:
        for item in corpus.items:
            by_voice.setdefault(item.voice, []).append(corpus.root / item.audio)
    return choose_readings(by_voice, cfg.per_voice, cfg.seed)


def choose_readings(by_voice: dict[str, list[Path]], per_voice: int, seed: int) -> list[tuple[str, Path]]:
    """Up to ``per_voice`` readings of each voice, drawn with ``seed``; a kept-out voice (:func:`kept_out`) among
    them is a :class:`SettingsError`, never fitted on."""
    banned = kept_out() & set(by_voice)
    if banned:
        raise SettingsError(f"the readings hold voices {sorted(banned)}, kept out of every shipped model")
    rng = random.Random(seed)
    chosen = []
    for voice in sorted(by_voice):
        paths = sorted(by_voice[voice])
        rng.shuffle(paths)
        chosen += [(voice, p) for p in paths[:per_voice]]
    return chosen


def pair(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """One reading -> (its Vocos log mel ``[n, 100]``, Whisper's normalised log-mel ``[80, 2f]`` of it)."""
    from leakloss.acoustic.whisper_encoder import log_mel, mel_filters
    from leakloss.acoustic.whisper_recognizer import WHISPER_FRAME_RMS
    from leakloss.functional.leak import rms_normalize

    wave, rate = sf.read(str(path), dtype="float32")
    if rate != 16_000 or wave.ndim != 1:
        raise ValueError(f"{path}: expected 16 kHz mono, got {rate} Hz, shape {wave.shape}")
    wave = torch.from_numpy(wave)[None]
    frames = -(-wave.shape[-1] // 320)
    target = log_mel(rms_normalize(wave) * WHISPER_FRAME_RMS, mel_filters(), frames)[0]
    mels, _ = vocos_mels(wave)
    return mels[0], target


def mse_log10(bridge: MelBridge, items) -> torch.Tensor:
    """Mean squared error in log10 units of the bridge over ``items`` (a list of :func:`pair`), per element."""
    total, count = 0.0, 0
    for mels, target in items:
        n_out = target.shape[-1]
        got = bridge(mels[None], torch.tensor([mels.shape[0]]), n_out, torch.tensor([n_out]))[0]
        err = ((got - target) * 4).pow(2)
        total, count = total + err.sum(), count + err.numel()
    return total / max(count, 1)


def ridge_fit(bridge: MelBridge, train, held, lambdas) -> tuple[float, float]:
    """Set the bridge's linear part by ridge regression (its net's output zeroed, so the bridge starts as the linear
    map): the lambda with the lowest held-back error. Returns (lambda, held-back RMSE of the linear bridge)."""
    from leakloss.functional.mel_bridge import level_normalize, to_whisper_grid

    k, c = bridge.in_bins, bridge.context

    def design(items):
        xs, ys = [], []
        for mels, target in items:
            n_out = target.shape[-1]
            x = to_whisper_grid(level_normalize(mels[None, :, :k], torch.tensor([mels.shape[0]])), n_out)[0]
            pad = torch.nn.functional.pad(x.T[None], (c, c), mode="replicate")[0].T
            xs.append(torch.cat([pad[j:j + n_out] for j in range(2 * c + 1)] + [torch.ones(n_out, 1)], -1))
            ys.append(target.T * 4 - 4)  # log10 power (floored)
        return torch.cat(xs).double(), torch.cat(ys).double()

    x, y = design(train)
    gram, cross, n = x.T @ x, x.T @ y, x.shape[0]
    best = None
    with torch.no_grad():
        torch.nn.init.zeros_(bridge.net[-1].weight)
        torch.nn.init.zeros_(bridge.net[-1].bias)
        for lam in lambdas:
            w = torch.linalg.solve(gram + lam * n / 1000 * torch.eye(gram.shape[0], dtype=gram.dtype), cross)
            bridge.linear.weight.copy_(w[:-1].reshape(2 * c + 1, k, -1).permute(2, 1, 0).float())
            bridge.linear.bias.copy_(w[-1].float())
            err = float(mse_log10(bridge, held).sqrt())
            if not math.isfinite(err):  # a lambda whose solve overflowed: never chosen, never poisons the choice
                continue
            if best is None or err < best[1]:
                best = (lam, err, w)
        if best is None:
            raise UntrainedError(f"no ridge lambda of {list(lambdas)} gave a finite held-back error: nothing saved")
        lam, err, w = best
        bridge.linear.weight.copy_(w[:-1].reshape(2 * c + 1, k, -1).permute(2, 1, 0).float())
        bridge.linear.bias.copy_(w[-1].float())
    return lam, err


def run(cfg: DictConfig) -> dict:
    """Fit the bridge of ``cfg`` and save it with its card. SettingsError before any work; UntrainedError when
    no update ran or the weights hold NaN/Inf (nothing saved)."""
    check_settings(cfg)
    bridge = instantiate_setting(cfg.bridge, "bridge")
    if not any(p.requires_grad for p in bridge.parameters()):
        raise SettingsError("bridge: it has nothing to train (bridge.frozen=true?): set bridge.frozen=false")
    torch.set_num_threads(cfg.num_threads)
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    start = time.time()
    readings = fitting_readings(cfg)
    items = [pair(p) for _, p in readings]
    order = list(range(len(items)))
    rng.shuffle(order)
    n_held = max(1, round(cfg.heldback_fraction * len(items)))
    held = [items[i] for i in order[:n_held]]
    train = [items[i] for i in order[n_held:]]
    if not train:  # a raw torch.cat error in the ridge fit
        raise SettingsError(f"heldback_fraction={cfg.heldback_fraction} holds back all {len(items)} readings: "
                            "nothing is left to fit on (lower it, or raise per_voice)")
    print(f"{len(items)} readings of {len({v for v, _ in readings})} voices ({len(train)} fit, {len(held)} held "
          f"back), {time.time() - start:.0f}s", flush=True)
    lam, linear_err = ridge_fit(bridge, train, held, list(cfg.ridge_lambdas))
    print(f"ridge: lambda {lam:g}, held-back RMSE {linear_err:.3f} log10", flush=True)
    opt = torch.optim.Adam([p for p in bridge.parameters() if p.requires_grad], lr=cfg.lr)
    # the ridge start is the checkpoint to beat: if no evaluation beats it, it is what is saved (and what the card
    # describes), not unchecked Adam weights
    best_err, best_state, step = linear_err, {k: v.clone() for k, v in bridge.state_dict().items()}, 0
    best_step = 0  # the Adam step of the weights kept (0: the ridge start)
    budget, fit_start = cfg.minutes * 60, time.time()
    evaluated = 0
    while time.time() - fit_start < budget:
        batch = rng.sample(train, min(cfg.batch, len(train)))
        loss = mse_log10(bridge, batch)
        if not bool(torch.isfinite(loss)):
            raise UntrainedError(f"the loss is not finite at step {step + 1} (try a lower lr than {cfg.lr}): "
                                 "nothing saved")
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        last = time.time() - fit_start >= budget  # the steps after the last evaluation are evaluated too
        if step % cfg.eval_every == 0 or last:
            with torch.no_grad():
                err = float(mse_log10(bridge, held).sqrt())
            evaluated = step
            print(f"step {step}  train {float(loss.detach()) ** 0.5:.3f}  held back {err:.3f}  {time.time() - fit_start:.0f}s",
                  flush=True)
            if err < best_err:
                best_err, best_state, best_step = err, {k: v.clone() for k, v in bridge.state_dict().items()}, step
    if evaluated != step:  # (a budget ending between the loop's check and the last step's)
        with torch.no_grad():
            err = float(mse_log10(bridge, held).sqrt())
        if err < best_err:
            best_err, best_state, best_step = err, {k: v.clone() for k, v in bridge.state_dict().items()}, step
    bridge.load_state_dict(best_state)
    stem = output_stem(cfg)
    check_trained(step, bridge.state_dict(), str(stem))
    voices = sorted({v for v, _ in readings})
    card = {
        "fitted_on": f"readings of the training voices only ({', '.join(voices)}; {cfg.per_voice} a voice, "
                     f"{len(items)} readings); never the unseen family or its twin ({', '.join(sorted(kept_out()))}) "
                     "or any real recording",
        "input": "Vocos log mel (24 kHz, n_fft 1024, hop 256, 100 htk bins) of the audio resampled to 24 kHz; "
                 "the bins under 8 kHz",
        "target": "Whisper log-mel (16 kHz, n_fft 400, hop 160, 80 slaney bins, floor max - 8) of the same audio at "
                  "unit RMS x 0.05 (as WhisperRecognizer.frame_features hears it)",
        # the held-back readings also chose the ridge lambda and the checkpoint: a selection figure, not a test
        "heldback_rmse_log10": round(best_err, 4), "linear_only_heldback_rmse_log10": round(linear_err, 4),
        # steps: Adam steps run; kept_step: the step of the weights saved (0: the ridge start, no Adam step beat it)
        "ridge_lambda": lam, "steps": step, "kept_step": best_step, "training_minutes": round((time.time() - fit_start) / 60, 1),
        "run_minutes": round((time.time() - start) / 60, 1), "seed": cfg.seed,
        "parameters": sum(p.numel() for p in bridge.parameters()),
        "trainer": f"ridge fit of the linear part, then Adam lr {cfg.lr}, batch {cfg.batch} readings, "
                   f"{cfg.minutes:g} min; the checkpoint with the lowest held-back error kept (python -m train_bridge)",
        "license": "weights fitted by the leakloss authors on audio synthesised by espeak-ng, Festival/flite and "
                   "Piper voices",
    }
    bridge.frozen = True
    bridge.save(stem, **card)
    print(json.dumps(card, indent=1))
    return card


@hydra.main(version_base="1.3", config_path=config_dir(), config_name="train_bridge")
def main(cfg: DictConfig) -> None:
    run_unsaved_fit(run, cfg)


if __name__ == "__main__":
    from leakloss.config import exit_on_bad_overrides

    exit_on_bad_overrides("train_bridge")
    main()
