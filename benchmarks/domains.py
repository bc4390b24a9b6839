"""Do the instruments hear beyond espeak? Phone error, word check and catches on voices never trained on.

Domains (held-out sentences: the fixed 10% split of the built-in sentences):

- ``espeak``: the held-out espeak voices (teacher phones, Hindi-base text), as in ``recognizers.py``;
- ``unseen``: the unseen family (:data:`leakloss.speech.festival.UNSEEN_FAMILY`, Festival's HTS voices
  ``fest-slt`` and ``fest-ona``): no shipped model trained on any of them. They say the frontend's Nepali phones
  through their phone input; the reference is what they said. ``unseen-twin``: flite's clustergen ``slt``, the
  same speaker as the HTS ``slt`` and kept out of training for that reason, printed apart (its family is not the
  unseen one);
- ``train-family``: one Festival diphone and one flite clustergen voice of the training families, and Piper,
  on the held-out sentences (seen voices, unseen text);
- ``real``: the native-speaker recordings of ``../shared/data/real-nepali-speech`` (skipped when absent),
  against the frontend's phones of the transcript: the *test* speakers of :func:`leakloss.speech.real.speaker_split`
  (a recognizer may train on the others); ``real-all`` (every clip) is printed beside it, not in the last line.

Phone error rates compare coarse phones (:func:`leakloss.text.phones.coarse`: length, nasalisation and stress
dropped, flap = trill, one schwa); each unseen voice and the real test speakers are broken down into their most
frequent edits (:func:`leakloss.eval.confusion.corpus_confusions`: ``ʌ->a`` heard as, ``t->-`` deleted). Then,
with the scorer as shipped (its default word-check recognizer):

- ``quarantine_unseen``: correct readings by the unseen family that the word check quarantines;
- ``quarantine_mismatch``: the same readings given another sentence's transcript, quarantined;
- ``caught_unseen`` / ``false_unseen``: physical pairs in the unseen family at real deletion sites (the site
  vowel's segments cut, 2 ms fades; the sham cuts and puts the same samples back) scored against two espeak
  teacher references: the share of cuts flagged at that site, and the number of shams flagged there;
- real recordings: the share of tested words flagged, per head (a flag on a native reading is a false alarm
  until a listener says otherwise).

Last line: ``per_espeak=… per_unseen_family=… per_real=… quarantine_unseen=… quarantine_mismatch=…
caught_unseen=… false_unseen=… flagged_real_deletion=… flagged_real_quality=… recognizer=…`` (:func:`headline`; a
figure whose readings are absent, e.g. the Festival voices or the real recordings, is ``nan``, never 0).
"""

from __future__ import annotations

import argparse
import random
import time

import torch

from leakloss.acoustic.recognizer import Recognizer, RecognizerNotFoundError
from leakloss.eval.confusion import corpus_confusions
from leakloss.pairs.splice import delete_span, sham_span
from leakloss.speech import festival, piper_voice
from leakloss.speech.corpus import builtin_sentences, split_sentences, split_text_words
from leakloss.speech.real import real_clips
from leakloss.speech.synth import (
    HELDOUT_HINDI_VOICE,
    HELDOUT_TEACHER_VOICE,
    TRAIN_TEACHER_VOICES,
    speak_phones,
    speak_text,
)
from leakloss.text.phones import coarse
from leakloss.text.sites import SiteFinder

TRAIN_FAMILY_VOICES = ("fest-kal", "flite-awb")


def real_recordings(limit: int | None, split: str | None) -> list[dict]:
    """The native-speaker clips of one split of :func:`leakloss.speech.real.speaker_split` (None: all)."""
    return [{"id": c.id, "text": c.text, "wave": c.load(), "split": c.split}
            for c in real_clips(split=split)[:limit]]


def available(names) -> list:
    return [v for v in (festival.get_voice(n) for n in names) if festival.voice_available(v)]


def corpus_per(pairs) -> float:
    """Corpus phone error rate (coarse) of ``(reference, hypothesis)`` pairs; NaN when there is no reference phone
    (an empty domain: its voices are not installed), not a perfect 0."""
    edits, phones = corpus_confusions(pairs, coarse)
    return sum(edits.values()) / phones if phones else float("nan")


def headline(per: dict[str, float], quarantine_unseen: float, quarantine_mismatch: float, caught: int, cuts: int,
             false_flags: int, shams: int, share: dict[str, float], recognizer: str) -> str:
    """The last line; ``false_unseen`` (a count of shams flagged) is ``nan`` when no sham was scored."""
    nan = float("nan")
    caught_unseen = caught / cuts if cuts else nan
    false_unseen = str(false_flags) if shams else "nan"
    return (f"per_espeak={per.get('espeak', nan):.4f} per_unseen_family={per.get('unseen', nan):.4f} "
            f"per_real={per.get('real', nan):.4f} quarantine_unseen={quarantine_unseen:.4f} "
            f"quarantine_mismatch={quarantine_mismatch:.4f} caught_unseen={caught_unseen:.4f} "
            f"false_unseen={false_unseen} flagged_real_deletion={share['deletion']:.4f} "
            f"flagged_real_quality={share['quality']:.4f} recognizer={recognizer}")


def site_decision(result: dict, word_index: int, site_index: int) -> str | None:
    for w in result.get("words", []):
        if w["index"] == word_index and site_index < len(w["sites"]):
            return w["sites"][site_index]["decision"]
    return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recognizers", nargs="+", default=["w", "wb"], help="recognizers whose PER is tabled")
    parser.add_argument("--limit", type=int, default=40, help="held-out sentences (of 57; 0: all)")
    parser.add_argument("--pair-sentences", type=int, default=16, help="held-out sentences for the physical pairs")
    parser.add_argument("--real-limit", type=int, default=None)
    parser.add_argument("--scorer-recognizers", nargs=2, default=None, metavar=("A", "B"),
                        help="the scorer's recognizers for its two roles (default: the shipped scorer's)")
    parser.add_argument("--heads-dir", default=None, help="heads trained on those recognizers' features")
    parser.add_argument("--check-recognizer", default=None, help="the word check's recognizer (default: the scorer's)")
    parser.add_argument("--confusions", type=int, default=8, help="most frequent edits printed per unseen voice")
    args = parser.parse_args(argv)
    # refused up front, not after minutes of synthesis: -1 was a slice that dropped the last sentence
    if args.limit < 0 or args.pair_sentences < 0 or args.confusions < 0 \
            or (args.real_limit is not None and args.real_limit < 0):
        parser.error("need --limit >= 0, --pair-sentences >= 0, --real-limit >= 0 and --confusions >= 0")
    torch.set_num_threads(2)
    start = time.time()
    from leakloss.scorer import Scorer, phone_error_rate

    roles = dict(zip(("recognizer_a", "recognizer_b"), args.scorer_recognizers)) if args.scorer_recognizers else {}
    try:  # an unknown recognizer or heads folder: one line before the synthesis, not a traceback after it
        scorer = Scorer(**roles, heads_dir=args.heads_dir, check_recognizer=args.check_recognizer)
    except Exception as err:  # noqa: BLE001 - any reason the scorer cannot load is a bad argument here
        parser.error(f"--scorer-recognizers / --heads-dir / --check-recognizer: {type(err).__name__}: {err}")
    _, held = split_sentences(builtin_sentences())
    held = held[: args.limit] if args.limit else held  # the same first sentences at any limit (fixed split)
    finder = SiteFinder()
    words_of = {t: [list(w.nepali) for w in finder(t) if w.skipped is None] for t in held}
    domains: dict[str, list[tuple[torch.Tensor, list[str], str]]] = {"espeak": [], "unseen": [], "unseen-twin": []}
    for text in held:
        ph = words_of[text]
        r = speak_phones(ph, HELDOUT_TEACHER_VOICE)
        domains["espeak"].append((r.waveform, r.phones, text))
        r = speak_text(" ".join(split_text_words(text)), HELDOUT_HINDI_VOICE)
        domains["espeak"].append((r.waveform, r.phones, text))
    voices = available(festival.UNSEEN_VOICES)
    unseen_readings = []  # (text, voice, reading) for the pairs
    unseen_voice_of: list[str] = []  # the voice of each domains["unseen"] reading, in order
    for v in voices + available(festival.UNSEEN_SPEAKER_TWINS):
        twin = v.name in festival.UNSEEN_SPEAKER_TWINS  # kept out of training, but of another family: apart
        for text in held:
            try:
                r = festival.speak_phones(words_of[text], v)
            except festival.SynthesisError:
                continue
            domains["unseen-twin" if twin else "unseen"].append((r.waveform, r.phones, text))
            if not twin:
                unseen_readings.append((text, v, r))
                unseen_voice_of.append(v.name)
    for name in TRAIN_FAMILY_VOICES:
        v = festival.get_voice(name)
        if festival.voice_available(v):
            domains[name] = []
            for text in held:
                try:
                    r = festival.speak_phones(words_of[text], v)
                except festival.SynthesisError:
                    continue
                domains[name].append((r.waveform, r.phones, text))
    if piper_voice.piper_available():
        domains["piper"] = []
        for text in held[:20]:
            r = piper_voice.speak_phones(words_of[text], noise_scale=0.0, noise_w=0.0)
            domains["piper"].append((r.waveform, r.phones, text))
    every_real = real_recordings(args.real_limit, None)
    real = [row for row in every_real if row["split"] == "test"]
    for name, rows in (("real", real), ("real-all", every_real)):
        if rows:
            domains[name] = [(row["wave"], [p for w in finder(row["text"]) if w.skipped is None for p in w.nepali],
                              row["text"]) for row in rows]
    print(f"{len(held)} held-out sentences; readings: " + ", ".join(f"{k} {len(v)}" for k, v in domains.items())
          + f"; unseen voices {[v.name for v in voices]} ({time.time() - start:.0f}s)")

    per: dict[str, dict[str, float]] = {}
    for name in args.recognizers:
        try:
            model = Recognizer.load(name)
        except RecognizerNotFoundError as err:
            print(f"recognizer {name}: not available ({err})")
            continue
        with torch.no_grad():
            hyps = {d: [model.greedy(x[0][None])[0] for x in items] for d, items in domains.items()}
        per[name] = {}
        for d, items in domains.items():  # edits summed / phones summed: the corpus phone error rate
            per[name][d] = corpus_per((x[1], h) for x, h in zip(items, hyps[d]))
        print(f"recognizer {model.name}: " + "  ".join(f"{d} {v:.1%}" for d, v in per[name].items()), flush=True)
        # where the errors are: each unseen voice and the real test speakers apart, the most frequent edits
        parts = {v: [(x[1], h) for x, h, who in zip(domains["unseen"], hyps["unseen"], unseen_voice_of) if who == v]
                 for v in dict.fromkeys(unseen_voice_of)}
        if "real" in domains:
            parts["real"] = [(x[1], h) for x, h in zip(domains["real"], hyps["real"])]
        for part, pairs in parts.items():
            edits, phones = corpus_confusions(pairs, coarse)
            top = ", ".join(f"{r}->{h} {c}" for (r, h), c in edits.most_common(args.confusions))
            print(f"  {part}: {sum(edits.values()) / max(phones, 1):.1%} of {phones} phones; most frequent: {top}")

    check_name = scorer.check_recognizer_name
    print(f"scorer: recognizers {scorer.recognizers['a'].name} / {scorer.recognizers['b'].name}, heads "
          f"{args.heads_dir or 'shipped'}; word check: recognizer {check_name}, limits {scorer.query_max_per:.2f} (query) "
          f"{scorer.reference_max_per:.2f} (reference)")
    # word check: correct transcripts, then each reading with the next sentence's transcript
    # the scorer's own check (its recognizer, phone error rate, query limit); the hypothesis is decoded once and
    # compared with both transcripts
    passes, mismatch_passes = [], []
    expected = {t: [p for w in finder(t) if w.skipped is None for p in w.nepali] for t in held}
    for wave, _, text in domains["unseen"]:
        other = held[(held.index(text) + 1) % len(held)]
        with torch.no_grad():
            hyp = scorer.check_recognizer.greedy(wave[None])[0]
        passes.append(phone_error_rate(expected[text], hyp) <= scorer.query_max_per)
        mismatch_passes.append(phone_error_rate(expected[other], hyp) <= scorer.query_max_per)
    # no reading (the Festival voices missing): nan, not a perfect 1.0
    quarantine_unseen = 1 - sum(passes) / len(passes) if passes else float("nan")
    quarantine_mismatch = 1 - sum(mismatch_passes) / len(mismatch_passes) if mismatch_passes else float("nan")
    print(f"word check on the unseen family: {quarantine_unseen:.1%} of {len(passes)} correct readings quarantined, "
          f"{quarantine_mismatch:.1%} of {len(mismatch_passes)} mismatched ones ({time.time() - start:.0f}s)", flush=True)

    # physical deletion pairs in the unseen family
    rng = random.Random(0)
    refs_of: dict[str, list[torch.Tensor]] = {}
    caught = shams = false_flags = cuts = 0
    unscored = 0
    pair_texts = set(held[: args.pair_sentences])
    for text, voice, reading in unseen_readings:
        if text not in pair_texts:
            continue
        spoken = [w for w in finder(text) if w.skipped is None]
        spoken_phones = words_of[text]
        spans = festival.nepali_phone_spans(reading, voice, spoken_phones)
        sites = [(k, w, j, s) for k, w in enumerate(spoken) for j, s in enumerate(w.testable_sites)
                 if s.kind == "deletion" and k < len(spans) and spans[k][s.position] is not None]
        rng.shuffle(sites)
        if text not in refs_of:
            refs_of[text] = [speak_phones(spoken_phones, v).waveform for v in TRAIN_TEACHER_VOICES[:2]]
        for k, w, j, site in sites[:2]:
            a, b = spans[k][site.position]
            for altered, is_cut in ((delete_span(reading.waveform, a, b), True), (sham_span(reading.waveform, a, b), False)):
                result = scorer.score(altered, text, refs_of[text], query_name=f"{voice.name}-{'cut' if is_cut else 'sham'}")
                decision = site_decision(result, w.index, j)
                if is_cut:
                    cuts += 1
                    caught += decision == "flagged"
                else:
                    shams += 1
                    false_flags += decision == "flagged"
                unscored += decision in (None, "unscored")
    caught_unseen = caught / cuts if cuts else float("nan")
    print(f"physical deletions in the unseen family: {caught} of {cuts} caught ({caught_unseen:.1%}), "
          f"{false_flags} of {shams} shams flagged, {unscored} unscored or quarantined ({time.time() - start:.0f}s)",
          flush=True)

    flagged_real = {"deletion": [0, 0], "quality": [0, 0]}
    real_status: dict[str, int] = {}
    for row in real:
        spoken = [w for w in finder(row["text"]) if w.skipped is None]
        refs = [speak_phones([list(w.nepali) for w in spoken], v).waveform for v in TRAIN_TEACHER_VOICES[:2]]
        result = scorer.score(row["wave"], row["text"], refs, query_name=row["id"])
        real_status[result["status"]] = real_status.get(result["status"], 0) + 1
        for w in result["words"]:
            for s in w["sites"]:
                if s["decision"] in ("flagged", "uncertain", "no_change"):
                    flagged_real[s["kind"]][1] += 1
                    flagged_real[s["kind"]][0] += s["decision"] == "flagged"
    share = {k: (v[0] / v[1] if v[1] else float("nan")) for k, v in flagged_real.items()}
    print(f"real recordings: statuses {real_status}; tested sites flagged: " +
          ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in flagged_real.items()) + f" ({time.time() - start:.0f}s)")
    best = per.get(check_name.split("@")[0], {})
    print(headline(best, quarantine_unseen, quarantine_mismatch, caught, cuts, false_flags, shams, share,
                   check_name.split("@")[0]))


if __name__ == "__main__":
    main()
