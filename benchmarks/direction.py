"""Direction check of a training signal: does descending a leak penalty make another instrument flag fewer sites?

Start from Hindi-ward readings of held-out sentences, descend the leak penalty (``--head``/``--recognizer``,
passed to :meth:`leakloss.penalty.LeakPenalty.load`; default: the shipped penalty, its raw-conv head on
recognizer wb) on the *input*, then ask a judge on another recognizer — the reference-paired scorer with the heads
on recognizer w (``leakloss/assets/heads_w``, the scorer's default until 2026-12-05: the shipped scorer now runs on
wb, the penalty's own recognizer; ``--heads-dir leakloss/assets/heads_espeak``: the espeak-only heads on
recognizers A/B, the judge of the figures before 2026-12-01 13:00) — whether fewer sites are flagged. The judge's
heads and word check must all run on recognizers other than the penalty's: a penalty judged by its own
recognizer would grade itself, so that is refused (exit 2). The references the judge compares with are the teacher
voices' readings.

Sentences: the built-in held-out ones, or ``--texts FILE`` from line ``--texts-from`` on (e.g. the shared
prompts, ``$LEAKLOSS_SHARED/data/nepali-prompts/prompts.tsv``, whose lines 1501 on no shipped model trained on:
the fresh sentences of the margin term's confirmatory run, docs/penalty.md).

Readings (``--voices``):

- ``unseen`` (default): the unseen family (:data:`leakloss.speech.festival.UNSEEN_VOICES`, Festival's HTS voices,
  kept out of every shipped model's training), taking turns by sentence, saying each word's Nepali phones with
  every testable site said the Hindi way (:func:`leakloss.text.sites.hindi_ward`) through their phone input, as
  in ``signal_domains.py``; cached under ``$LEAKLOSS_CACHE`` (default ``.cache/leakloss``) ``/direction``;
- ``espeak``: espeak's held-out Hindi voice reading the text (the default before 2026-12-04 22:00 UTC).

The sites are placed on each reading by the penalty's recognizer (:func:`leakloss.site_placement.place_sites`);
a reading where it places none is not used (counted, with the reason, on stderr).

Three input domains:

- ``mel`` (default): log-gains on 32 mel bands per 5 ms frame inside each site's window (±30 ms),
  limited to ±26 dB, applied to the reading's own STFT (its phase kept) and inverted. Zero gains give
  the reading back exactly. The penalty is averaged over random copies (noise at 15-40 dB SNR, ±3 dB
  gain, 0-2.5 ms shift), so a perturbation that only fools one exact waveform does not pay.
- ``voiced``: the ``mel`` gains plus a voiced source (a pulse train at the reading's median f0) added in the
  same windows with learned non-negative band amplitudes (:class:`VoicedInsert`), so that the edit can put back a
  vowel the reading dropped: band gains alone re-weight only the frames that are there, which moves quality flags
  and hardly deletion flags (2026-12-06).
- ``wave``: Adam on the raw samples. This one is adversarially easy: recognizer A's penalty goes to
  ~0 while recognizer B's flags do not move (measured; see the README).

What is descended (``--term``): ``head`` (default), the penalty's reference-free frame head; ``margin``, the
text-paired path-margin term on the same recognizer (:class:`leakloss.margin_penalty.PathMarginPenalty`: the scorer's
CTC path margins, Hindi-ward minus Nepali, over each site's word, planned once on the reading). The judge is the same.

A control applies a random edit of the same size as the learned one (:func:`random_control`; for ``voiced``, a
random non-negative amplitude map inserting the same energy): if it moved the judge's flags as
much, the direction would not come from the penalty's gradient. The issue's bar: flags after descent at most
half of before (``halved``), the control within 10% of before (``control_within_10pct``). Sites the judge
leaves unscored (e.g. its word check refuses the edited reading) are not flags: they are counted apart.

Defaults: 3 sentences, 100 steps (were 10 and 150; A's penalty falls from ~5 to <0.01 within 100 steps). Measured
2026-12-04 on 2 busy CPU cores: a sentence whose sites are placed costs ~100 s with recognizer A, ~165 s with the
shipped head on wb (8 sentences: 1317 s), so the default of 3 stays near 5 minutes; ``--sentences 8`` for the
figures of docs/penalty.md.

Last line: ``flags_before=… flags_after=… flags_control=… sites=… steps=… domain=… deletion_before=…
deletion_after=… quality_before=… quality_after=… control_within_10pct=… halved=… unscored_before=…
unscored_after=… unscored_control=… unplaced=… voices=… penalty=RECOGNIZER`` (``unplaced``: readings on which
the penalty's recognizer placed no site, not used; recognizer A aligns none of the unseen family's).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path

import torch
from torch import Tensor

from leakloss.eval.edits import BandGain, SampleDelta, VoicedInsert, descend, random_control
from leakloss.heads import W_HEADS
from leakloss.margin_penalty import PathMarginPenalty
from leakloss.mel_bridge import MelPathPenalty, vocos_mels
from leakloss.penalty import LeakPenalty
from leakloss.scorer import Scorer
from leakloss.site_placement import locate_sites
from leakloss.speech.corpus import builtin_sentences, split_sentences
from leakloss.speech.synth import HELDOUT_HINDI_VOICE, TRAIN_TEACHER_VOICES, speak_phones, speak_text
from leakloss.text.sites import SiteFinder, hindi_ward

ROOT = Path(__file__).resolve().parent.parent
VOICES = ("unseen", "espeak")
TERMS = ("head", "margin")
DOMAINS = ("mel", "voiced", "wave")
#: The issue's bar: flags after descent at most this share of before, the control within this share of before.
HALVED = 0.5
CONTROL_TOLERANCE = 0.10
class JudgeError(ValueError):
    """The judge runs on the penalty's own recognizer (it would grade the penalty by itself)."""


def base_name(recognizer_name: str) -> str:
    """``w@55714b26`` -> ``w``: the recognizer, whatever weights' digest."""
    return recognizer_name.split("@", 1)[0]


def judge_recognizers(scorer) -> dict[str, str]:
    """Role -> recognizer name of everything the judge decides with: its two heads and its word check."""
    return {"quality head": scorer.recognizers["a"].name, "deletion head": scorer.recognizers["b"].name,
            "word check": scorer.check_recognizer_name}


def check_judge(penalty_recognizer: str, judge: Mapping[str, str]) -> None:
    """Raise :class:`JudgeError` when any of the judge's roles runs on the penalty's recognizer."""
    same = [role for role, name in judge.items() if base_name(name) == base_name(penalty_recognizer)]
    if same:
        if base_name(penalty_recognizer) == "w":
            other = "--heads-dir leakloss/assets/heads_espeak (heads on recognizers A/B) with --check-recognizer wb"
        else:
            other = "the default judge (no --heads-dir: heads_w, heads and word check on w)"
        raise JudgeError(f"the judge's {', '.join(same)} run(s) on recognizer {base_name(penalty_recognizer)}, the "
                         f"one the penalty descends: the check would grade the penalty by itself; pick a judge on "
                         f"another recognizer, e.g. {other}")


def cache_dir() -> Path:
    return Path(os.environ.get("LEAKLOSS_CACHE") or ROOT / ".cache" / "leakloss") / "direction"


NO_UNSEEN_VOICE = ("no voice of the unseen family is installed (the festival packages of .ci/run); --voices "
                   "espeak reads with espeak instead")


def unseen_voices(names: Sequence[str] | None = None) -> list:
    """The installed voices of the unseen family (default :data:`leakloss.speech.festival.UNSEEN_VOICES`)."""
    from leakloss.speech import festival

    names = festival.UNSEEN_VOICES if names is None else names
    return [v for v in (festival.get_voice(n) for n in names) if festival.voice_available(v)]


def hindi_ward_readings(held: Sequence[str], finder, voices: str, skipped: Counter,
                        unseen: Sequence | None = None) -> Iterator[tuple[str, list, Tensor, str]]:
    """``(text, words, wave [t], voice name)`` for each held-out sentence with a testable site, read the Hindi
    way: by espeak's held-out Hindi voice from the text, or by the unseen family (taking turns by sentence)
    from :func:`hindi_ward` phones. A reading that cannot be made is counted in ``skipped``, not dropped."""
    from leakloss.speech import festival

    if voices == "unseen":
        unseen = unseen_voices() if unseen is None else list(unseen)
        if not unseen:
            raise festival.SynthesizerUnavailableError(NO_UNSEEN_VOICE)
    elif voices != "espeak":
        raise ValueError(f"voices must be one of {VOICES}, got {voices!r}")
    turn = 0
    for text in held:
        words = [w for w in finder(text) if w.skipped is None]
        if not any(w.testable_sites for w in words):
            continue
        if voices == "espeak":
            yield text, words, speak_text(text, HELDOUT_HINDI_VOICE).waveform, HELDOUT_HINDI_VOICE.name
            continue
        voice = unseen[turn % len(unseen)]
        turn += 1
        try:
            reading = festival.speak_phones(hindi_ward(words), voice, cache_dir=cache_dir() / "festival")
        except (festival.SynthesisError, KeyError) as err:
            skipped[f"{voice.name}: {type(err).__name__}"] += 1
            continue
        yield text, words, reading.waveform, voice.name


def flags(scorer: Scorer, wave: Tensor, text: str, refs) -> dict[str, tuple[int, int, int]]:
    """(flagged, unscored, sites) per contrast kind, by the reference-paired scorer. A reading the judge does not
    score (its word check quarantines it: its words come back without sites) has every testable site of its text
    unscored: an edit that makes the reading unintelligible must not pass as "no flag"."""
    r = scorer.score(wave, text, refs)
    out = {}
    if r["status"] != "scored":
        for site in (s for w in SiteFinder()(text) if w.skipped is None for s in w.testable_sites):
            f, u, n = out.get(site.kind, (0, 0, 0))
            out[site.kind] = (f, u + 1, n + 1)
        return out
    for s in (s for w in r["words"] for s in w["sites"]):
        f, u, n = out.get(s["kind"], (0, 0, 0))
        out[s["kind"]] = (f + (s["decision"] == "flagged"), u + (s["decision"] == "unscored"), n + 1)
    return out


def summary(totals: Mapping[str, Mapping[str, tuple[int, int, int]]], *, steps: int, domain: str, voices: str,
            penalty: str, unplaced: int = 0) -> str:
    """The last line, from the per-stage (``before``/``after``/``control``) per-kind (flagged, unscored, sites);
    ``unplaced``: readings on which the penalty's recognizer placed no site (not used). With no site, neither
    bar is met nor missed: ``n/a``."""
    flagged = {when: sum(f for f, _, _ in per.values()) for when, per in totals.items()}
    unscored = {when: sum(u for _, u, _ in per.values()) for when, per in totals.items()}
    per_kind = {f"{kind}_{when}": totals[when].get(kind, (0, 0, 0))[0]
                for kind in ("deletion", "quality") for when in ("before", "after")}
    before = flagged["before"]
    sites = sum(n for _, _, n in totals["before"].values())
    within = abs(flagged["control"] - before) <= CONTROL_TOLERANCE * before if sites else "n/a"
    halved = (before > 0 and flagged["after"] <= HALVED * before) if sites else "n/a"
    return (f"flags_before={before} flags_after={flagged['after']} flags_control={flagged['control']} "
            f"sites={sites} steps={steps} domain={domain} "
            + " ".join(f"{k}={v}" for k, v in per_kind.items())
            + f" control_within_10pct={within} halved={halved} unscored_before={unscored['before']} "
            f"unscored_after={unscored['after']} unscored_control={unscored['control']} unplaced={unplaced} voices={voices} "
            f"penalty={base_name(penalty)}")


def sentences(path: str | None, first_line: int = 1) -> list[str]:
    """The built-in held-out sentences, or those of ``path`` from line ``first_line`` on (``id<TAB>text`` lines give
    their text), without the built-in training sentences (the heads and recognizers trained on them)."""
    train, held = split_sentences(builtin_sentences())
    if path is None:
        return held
    from leakloss.textfile import text_lines

    lines = text_lines(Path(path).read_text(encoding="utf-8"))[first_line - 1:]
    texts = [line.split("\t", 1)[-1].strip() for line in lines]
    texts = [t for t in texts if t and t not in set(train)]
    if not texts:
        raise ValueError(f"{path} has no sentence from line {first_line} on")
    return texts


def planned_margin(term: PathMarginPenalty, plan):
    """``descend``'s penalty interface (``waves=[k, t], sites=...``) for the margin term on one reading's plan; with
    a mel bridge the term hears each wave's Vocos mel through it, as an F5 fine-tune's mels."""

    def objective(waves: Tensor, sites=None):
        if term.mel_bridge is not None:
            mels, mel_lengths = vocos_mels(waves)
            return term(mels=mels, mel_lengths=mel_lengths, plans=[plan] * waves.shape[0])
        return term(waves, plans=[plan] * waves.shape[0])

    return objective


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=positive_int, default=3, help="held-out sentences with placed sites")
    parser.add_argument("--steps", type=positive_int, default=100)
    parser.add_argument("--domain", choices=DOMAINS, default="mel")
    parser.add_argument("--lr", type=positive_float, default=None, help="default 0.05 (mel, voiced) / 1e-3 (wave)")
    parser.add_argument("--copies", type=positive_int, default=2, help="random copies per step (1: none)")
    parser.add_argument("--voices", choices=VOICES, default="unseen",
                        help="who reads Hindi-ward: the unseen family (default) or espeak's held-out Hindi voice")
    parser.add_argument("--head", default=None, help="the penalty's raw-conv head file (default: the shipped one)")
    parser.add_argument("--texts", default=None,
                        help="sentences to read instead of the built-in held-out ones: a UTF-8 file, one a line "
                             "(`id<TAB>text` lines, as the shared prompts.tsv, give their text); the built-in "
                             "training sentences in it are skipped")
    parser.add_argument("--texts-from", type=positive_int, default=1, help="first line of --texts to use (1-based)")
    parser.add_argument("--term", choices=TERMS, default="head",
                        help="what is descended: the penalty's frame head (default) or the text-paired path-margin term "
                             "on the same recognizer (leakloss.margin_penalty)")
    parser.add_argument("--mel-bridge", action="store_true",
                        help="descend the term (frame head or margin) on each edited reading's Vocos mel through the "
                             "shipped mel bridge, as an F5 fine-tune hears mels through it, not its wave")
    parser.add_argument("--recognizer", default=None,
                        help="the penalty's recognizer (default: the one its head's card names)")
    parser.add_argument("--heads-dir", default=str(W_HEADS),
                        help="the judge's heads (default: leakloss/assets/heads_w, on recognizer w; "
                             "leakloss/assets/heads_espeak: the espeak-only heads on A/B)")
    parser.add_argument("--check-recognizer", default=None, help="the judge's word check (default: the scorer's)")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    lr = args.lr or (1e-3 if args.domain == "wave" else 0.05)
    torch.set_num_threads(2)
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    try:
        held = sentences(args.texts, args.texts_from)
    except (OSError, UnicodeDecodeError, ValueError) as err:
        parser.error(f"--texts: {err}")
    finder = SiteFinder()
    unseen = unseen_voices() if args.voices == "unseen" else None
    if args.voices == "unseen" and not unseen:
        parser.error(NO_UNSEEN_VOICE)
    try:
        penalty = LeakPenalty.load(recognizer=args.recognizer, head_path=args.head, mel_bridge=args.mel_bridge or None)
    except (ValueError, OSError) as err:  # a bad head file or recognizer: a clear error
        parser.error(f"the penalty: {err}")
    try:
        scorer = Scorer(heads_dir=args.heads_dir, check_recognizer=args.check_recognizer)
    except (ValueError, OSError) as err:
        parser.error(f"the judge: {err}")
    margin = PathMarginPenalty(penalty.recognizer, mel_bridge=penalty.mel_bridge) if args.term == "margin" else None
    judge = judge_recognizers(scorer)
    try:
        check_judge(penalty.recognizer.name, judge)
    except JudgeError as err:
        parser.error(str(err))
    print(f"penalty on {penalty.recognizer.name}; judge: "
          + ", ".join(f"{role} {name}" for role, name in judge.items()) + f"; readings: {args.voices}", flush=True)
    totals = {"before": {}, "after": {}, "control": {}}
    done, unplaced, skipped, start = 0, Counter(), Counter(), time.time()
    readings = hindi_ward_readings(held, finder, args.voices, skipped, unseen)
    for text, words, wave, voice in readings:
        placement = locate_sites(wave, text, penalty.recognizer, words=words)  # place_sites, with the reason
        sites = placement.sites
        if not sites:
            unplaced[placement.status] += 1
            continue
        objective = MelPathPenalty(penalty) if args.mel_bridge else penalty
        if margin is not None:
            # the word crops, fixed while the edit changes the audio (as sites are)
            plan = margin.plan(text=text, mel=vocos_mels(wave[None])[0][0]) if args.mel_bridge else margin.plan(wave, text)
            if plan.status != "ok":
                unplaced[f"margin plan {plan.status}"] += 1
                continue
            objective = planned_margin(margin, plan)
        done += 1
        refs = [speak_phones([w.nepali for w in words], v).waveform for v in TRAIN_TEACHER_VOICES[:2]]
        make = {"mel": partial(BandGain, wave, sites), "voiced": partial(VoicedInsert, wave, sites),
                "wave": partial(SampleDelta, wave)}[args.domain]
        edit = make()
        curve = descend(objective, edit, sites, args.steps, lr, args.copies, generator)
        with torch.no_grad():
            new = edit()
            control_wave = random_control(edit, make, generator)()
        snr = 10 * math.log10(float(wave.pow(2).sum() / (new - wave).pow(2).sum().clamp(min=1e-12)))
        row = {"before": flags(scorer, wave, text, refs), "after": flags(scorer, new, text, refs),
               "control": flags(scorer, control_wave, text, refs)}
        for when, per_kind in row.items():
            for kind, counts in per_kind.items():
                totals[when][kind] = tuple(a + b for a, b in zip(totals[when].get(kind, (0, 0, 0)), counts))
        show = "  ".join(f"{k} {row['before'][k][0]}->{row['after'].get(k, (0,))[0]} (control "
                         f"{row['control'].get(k, (0,))[0]}) of {n}" for k, (_, _, n) in row["before"].items())
        print(f"{voice}: {text[:32]}…  penalty {curve[0]:.3f} -> {curve[-1]:.3f}  {show}  edit SNR {snr:.1f} dB  "
              f"[{time.time() - start:.0f}s]", flush=True)
        if done == args.sentences:
            break  # before the next reading is made
    if unplaced or skipped:
        print(f"not used: {sum(unplaced.values())} reading(s) with no site placed by {penalty.recognizer.name} "
              f"{dict(unplaced)}"
              + (f"; not synthesised: {dict(skipped)}" if skipped else ""), file=sys.stderr, flush=True)
    if done < args.sentences:
        print(f"only {done} of {args.sentences} sentences had a reading with sites", file=sys.stderr, flush=True)
    for kind in sorted(totals["before"]):
        b, u, n = totals["before"][kind]
        after, control = totals["after"].get(kind, (0, 0, 0)), totals["control"].get(kind, (0, 0, 0))
        print(f"{kind}: flagged before {b}/{n} ({u} unscored), after {after[0]}/{n} ({after[1]} unscored), "
              f"control {control[0]}/{n} ({control[1]} unscored)")
    print(f"{time.time() - start:.0f}s for {done} sentences")
    print(summary(totals, steps=args.steps, domain=args.domain, voices=args.voices,
                  penalty=base_name(penalty.recognizer.name) + ("+mel_bridge" if args.mel_bridge else "")
                  + ("+margin" if margin is not None else ""),
                  unplaced=sum(unplaced.values())))


if __name__ == "__main__":
    main()
