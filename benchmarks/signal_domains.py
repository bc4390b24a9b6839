"""Does the training signal hear beyond espeak? The penalty, the reward and site placement on held-out speech.

The signal (``--signal``; default ``shipped``: :meth:`leakloss.penalty.LeakPenalty.load` as shipped, its reward
:func:`leakloss.penalty.leak_reward_details` and its site placement :func:`leakloss.penalty.locate_sites`, both on
the penalty's recognizer) is run on the held-out sentences (the fixed 10% split of the built-in sentences, as in
``domains.py``) in three domains:

- ``unseen``: the unseen family (:data:`leakloss.speech.festival.UNSEEN_VOICES`, Festival's HTS voices, kept out
  of every shipped model's training) saying the frontend's Nepali phones through their phone input; flite's
  ``slt`` (same speaker, kept out too, another family) is printed apart with ``--twin``, as in ``domains.py``;
- ``real``: the native recordings of ``../shared/data/real-nepali-speech`` by the *test* speakers
  (:func:`leakloss.speech.real.speaker_split`, minus any clip a recognizer card lists as trained on);
- ``espeak``: the held-out teacher voice read fast, for the short retained vowels.

Figures (each from running the signal; a domain whose voices or data are absent prints ``nan``, and why on stderr):

- ``judged_real`` / ``judged_unseen``: share of correct readings whose reward is judged (status ``scored`` or
  ``no_testable_site``, :data:`leakloss.schema.JUDGED_REWARD_STATUSES`) rather than refused;
- ``auc_site_unseen``: ROC AUC of the penalty's site probability (``parts.site_probs``) of physical cuts at real
  deletion sites (the site vowel's own segments, by the synthesizer's times, cut out with 2 ms fades:
  :func:`leakloss.pairs.splice.delete_span`) against their shams (cut and put back:
  :func:`~leakloss.pairs.splice.sham_span`). The site window is the span that was cut, in the intact reading's
  timing, for both (as in fine-tuning, where sites placed on the ground truth are scored on the generated audio);
- ``auc_site_real``: the same on the test speakers' recordings at every schwa the frontend says is spoken (the
  vowel of the deletion contrast), placed by forced alignment with ``--aligner`` (recognizer w by default: it
  hears real speech) as the phone's segment (:meth:`leakloss.acoustic.align.AlignmentResult.phone_segments`): the
  CTC spike alone is often 20 ms of a 70 ms schwa, and cutting it left the vowel (until 2026-12-05). Every
  schwa, not only the testable contrast sites: the 14 test clips are short phrases with two or three of those
  (their AUC is printed apart);
- ``auc_reward_unseen``: ROC AUC of the reward of Nepali readings against Hindi-ward readings (the same words by
  the same voice with every testable site said the Hindi way: the vowel dropped, or the Hindi vowel) in the
  unseen family, over the sentences that have a testable site;
- ``false_sites_real``: share of those schwa sites, on the intact native recordings, whose leak probability is
  >= 0.5 (the sites the signal's own placement finds are counted and printed beside: recognizer A aligns none);
- ``false_short_vowels``: share of retained schwas at deletion sites lasting 40-60 ms (the held-out teacher voice
  at seven fast rates, as in ``short_vowels.py``; window: espeak's own times) at or above the penalty's flag
  threshold, pooled over ``--short-vowel-syntheses`` syntheses of each reading (default 5, as
  ``short_vowels.py``), each with its own draw of the held-out voice's breath noise (``Voice.noise_draw``: espeak
  is seeded per request since 2026-12-07, so the same request repeated is the same reading; until then each
  synthesis was another draw by the clock): one synthesis is one draw (a borderline vowel's probability moved
  0.44 -> 0.89 between runs; measured 2026-12-06).

Readings by Festival/flite are cached under ``$LEAKLOSS_CACHE`` (default ``.cache/leakloss``) ``/signal_domains``,
keyed by a hash of voice and phones; every score is computed afresh.

Last line: ``judged_real=… judged_unseen=… auc_site_unseen=… auc_site_real=… auc_reward_unseen=… false_sites_real=…
false_short_vowels=… signal=…``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from leakloss.constants import SAMPLE_RATE
from leakloss.eval.stats import Interval, roc_auc, wilson_interval
from leakloss.pairs.splice import delete_span, sham_span
from leakloss.schema import JUDGED_REWARD_STATUSES
from leakloss.text.sites import hindi_ward
from leakloss.timing import TimedSite

ROOT = Path(__file__).resolve().parent.parent
#: The fast espeak rates (words/min) at which retained schwas get short, as in ``short_vowels.py``.
FAST_RATES = (220, 240, 260, 280, 300, 320, 340)
SHORT_VOWEL_S = (0.04, 0.06)
#: A site on a native recording at or above this leak probability counts as a false site (the issue's rule).
FALSE_SITE_P = 0.5
KEYS = ("judged_real", "judged_unseen", "auc_site_unseen", "auc_site_real", "auc_reward_unseen", "false_sites_real",
        "false_short_vowels")


@dataclass
class Signal:
    """The training signal under test: a penalty (``penalty(waves=[b, t], wave_lengths=[b], sites=[[TimedSite]])
    -> (loss, parts)`` with ``parts.site_probs`` / ``parts.site_active``), the recognizer its reward and site
    placement run on, and those two functions (signature of :func:`leakloss.penalty.leak_reward_details` and
    :func:`leakloss.penalty.locate_sites`), so another recognizer's signal is scored by the same code."""

    name: str
    penalty: Callable
    recognizer: object
    flag_threshold: float
    reward_details: Callable
    locate_sites: Callable

    def rewards(self, waves: Sequence[Tensor], texts: Sequence[str]) -> list:
        return self.reward_details(list(waves), list(texts), self.penalty, self.recognizer)

    def place(self, wave: Tensor, text: str) -> list[TimedSite]:
        return list(self.locate_sites(wave, text, self.recognizer).sites)

    @torch.no_grad()
    def site_probs(self, wave: Tensor, sites: Sequence[TimedSite]) -> list[float | None]:
        """Leak probability of each site on ``wave [t]`` (None: the site has no frame in the audio)."""
        if not sites:
            return []
        _, parts = self.penalty(waves=wave[None], sites=[list(sites)])
        return [float(p) if bool(a) else None for p, a in zip(parts.site_probs, parts.site_active)]


def shipped_signal(recognizer: str | None = None, head: str | None = None, mel_bridge: bool = False,
                   crop: bool = False) -> Signal:
    """The signal as shipped: :meth:`LeakPenalty.load` (its default head and recognizer unless given), its reward
    and site placement on the penalty's recognizer. ``mel_bridge``: the penalty scores each reading's Vocos mel
    through the shipped mel bridge (:class:`leakloss.mel_bridge.MelPathPenalty`), as in an F5 fine-tune with
    ``leak.mel_bridge=true``; placement stays on the waves. ``crop`` (with ``mel_bridge``): Whisper's encoder on
    crops around the sites only (:meth:`LeakPenalty.cropped`, ``leak.mel_bridge=true leak.crop=true``)."""
    from leakloss.mel_bridge import MelPathPenalty
    from leakloss.penalty import LeakPenalty, leak_reward_details, locate_sites

    if crop and not mel_bridge:
        raise ValueError("--crop crops the mel bridge's log mel: give --mel-bridge with it")
    penalty = LeakPenalty.load(recognizer=recognizer, head_path=head, mel_bridge=mel_bridge or None)
    scored = MelPathPenalty(penalty, crop=crop) if mel_bridge else penalty
    name = f"{penalty.recognizer.name}+{Path(head).stem if head else 'shipped'}" + ("+mel_bridge" if mel_bridge else "")
    return Signal(name + ("+crop" if crop else ""), scored, penalty.recognizer, penalty.flag_threshold,
                  leak_reward_details, locate_sites)


def load_signal(spec: str, recognizer: str | None = None, head: str | None = None, mel_bridge: bool = False,
                crop: bool = False) -> Signal:
    """``shipped`` (:func:`shipped_signal`), or ``MODULE:CALLABLE`` called with no argument, returning a
    :class:`Signal` or a penalty module (wrapped as the shipped one is: its ``.recognizer`` places and checks)."""
    if spec == "shipped":
        return shipped_signal(recognizer, head, mel_bridge, crop)
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--signal must be 'shipped' or MODULE:CALLABLE, got {spec!r}")
    if recognizer is not None or head is not None or mel_bridge or crop:
        raise ValueError("--recognizer/--head/--mel-bridge/--crop go with --signal shipped; a MODULE:CALLABLE signal "
                         "builds its own")
    target = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    built = target()
    if isinstance(built, Signal):
        return built
    from leakloss.heads import FLAG_THRESHOLD
    from leakloss.penalty import leak_reward_details, locate_sites

    rec = getattr(built, "recognizer", None)
    if rec is None:
        raise ValueError(f"{spec} returned a {type(built).__name__}: neither a Signal nor a penalty with .recognizer")
    return Signal(spec, built, rec, getattr(built, "flag_threshold", FLAG_THRESHOLD), leak_reward_details,
                  locate_sites)


def judged_share(results) -> float:
    """Share of reward results judged (``scored`` / ``no_testable_site``); NaN for none."""
    return sum(r.status in JUDGED_REWARD_STATUSES for r in results) / len(results) if results else math.nan


def auc_or_nan(positives: Sequence[float], negatives: Sequence[float]) -> float:
    return roc_auc(positives, negatives) if positives and negatives else math.nan


def cut_pair_probs(signal: Signal, wave: Tensor, span: tuple[float, float], site: TimedSite) -> tuple | None:
    """(p on the cut, p on the sham) of ``site`` (the cut span's window), or None when either has no frame."""
    a, b = span
    cut = signal.site_probs(delete_span(wave, a, b), [site])[0]
    sham = signal.site_probs(sham_span(wave, a, b), [site])[0]
    return None if cut is None or sham is None else (cut, sham)


def warn(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cache_dir() -> Path:
    return Path(os.environ.get("LEAKLOSS_CACHE") or ROOT / ".cache" / "leakloss") / "signal_domains"


def unseen_domain(signal: Signal, held: list[str], words_of: dict, voice_names: Sequence[str], pair_sentences: int,
                  label: str) -> dict:
    """Rewards of Nepali and Hindi-ward readings and cut/sham site probabilities in the given voices."""
    from leakloss.speech import festival

    voices = [v for v in (festival.get_voice(n) for n in voice_names) if festival.voice_available(v)]
    missing = [n for n in voice_names if n not in {v.name for v in voices}]
    if missing:
        warn(f"{label}: voice(s) {', '.join(missing)} not installed (festival/flite packages of .ci/run)")
    if not voices:
        return {}
    cache = cache_dir() / "festival"
    nepali, hindi, nepali_paired, failed = [], [], [], Counter()
    cuts, shams, unscored = [], [], 0
    for voice in voices:
        for i, text in enumerate(held):
            words = words_of[text]
            if not words:
                continue
            phones = [list(w.nepali) for w in words]
            try:
                reading = festival.speak_phones(phones, voice, cache_dir=cache)
            except (festival.SynthesisError, KeyError) as err:
                failed[f"{voice.name} nepali: {type(err).__name__}"] += 1
                continue
            nepali.append((reading.waveform, text))
            if any(w.testable_sites for w in words):
                try:
                    hindi.append((festival.speak_phones(hindi_ward(words), voice, cache_dir=cache).waveform, text))
                    nepali_paired.append(len(nepali) - 1)
                except (festival.SynthesisError, KeyError) as err:
                    failed[f"{voice.name} hindi-ward: {type(err).__name__}"] += 1
            if pair_sentences and i >= pair_sentences:
                continue
            spans = festival.nepali_phone_spans(reading, voice, phones)
            for k, w in enumerate(words):
                for site in w.testable_sites:
                    span = spans[k][site.position] if k < len(spans) else None
                    if site.kind != "deletion" or span is None:
                        continue
                    probs = cut_pair_probs(signal, reading.waveform, span,
                                           TimedSite(span[0], span[1], site.kind, site.contrast, w.word))
                    if probs is None:
                        unscored += 1
                        continue
                    cuts.append(probs[0])
                    shams.append(probs[1])
    if failed:
        warn(f"{label}: readings not synthesised: {dict(failed)}")
    rewards = signal.rewards([x[0] for x in nepali], [x[1] for x in nepali])
    hindi_rewards = signal.rewards([x[0] for x in hindi], [x[1] for x in hindi])
    paired = [rewards[i].reward for i in nepali_paired]
    out = {"judged": judged_share(rewards), "auc_site": auc_or_nan(cuts, shams),
           "auc_reward": auc_or_nan(paired, [r.reward for r in hindi_rewards])}
    print(f"{label} ({', '.join(v.name for v in voices)}): {len(nepali)} Nepali readings, statuses "
          f"{dict(Counter(r.status for r in rewards))}; Hindi-ward {len(hindi)}, statuses "
          f"{dict(Counter(r.status for r in hindi_rewards))}; mean reward Nepali {_mean(paired):.3f} vs Hindi-ward "
          f"{_mean([r.reward for r in hindi_rewards]):.3f}; cuts {len(cuts)} (mean p {_mean(cuts):.3f}) vs shams "
          f"(mean p {_mean(shams):.3f}), {unscored} unscored", flush=True)
    return out


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def trained_clip_ids() -> set[str]:
    """Real clips any shipped recognizer card lists as trained on (never test material)."""
    ids: set[str] = set()
    for card in (ROOT / "leakloss" / "assets" / "recognizers").glob("*/card.json"):
        ids.update((json.loads(card.read_text(encoding="utf-8")).get("real_speech") or {}).get("clips", []))
    return ids


def schwa_sites(wave: Tensor, words, aligner) -> list[TimedSite] | None:
    """Every schwa the frontend says is spoken (a deletion contrast's vowel, testable site or not) placed on
    ``wave [t]`` by forced alignment with ``aligner``; None when the words do not align."""
    from leakloss.acoustic.align import align_words
    from leakloss.functional.leak import peak_limited
    from leakloss.text.phones import strip_nasal
    from leakloss.text.sites import OPEN_CENTRAL

    if not words:
        return []
    with torch.no_grad():
        log_probs, frames = aligner(peak_limited(wave)[None])
    n = int(frames[0])
    alignment = align_words(log_probs[0, :n], n, [w.nepali for w in words], aligner.phoneset, aligner.frame_rate,
                            words=[w.word for w in words])
    if not alignment.ok:
        return None
    out = []
    for k, w in enumerate(words):
        segments = alignment.phone_segments(k)  # the vowels, not their CTC spikes (a 20 ms cut leaves the vowel)
        if segments is None:
            continue
        for i, phone in enumerate(w.nepali):
            if strip_nasal(phone) in OPEN_CENTRAL:
                a, b = segments[i]
                out.append(TimedSite(a, max(b, a + 0.01), "deletion", f"{phone}->∅", w.word))
    return out


def real_domain(signal: Signal, aligner_name: str, limit: int | None) -> dict:
    from leakloss.acoustic.recognizer import Recognizer, RecognizerNotFoundError
    from leakloss.penalty import locate_sites
    from leakloss.speech.real import default_dir, real_clips

    trained = trained_clip_ids()
    clips = [c for c in real_clips(split="test") if c.id not in trained][:limit]
    if not clips:
        warn(f"real: no test-speaker recordings in {default_dir()} (set LEAKLOSS_SHARED to the shared folder)")
        return {}
    waves = [c.load() for c in clips]
    rewards = signal.rewards(waves, [c.text for c in clips])
    placed_probs, unplaced = [], Counter()  # the signal's own placement (the reward's): reported beside
    for wave, clip in zip(waves, clips):
        placement = signal.locate_sites(wave, clip.text, signal.recognizer)
        if placement.status != "placed":
            unplaced[placement.status] += 1
        placed_probs += [p for p in signal.site_probs(wave, placement.sites) if p is not None]
    out = {"judged": judged_share(rewards)}
    print(f"real: {len(clips)} test-speaker clips, reward statuses {dict(Counter(r.status for r in rewards))}, "
          f"median phone error {_median([r.phone_error_rate for r in rewards])}; signal's placement: "
          f"{len(placed_probs)} sites, not placed {dict(unplaced)}; sites p >= {FALSE_SITE_P}: "
          f"{sum(p >= FALSE_SITE_P for p in placed_probs)}", flush=True)
    try:
        aligner = Recognizer.load(aligner_name)
    except RecognizerNotFoundError as err:
        warn(f"real: aligner {aligner_name} not available ({err}): auc_site_real and false_sites_real are nan")
        return out
    from leakloss.text.sites import SiteFinder

    finder = SiteFinder()
    cuts, shams, intact, unscored, unaligned = [], [], [], 0, 0
    contrast_cuts, contrast_shams = [], []
    for wave, clip in zip(waves, clips):
        words = [w for w in finder(clip.text) if w.skipped is None]
        sites = schwa_sites(wave, words, aligner)
        if sites is None:
            unaligned += 1
            continue
        contrast = {(s.start, s.word) for s in locate_sites(wave, clip.text, aligner, words=words).sites}
        intact += [p for p in signal.site_probs(wave, sites) if p is not None]
        for site in sites:
            probs = cut_pair_probs(signal, wave, (site.start, site.end), site)
            if probs is None:
                unscored += 1
                continue
            cuts.append(probs[0])
            shams.append(probs[1])
            if (site.start, site.word) in contrast:
                contrast_cuts.append(probs[0])
                contrast_shams.append(probs[1])
    out["auc_site"] = auc_or_nan(cuts, shams)
    out["false_sites"], interval = false_site_rate(intact)
    wilson = f" (95% Wilson {interval.low:.3f}-{interval.high:.3f})" if interval else ""
    print(f"real schwas placed by {aligner.name} ({unaligned} clips not aligned): intact {len(intact)} sites, "
          f"{sum(p >= FALSE_SITE_P for p in intact)} with p >= {FALSE_SITE_P}{wilson}; cut/sham {len(cuts)} pairs (mean p "
          f"cut {_mean(cuts):.3f}, sham {_mean(shams):.3f}, AUC {out['auc_site']:.3f}), {unscored} unscored; of them "
          f"at testable contrast sites {len(contrast_cuts)} (AUC {auc_or_nan(contrast_cuts, contrast_shams):.3f})",
          flush=True)
    if not cuts:
        warn("real: no schwa could be cut and scored: auc_site_real is nan")
    return out


def false_site_rate(probs: Sequence[float]) -> tuple[float, Interval | None]:
    """Share of intact sites at or above :data:`FALSE_SITE_P`, with its 95% Wilson interval (nan and None without
    sites): a few dozen sites cannot resolve a 2% rate, and the interval says how far from it the share may be."""
    if not probs:
        return math.nan, None
    flagged = sum(p >= FALSE_SITE_P for p in probs)
    return flagged / len(probs), wilson_interval(flagged, len(probs))


def _median(xs) -> str:
    xs = sorted(x for x in xs if x is not None)
    return f"{xs[len(xs) // 2]:.2f}" if xs else "n/a"


def speech_end(wave, hop: int = 160, floor_db: float = -40.0) -> float:
    """Seconds to the end of the last 10 ms frame within ``floor_db`` of the loudest one: where the reading's
    trailing silence starts (espeak gives phone starts only, and its end event is not kept)."""
    frames = wave[: wave.numel() // hop * hop].reshape(-1, hop)
    if not frames.numel():
        return wave.numel() / SAMPLE_RATE
    rms = frames.pow(2).mean(-1).sqrt()
    loud = (rms >= rms.max() * 10 ** (floor_db / 20)).nonzero()
    return (int(loud[-1]) + 1) * hop / SAMPLE_RATE if loud.numel() else wave.numel() / SAMPLE_RATE


def short_vowel_sites(reading, words, min_s: float, max_s: float) -> list[TimedSite]:
    """Retained vowels of testable deletion sites lasting ``min_s``-``max_s`` in an espeak reading, at espeak's
    own times (a word espeak said with other phones than given is skipped). An utterance-final vowel ends where the
    trailing silence starts (:func:`speech_end`): until 2026-12-07 it ran to the end of the audio, so the final
    short schwas, the schwa-deletion position, were measured 64-85 ms long and left out."""
    from leakloss.text.phones import equivalents

    out = []
    last_end = speech_end(reading.waveform)
    for k, w in enumerate(words):
        idx = [i for i, wi in enumerate(reading.phone_words) if wi == k]
        if len(idx) != len(w.nepali) or not all(equivalents(reading.phones[i]) & equivalents(p)
                                                for i, p in zip(idx, w.nepali)):
            continue
        for site in w.testable_sites:
            if site.kind != "deletion":
                continue
            i = idx[site.position]
            start = reading.phone_starts[i]
            end = reading.phone_starts[i + 1] if i + 1 < len(reading.phones) else min(reading.duration, last_end)
            if min_s <= end - start <= max_s:
                out.append(TimedSite(start, end, site.kind, site.contrast, w.word))
    return out


def short_vowel_domain(signal: Signal, held: list[str], words_of: dict, syntheses: int = 5) -> dict:
    """``false_short_vowels`` pooled over ``syntheses`` fresh readings of each sentence at each fast rate."""
    from leakloss.speech.synth import HELDOUT_TEACHER_VOICE as base
    from leakloss.speech.synth import Voice, speak_phones

    probs, per_draw = [], [0] * syntheses
    for draw in range(syntheses):
        for text in held:
            words = words_of[text]
            if not any(s.kind == "deletion" for w in words for s in w.testable_sites):
                continue
            for rate in FAST_RATES:
                voice = Voice(f"{base.name}-r{rate}", base.language, base.variant, rate, base.pitch,
                              base.pitch_range, noise_draw=draw)  # espeak is seeded: each draw its own noise
                reading = speak_phones([w.nepali for w in words], voice)
                sites = short_vowel_sites(reading, words, *SHORT_VOWEL_S)
                drawn = [p for p in signal.site_probs(reading.waveform, sites) if p is not None]
                probs += drawn
                per_draw[draw] += sum(p >= signal.flag_threshold for p in drawn)
    flagged = sum(p >= signal.flag_threshold for p in probs)
    print(f"espeak short vowels ({base.name} at {FAST_RATES[0]}-{FAST_RATES[-1]} wpm, {syntheses} syntheses): "
          f"{flagged} of {len(probs)} flagged (p >= {signal.flag_threshold}; per synthesis {per_draw})", flush=True)
    if not probs:
        warn("espeak: no short retained vowel found: false_short_vowels is nan")
    return {"false_short_vowels": flagged / len(probs) if probs else math.nan}


def main(argv: list[str] | None = None) -> None:
    from leakloss.speech import festival
    from leakloss.speech.corpus import builtin_sentences, split_sentences
    from leakloss.text.sites import SiteFinder

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--signal", default="shipped",
                        help="'shipped' (LeakPenalty.load with its reward and placement) or MODULE:CALLABLE "
                             "returning a Signal or a penalty module")
    parser.add_argument("--recognizer", default=None, help="with --signal shipped: the penalty's recognizer")
    parser.add_argument("--head", default=None, help="with --signal shipped: the penalty's raw-conv head file")
    parser.add_argument("--mel-bridge", action="store_true",
                        help="with --signal shipped: score each reading's Vocos mel through the shipped mel bridge "
                             "(leakloss.mel_bridge), not its wave")
    parser.add_argument("--crop", action="store_true",
                        help="with --mel-bridge: Whisper's encoder on crops around the sites only "
                             "(LeakPenalty.cropped, finetune-f5 leak.mel_bridge=true leak.crop=true)")
    parser.add_argument("--limit", type=int, default=24, help="held-out sentences (of 57; 0: all)")
    parser.add_argument("--pair-sentences", type=int, default=0,
                        help="of those, sentences whose deletion sites are cut (per unseen voice; 0: all)")
    parser.add_argument("--aligner", default="w", help="recognizer placing the sites cut in real recordings")
    parser.add_argument("--real-limit", type=int, default=None)
    parser.add_argument("--twin", action="store_true", help="also print flite's slt (kept out, another family)")
    parser.add_argument("--short-vowel-syntheses", type=int, default=5,
                        help="espeak syntheses pooled for false_short_vowels, each another draw of the breath noise")
    args = parser.parse_args(argv)
    if args.short_vowel_syntheses < 1:
        parser.error(f"--short-vowel-syntheses must be at least 1, got {args.short_vowel_syntheses}")
    torch.set_num_threads(2)
    start = time.time()
    try:
        signal = load_signal(args.signal, args.recognizer, args.head, args.mel_bridge, args.crop)
    except (ValueError, OSError, ImportError, AttributeError) as err:  # bad spec, head or recognizer: a clear error
        parser.error(str(err))
    _, held = split_sentences(builtin_sentences())
    held = held[: args.limit] if args.limit else held  # the same first sentences at any limit (fixed split)
    finder = SiteFinder()
    words_of = {t: [w for w in finder(t) if w.skipped is None] for t in held}
    print(f"signal {signal.name}: {len(held)} held-out sentences, "
          f"{sum(any(w.testable_sites for w in ws) for ws in words_of.values())} with a testable site", flush=True)
    figures = dict.fromkeys(KEYS, math.nan)

    unseen = unseen_domain(signal, held, words_of, festival.UNSEEN_VOICES, args.pair_sentences, "unseen family")
    figures.update(judged_unseen=unseen.get("judged", math.nan), auc_site_unseen=unseen.get("auc_site", math.nan),
                   auc_reward_unseen=unseen.get("auc_reward", math.nan))
    print(f"  [{time.time() - start:.0f}s]", flush=True)
    if args.twin:
        unseen_domain(signal, held, words_of, festival.UNSEEN_SPEAKER_TWINS, args.pair_sentences,
                      "unseen twin (apart)")
        print(f"  [{time.time() - start:.0f}s]", flush=True)
    real = real_domain(signal, args.aligner, args.real_limit)
    figures.update(judged_real=real.get("judged", math.nan), auc_site_real=real.get("auc_site", math.nan),
                   false_sites_real=real.get("false_sites", math.nan))
    print(f"  [{time.time() - start:.0f}s]", flush=True)
    figures.update(short_vowel_domain(signal, held, words_of, args.short_vowel_syntheses))
    print(f"{time.time() - start:.0f}s")
    print(" ".join(f"{k}={figures[k]:.4f}" for k in KEYS) + f" signal={signal.name.replace(' ', '_')}")


if __name__ == "__main__":
    main()
