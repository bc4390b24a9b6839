"""Benchmark: the share of a real-size F5 v1 Base training step's wall clock that the leak penalty adds, on a CUDA
device (issue 40's GPU check: at most 5% with the cropped penalty).

The model is F5 v1 Base as ``finetune-f5`` builds it (the shipped preset's arch, ``leakloss/conf/f5/f5_v1_base.yaml``:
DiT dim 1024, depth 22, heads 16, ff_mult 2, text_dim 512, conv_layers 4, 100 mels) with random weights, trained as F5
trains it: ``LeakAwareCFM`` forward under bf16 autocast (F5's accelerate mixed precision), backward, AdamW step, on
its published batch of 38,400 mel frames per GPU (``--item-seconds`` long items: 8 s gives 51 items). CFG drops are
off, so every step pays (an upper bound, as in ``penalty_overhead.py``). One transformer and one optimizer serve
every arm, built as ``finetune-f5`` builds them (the vocoder on the model, ``mel_to_wave``; the penalty without
one); the arms take turns step by step (a seeded random order each step), ``--warmup`` steps each first, then the
median of ``--steps`` CUDA-synchronised steps (host syncs the penalty makes, e.g. one per site to test its span,
are part of what it costs):

- ``none``: no penalty;
- ``whole``: ``finetune-f5``'s default on a Whisper head (``leak.crop=null``): every item with a site in its infilled
  span (~98% of 8 s items at 0.6 sites/s) vocoded whole and scored;
- ``cropped``: ``leak.crop=true``: only crops around the sites inside the infilled span (Whisper's 1 s margin);
- ``bridge``: ``leak.mel_bridge=true``: F5's mels through the shipped mel bridge, no vocoder;
- ``bridge_cropped``: ``leak.mel_bridge=true leak.crop=true``: every item bridged, Whisper's encoder on crops around
  the sites only (``LeakPenalty.cropped``);
- each again with the penalty under bf16 autocast (``leak.bf16=true``): ``whole_bf16``, ``cropped_bf16``,
  ``bridge_bf16``, ``bridge_cropped_bf16``.

The penalty's modules: recognizer wb's architecture (multilingual Whisper base encoder, own length, run to the state
the shipped head reads) with random weights (``penalty_overhead.whisper_architecture``: a device machine has no
encoder weights, and the time does not depend on them), the shipped frame head, the released Vocos generator's shapes
(``charactr/vocos-mel-24khz``) with random weights, the shipped mel bridge. Sites: a Poisson process at
``--site-density`` per second of each item (0.6, as ``penalty_overhead.py``), ``--site-seconds`` long, uniform over
the item (the penalty scores those centred in F5's random infilled span).

``share_ARM = (median step with ARM - median step without) / median step without``; ``oom`` for an arm that ran
out of GPU memory (the other arms still run).

Last line: ``share_whole=… share_cropped=… share_bridge=… share_bridge_cropped=… share_whole_bf16=…
share_cropped_bf16=… share_bridge_bf16=… share_bridge_cropped_bf16=… step_ms=… max_memory_gib=… items=… frames=…
device=…`` (``step_ms``: the step without the penalty; ``device``: the CUDA device's name, spaces as ``_``).
Without CUDA it measures nothing and its last line is ``cuda=0``, unless ``--smoke``: a tiny DiT, two 2 s items, one
step per arm on the CPU, the same last line: a check that the script runs (what a lent GPU would run), not a figure. On a device machine: ``train_f5/device_prepare.sh``
makes the checkout small enough to travel and prints the command (docs/penalty.md, "The GPU check").
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from leakloss.constants import MEL_BINS, MEL_HOP, MEL_SAMPLE_RATE
from leakloss.timing import TimedSite

F5_BATCH_FRAMES = 38_400  # F5TTS_v1_Base.yaml: batch_size_per_gpu (frame-wise)
FRAME_RATE = MEL_SAMPLE_RATE / MEL_HOP  # 93.75 mel frames a second
#: issue 40's bound on the cropped penalty's wall-clock share of an F5 v1 Base step on a GPU
TARGET_SHARE_CROPPED = 0.05
PENALTY_ARMS = ("whole", "cropped", "bridge", "bridge_cropped")
ARMS = ("none", *PENALTY_ARMS, *(f"{arm}_bf16" for arm in PENALTY_ARMS))
TEXT_VOCAB = 2545  # F5's pinyin vocabulary size, as penalty_overhead.f5_step_flops (embeddings cost no time to speak of)


def draw_sites(durations: Sequence[float], density: float, site_s: float, seed: int) -> list[list[TimedSite]]:
    """Poisson(``density`` per second) sites per item, ``site_s`` long, uniform over the item (seeded)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for duration in durations:
        n = int(torch.poisson(torch.tensor([density * duration]), generator=g).item())
        starts = torch.rand(n, generator=g) * max(duration - site_s, 0.0)
        out.append([TimedSite(float(s), float(s) + site_s, "deletion", "ʌ->∅") for s in sorted(starts.tolist())])
    return out


def build_penalties(recognizer: str = "wb") -> dict:
    """``{"vocoded": LeakPenalty, "bridged": LeakPenalty}`` on ``recognizer``'s architecture (random weights) and
    the shipped head when its card names that recognizer; the first reads waves (the model vocodes), the second mels
    through the shipped mel bridge."""
    from benchmarks.penalty_overhead import build_head, shipped_head_layer, whisper_architecture
    from leakloss.mel_bridge import MelBridge
    from leakloss.penalty import LeakPenalty

    rec = whisper_architecture(recognizer)
    layer = shipped_head_layer(recognizer) or rec.default_frame_layer
    head, _ = build_head(recognizer, rec.frame_channels(layer))
    return {"vocoded": LeakPenalty(rec, head, conv_layer=layer),
            "bridged": LeakPenalty(rec, head, conv_layer=layer, mel_bridge=MelBridge.embedded())}


def build_transformer(smoke: bool):
    """F5 v1 Base's DiT (the shipped preset's arch), or a tiny one for ``--smoke``; random weights, seeded."""
    from f5_tts.model import DiT

    from benchmarks.penalty_overhead import _v1_base_arch

    tiny = {"dim": 64, "depth": 2, "heads": 2, "dim_head": 32, "ff_mult": 2, "text_dim": 64, "conv_layers": 1}
    arch = tiny if smoke else _v1_base_arch()
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return DiT(**arch, mel_dim=MEL_BINS, text_num_embeds=TEXT_VOCAB)


def build_arms(transformer, penalties: dict, lookup: Callable, arms: Sequence[str]) -> dict:
    """One ``LeakAwareCFM`` per arm around the same transformer and the released Vocos shapes as its
    ``mel_to_wave``, as ``finetune-f5`` passes its vocoder (CFG drops off: every step pays)."""
    from benchmarks.penalty_overhead import released_vocos
    from integrations.f5_tts import MEL_SPEC_KWARGS, LeakAwareCFM

    common = {"mel_spec_kwargs": MEL_SPEC_KWARGS, "audio_drop_prob": 0.0, "cond_drop_prob": 0.0,
              "mel_to_wave": released_vocos()}
    models = {}
    for arm in arms:
        kind, bf16 = arm.removesuffix("_bf16"), arm.endswith("_bf16")
        if kind == "none":
            models[arm] = LeakAwareCFM(transformer, **common)
            continue
        penalty = penalties["bridged" if kind.startswith("bridge") else "vocoded"]
        models[arm] = LeakAwareCFM(transformer, **common, leak_penalty=penalty, leak_weight=1.0, site_lookup=lookup,
                                   leak_crop=kind in ("cropped", "bridge_cropped"), leak_bf16=bf16)
    return models


def batch(n_items: int, item_frames: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """Random mels ``[n, frames, 100]`` (seeded), full lengths, one distinct Devanagari text per item."""
    g = torch.Generator().manual_seed(0)
    mel = torch.randn(n_items, item_frames, MEL_BINS, generator=g) * 2.0 - 5.0  # about a log mel's range
    lens = torch.full((n_items,), item_frames, dtype=torch.long)
    texts = [f"नेकपा हैन वाक्य {i}" for i in range(n_items)]
    return mel.to(device), lens.to(device), texts


def timed_steps(models: dict, optimizer, mel, lens, texts, *, steps: int, warmup: int, autocast: bool,
                device: torch.device) -> tuple[dict[str, float], dict[str, int]]:
    """Median seconds of a training step per arm (arms interleaved in a seeded random order each step, so no arm
    always follows the same one), and the steps on which the penalty ran (it must have run on every timed step of a
    penalty arm: else the step timed was not the arm's). An arm that runs out of CUDA memory is dropped from the
    later steps and its median is ``nan``."""
    names = list(models)
    times: dict[str, list[float]] = {name: [] for name in names}
    paid = dict.fromkeys(names, 0)
    out_of_memory: set[str] = set()
    order = random.Random(0)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    torch.manual_seed(0)
    for step in range(warmup + steps):
        for name in order.sample(names, len(names)):
            if name in out_of_memory:
                continue
            model = models[name]
            model.train()
            sync()
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            try:
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
                    loss, _, _ = model(mel, texts, lens=lens)
                loss.backward()
            except torch.OutOfMemoryError:
                out_of_memory.add(name)
                loss = None
                optimizer.zero_grad(set_to_none=True)
                torch.cuda.empty_cache()
                print(f"{name}: out of CUDA memory at step {step}; the other arms go on", file=sys.stderr, flush=True)
                continue
            optimizer.step()
            sync()
            if step >= warmup:
                times[name].append(time.perf_counter() - start)
                paid[name] += model.last_leak_parts is not None
    return {name: statistics.median(v) if v and name not in out_of_memory else math.nan
            for name, v in times.items()}, paid


def batch_sites(durations: Sequence[float], args: argparse.Namespace) -> list[list[TimedSite]]:
    """Each item's sites: :func:`draw_sites`, or for ``--smoke`` one at each item's middle (F5's infilled span,
    70-100% of the item, always covers it: every step pays)."""
    if args.smoke:
        half = args.site_seconds / 2
        return [[TimedSite(d / 2 - half, d / 2 + half, "deletion", "ʌ->∅")] for d in durations]
    return draw_sites(durations, args.site_density, args.site_seconds, seed=0)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10, help="timed steps per arm (median)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--item-seconds", type=float, default=8.0, help="length of each item of the 38,400-frame batch")
    ap.add_argument("--site-density", type=float, default=0.6, help="sites per second of audio (> 0)")
    ap.add_argument("--site-seconds", type=float, default=0.08)
    ap.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    ap.add_argument("--smoke", action="store_true", help="tiny DiT, two 2 s items, one step each, on the CPU")
    return ap


def share_text(arm: str, run: Sequence[str], shares: dict[str, float]) -> str:
    """``0.0123``; ``oom`` for an arm that ran out of memory; ``nan`` for one not run."""
    if arm in run and math.isnan(shares[arm]):
        return "oom"
    return f"{shares.get(arm, math.nan):.4f}"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or not args.item_seconds > 0 or not args.site_density > 0 \
            or not args.site_seconds > 0:
        print("error: need --steps >= 1, --warmup >= 0 and positive --item-seconds, --site-density and "
              "--site-seconds", file=sys.stderr)
        return 2
    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        print("no CUDA device: nothing measured (--smoke runs the script on the CPU with a tiny F5)")
        print("cuda=0")
        return 0
    device = torch.device("cuda" if cuda and not args.smoke else "cpu")
    arms = ["none", *[a for a in args.arms if a != "none"]]
    if args.smoke:
        n_items, item_frames, steps, warmup = 2, round(2.0 * FRAME_RATE), 1, min(args.warmup, 1)
    else:
        item_frames = round(args.item_seconds * FRAME_RATE)
        n_items, steps, warmup = max(1, F5_BATCH_FRAMES // item_frames), args.steps, args.warmup
    durations = [item_frames / FRAME_RATE] * n_items
    mel, lens, texts = batch(n_items, item_frames, device)
    sites = dict(zip(texts, batch_sites(durations, args)))
    transformer = build_transformer(args.smoke)
    models = build_arms(transformer, build_penalties(), lambda text: sites.get(text, []), arms)
    for model in models.values():
        model.to(device)
    optimizer = torch.optim.AdamW(transformer.parameters(), lr=1e-5)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    median, paid = timed_steps(models, optimizer, mel, lens, texts, steps=steps, warmup=warmup,
                               autocast=device.type == "cuda", device=device)
    unpaid = [arm for arm in arms if arm != "none" and paid[arm] < steps and math.isfinite(median[arm])]
    if unpaid:  # a timed step without the penalty is not the arm's step
        print(f"error: the penalty did not run on every timed step of {unpaid} (paid {paid} of {steps})",
              file=sys.stderr)
        return 1
    base = median["none"]
    if not math.isfinite(base):
        print("error: the step without the penalty ran out of CUDA memory: lower --item-seconds' batch",
              file=sys.stderr)
        return 1
    shares = {arm: (median[arm] - base) / base for arm in arms if arm != "none"}
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu-smoke"
    memory = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else math.nan
    n_sites = sum(len(s) for s in sites.values())
    print(f"device {name}, torch {torch.__version__}; {n_items} items x {item_frames} frames "
          f"({n_items * item_frames} frames, {n_sites} sites); "
          f"{sum(p.numel() for p in transformer.parameters()) / 1e6:.1f} M transformer parameters; medians of {steps} "
          f"steps: " + ", ".join(f"{arm} {median[arm] * 1000:.1f} ms" for arm in arms), flush=True)
    if "cropped" in shares:
        print(f"cropped share {shares['cropped']:.4f} (issue 40's GPU target: at most {TARGET_SHARE_CROPPED})")
    figures = " ".join(f"share_{arm}={share_text(arm, arms, shares)}" for arm in ARMS[1:])
    print(f"{figures} step_ms={base * 1000:.1f} max_memory_gib={memory:.2f} items={n_items} "
          f"frames={n_items * item_frames} device={name.replace(' ', '_')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
