"""Calibrate a recognizer's word-check limits and write them into its card:
``python -m train_recognizers.calibrate w`` (a folder or an embedded name).

Calibration readings are the held-out sentences (never trained on) read by voices of the *training* families
(the espeak held-out teacher and Hindi voices, Festival diphone and flite clustergen training voices, Piper);
the unseen family is never used here, so ``benchmarks/domains.py`` measures the limits on it honestly.

- query limit: just under the 2nd percentile of the phone error rate of the *mismatched* readings (each reading
  against the next sentence's transcript), so that at least 98% of readings of another text stay quarantined;
- reference limit: the 99th percentile of the espeak teacher's correct readings plus 0.05, at most the query limit
  (references are trusted teacher readings: the stricter limit catches a broken one).

Phone error rates as the scorer computes them (:func:`leakloss.scorer.phone_error_rate`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from leakloss.acoustic.recognizer import Recognizer, RecognizerLoadError, resolve_recognizer_path
from leakloss.atomic import write_text_atomic
from leakloss.checks import first_line
from leakloss.scorer import phone_error_rate
from leakloss.speech import festival, piper_voice
from leakloss.speech.corpus import builtin_sentences, split_sentences
from leakloss.speech.synth import HELDOUT_HINDI_VOICE, HELDOUT_TEACHER_VOICE, speak_phones, speak_text
from leakloss.text.sites import SiteFinder
from leakloss.textfile import read_json_object

CALIBRATION_VOICES = ("fest-kal", "fest-it-pc", "fest-cs-krb", "flite-awb", "flite-rms")


def readings(held: list[str]) -> dict[str, list[tuple[torch.Tensor, str]]]:
    finder = SiteFinder()
    words = {t: [list(w.nepali) for w in finder(t) if w.skipped is None] for t in held}
    out: dict[str, list] = {"espeak-teacher": [], "espeak-hindi": []}
    for t in held:
        out["espeak-teacher"].append((speak_phones(words[t], HELDOUT_TEACHER_VOICE).waveform, t))
        out["espeak-hindi"].append((speak_text(" ".join(w.word for w in finder(t) if w.skipped is None),
                                               HELDOUT_HINDI_VOICE).waveform, t))
    for name in CALIBRATION_VOICES:
        voice = festival.get_voice(name)
        if not festival.voice_available(voice):
            continue
        out[name] = []
        for t in held:
            try:
                out[name].append((festival.speak_phones(words[t], voice).waveform, t))
            except festival.SynthesisError:
                continue
    if piper_voice.piper_available():
        out["piper"] = [(piper_voice.speak_phones(words[t], noise_scale=0.0, noise_w=0.0).waveform, t) for t in held]
    return out


#: Fewer mismatched readings than this and the query limit (their 2nd percentile) is only their minimum: warned.
FEW_MISMATCHED = 50
#: Fewest of the espeak teacher's correct readings that must pass the query limit for the limits to be written:
#: a recognizer that tells correct from mismatched readings apart passes all of them (w: 1.0); one that does not
#: got limits under which every query was "not scored", written without a word.
MIN_TEACHER_PASS = 0.9


def read_card(folder: Path) -> dict:
    """The recognizer's card.json (``{}`` when absent); ``ValueError`` when it cannot be read as a JSON object."""
    card_path = folder / "card.json"
    return read_json_object(card_path, "card") if card_path.exists() else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("recognizer")
    parser.add_argument("--dry-run", action="store_true", help="print the limits, do not write the card")
    parser.add_argument("--sentences", type=int, default=0, help="the first N held-out sentences only (0: all 57)")
    args = parser.parse_args(argv)
    _, held = split_sentences(builtin_sentences())
    if args.sentences == 1 or args.sentences < 0:
        # one sentence: its "mismatched" reading would be checked against its own transcript
        print(f"error: --sentences {args.sentences}: give 0 (all {len(held)}) or at least 2", file=sys.stderr)
        return 2
    torch.set_num_threads(2)
    try:
        model = Recognizer.load(args.recognizer)
    except RecognizerLoadError as err:
        print(f"error: {first_line(err)}", file=sys.stderr)
        return 2
    folder = resolve_recognizer_path(args.recognizer)
    if not args.dry_run and not isinstance(folder, Path):
        print(f"error: {args.recognizer} is not a local recognizer folder; nothing written", file=sys.stderr)
        return 2
    try:  # a truncated card was found only after every reading, as a traceback
        card = read_card(folder) if isinstance(folder, Path) else {}
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    held = held[: args.sentences] if args.sentences else held
    finder = SiteFinder()
    expected = {t: [p for w in finder(t) if w.skipped is None for p in w.nepali] for t in held}
    correct: dict[str, list[float]] = {}
    mismatched: list[float] = []
    with torch.no_grad():
        for group, items in readings(held).items():
            if not items:
                continue  # a voice that spoke none of the sentences calibrated nothing
            correct[group] = []
            for wave, text in items:
                hyp = model.greedy(wave[None])[0]
                other = held[(held.index(text) + 1) % len(held)]
                correct[group].append(phone_error_rate(expected[text], hyp))
                mismatched.append(phone_error_rate(expected[other], hyp))
    query = float(np.floor(np.percentile(mismatched, 2) * 100) / 100) - 0.01
    reference = float(min(query, np.ceil((np.percentile(correct["espeak-teacher"], 99) + 0.05) * 100) / 100))
    summary = {group: {"median": round(float(np.median(v)), 3), "p95": round(float(np.percentile(v, 95)), 3),
                       "pass": round(float(np.mean(np.array(v) <= query)), 3), "n": len(v)}
               for group, v in correct.items()}
    summary["mismatched"] = {"median": round(float(np.median(mismatched)), 3), "p2": round(float(np.percentile(mismatched, 2)), 3),
                             "quarantined": round(float(np.mean(np.array(mismatched) > query)), 3), "n": len(mismatched)}
    for group, s in summary.items():
        print(f"{group:16s} {s}")
    print(f"limits: query {query:.2f}, reference {reference:.2f}")
    if len(mismatched) < FEW_MISMATCHED:
        print(f"warning: the query limit rests on {len(mismatched)} mismatched readings only "
              f"(fewer than {FEW_MISMATCHED}: their 2nd percentile is about their minimum)", file=sys.stderr)
    teacher_pass = summary["espeak-teacher"]["pass"]
    if teacher_pass < MIN_TEACHER_PASS:
        problem = (f"under these limits only {teacher_pass:.0%} of the espeak teacher's correct readings pass "
                   f"(fewer than {MIN_TEACHER_PASS:.0%}): the recognizer does not tell correct readings from "
                   "mismatched ones")
        print(f"warning: {problem}" if args.dry_run else f"error: {problem}; card not written", file=sys.stderr)
        if not args.dry_run:
            return 1
    if args.dry_run:
        return 0
    card_path = folder / "card.json"
    # the voices and sentences that were really read (a voice missing on this machine is not named)
    card["word_check"] = {"query_max_per": round(query, 2), "reference_max_per": round(reference, 2),
                          "calibration": summary, "calibration_voices": list(correct),
                          "sentences": f"the first {len(held)} of the {len(split_sentences(builtin_sentences())[1])} "
                                       "held-out sentences of the built-in split (seed 0)"}
    write_text_atomic(card_path, json.dumps(card, ensure_ascii=False, indent=1))
    if (folder / "README.md").exists() and card.get("class", "").startswith("WhisperPhoneHead"):
        from train_recognizers.whisper import card_markdown

        write_text_atomic(folder / "README.md", card_markdown(card))
    print(f"wrote {card_path}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # a traceback; the card is written atomically, so it is as it was
        print("\ninterrupted: the recognizer's card is unchanged", file=sys.stderr)
        sys.exit(130)
