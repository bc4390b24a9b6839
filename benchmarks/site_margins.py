"""Benchmark: do the path margins separate a Nepali reading from a Hindi one at deletion sites?

For ~30 built-in sentences: the teacher (held-out Nepali voice) speaks the frontend's phones, the
Hindi base (held-out Hindi voice) reads the Devanagari text. Both readings are aligned with the
Nepali phones and scored by :class:`leakloss.acoustic.features.EvidenceExtractor`. At every testable
DELETION site scored in both readings we look at the mean margin over the three crops: a good
recognizer gives the teacher a negative margin (fits Nepali) and the Hindi base a positive one.

Also reports the alignment fit of correct text (teacher, Hindi) against another sentence's text on
the same audio (``--fit``: how ``align.DEFAULT_MIN_FIT`` was chosen) and the extraction speed
(seconds of audio per second of wall time, recognizer pass + alignment + features).

Run: ``OMP_NUM_THREADS=1 python benchmarks/site_margins.py --recognizer a``. The last line is
``teacher_negative=X hindi_positive=Y sites=N`` (shares of the N deletion sites; ``nan`` when N is 0).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from leakloss.acoustic.align import DEFAULT_MIN_FIT, align_words
from leakloss.acoustic.features import EvidenceExtractor
from leakloss.acoustic.recognizer import Recognizer
from leakloss.speech.corpus import builtin_sentences, split_sentences
from leakloss.speech.synth import HINDI_VOICES, TEACHER_VOICES, speak_phones, speak_text
from leakloss.text.sites import SiteFinder


def _q(xs: list[float]) -> str:
    if not xs:
        return "n=0"
    s = sorted(xs)
    return f"n={len(s)} min={s[0]:.3f} p10={s[len(s) // 10]:.3f} median={statistics.median(s):.3f} max={s[-1]:.3f}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recognizer", default="a", help="a | b | a local recognizer directory")
    ap.add_argument("--sentences", type=int, default=30)
    ap.add_argument("--split", choices=("heldout", "first"), default="heldout",
                    help="heldout: sentences the embedded recognizers never trained on (split_sentences); first: the first N")
    ap.add_argument("--min-fit", type=float, default=DEFAULT_MIN_FIT)
    ap.add_argument("--fit", action="store_true", help="also measure alignment fit of mismatched text")
    args = ap.parse_args(argv)
    if args.sentences < 1:
        ap.error(f"--sentences must be at least 1, got {args.sentences}")

    torch.set_num_threads(1)
    try:
        rec = Recognizer.load(args.recognizer)
    except (ValueError, OSError) as err:  # an unknown name or a bad folder: a clear error, not a traceback
        ap.error(f"--recognizer: {err}")
    finder = SiteFinder(phoneset=rec.phoneset)
    extractor = EvidenceExtractor(rec, min_fit=args.min_fit)
    pool = builtin_sentences()
    sentences = (split_sentences(pool, 0.1)[1] if args.split == "heldout" else pool)[: args.sentences]

    teacher_m, hindi_m = [], []
    fits: dict[str, list[float]] = {"teacher": [], "hindi": [], "mismatch": [], "mismatch_hindi": []}
    failures: list[str] = []
    audio_s = wall_s = 0.0
    prepared = []
    for text in sentences:
        words = finder(text)
        phones = [w.nepali for w in words]
        if not any(phones):
            continue
        teacher = speak_phones([p for p in phones if p], TEACHER_VOICES[-1]).waveform
        hindi = speak_text(text, HINDI_VOICES[-1]).waveform
        prepared.append((text, words, phones, teacher, hindi))

    for k, (text, words, phones, teacher, hindi) in enumerate(prepared):
        results = {}
        for role, wave in (("teacher", teacher), ("hindi", hindi)):
            t0 = time.perf_counter()
            out = extractor.extract(wave, phones, words)
            wall_s += time.perf_counter() - t0
            audio_s += out.duration
            results[role] = out
            if out.alignment is not None:
                fits[role].append(out.alignment.fit)
            if out.status not in ("ok", "no_testable_site"):
                failures.append(f"{role} {text[:30]}: {out.reason}")
        if args.fit:
            other_phones = prepared[(k + 1) % len(prepared)][2]
            for name, wave in (("mismatch", teacher), ("mismatch_hindi", hindi)):
                with torch.no_grad():
                    lp, n = rec(wave[None])
                fits[name].append(align_words(lp[0], int(n[0]), other_phones, rec.phoneset, rec.frame_rate,
                                              min_fit=0.0).fit)
        t, h = results["teacher"], results["hindi"]
        if not (t.ok and h.ok):
            continue
        for key, ev in t.sites.items():
            if ev.kind != "deletion" or key not in h.sites:
                continue
            teacher_m.append(float(ev.margin.mean()))
            hindi_m.append(float(h.sites[key].margin.mean()))

    n = len(teacher_m)
    nan = float("nan")  # no deletion site scored in both readings: no share, not a 0
    neg = sum(m < 0 for m in teacher_m) / n if n else nan
    pos = sum(m > 0 for m in hindi_m) / n if n else nan
    both = sum(a < 0 < b for a, b in zip(teacher_m, hindi_m)) / n if n else nan
    print(f"recognizer={args.recognizer} split={args.split} sentences={len(prepared)} failures={len(failures)}")
    for f in failures[:10]:
        print("  failed:", f)
    print(f"fit teacher  {_q(fits['teacher'])}")
    print(f"fit hindi    {_q(fits['hindi'])}")
    if args.fit:
        print(f"fit mismatch {_q(fits['mismatch'])}")
        print(f"fit mismatch on hindi {_q(fits['mismatch_hindi'])}")
    print(f"margin teacher {_q(teacher_m)}")
    print(f"margin hindi   {_q(hindi_m)}")
    print(f"speed={audio_s / max(wall_s, 1e-9):.1f} s_audio_per_s audio={audio_s:.1f}s wall={wall_s:.1f}s")
    print(f"both={both:.3f}")
    print(f"teacher_negative={neg:.3f} hindi_positive={pos:.3f} sites={n}")


if __name__ == "__main__":
    main()
