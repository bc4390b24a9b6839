"""Inherent-vowel agreement of the Nepali frontend's rules with the Google Nepali lexicon.

The frontend runs with no lexicon and without the built-in exceptions (suffix stripping + letter-to-sound
rules only). For each lexicon word, ``inherent_vowel_pattern`` (a minimum-edit alignment of the phones to
the spelling, see its docstring) says which written inherent vowels each pronunciation keeps; a word
matches when both patterns exist and are equal. An unalignable pattern (None) counts as a mismatch and is
reported separately.

Held-out split: words whose ``sha1(word).hexdigest()`` ends in 0, 1 or 2 (~19%) were set aside before
the rules were written and never studied; the other words ("studied") were used to write the rules.
Both are printed, labelled. espeak-ng's own ``ne`` voice is scored the same way for comparison.

    python benchmarks/frontend_agreement.py [--lexicon PATH] [--limit N]

The last line is ``agreement=... high_agreement=... high_coverage=... espeak_ne_agreement=...`` for the
held-out part.
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

from leakloss.text.g2p import NepaliFrontend, inherent_vowel_pattern, iter_lexicon
from leakloss.text.normalize import TextError
from leakloss.text.phones import clean_espeak_ipa

REPO = Path(__file__).resolve().parent.parent
DEFAULT_LEXICON = REPO.parent / "shared" / "data" / "nepali-lexicon" / "lexicon-dev.tsv"
HELD_OUT_DIGITS = frozenset("012")


def is_held_out(word: str) -> bool:
    return hashlib.sha1(word.encode()).hexdigest()[-1] in HELD_OUT_DIGITS


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


def score(rows: list[tuple[str, tuple[bool, ...] | None]], fe: NepaliFrontend,
          espeak: dict[str, list[str]] | None) -> dict[str, float]:
    n = len(rows)
    match = high = high_match = ref_none = our_none = es_match = 0
    by_source: Counter[tuple[str, str]] = Counter()
    for word, ref in rows:
        pron = fe.pronounce(word)
        ours = inherent_vowel_pattern(word, pron.phones)
        ok = ref is not None and ours is not None and ours == ref
        ref_none += ref is None
        our_none += ours is None
        match += ok
        by_source[(pron.source, pron.confidence)] += 1
        if pron.confidence == "high":
            high += 1
            high_match += ok
        if espeak is not None and ref is not None:
            es_match += inherent_vowel_pattern(word, espeak[word]) == ref
    return {
        "n": n, "agreement": match / n, "high_agreement": high_match / max(high, 1), "high_coverage": high / n,
        "espeak_ne_agreement": es_match / n if espeak is not None else float("nan"),
        "lexicon_unalignable": ref_none, "ours_unalignable": our_none,
        **{f"share_{s}_{c}": v / n for (s, c), v in sorted(by_source.items())},
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lexicon", type=Path, default=DEFAULT_LEXICON)
    ap.add_argument("--limit", type=int, default=None, help="score at most N words of each part")
    args = ap.parse_args(argv)
    t0 = time.time()
    try:
        entries = list(iter_lexicon(args.lexicon, strict=False))
    except TextError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    held, studied, seen = [], [], set()
    no_phones = 0
    for _, word, phones in entries:
        if phones is None:
            no_phones += 1  # empty phone column or a spelling with digits: not a test word
            continue
        if word in seen:
            continue
        seen.add(word)
        (held if is_held_out(word) else studied).append((word, inherent_vowel_pattern(word, phones)))
    if args.limit is not None:
        held, studied = held[: args.limit], studied[: args.limit]
    print(f"lexicon {args.lexicon}: {len(entries)} entries, {no_phones} without usable phones/spelling skipped")
    words = [w for w, _ in held + studied]
    es = espeak_ne(words)
    espeak = dict(zip(words, es)) if es is not None else None
    fe = NepaliFrontend(use_builtin_exceptions=False)
    results = {}
    for name, rows in (("studied (used to write the rules)", studied), ("held-out", held)):
        r = score(rows, fe, espeak)
        results[name] = r
        print(f"== {name}: {r['n']} words")
        for k, v in r.items():
            print(f"  {k}: {v:.4f}" if isinstance(v, float) else f"  {k}: {v}")
    print(f"time {time.time() - t0:.1f}s")
    r = results["held-out"]
    print(f"agreement={r['agreement']:.3f} high_agreement={r['high_agreement']:.3f} "
          f"high_coverage={r['high_coverage']:.3f} espeak_ne_agreement={r['espeak_ne_agreement']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
