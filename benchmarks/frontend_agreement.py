"""Inherent-vowel agreement of the Nepali frontend (learned retention model over the rules) with the
Google Nepali lexicon.

The frontend runs with no lexicon and without the built-in exceptions: the retention model
(:mod:`leakloss.text.retention`: trees mixed with the sequence network of :mod:`leakloss.text.retention_net`)
decides every inherent vowel, the rules (suffix stripping + letter-to-sound
rules) are its features; the rules alone are scored too (``rules_agreement``). For each lexicon word, ``inherent_vowel_pattern`` (a minimum-edit alignment of the phones to
the spelling, see its docstring) says which written inherent vowels each pronunciation keeps; a word
matches when both patterns exist and are equal. An unalignable pattern (None) counts as a mismatch and is
reported separately.

Split (:func:`leakloss.text.train_retention.split_of`): words whose ``sha1(word).hexdigest()`` ends in
0, 1 or 2 (~19%) are held out: set aside before the rules were written, never studied, and never seen by
the model's training or calibration; the rest (3-4, ``calibration``, and 5-f, ``train``) fitted the model,
whose thresholds were chosen on out-of-fold predictions of those words. All three are printed, labelled.
espeak-ng's own ``ne`` voice is scored the same way.

The lexicon's own consistency is printed as a ceiling (:func:`stem_consistency`: a stem said differently
alone and with a case marker, e.g. जनता / जनतालाई).

Inflected and compound held-out words are measured apart (``groups``: the suffix splits -को -मा -लाई
-हरू, verb endings -एर -नु -छ ..., compounds the rules split, plain words).

NepTTS-style check (``deletion_precision``): for held-out words the frontend marks ``high`` or ``medium``
(testable), every deletion site against espeak ``hi`` (:func:`leakloss.text.sites.find_sites`) is a real
contrast when the lexicon pronounces the inherent vowel our ʌ stands for (and espeak hi drops it, which
is what makes it a site).

Held-out words the model decides are also counted by what the phonotactic rescoring
(:mod:`leakloss.text.phonotactics`) did to them against the slot-by-slot decisions: ``rescoring_same``,
``_fixed``, ``_broke``, ``_changed_both_wrong``.

    python benchmarks/frontend_agreement.py [--lexicon PATH] [--limit N]

The last line is ``agreement=... high_agreement=... high_coverage=... espeak_ne_agreement=...
deletion_precision=... rules_agreement=...`` for the held-out part (a share with nothing to count, e.g. no
``high`` word, is ``nan``). The default lexicon is ``$LEAKLOSS_SHARED/data/nepali-lexicon/lexicon-dev.tsv``
(``../shared`` beside the repository); when it is absent the script says so and prints the figures as ``nan``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # measure this checkout's leakloss
from leakloss.text.frontend import NepaliFrontend
from leakloss.text.g2p import inherent_vowel_pattern, iter_lexicon
from leakloss.text.normalize import TextError
from leakloss.text.phones import clean_espeak_ipa
from leakloss.text.retention import forced_slots, plan_phones, plan_word, slot_by_slot
from leakloss.text.train_retention import DEFAULT_LEXICON, deletion_truth, split_of, stem_consistency, word_groups

REPO = Path(__file__).resolve().parent.parent
HELD_OUT_DIGITS = frozenset("012")
FIGURES = ("agreement", "high_agreement", "high_coverage", "espeak_ne_agreement", "deletion_precision",
           "rules_agreement")


def _share(count: float, total: float) -> float:
    """``count / total``; NaN when there is nothing to count (not a 0 that reads as a measured failure)."""
    return count / total if total else float("nan")


def is_held_out(word: str) -> bool:
    return hashlib.sha1(word.encode()).hexdigest()[-1] in HELD_OUT_DIGITS  # == split_of(word) == "test"


def espeak_ne(words: Sequence[str]) -> list[list[str]] | None:
    """espeak-ng ``ne`` IPA phones per word, or None if espeak cannot be loaded."""
    try:
        from leakloss.text.hindi import espeak_phonemes  # the lead's helper, when it exists
    except ImportError:
        espeak_phonemes = None
    if espeak_phonemes is not None:
        return [[clean_espeak_ipa(p) for p in ps] for ps in espeak_phonemes(list(words), "ne")]
    try:
        import espeakng_loader
        from phonemizer.backend.espeak.wrapper import EspeakWrapper

        EspeakWrapper.set_library(espeakng_loader.get_library_path())
        os.environ["ESPEAK_DATA_PATH"] = espeakng_loader.get_data_path()
        from phonemizer.backend import EspeakBackend
        from phonemizer.separator import Separator
    except Exception as e:  # noqa: BLE001 - optional comparison only
        print(f"espeak unavailable: {e}", file=sys.stderr)
        return None
    backend = EspeakBackend("ne", preserve_punctuation=False, with_stress=False, language_switch="remove-flags")
    out = backend.phonemize(list(words), separator=Separator(phone=" ", word=" | "), strip=True, njobs=1)
    return [[clean_espeak_ipa(p) for p in line.replace("|", " ").split()] for line in out]


def rescoring_effect(fe: NepaliFrontend, pron, ref: tuple[bool, ...] | None, ok: bool) -> str:
    """What the phonotactic rescoring did to a model-decided word: ``same`` (the slot-by-slot decisions,
    :func:`leakloss.text.retention.slot_by_slot`, are the rescored ones), ``fixed`` / ``broke`` the lexicon's
    pattern, or ``changed_both_wrong``."""
    plan = plan_word(pron.word)
    kept = slot_by_slot(fe.retention.predict_plan(plan), forced_slots(plan)).kept
    if kept == tuple(v.kept for v in pron.vowels):
        return "same"
    before_ok = ref is not None and inherent_vowel_pattern(pron.word, plan_phones(plan, kept)) == ref
    return "fixed" if ok and not before_ok else "broke" if before_ok and not ok else "changed_both_wrong"


def score(rows: list[tuple[str, tuple[bool, ...] | None]], fe: NepaliFrontend,
          espeak: dict[str, list[str]] | None, hindi: dict[str, list[str]] | None = None,
          rules: NepaliFrontend | None = None, count_rescoring: bool = False) -> dict[str, float]:
    n = len(rows)
    match = high = high_match = ref_none = our_none = es_match = rules_match = 0
    by_source: Counter[tuple[str, str]] = Counter()
    groups: Counter[tuple[str, str]] = Counter()
    dels: list[bool] = []
    rescoring: Counter[str] = Counter()
    for word, ref in rows:
        pron = fe.pronounce(word)
        ours = inherent_vowel_pattern(word, pron.phones)
        ok = ref is not None and ours is not None and ours == ref
        if count_rescoring and pron.source == "model" and fe.retention.phonotactics is not None:
            rescoring[rescoring_effect(fe, pron, ref, ok)] += 1
        ref_none += ref is None
        our_none += ours is None
        match += ok
        by_source[(pron.source, pron.confidence)] += 1
        if pron.confidence == "high":
            high += 1
            high_match += ok
        if espeak is not None and ref is not None:
            es_match += inherent_vowel_pattern(word, espeak[word]) == ref
        if rules is not None:
            rules_match += ref is not None and inherent_vowel_pattern(word, rules.pronounce(word).phones) == ref
        if hindi is not None:
            for g in word_groups(word):
                groups[(g, "n")] += 1
                groups[(g, "ok")] += ok
            if pron.confidence in ("high", "medium"):
                dels += deletion_truth(word, pron.phones, hindi[word], ref)
    out = {
        "n": n, "agreement": _share(match, n), "high_agreement": _share(high_match, high),
        "high_coverage": _share(high, n),
        "espeak_ne_agreement": _share(es_match, n) if espeak is not None else float("nan"),
        "rules_agreement": _share(rules_match, n) if rules is not None else float("nan"),
        "lexicon_unalignable": ref_none, "ours_unalignable": our_none,
        **{f"share_{s}_{c}": v / n for (s, c), v in sorted(by_source.items())},
    }
    if rescoring:
        out.update({f"rescoring_{k}": rescoring[k] for k in ("same", "fixed", "broke", "changed_both_wrong")})
    if hindi is not None:
        out["deletion_sites"] = len(dels)
        out["deletion_precision"] = _share(sum(dels), len(dels))
        for g in sorted({g for g, _ in groups}):
            out[f"group {g}: n"] = groups[(g, "n")]
            out[f"group {g}: agreement"] = groups[(g, "ok")] / groups[(g, "n")]
    return out


def default_lexicon_or_skip(lexicon: Path | None, default: Path, figures: Sequence[str]) -> Path | None:
    """``lexicon`` as given, else ``default`` (the shared dev lexicon); None, after the skip lines (a last line of
    nan ``figures``), when no lexicon was given and the default is absent. A lexicon given by hand is returned even
    if it is missing: that is the caller's error, not a skip."""
    if lexicon is not None:
        return lexicon
    if not default.is_file():  # the shared data is absent: skip, the figures nan
        print(f"skipped: no lexicon at {default} (the shared dev lexicon; set LEAKLOSS_SHARED or pass "
              "--lexicon PATH)")
        print(" ".join(f"{k}=nan" for k in figures))
        return None
    return default


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lexicon", type=Path, default=None,
                    help=f"the lexicon (default: the shared dev lexicon, {DEFAULT_LEXICON}; skipped when absent)")
    ap.add_argument("--limit", type=int, default=None, help="score at most N words of each part")
    args = ap.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        ap.error(f"--limit must be at least 1, got {args.limit}")
    args.lexicon = default_lexicon_or_skip(args.lexicon, DEFAULT_LEXICON, FIGURES)
    if args.lexicon is None:
        return 0
    t0 = time.time()
    try:
        entries = list(iter_lexicon(args.lexicon, strict=False))
    except TextError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    parts: dict[str, list] = {"train": [], "calibration": [], "test": []}
    seen = set()
    no_phones = 0
    for _, word, phones in entries:
        if phones is None:
            no_phones += 1  # empty phone column or a spelling with digits: not a test word
            continue
        if word in seen:
            continue
        seen.add(word)
        parts[split_of(word)].append((word, inherent_vowel_pattern(word, phones)))
    if args.limit is not None:
        parts = {k: v[: args.limit] for k, v in parts.items()}
    if not parts["test"]:
        print(f"error: {args.lexicon} has no held-out word with usable phones", file=sys.stderr)
        return 2
    print(f"lexicon {args.lexicon}: {len(entries)} entries, {no_phones} without usable phones/spelling skipped")
    words = [w for rows in parts.values() for w, _ in rows]
    es = espeak_ne(words)
    espeak = dict(zip(words, es)) if es is not None else None
    from leakloss.text.hindi import espeak_phonemes

    held_words = [w for w, _ in parts["test"]]
    hindi = dict(zip(held_words, espeak_phonemes(held_words, "hi")))
    fe = NepaliFrontend(use_builtin_exceptions=False)
    rules = NepaliFrontend(use_builtin_exceptions=False, retention=None)
    results = {}
    for name, rows, extra in (
        ("train (model fitted; rules written on it)", parts["train"], {}),
        ("calibration (model fitted; rules written on it)", parts["calibration"], {}),
        ("held-out", parts["test"], {"hindi": hindi, "rules": rules, "count_rescoring": True}),
    ):
        r = score(rows, fe, espeak, **extra)
        results[name] = r
        print(f"== {name}: {r['n']} words")
        for k, v in r.items():
            print(f"  {k}: {v:.4f}" if isinstance(v, float) else f"  {k}: {v}")
    pairs, bad, examples = stem_consistency({w: r for rows in parts.values() for w, r in rows})
    print(f"lexicon self-consistency (a ceiling for any model): {bad} of {pairs} stem/stem+marker pairs say the "
          f"stem's inner inherent vowels differently ({bad / max(pairs, 1):.3f}), e.g. {', '.join(examples[:4])}")
    print(f"time {time.time() - t0:.1f}s")
    r = results["held-out"]
    print(f"agreement={r['agreement']:.3f} high_agreement={r['high_agreement']:.3f} "
          f"high_coverage={r['high_coverage']:.3f} espeak_ne_agreement={r['espeak_ne_agreement']:.3f} "
          f"deletion_precision={r['deletion_precision']:.3f} rules_agreement={r['rules_agreement']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
