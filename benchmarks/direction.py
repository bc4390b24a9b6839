"""Direction check of the training signal: descend the leak penalty of recognizer A on the *input*
waveform of Hindi-base readings, then ask a different instrument — the reference-paired scorer's
deletion head on recognizer B's features, with its gates — whether fewer sites are flagged.

Last line: ``flags_before=… flags_after=… sites=… steps=…``.
"""

from __future__ import annotations

import argparse
import time

import torch

from leakloss.penalty import LeakPenalty, place_sites
from leakloss.scorer import Scorer
from leakloss.speech.corpus import builtin_sentences, split_sentences
from leakloss.speech.synth import HELDOUT_HINDI_VOICE, TRAIN_TEACHER_VOICES, speak_phones, speak_text
from leakloss.text.sites import SiteFinder


def descend(penalty: LeakPenalty, wave: torch.Tensor, sites, steps: int, lr: float) -> tuple[torch.Tensor, list[float]]:
    """Adam on the waveform samples (kept in [-1, 1]); returns the new wave and the penalty curve."""
    x = wave.clone().requires_grad_(True)
    opt = torch.optim.Adam([x], lr=lr)
    curve = []
    for _ in range(steps):
        loss, _ = penalty(waves=x[None], sites=[sites])
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            x.clamp_(-1, 1)
        curve.append(float(loss.detach()))
    return x.detach(), curve


def flagged(scorer: Scorer, wave, text, refs) -> tuple[int, int]:
    r = scorer.score(wave, text, refs)
    sites = [s for w in r["words"] for s in w["sites"]]
    return sum(s["decision"] == "flagged" for s in sites), len(sites)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sentences", type=int, default=8)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--lr", type=float, default=2e-4)
    args = parser.parse_args()
    torch.set_num_threads(2)
    _, held = split_sentences(builtin_sentences())
    finder = SiteFinder()
    penalty = LeakPenalty.load()  # raw-conv head on recognizer A
    scorer = Scorer()  # deletion head on recognizer B, gates on both
    before = after = total = 0
    start = time.time()
    for text in held[: args.sentences]:
        words = [w for w in finder(text) if w.skipped is None]
        if not any(s.kind == "deletion" for w in words for s in w.testable_sites):
            continue
        phones = [w.nepali for w in words]
        refs = [speak_phones(phones, v).waveform for v in TRAIN_TEACHER_VOICES[:2]]
        wave = speak_text(text, HELDOUT_HINDI_VOICE).waveform
        sites = place_sites(wave, text, penalty.recognizer)
        if not sites:
            continue
        b, n = flagged(scorer, wave, text, refs)
        new, curve = descend(penalty, wave, sites, args.steps, args.lr)
        a, _ = flagged(scorer, new, text, refs)
        before, after, total = before + b, after + a, total + n
        print(f"{text[:40]}…  penalty {curve[0]:.3f} -> {curve[-1]:.3f}  flags {b} -> {a} of {n}")
    print(f"{time.time() - start:.0f}s")
    print(f"flags_before={before} flags_after={after} sites={total} steps={args.steps}")


if __name__ == "__main__":
    main()
