"""Pretrain the small Hindi-base F5: ``python -m train_f5 [max_minutes=120] [device=cuda bf16=true]``.

Time-budgeted and resumable: every ``checkpoint_minutes`` (and at the end) the model and its EMA
(``out_dir/checkpoint.safetensors``), the optimizer state (``optimizer.safetensors``) and the step
(``checkpoint.json``) are written atomically; a new run with the same ``out_dir`` continues from there
(with a fresh, re-warmed optimizer when only the weights are there, as in a committed checkpoint). ``out_dir/model.safetensors`` + ``model.json``
is the EMA model with its card (dims, vocab, mel settings, data, steps, figures): what ships.
SIGTERM or Ctrl-C stops a run after the current step with the same final checkpoint as the time budget.
Progress lines report the flow-matching loss and, at each checkpoint, recognizer A's phone error rate
on a few syntheses of held-out phrases prompted by another utterance (the Hindi base should read them
the Hindi way, so the reference phones are espeak ``hi``'s).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import random
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from leakloss.config import config_dir, instantiate_setting
from leakloss.constants import MEL_DESCRIPTION, MEL_HOP, MEL_SAMPLE_RATE

CHECKPOINT = "checkpoint"
OPTIMIZER = "optimizer"


def _flatten_optimizer(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    state = opt.state_dict()
    tensors = {f"optim.{idx}.{name}": (v if torch.is_tensor(v) else torch.tensor(v)).contiguous()
               for idx, per_param in state["state"].items() for name, v in per_param.items()}
    return tensors, {"param_groups": state["param_groups"]}


def _unflatten_optimizer(tensors: dict[str, torch.Tensor], meta: dict) -> dict:
    state: dict[int, dict] = {}
    for key, value in tensors.items():
        if key.startswith("optim."):
            _, idx, name = key.split(".", 2)
            state.setdefault(int(idx), {})[name] = value
    return {"state": state, "param_groups": meta["param_groups"]}


def save_checkpoint(out_dir: Path, model, ema: dict, opt, meta: dict) -> None:
    from safetensors.torch import save

    from leakloss.atomic import write_bytes_atomic, write_text_atomic

    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    tensors |= {f"ema.{k}": v.detach().cpu().contiguous() for k, v in ema.items()}
    optim, optim_meta = _flatten_optimizer(opt)
    out_dir.mkdir(parents=True, exist_ok=True)
    # weights and optimizer apart: the weights (small) can be committed and resumed with a fresh optimizer
    for name, part in ((CHECKPOINT, tensors), (OPTIMIZER, {k: v.cpu() for k, v in optim.items()})):
        write_bytes_atomic(out_dir / f"{name}.safetensors", save(part))
    write_text_atomic(out_dir / f"{CHECKPOINT}.json", json.dumps(meta | {"optimizer": optim_meta}, indent=1))


def load_checkpoint(out_dir: Path, model, ema: dict, opt) -> dict | None:
    """The counters of the checkpoint in ``out_dir`` after loading it into ``model``/``ema``/``opt`` (None: no
    checkpoint there); :class:`~leakloss.checks.ResumeError` when it cannot be read or another architecture wrote it."""
    from leakloss.checks import ResumeError, first_line

    path = out_dir / f"{CHECKPOINT}.safetensors"
    if not path.is_file() and not (out_dir / "model.safetensors").is_file():
        return None
    try:
        if not path.is_file():
            return _load_shipped_model(out_dir, model, ema)
        return _load_checkpoint(out_dir, model, ema, opt)
    except Exception as err:  # safetensors, json and load_state_dict each raise their own kind
        first = first_line(err)[:300]
        raise ResumeError(f"out_dir={out_dir}: its checkpoint cannot be continued ({type(err).__name__}: {first}); "
                          "delete it, or give another out_dir, to start afresh") from None


def _load_checkpoint(out_dir: Path, model, ema: dict, opt) -> dict:
    from safetensors.torch import load_file

    path = out_dir / f"{CHECKPOINT}.safetensors"
    tensors = load_file(str(path))
    meta = json.loads((out_dir / f"{CHECKPOINT}.json").read_text(encoding="utf-8"))
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    for k, v in tensors.items():
        if k.startswith("ema."):
            ema[k[4:]].copy_(v)
    optim_path = out_dir / f"{OPTIMIZER}.safetensors"
    if optim_path.is_file():
        opt.load_state_dict(_unflatten_optimizer(load_file(str(optim_path)), meta["optimizer"]))
    else:  # weights only (e.g. a committed checkpoint): the optimizer starts afresh, warm-up included
        meta["fresh_optimizer_at"] = meta["step"]
    return meta


def _load_shipped_model(out_dir: Path, model, ema: dict) -> dict:
    """A shipped model (EMA weights + card, what is committed) as the start of a new run: its weights become both
    the training weights and the EMA, the optimizer starts afresh (warm-up included), the card's counters and
    learning curve carry on."""
    from safetensors.torch import load_file

    weights = load_file(str(out_dir / "model.safetensors"))
    card = json.loads((out_dir / "model.json").read_text(encoding="utf-8"))
    model.load_state_dict(weights)
    for k, v in ema.items():
        v.copy_(weights[k])
    step = int(card["steps"])
    meta = {"step": step, "minutes": float(card["training_minutes"]), "runs": int(card.get("runs", 1)),
            "curve": list(card.get("learning_curve", [])), "fresh_optimizer_at": step,
            "architecture": card.get("architecture"), "texts_sha256": card.get("texts_sha256")}
    if "earlier_training_data" in card:
        meta["earlier_training_data"] = card["earlier_training_data"]
    elif card.get("texts_sha256") is None:  # a card written before the texts' hash was recorded: what it says
        meta["earlier_training_data"] = {"until_step": step, "training_data": card.get("training_data"),
                                         "texts_sha256": None}
    return meta


def check_same_architecture(out_dir: Path, written: dict | None, model_cfg: dict) -> None:
    """:class:`~leakloss.checks.ResumeError` when the checkpoint in ``out_dir`` was trained as another
    architecture than this run's ``model`` (a switch such as the text layout changes no weight shape, so the weights
    would load and the run would train them as something they are not); ``written`` None: not recorded (older
    checkpoints), not checked."""
    from integrations.f5_tts import architecture_changes
    from leakloss.checks import ResumeError

    changes = architecture_changes(written, model_cfg) if written is not None else {}
    if changes:
        raise ResumeError(f"out_dir={out_dir}: its checkpoint was trained as another architecture "
                          f"({', '.join(f'{k}={a!r}' for k, (a, _) in changes.items())}; this run: "
                          f"{', '.join(f'{k}={b!r}' for k, (_, b) in changes.items())}); give those settings again, "
                          "or another out_dir to start afresh")


def save_model(out_dir: Path, model, ema: dict, card: dict) -> None:
    from safetensors.torch import save

    from leakloss.atomic import write_bytes_atomic, write_text_atomic
    from leakloss.checks import nonfinite_tensors

    state = {k: (ema[k] if k in ema else v).detach().cpu().contiguous() for k, v in model.state_dict().items()}
    bad = nonfinite_tensors(state)
    if bad:  # ema_decay=nan made every EMA weight NaN, and it was exported with exit 0
        raise FloatingPointError(f"{out_dir}: weights {', '.join(bad[:3])} hold NaN/Inf: not saved")
    write_bytes_atomic(out_dir / "model.safetensors", save(state))
    write_text_atomic(out_dir / "model.json", json.dumps(card, ensure_ascii=False, indent=1))


@contextlib.contextmanager
def stop_on_signal() -> Iterator[threading.Event]:
    """An event set by SIGTERM / SIGINT while the block runs (the loop stops and checkpoints instead of dying);
    the previous handlers come back after it. Outside the main thread (no signals there) the event never sets."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def learning_rate(step: int, base: float, warmup_steps: int, warm_from: int = 0, decay_start: int | None = None,
                  decay_steps: int = 0, min_lr: float = 0.0) -> float:
    """Linear warm-up over ``warmup_steps`` from ``warm_from`` (a fresh optimizer warms up again), constant
    ``base``, then (``decay_start`` given) linear decay to ``min_lr`` over ``decay_steps``, ``min_lr`` after."""
    lr = base * min(1.0, (step - warm_from + 1) / max(warmup_steps, 1))
    if decay_start is not None and step >= decay_start:
        done = 1.0 if decay_steps <= 0 else min(1.0, (step - decay_start) / decay_steps)
        lr = min(lr, base + (min_lr - base) * done)
    return lr


def corpus_sources(cfg: DictConfig) -> tuple[list[str], Path | None]:
    """The phrases the Hindi base reads (``data.*`` and ``seed`` fix them) and the prompts file read (None: the
    built-in sentences alone). ``data.prompts`` given on the command line must exist (:class:`SettingsError`);
    its default (``$LEAKLOSS_PROMPTS``, else the shared Nepali prompts) missing is a ``warning:`` line."""
    from train_f5.data import phrases, read_corpus_sentences

    explicit = cfg.data.prompts is not None and not OmegaConf.is_interpolation(cfg.data, "prompts")
    sentences, read = read_corpus_sentences(cfg.data.prompts or None, required=explicit, setting="data.prompts")
    return phrases(sentences, max_words=cfg.data.max_words, seed=cfg.seed)[: cfg.data.max_texts], read


def corpus_texts(cfg: DictConfig) -> list[str]:
    """The phrases the Hindi base reads (``data.*`` and ``seed`` fix them)."""
    return corpus_sources(cfg)[0]


def texts_description(prompts: Path | None) -> dict:
    """What the corpus's sentences were read from, for the card (``prompts``: the file read, None: none)."""
    from leakloss.paths import shared_path
    from train_f5.data import DEFAULT_PROMPTS

    if prompts is None:
        return {"built_in_sentences": True, "prompts": None,
                "text": "the built-in sentences only (no prompts file was read)"}
    resolved = prompts.resolve()
    if resolved == DEFAULT_PROMPTS.resolve():
        return {"built_in_sentences": True, "prompts": "shared/data/nepali-prompts/prompts.tsv",
                "text": "the built-in sentences and the Nepali prompts (google/language-resources, Apache 2.0)"}
    try:
        name = f"shared/{resolved.relative_to(Path(shared_path()))}"
    except ValueError:
        name = str(prompts)
    return {"built_in_sentences": True, "prompts": name, "text": f"the built-in sentences and the sentences of {name}"}


#: how a run draws its randomness (written to the checkpoint and the card)
SEEDING = ("per step: torch (CPU and CUDA), python's random (F5's CFG drops) and the batch seeded from "
           "train_f5.data.step_seed(seed, step)")


def seed_step(seed: int, step: int) -> None:
    """Seed everything step ``step`` draws (F5's noise, time, infill span and dropout from torch; its CFG drops
    from python's ``random``) from (``seed``, ``step``) alone: a resumed run, or one continued from the shipped
    model, draws what an uninterrupted one draws, whatever ran between steps (a checkpoint's probe syntheses
    re-seed torch's global generator)."""
    from train_f5.data import step_seed

    torch.manual_seed(step_seed(seed, step, "torch"))  # the CUDA generators too
    random.seed(step_seed(seed, step, "python"))


def corpus_for(cfg: DictConfig, texts: list[str] | None = None):
    """The pretraining corpus (synthesised once into ``cache_dir``, then read from there)."""
    from leakloss.speech.synth import TRAIN_HINDI_VOICES
    from train_f5.data import build_corpus

    texts = corpus_texts(cfg) if texts is None else texts
    return build_corpus(texts, TRAIN_HINDI_VOICES, cfg.cache_dir, workers=cfg.data.workers)


def run(cfg: DictConfig) -> dict:
    with stop_on_signal() as stop:
        return _run(cfg, stop)


def _run(cfg: DictConfig, stop: threading.Event) -> dict:
    from leakloss.speech.synth import TRAIN_HINDI_VOICES
    from integrations.f5_tts import clean_mel_estimate, transformer_inputs
    from train_f5.data import pair_batches
    from train_f5.evaluate import probe_phone_error_rates

    torch.set_num_threads(cfg.num_threads)
    device = torch.device(cfg.device)
    out_dir = Path(cfg.out_dir)
    start = time.time()
    model = instantiate_setting(cfg.model, "model").to(device)  # before the corpus: a bad size is one error line
    params = [p for p in model.parameters() if p.requires_grad]
    ema = {k: v.detach().clone() for k, v in model.state_dict().items() if v.dtype.is_floating_point}
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    # before the corpus: a checkpoint that cannot be continued is one error line, not a traceback minutes later
    meta = load_checkpoint(out_dir, model, ema, opt) or {"step": 0, "minutes": 0.0, "runs": 0}
    architecture = OmegaConf.to_container(cfg.model, resolve=True)
    check_same_architecture(out_dir, meta.get("architecture"), architecture)
    texts, prompts_read = corpus_sources(cfg)
    sources = texts_description(prompts_read)
    texts_sha = hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()[:16]
    written_sha = meta.get("texts_sha256")
    if meta["step"] and written_sha is None:
        # A warning, not a refusal: the committed model's card (checkpoints/f5_hindi_base/model.json) was written
        # before the texts' hash was recorded, and a refusal would leave it impossible to continue. What its card
        # said steps 1..n read is carried into this run's card (earlier_training_data), so the card never claims
        # that this run's texts were the only ones; from this run on the hash is recorded and checked.
        print(f"warning: out_dir={out_dir}: its model was saved without the hash of the texts it was trained on; "
              f"they cannot be checked against this run's {len(texts)} phrases (its card says: "
              f"{(meta.get('earlier_training_data') or {}).get('training_data')!r})", file=sys.stderr)
    elif written_sha not in (None, texts_sha):  # its card would describe a corpus steps 1..n never saw
        from leakloss.checks import ResumeError

        raise ResumeError(f"out_dir={out_dir}: its checkpoint was trained on other texts (data.* or seed changed); "
                          "give those settings again, or another out_dir to start afresh")
    corpus = corpus_for(cfg, texts)
    content = None
    if cfg.content.weight > 0:  # CTC on the clean-mel estimate through a frozen recognizer (train_f5.content)
        from train_f5.content import ContentCTC

        content = ContentCTC.load(cfg.content.recognizer, device=device)
    print(f"corpus: {len(corpus)} readings, {corpus.mels.shape[0] * MEL_HOP / MEL_SAMPLE_RATE / 3600:.2f} h, "
          f"{time.time() - start:.0f}s", flush=True)
    step, done_minutes = meta["step"], meta["minutes"]
    if step:
        print(f"resumed at step {step} ({done_minutes:.0f} min of training so far)", flush=True)
    n_params = sum(p.numel() for p in params)
    # each step's batch and randomness are a pure function of (seed, step): a resume at step k draws what the
    # uninterrupted run drew (seed + step re-seeded one stream at k, and torch's generator was never seeded)
    batches = pair_batches(corpus, cfg.data.max_frames, cfg.data.pair_prob, seed=cfg.seed, first_step=step)

    warm_from = meta.get("fresh_optimizer_at", 0)

    def lr_at(s: int) -> float:
        return learning_rate(s, cfg.lr, cfg.warmup_steps, warm_from, cfg.decay_start, cfg.decay_steps, cfg.min_lr)

    curve: list[dict] = list(meta.get("curve", []))

    def checkpoint(final: bool) -> dict:
        if final:  # a budget too small for one step: neither a checkpoint nor an untrained model is written
            from leakloss.checks import check_trained

            check_trained(step, {}, str(out_dir))
        minutes = done_minutes + (time.time() - run_start) / 60
        info = {"step": step, "minutes": round(minutes, 2), "runs": meta["runs"] + 1,
                "loss_recent": round(sum(recent) / max(len(recent), 1), 4), "texts_sha256": texts_sha,
                "texts_sources": {k: v for k, v in sources.items() if k != "text"},
                "architecture": architecture, "seeding": SEEDING,
                # the warm-up's start: a resume with the optimizer's state must warm from where this run did
                "fresh_optimizer_at": warm_from}
        if "earlier_training_data" in meta:
            info["earlier_training_data"] = meta["earlier_training_data"]
        probes = probe_phone_error_rates(model, ema, corpus, list(cfg.probe.recognizers), device=device,
                                         n=cfg.probe.texts)
        info["probe_per"] = {name: round(per, 4) for name, per in probes.items()}
        curve.append({"step": step, "minutes": info["minutes"], "device": device.type,
                      "flow_loss": info["loss_recent"], "probe_per": info["probe_per"]})
        info["curve"] = curve
        save_checkpoint(out_dir, model, ema, opt, info)
        pers = " ".join(f"{name} {per:.3f}" for name, per in probes.items())
        print(f"checkpoint step {step}: loss {info['loss_recent']:.4f} probe PER {pers} "
              f"({minutes:.0f} min in all)", flush=True)
        if final:
            card = {"class": "F5-TTS CFM(DiT)", "architecture": architecture, "parameters": n_params,
                    "vocab": "leakloss integrations.f5_tts.devanagari_chars()", "mel": MEL_DESCRIPTION,
                    "training_data": f"espeak-ng hi voices {[v.name for v in TRAIN_HINDI_VOICES]} reading {len(corpus)} Devanagari "
                                     f"phrases of {sources['text']}; test words (train_f5.data.is_test_word) excluded",
                    "texts_sha256": texts_sha, "texts_sources": info["texts_sources"], "seeding": SEEDING,
                    "steps": step, "training_minutes": info["minutes"], "probe_per": info["probe_per"],
                    "probe": f"recognizers {list(cfg.probe.recognizers)} on {cfg.probe.texts} syntheses of held-out "
                             "test-word phrases, against espeak hi's phones",
                    "content_loss": OmegaConf.to_container(cfg.content, resolve=True),
                    "runs": info["runs"], "learning_curve": curve, "weights": "EMA"}
            if "earlier_training_data" in info:  # steps 1..until_step read what an older card said, unchecked
                card["earlier_training_data"] = info["earlier_training_data"]
            save_model(out_dir, model, ema, card)
        return info

    run_start, last_ckpt, recent, recent_ctc = time.time(), time.time(), [], []
    model.train()
    info = {}
    while step < cfg.max_steps and (time.time() - run_start) < cfg.max_minutes * 60 and not stop.is_set():
        seed_step(cfg.seed, step)
        mel, lens, text, phones = next(batches)
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        lens = lens.to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bool(cfg.bf16)), transformer_inputs(model) as seen:
            loss, cond, pred = model(mel.to(device), text, lens=lens)
            flow = loss.detach()
            if content is not None and not seen.get("drop_text", False):  # no text: no content to teach
                x1_hat, _ = clean_mel_estimate(seen["x"], seen["time"], pred, cond, lens)
                ctc, _parts = content(x1_hat.float(), lens, [content.targets(p) for p in phones])
                loss = loss + cfg.content.weight * (seen["time"].float() ** 2).mean() * ctc
                recent_ctc = (recent_ctc + [float(ctc.detach())])[-cfg.log_every:]
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite loss at step {step}")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        opt.step()
        step += 1
        with torch.no_grad():
            decay = min(cfg.ema_decay, (1 + step) / (10 + step))
            state = model.state_dict()
            for k, v in ema.items():
                v.lerp_(state[k].detach(), 1 - decay)
        recent = (recent + [flow.item()])[-cfg.log_every:]
        if step % cfg.log_every == 0:
            ctc_text = f" ctc {sum(recent_ctc) / len(recent_ctc):.3f}" if recent_ctc else ""
            print(f"step {step} loss {sum(recent) / len(recent):.4f}{ctc_text} lr {lr_at(step):.2e} "
                  f"{(time.time() - run_start) / 60:.1f} min", flush=True)
        if time.time() - last_ckpt > cfg.checkpoint_minutes * 60:
            info = checkpoint(final=False)
            last_ckpt = time.time()
            model.train()
    if stop.is_set():
        print(f"stopped by a signal at step {step}: final checkpoint", flush=True)
    info = checkpoint(final=True)
    return info


@hydra.main(version_base="1.3", config_path=config_dir(), config_name="train_f5")
def main(cfg: DictConfig) -> None:
    from leakloss.checks import ResumeError, SettingsError, UntrainedError, check_config

    positive, non_negative = (0.0, math.inf, False), (0.0, math.inf, True)
    try:  # before the corpus is built: ema_decay=nan exported an all-NaN model, log_every=0 divided by zero
        check_config(cfg, whole={"data.max_texts": 1, "data.max_frames": 1, "log_every": 1, "num_threads": 1,
                                 "max_steps": 1, "data.workers": 1, "probe.texts": 1},
                     numbers={"lr": positive, "min_lr": non_negative, "grad_clip": positive,
                              "content.weight": non_negative,
                              "ema_decay": (0.0, 1.0, True), "max_minutes": positive,
                              "checkpoint_minutes": positive},
                     folders=("out_dir",), seeds=("seed",))
    except SettingsError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    if OmegaConf.select(cfg, "decay_start") is not None:
        try:
            check_config(cfg, whole={"decay_start": 0, "decay_steps": 0})
        except SettingsError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)
    try:
        result = run(cfg)
    except (ResumeError, SettingsError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except (FloatingPointError, UntrainedError) as err:  # a diverged or untrained run: nothing is saved
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(result))


if __name__ == "__main__":
    from leakloss.config import exit_on_bad_overrides

    exit_on_bad_overrides("train_f5")  # a mistyped override is one error line, not Hydra's report
    main()
