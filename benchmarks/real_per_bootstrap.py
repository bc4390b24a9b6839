"""How far the real test speakers' phone error rate can tell two recognizers apart: a paired speaker bootstrap.

The real-speech figure of ``benchmarks/domains.py`` (``per_real``) rests on 14 clips of 10 test speakers (308
reference phones). This script decodes them with a baseline recognizer and candidates (the same greedy decodes,
references and ``coarse`` phone classes as ``domains.py``), then resamples the speakers with replacement
(``--resamples``, seed 0): each candidate's PER with its 95% interval, the share of resamples under ``--target``,
and its difference from the baseline with the interval of the paired difference.

Needs ``../shared/data/real-nepali-speech`` (skips with a message when absent: the same last line, its figures
``nan``). About a minute on 2 cores.

Last line: ``per_base=… per_cand=… diff=… diff_low=… diff_high=… p_cand_under_target=… p_base_under_target=…
speakers=… clips=… base=… cand=…`` (the last candidate given).
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Sequence

#: the figures of the last line that a skipped run prints as ``nan``
FIGURES = ("per_base", "per_cand", "diff", "diff_low", "diff_high", "p_cand_under_target", "p_base_under_target")


def skipped_line(reason: str, base: str, cand: str, speakers: int = 0, clips: int = 0) -> None:
    """Say why nothing was measured, then the last line with every figure ``nan`` (never prose last)."""
    print(f"skipped: {reason}")
    print(" ".join(f"{k}=nan" for k in FIGURES) + f" speakers={speakers} clips={clips} base={base} cand={cand}")


def speaker_bootstrap(edits: dict[str, list[tuple[int, int]]], speakers: Sequence[str], base: str,
                      resamples: int = 10_000, seed: int = 0) -> dict[str, dict[str, list[float]]]:
    """``edits[name][i]`` = (edit count, reference phones) of clip ``i``, ``speakers[i]`` its speaker. Each resample
    draws the speakers with replacement (every clip of a drawn speaker, as often as drawn) and computes each
    recognizer's corpus PER and its difference from ``base`` on the same draw. Returns ``{name: {"per": [...],
    "diff": [...]}}``, sorted lists of ``resamples`` values."""
    ids = sorted(set(speakers))
    clips_of = {s: [i for i, who in enumerate(speakers) if who == s] for s in ids}
    rng = random.Random(seed)
    out = {name: {"per": [], "diff": []} for name in edits}
    for _ in range(resamples):
        drawn = [i for s in (rng.choice(ids) for _ in ids) for i in clips_of[s]]
        phones = sum(edits[base][i][1] for i in drawn)
        base_errors = sum(edits[base][i][0] for i in drawn)
        for name, rows in edits.items():
            errors = sum(rows[i][0] for i in drawn)
            out[name]["per"].append(errors / phones)
            out[name]["diff"].append((errors - base_errors) / phones)
    for parts in out.values():
        parts["per"].sort()
        parts["diff"].sort()
    return out


def interval(sorted_values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of sorted values."""
    n = len(sorted_values)
    lo = int((1 - level) / 2 * n)
    return sorted_values[lo], sorted_values[min(n - 1, n - 1 - lo)]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="wb", help="the baseline recognizer (the shipped one)")
    parser.add_argument("--candidates", nargs="+", default=["checkpoints/wb_aug", "checkpoints/wb_real"])
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--target", type=float, default=0.25, help="issue 40's real-speech bar")
    args = parser.parse_args(argv)
    if args.resamples < 1:
        parser.error(f"--resamples must be at least 1, got {args.resamples}")

    import torch

    from leakloss.acoustic.recognizer import Recognizer, RecognizerNotFoundError
    from leakloss.eval.confusion import corpus_confusions
    from leakloss.speech.real import real_clips
    from leakloss.text.phones import coarse
    from leakloss.text.sites import SiteFinder

    clips = real_clips(split="test")
    if not clips:  # ../shared/data/real-nepali-speech absent
        skipped_line("no real test-speaker recording", args.base, args.candidates[-1])
        return
    finder = SiteFinder()
    refs = [[p for w in finder(c.text) if w.skipped is None for p in w.nepali] for c in clips]
    waves = [c.load() for c in clips]
    edits: dict[str, list[tuple[int, int]]] = {}
    for name in [args.base, *args.candidates]:
        try:
            recognizer = Recognizer.load(name)
        except RecognizerNotFoundError as err:
            print(f"recognizer {name}: not available ({err})", file=sys.stderr)
            continue
        with torch.no_grad():
            hyps = [recognizer.greedy(w[None])[0] for w in waves]
        edits[name] = []
        for ref, hyp in zip(refs, hyps):
            counts, phones = corpus_confusions([(ref, hyp)], coarse)
            edits[name].append((sum(counts.values()), phones))
        errors, phones = (sum(x[k] for x in edits[name]) for k in (0, 1))
        print(f"{name}: PER {errors / phones:.4f} ({errors} edits of {phones} phones)", flush=True)
    if args.base not in edits or len(edits) < 2:
        skipped_line("the baseline or every candidate is missing", args.base, args.candidates[-1],
                     len({c.speaker for c in clips}), len(clips))
        return
    speakers = [c.speaker for c in clips]
    boot = speaker_bootstrap(edits, speakers, args.base, args.resamples)
    point = {name: sum(e for e, _ in rows) / sum(n for _, n in rows) for name, rows in edits.items()}
    for name in edits:
        lo, hi = interval(boot[name]["per"])
        under = sum(v <= args.target for v in boot[name]["per"]) / args.resamples
        line = f"{name}: PER {point[name]:.4f} [{lo:.4f}, {hi:.4f}], under {args.target:g} in {under:.1%} of resamples"
        if name != args.base:
            dlo, dhi = interval(boot[name]["diff"])
            better = sum(v < 0 for v in boot[name]["diff"]) / args.resamples
            line += (f"; - {args.base}: {point[name] - point[args.base]:+.4f} [{dlo:+.4f}, {dhi:+.4f}], "
                     f"lower in {better:.1%}")
        print(line)
    cand = [n for n in edits if n != args.base][-1]
    dlo, dhi = interval(boot[cand]["diff"])
    print(f"per_base={point[args.base]:.4f} per_cand={point[cand]:.4f} diff={point[cand] - point[args.base]:.4f} "
          f"diff_low={dlo:.4f} diff_high={dhi:.4f} "
          f"p_cand_under_target={sum(v <= args.target for v in boot[cand]['per']) / args.resamples:.3f} "
          f"p_base_under_target={sum(v <= args.target for v in boot[args.base]['per']) / args.resamples:.3f} "
          f"speakers={len(set(speakers))} clips={len(clips)} base={args.base} cand={cand}")


if __name__ == "__main__":
    main()
