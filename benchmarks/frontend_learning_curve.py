"""How the retention model's held-out agreement grows with the number of training words.

The question it answers: is the frontend short of the 97% word agreement goal because the spelling does
not say more, or because the lexicon is small? The shipped trees (:func:`leakloss.text.train_retention.fit_trees`,
the training script's settings) are refitted on nested subsets of the training words -- 1/8, 1/4, 1/2 and all
of them; a word is in the subset of fraction f when ``int(sha1(word)[-5:-3], 16) / 256 < f``, digits that
neither the split (last digit) nor the memory folds (second-last) use. Each fit is calibrated on the
calibration words (``high`` threshold for 99.6% there: 4.2k words need a margin above the 99.5% goal) and
scored on the held-out test words. One more point lies beyond the line's range: the fit on the training
*and* calibration words, i.e. the shipped model's data (``agreement_fit_words``; its ``high`` threshold
comes from out-of-fold predictions, see :mod:`leakloss.text.train_retention`, and is not recomputed here).

A straight line of agreement against log2(training words), fitted by least squares to the four points,
gives the gain per doubling and the number of training words at which it would reach 97%, set against the
whole shared dev lexicon (``lexicon_words``: its words of every split that have a written inherent vowel and
align, the unit ``train_words`` counts too). An extrapolation: the line only describes the measured range.

    python benchmarks/frontend_learning_curve.py [--lexicon PATH]

Last line: ``agreement_1_8=... agreement_1_4=... agreement_1_2=... agreement_full=... high_coverage_full=...
gain_per_doubling=... words_for_097=... train_words=... lexicon_words=... agreement_fit_words=... fit_words=...``.
Without the shared dev lexicon (the default ``--lexicon``) it says so and prints those figures as ``nan``.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # measure this checkout's leakloss
from benchmarks.frontend_agreement import default_lexicon_or_skip
from leakloss.text.morphology import HUNSPELL_NE, Morphology
from leakloss.text.normalize import TextError
from leakloss.text.train_retention import (
    DEFAULT_LEXICON, agrees, fit_trees, labelled_plans, load_rows, pick_threshold, predict_words,
    split_of,
)

FRACTIONS: tuple[tuple[str, float], ...] = (("1_8", 1 / 8), ("1_4", 1 / 4), ("1_2", 1 / 2), ("full", 1.0))
GOAL = 0.97
FIGURES = ("agreement_1_8", "agreement_1_4", "agreement_1_2", "agreement_full", "high_coverage_full",
           "gain_per_doubling", "words_for_097", "train_words", "lexicon_words", "agreement_fit_words", "fit_words")
CALIBRATION_WORDS_TARGET = 0.996  # `high` agreement on the calibration words for each fit


def subset_key(word: str) -> float:
    """In [0, 1): a word trains the fit of fraction f when this is < f (nested subsets)."""
    return int(hashlib.sha1(word.encode("utf-8")).hexdigest()[-5:-3], 16) / 256


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lexicon", type=Path, default=None,
                    help=f"the lexicon (default: the shared dev lexicon, {DEFAULT_LEXICON}; skipped when absent)")
    ap.add_argument("--hunspell", default=str(HUNSPELL_NE),
                    help="the dictionary of the morphology features, as the training script's; 'none': without")
    args = ap.parse_args(argv)
    args.lexicon = default_lexicon_or_skip(args.lexicon, DEFAULT_LEXICON, FIGURES)
    if args.lexicon is None:
        return 0
    if not args.lexicon.is_file():
        print(f"error: no lexicon at {args.lexicon} (the shared dev lexicon; pass --lexicon PATH)", file=sys.stderr)
        return 2
    t0 = time.time()
    try:
        rows = load_rows(args.lexicon)
        morphology = Morphology({}) if args.hunspell == "none" else Morphology.from_hunspell(args.hunspell)
    except TextError as e:  # MorphologyError is one
        print(f"error: {e}", file=sys.stderr)
        return 2
    parts: dict[str, list] = {"train": [], "calibration": [], "test": []}
    for w, ref in rows:
        parts[split_of(w)].append((w, ref))
    train_all = labelled_plans(parts["train"])
    print(f"lexicon {args.lexicon}: {len(rows)} words ({ {k: len(v) for k, v in parts.items()} }), "
          f"{len(train_all)} training words with a written inherent vowel and aligned phones (the rows the trees learn from)")
    cal_words, test_words = [w for w, _ in parts["calibration"]], [w for w, _ in parts["test"]]
    sizes, agreements, out = [], [], {}
    for name, frac in FRACTIONS:
        t1 = time.time()
        train = [t for t in train_all if subset_key(t[0]) < frac]
        vocabulary_words = [w for w, _ in parts["train"] if subset_key(w) < frac]  # with the words no vowel labels
        model = fit_trees(train, vocabulary_words=vocabulary_words, morphology=morphology).model
        cal = predict_words(model, cal_words)
        threshold, _, _ = pick_threshold([p for _, p, _ in cal], agrees(parts["calibration"], cal),
                                      CALIBRATION_WORDS_TARGET)
        test = predict_words(model, test_words)
        ok = np.asarray(agrees(parts["test"], test))
        high = np.asarray([p >= threshold for _, p, _ in test])
        agreement = float(ok.mean())
        sizes.append(len(train))
        agreements.append(agreement)
        out[f"agreement_{name}"] = agreement
        out[f"high_coverage_{name}"] = float(high.mean())
        print(f"  {name:>4}: {len(train):6d} training words -> held-out agreement {agreement:.4f}, high >= "
              f"{threshold:.4f} covers {high.mean():.3f} at {ok[high].mean() if high.any() else float('nan'):.4f} "
              f"({time.time() - t1:.0f}s)", flush=True)
    slope, intercept = np.polyfit(np.log2(sizes), agreements, 1)
    words_for_goal = 2 ** ((GOAL - intercept) / slope) if slope > 0 else math.inf
    lexicon_words = len(labelled_plans(rows))  # the same unit as the training words: aligned, with a vowel
    print(f"agreement = {intercept:.4f} + {slope:.4f} * log2(training words); {GOAL:.0%} at ~{words_for_goal:,.0f} "
          f"training words, {words_for_goal / sizes[-1]:.1f}x the {sizes[-1]:,} used and "
          f"{words_for_goal / lexicon_words:.1f}x what the whole dev lexicon holds ({lexicon_words:,} such words in all splits)")
    t1 = time.time()
    fit_words = labelled_plans(parts["train"] + parts["calibration"])
    fit_model = fit_trees(fit_words, vocabulary_words=[w for w, _ in parts["train"] + parts["calibration"]],
                          morphology=morphology).model
    beyond = float(np.mean(agrees(parts["test"], predict_words(fit_model, test_words))))
    print(f"  fit on training + calibration words (the shipped model's data): {len(fit_words)} words -> held-out "
          f"agreement {beyond:.4f}, the line says {intercept + slope * math.log2(len(fit_words)):.4f} "
          f"({time.time() - t1:.0f}s)")
    print(f"time {time.time() - t0:.1f}s")
    print(" ".join([f"agreement_{n}={out[f'agreement_{n}']:.4f}" for n, _ in FRACTIONS]
                   + [f"high_coverage_full={out['high_coverage_full']:.3f}", f"gain_per_doubling={slope:.4f}",
                      f"words_for_097={words_for_goal:.0f}", f"train_words={sizes[-1]}", f"lexicon_words={lexicon_words}",
                      f"agreement_fit_words={beyond:.4f}", f"fit_words={len(fit_words)}"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
