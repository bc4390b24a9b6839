"""Benchmark: the embedded leak penalty's forward + backward on a CUDA device, fp32 against bf16 autocast.

A fine-tuning-sized batch: 16 readings of 6 s at 16 kHz, 10 sites each (the shipped raw-conv head on recognizer A's
conv stack, ``LeakPenalty.load(device="cuda")``); 3 warm-up steps, then the mean of ``--steps`` timed steps (CUDA
synchronised). Last line: ``ms_fp32=… ms_bf16=… bf16_speedup=… realtime_fp32=… max_memory_gib=…`` (realtime: seconds
of audio per second of penalty compute). Without a CUDA device it measures nothing and says so: ``cuda=0``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from leakloss.constants import SAMPLE_RATE  # noqa: E402
from leakloss.penalty import LeakPenalty  # noqa: E402
from leakloss.timing import TimedSite  # noqa: E402


def timed_ms(penalty: LeakPenalty, waves: torch.Tensor, sites, autocast: bool, steps: int) -> float:
    """Mean milliseconds of one forward + backward to the waves."""
    for i in range(3 + steps):
        if i == 3:
            torch.cuda.synchronize()
            start = time.perf_counter()
        x = waves.clone().requires_grad_(True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss, _ = penalty(waves=x, sites=sites)
        loss.backward()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps * 1000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=6.0)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing measured")
        print("cuda=0")
        return 0
    penalty = LeakPenalty.load(device="cuda")
    torch.manual_seed(0)
    waves = torch.randn(args.batch, int(args.seconds * SAMPLE_RATE), device="cuda") * 0.1
    sites = [[TimedSite(0.3 + 0.5 * k, 0.4 + 0.5 * k, "deletion", "ʌ->∅") for k in range(10)]] * args.batch
    ms = {ac: timed_ms(penalty, waves, sites, ac, args.steps) for ac in (False, True)}
    audio_s = args.batch * args.seconds
    print(f"device {torch.cuda.get_device_name(0)}, torch {torch.__version__}; batch {args.batch} x {args.seconds} s")
    print(f"ms_fp32={ms[False]:.2f} ms_bf16={ms[True]:.2f} bf16_speedup={ms[False] / ms[True]:.2f} "
          f"realtime_fp32={audio_s / (ms[False] / 1000):.0f} "
          f"max_memory_gib={torch.cuda.max_memory_allocated() / 2**30:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
