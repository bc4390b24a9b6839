"""The reference-paired scorer: which words of a reading still sound Hindi, and how sure are we.

Follows the seed ("What counts as a trusted Nepali reference?", "What decides a flag?"):

1. The query's own word check: the embedded recognizer's phone error rate against the expected
   Nepali phones (or a real ASR's CER/WER via ``word_check``); a query that fails is
   ``quarantined``, not scored.
2. References (the teacher in other voices, never the query's prompt) pass the same word check,
   stricter; at each site a reference must prefer the Nepali path in every crop with the Nepali vowel
   clearly present (:func:`leakloss.decision.reference_qualifies`), else it is dropped for that site.
3. Each site is scored by its head (deletion: recognizer B's features, quality: A's) against every
   qualified reference and decided by the gated rule (:mod:`leakloss.decision`).

Every failure is a result, never a traceback: unreadable audio -> ``status: "failed"`` with a
reason; no testable site -> words ``not_tested``; no qualified reference -> sites ``unscored``, and
when no tested site could be scored at all (no reference given, every reference rejected...) the
reading is ``status: "unscored"`` with the reason.

What the audio checks found is part of the result: ``audio`` (the query's
:meth:`leakloss.audio.AudioInfo.as_dict`: rates, channels, clipping, warnings), the same per
reference in ``reference_checks``, and ``warnings``: every audio warning of the reading in words.
``scorer`` is :attr:`Scorer.fingerprint` (heads, recognizers, thresholds, frontend): what made the result.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from leakloss.acoustic.features import EvidenceExtractor, UtteranceEvidence, site_feature_vector
from leakloss.audio import AudioError, AudioInfo, load_audio, prepare_waveform
from leakloss.constants import SAMPLE_RATE
from leakloss.decision import (check_thresholds, combine_references, failed_gates, gates_pass, reference_qualifies, site_decision,
                               word_decision)
from leakloss.heads import SHIPPED_HEADS, heads_folder, load_head  # noqa: F401  (SHIPPED_HEADS: importable here)
from leakloss.schema import KINDS
from leakloss.text.phones import canonical


#: Word check by phone error rate of the check recognizer against the expected Nepali phones. A Hindi-style
#: reading differs in a few vowels (still passes); another sentence fails. These are recognizer A's limits; a
#: recognizer whose card carries calibrated ones (``word_check`` in card.json, written by
#: ``python -m train_recognizers.calibrate``) brings its own.
QUERY_MAX_PER = 0.45
REFERENCE_MAX_PER = 0.30
#: The word check of heads on a recognizer without calibrated limits (A, B): recognizer wb (CTC head on the
#: multilingual Whisper base encoder), which hears voices and real speech beyond espeak (``benchmarks/domains.py``);
#: A would quarantine nearly every non-espeak reading. Heads on w or wb check on their own recognizer.
DEFAULT_CHECK_RECOGNIZER = "wb"
QUERY_SITE_UNMEASURED = "query site could not be measured"


def phone_error_rate(reference: Sequence[str], hypothesis: Sequence[str],
                     phone_class: Callable[[str], str] = canonical) -> float:
    """Levenshtein distance over phone classes / reference length, in float64 (the word check compares it with
    its limit exactly). ``phone_class``: :func:`leakloss.text.phones.canonical` (ʌ and ə one phone), or e.g.
    ``coarse`` to compare across voices. :func:`leakloss.eval.metrics.phone_error_rate` is the corpus rate.

    Raises:
        ValueError: ``reference`` has no phones (a rate of nothing is undefined, as for a corpus)."""
    errors, total = _phone_edits(reference, hypothesis, phone_class)
    return errors / total


def _phone_edits(reference: Sequence[str], hypothesis: Sequence[str],
                 phone_class: Callable[[str], str]) -> tuple[int, int]:
    from torchaudio.functional import edit_distance

    if not reference:
        raise ValueError("the reference has no phones: a phone error rate needs at least one")
    return edit_distance([phone_class(p) for p in reference], [phone_class(p) for p in hypothesis]), len(reference)


#: normalised correlation above which two waves are one recording (another gain, bit depth, a resampling round trip)
SAME_RECORDING_CORRELATION = 0.995


def same_recording(a: Tensor, b: Tensor) -> bool:
    """Whether two 16 kHz waves ``[t]`` are the same recording: equal, or of lengths within 1% (at most 20 ms)
    apart whose normalised correlation over the shorter one is at least :data:`SAME_RECORDING_CORRELATION`. The
    query saved as 16-bit WAV, rescaled, or sent through 48 kHz and back was taken as its own trusted reference,
    and the sites were decided by the query's own audio."""
    if a.shape == b.shape and torch.equal(a, b):
        return True
    n, m = a.numel(), b.numel()
    if not n or not m or abs(n - m) > max(1, min(320, 0.01 * max(n, m))):
        return False
    k = min(n, m)
    x, y = a[:k].double(), b[:k].double()
    x, y = x - x.mean(), y - y.mean()
    denominator = float(x.norm() * y.norm())
    return denominator > 0 and float((x * y).sum()) / denominator >= SAME_RECORDING_CORRELATION


def shown_score(score: float, flag: float, no_change: float, digits: int = 4) -> float:
    """``score`` rounded to ``digits`` places without crossing a threshold: 0.49996 (uncertain) was shown as 0.5,
    the flag threshold, beside "uncertain"; 0.19996 (no change) as 0.2."""
    shown = round(score, digits)
    step = 10.0 ** -digits
    for threshold in (flag, no_change):
        if score < threshold <= shown:  # rounded up onto or past a threshold it is below
            shown = round(threshold - step, digits)
        elif shown < threshold <= score:  # rounded down below a threshold it reaches
            shown = round(threshold, digits) if round(threshold, digits) >= threshold else round(threshold + step, digits)
    return shown


def corpus_phone_error_rate(recognizer, waves: Sequence[Tensor], phones: Sequence[Sequence[str]],
                            phone_class: Callable[[str], str] = canonical) -> float:
    """Greedy-CTC phone error rate over readings: edit distances summed / reference phones summed
    (``waves[i]`` 16 kHz ``[t]``, ``phones[i]`` its reference phones; compared as ``phone_class``).

    Raises:
        ValueError: not one reference per wave, or no reference phones at all."""
    if len(waves) != len(phones):
        raise ValueError(f"one phone sequence per wave: {len(waves)} waves, {len(phones)} references")
    empty = [i for i, ref in enumerate(phones) if not ref]
    if empty:
        raise ValueError(f"reference {empty[0]} has no phones: a phone error rate needs at least one per reading")
    errors = total = 0
    with torch.no_grad():
        for wave, ref in zip(waves, phones):
            # a diverged model's NaN audio is heard as nothing (every phone an error), as the recognizer decoded
            # it before it refused NaN input
            heard = recognizer.greedy(wave[None])[0] if bool(torch.isfinite(wave).all()) else []
            e, n = _phone_edits(ref, heard, phone_class)
            errors, total = errors + e, total + n
    return errors / max(total, 1)


def asr_word_check(asr, max_cer: float = 0.08, alt_max_cer: float = 0.15, alt_max_wer: float = 0.5):
    """A word check by speech recognition with the seed's thresholds: pass if CER <= 8%, or CER <= 15%
    with WER <= 50%. Text is compared after the Hindi-safe normaliser (:mod:`leakloss.eval.normalize`).

    ``asr``: a callable ``wave [t] (16 kHz) -> text``, or a ``transformers`` ASR pipeline id / local
    directory (loaded from local files only; a missing model raises a clear error).
    """
    from leakloss.eval.normalize import cer, wer

    if isinstance(asr, (str, Path)):
        from transformers import pipeline

        from leakloss.acoustic.recognizer import (RecognizerLoadError, RecognizerNotFoundError, check_weights,
                                                  quiet_loading)
        from leakloss.checks import first_line

        try:
            local = Path(asr)
            if not local.is_dir():  # a hub id: its snapshot in the local cache, never a download
                from huggingface_hub import snapshot_download

                local = Path(snapshot_download(str(asr), local_files_only=True))
        except (OSError, ValueError) as err:
            raise RecognizerNotFoundError(f"cannot load ASR model {asr!r} from local files (leakloss never "
                                          f"downloads): {err}") from err
        check_weights(local)  # as every recognizer: safetensors only, read before loading (a pickle ran as one)
        try:
            with quiet_loading():
                # use_safetensors: transformers must never fall back to a pickle beside the safetensors
                pipe = pipeline("automatic-speech-recognition", model=str(local),
                                model_kwargs={"use_safetensors": True})
        except Exception as err:  # noqa: BLE001 - transformers raises many types (OSError, ValueError, KeyError...)
            raise RecognizerLoadError(f"cannot load ASR model {asr!r} from {local} ({type(err).__name__}: "
                                      f"{first_line(err) or 'no message'})") from err

        def transcribe(wave: Tensor) -> str:
            return pipe({"raw": wave.detach().cpu().numpy(), "sampling_rate": SAMPLE_RATE})["text"]
    else:
        transcribe = asr

    def check(wave: Tensor, text: str) -> tuple[bool, str]:
        hyp = transcribe(wave)
        c, w = cer(text, hyp), wer(text, hyp)
        return (c <= max_cer or (c <= alt_max_cer and w <= alt_max_wer)), f"ASR CER {c:.2f} WER {w:.2f} ({hyp!r})"

    return check


@dataclass
class Reading:
    name: str
    wave: Tensor | None
    error: str | None = None
    info: AudioInfo | None = None


def _label(item: str | Path | Tensor, name: str | None = None) -> str:
    """How a result names an input: its path, or ``name`` for a waveform tensor."""
    return (name or "<tensor>") if isinstance(item, Tensor) else str(item)


def _read(item: str | Path | Tensor, name: str | None = None) -> Reading:
    """The reading as the scorer hears it: at one peak (:func:`~leakloss.functional.leak.at_hearing_level`), as the
    reward and site placement hear theirs. The recognizer's log-mel moves with the gain: the same reading at a tenth
    of its level had a site's score move by up to 0.23 and one decision of 28 change (29 real recordings). ``info``
    describes the audio as given."""
    from leakloss.functional.leak import at_hearing_level

    tensor = isinstance(item, Tensor)
    label = _label(item, name)
    try:
        wave, info = prepare_waveform(item, SAMPLE_RATE) if tensor else load_audio(item)
    except AudioError as err:
        return Reading(label, None, str(err))
    return Reading(label, at_hearing_level(wave), info=info)


def _unscored_reason(refs: Sequence, ref_notes: list[dict], sites: list[dict]) -> str:
    """Why no tested site of a readable query got a decision."""
    if not refs:
        return "no reference given: every tested site needs a trusted Nepali reference reading"
    if not any(n["used"] for n in ref_notes):
        return "every reference rejected: " + "; ".join(f"{n['reference']}: {n['reason']}" for n in ref_notes)
    unmeasured = [s for s in sites if (s.get("reason") or "").startswith(QUERY_SITE_UNMEASURED)]
    if len(unmeasured) == len(sites):
        details = dict.fromkeys(s["reason"][len(QUERY_SITE_UNMEASURED) + 2:-1] for s in sites)  # unique, in order
        return f"no tested site could be measured in the query ({'; '.join(details)})"
    if unmeasured:  # "no reference qualified at any tested site" hid that the query itself was not measured
        return (f"{len(unmeasured)} of {len(sites)} tested sites could not be measured in the query, and no reference "
                f"qualified at the other {len(sites) - len(unmeasured)} (see each site's reason and reference_checks)")
    return "no reference qualified at any tested site (see reference_checks)"


class Scorer:
    """Loads the recognizers and heads once; :meth:`score` returns the JSON-ready result dict."""

    def __init__(self, recognizer_a: str | None = None, recognizer_b: str | None = None, heads_dir: str | Path | None = None,
                 word_check: Callable[[Tensor, str], tuple[bool, str]] | None = None,
                 flag_threshold: float | None = None, no_change_threshold: float | None = None,
                 min_confidence: str = "medium", device: str = "cpu",
                 check_recognizer: str | None = None) -> None:
        from leakloss.acoustic.recognizer import Recognizer
        from leakloss.text.sites import SiteFinder

        from leakloss.acoustic.recognizer import EMBEDDED
        from leakloss.heads import check_recognizer as check_head_recognizer

        heads_dir = heads_folder(heads_dir)  # a folder, or a shipped set by name (wb, w, espeak)
        self.heads, self.cards = {}, {}
        for kind in KINDS:
            self.heads[kind], self.cards[kind] = load_head(heads_dir / f"{kind}.safetensors")
        # unnamed roles take the recognizer each head was trained on (its card says which: "w@55714b26")
        recognizer_a = recognizer_a or self.cards["quality"].recognizer.split("@", 1)[0]
        recognizer_b = recognizer_b or self.cards["deletion"].recognizer.split("@", 1)[0]
        loaded: dict[str, object] = {}  # one instance per name: a = b = w loads the Whisper encoder once

        def load(name: str):
            if name not in loaded:
                loaded[name] = Recognizer.load(name, device=device)
            return loaded[name]

        self.recognizers = {"a": load(recognizer_a), "b": load(recognizer_b)}
        # the word check's recognizer, unless named: recognizer A's role, except an embedded one without calibrated
        # limits (A, B, trained on espeak only), whose heads check on DEFAULT_CHECK_RECOGNIZER
        calibrated = getattr(self.recognizers["a"], "word_check_limits", None) is not None
        default_check = recognizer_a if calibrated or recognizer_a not in EMBEDDED else DEFAULT_CHECK_RECOGNIZER
        self.check_recognizer = load(check_recognizer or default_check)
        self.check_recognizer_name = self.check_recognizer.name
        limits = getattr(self.check_recognizer, "word_check_limits", None)
        self.query_max_per, self.reference_max_per = limits or (QUERY_MAX_PER, REFERENCE_MAX_PER)
        with warnings.catch_warnings(record=True) as caught:  # kept: every result says it, not only stderr
            warnings.simplefilter("always")
            for kind in KINDS:
                check_head_recognizer(self.cards[kind], self.recognizers["b" if kind == "deletion" else "a"].name)
        #: warnings about this scorer's setup (heads trained on other recognizer weights), in every result
        self.setup_warnings = [str(w.message) for w in caught]
        for message in self.setup_warnings:
            warnings.warn(message, stacklevel=2)
        # each kind's head decides with its own card's thresholds (the quality sites had the deletion card's);
        # flag_threshold / no_change_threshold override both
        self.thresholds = {kind: (flag_threshold if flag_threshold is not None else self.cards[kind].thresholds["flag"],
                                  no_change_threshold if no_change_threshold is not None
                                  else self.cards[kind].thresholds["no_change"]) for kind in KINDS}
        for flag, no_change in self.thresholds.values():
            check_thresholds(flag, no_change)
        self.extractors = {k: EvidenceExtractor(r) for k, r in self.recognizers.items()}
        self.finder = SiteFinder(min_confidence=min_confidence)
        self.word_check = word_check
        self.fingerprint = self._fingerprint(heads_dir)
        self.device = device
        self._penalty = None  # the reference-free head, loaded on first use (score_reference_free)
        self._passes: dict[tuple[int, int], tuple[Tensor, Tensor, Tensor]] = {}

    def _fingerprint(self, heads_dir: Path) -> str:
        """What decides a result besides its inputs: the heads' files, the recognizers (their names carry their
        weights' hash), thresholds, word-check limits, the site finder and the level readings are heard at. Results
        carry it as ``scorer``, so a resumed batch rescores what other models or settings made."""
        import hashlib

        from leakloss.constants import RECOGNIZER_HEARING_PEAK

        heads = [hashlib.sha1((heads_dir / f"{kind}.safetensors").read_bytes()).hexdigest() for kind in KINDS]
        check = "recognizer" if self.word_check is None else getattr(self.word_check, "__qualname__", repr(self.word_check))
        parts = [*heads, *(self.recognizers[k].name for k in ("a", "b")), self.check_recognizer_name, check,
                 repr((sorted(self.thresholds.items()), self.query_max_per, self.reference_max_per)),
                 self.finder.fingerprint, f"heard at peak {RECOGNIZER_HEARING_PEAK}"]
        return hashlib.sha1("|".join(parts).encode()).hexdigest()[:16]

    def check_words(self, wave: Tensor, text: str, expected: list[str], max_per: float) -> tuple[bool, str]:
        """(passes, detail): the pluggable word check; default = the check recognizer's phone error rate."""
        if self.word_check is not None:
            return self.word_check(wave, text)
        from leakloss.acoustic.recognizer import greedy_phones

        if not expected:  # nothing to check the reading against: it cannot pass
            return False, "the text gives no phones to check the reading against"
        hyp = greedy_phones(*self._recognize(self.check_recognizer, wave), self.check_recognizer.phoneset)[0]
        per = phone_error_rate(expected, hyp)
        return per <= max_per, (f"phone error rate {per:.2f} (limit {max_per:.2f}, recognizer "
                                f"{self.check_recognizer_name.split('@', 1)[0]})")

    def check_transcript(self, wave: Tensor, text: str, query: bool = True) -> tuple[bool, str]:
        """The word check of ``wave [t]`` against ``text``, as :meth:`score` runs it (query or reference limit)."""
        expected = [p for w in self.finder(text) if w.skipped is None for p in w.nepali]
        try:
            return self.check_words(wave, text, expected, self.query_max_per if query else self.reference_max_per)
        finally:
            self._passes.clear()

    @torch.no_grad()
    def _recognize(self, recognizer, wave: Tensor) -> tuple[Tensor, Tensor]:
        """``recognizer(wave[None])``, computed once per (recognizer, wave) while a reading is scored: the word
        check's pass is the evidence's pass when both run on the same recognizer (w in the shipped scorer)."""
        key = (id(recognizer), id(wave))
        hit = self._passes.get(key)
        if hit is None or hit[0] is not wave:
            hit = self._passes[key] = (wave, *recognizer(wave[None]))
        return hit[1], hit[2]

    def _evidence(self, wave: Tensor, words) -> dict[str, UtteranceEvidence]:
        """Evidence per role; one pass per recognizer (both roles on w share it, and the word check's pass)."""
        phones = [w.nepali for w in words]
        done: dict[int, UtteranceEvidence] = {}
        out = {}
        for k, ex in self.extractors.items():
            rec = self.recognizers[k]
            if id(rec) not in done:
                seen = self._passes.get((id(rec), id(wave)))
                recognized = seen[1:] if seen is not None and seen[0] is wave else None
                done[id(rec)] = ex.extract(wave, phones, words, recognized=recognized)
            out[k] = done[id(rec)]
        return out

    def score(self, query: str | Path | Tensor, text: str, refs: Sequence[str | Path | Tensor], *,
              query_name: str | None = None) -> dict:
        """Score one reading against its references: the result dict (:class:`leakloss.schema.ReadingResult`).

        Raises ``TypeError`` for arguments of the wrong kind (a misuse of the API, not bad data: unreadable
        audio or text gives a ``failed`` result with its reason)."""
        if isinstance(refs, (str, Path, Tensor)):
            raise TypeError("refs must be a list of references (paths or waveform tensors), not one: pass [ref]")
        refs = list(refs)  # an iterator would be used up by the checks below
        for what, item in [("query", query), *((f"refs[{i}]", r) for i, r in enumerate(refs))]:
            if not isinstance(item, (str, Path, Tensor)):
                raise TypeError(f"{what} must be a path or a waveform tensor, got {type(item).__name__}")
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        try:
            return self._score(query, text, refs, query_name) | {"scorer": self.fingerprint}
        finally:
            self._passes.clear()  # the recognizer passes of this reading only

    @torch.no_grad()
    def _score(self, query, text: str, refs, query_name: str | None) -> dict:
        from leakloss.text.normalize import TextError

        q = _read(query, query_name)
        # until the references are checked, each one given is listed as not checked and why (a result that
        # stops early -- failed, quarantined -- still names every reference it was handed)
        result = {"query": q.name, "text": text, "status": "scored", "words": [], "references": [],
                  "reference_checks": [], "warnings": list(self.setup_warnings)}

        def stopped(status: str, reason: str, **more) -> dict:
            why = "the query was quarantined" if status == "quarantined" else "the reading could not be scored"
            checks = [{"reference": _label(r, f"refs[{i}]"), "used": False, "reason": f"not checked: {why}"}
                      for i, r in enumerate(refs)]
            return result | {"status": status, "reason": reason, "reference_checks": checks} | more
        if q.info is not None:
            result["audio"] = q.info.as_dict()
            result["warnings"] += [f"query: {w}" for w in q.info.warnings]
        try:
            all_words = self.finder(text)
        except TextError as err:
            return stopped("failed", f"text: {err}")
        words = [w for w in all_words if w.skipped is None]
        if not words:
            from leakloss.text.sites import no_word_reason

            return stopped("failed", f"text: {no_word_reason(all_words)}")
        # a misspelt, Latin or number word is spoken but neither aligned nor checked: say so, it can sink the check
        from leakloss.text.sites import unread_words

        result["warnings"] += [f"word {w.index} {w.word!r} is not read ({w.skipped}): left out of the word check "
                               "and the alignment" for w in unread_words(all_words)]
        if q.wave is None:
            return stopped("failed", f"query: {q.error}")
        expected = [p for w in words for p in w.nepali]
        ok, detail = self.check_words(q.wave, text, expected, self.query_max_per)
        if not ok:
            return stopped("quarantined", f"query failed the word check: {detail}",
                           words=[self._word_json(w, None, [], "unscored" if w.skipped is None and w.testable_sites
                                                  else "not_tested") for w in all_words])
        q_ev = self._evidence(q.wave, words)
        ref_evs, ref_notes = [], []
        heard: list[tuple[str, Tensor]] = [(q.name, q.wave)]  # the same audio twice is one piece of evidence
        for r in (_read(x, f"refs[{i}]") for i, x in enumerate(refs)):
            if r.wave is None:
                ref_notes.append({"reference": r.name, "used": False, "reason": r.error})
                continue
            audio = {"audio": r.info.as_dict()}
            same = next((k for k, (_, w) in enumerate(heard) if same_recording(w, r.wave)), None)
            if same is not None:
                why = ("the query's own audio: a reading is no reference for itself" if same == 0
                       else f"the same audio as reference {heard[same][0]}: counted once")
                ref_notes.append({"reference": r.name, "used": False, "reason": why} | audio)
                continue
            heard.append((r.name, r.wave))
            result["warnings"] += [f"reference {r.name}: {w}" for w in r.info.warnings]
            ok, detail = self.check_words(r.wave, text, expected, self.reference_max_per)
            if not ok:
                ref_notes.append({"reference": r.name, "used": False, "reason": f"word check: {detail}"} | audio)
                continue
            ref_evs.append(self._evidence(r.wave, words))
            ref_notes.append({"reference": r.name, "used": True, "reason": None} | audio)
        result["references"] = [n["reference"] for n in ref_notes if n["used"]]  # the references used
        result["reference_checks"] = ref_notes  # every reference given, used or not, and why
        if not q_ev["a"].ok and q_ev["a"].status not in ("no_testable_site",):
            result["reason"] = f"query: {q_ev['a'].reason}"
        out_words = self._words_json(all_words, words, q_ev["a"].alignment,
                                     lambda w, k: [self._site(w, s, q_ev, ref_evs) for s in w.testable_sites])
        result["words"] = out_words
        tested = [s for w in out_words for s in w["sites"]]
        if tested and all(s["decision"] == "unscored" for s in tested):
            # nothing was decided: saying "scored" would hide why (e.g. every reference was rejected)
            result["status"] = "unscored"
            why = _unscored_reason(refs, ref_notes, tested)
            result["reason"] = f"{why}; {result['reason']}" if result.get("reason") else why
        return result

    def load_reference_free(self):
        """The penalty's frozen raw-conv head and recognizer, with the head card's thresholds (loaded once)."""
        if getattr(self, "_penalty", None) is None:
            import hashlib

            from leakloss.penalty import SHIPPED_HEADS as PENALTY_HEADS, LeakPenalty

            head_path = PENALTY_HEADS / "rawconv.safetensors"
            self._penalty = LeakPenalty.load(head_path=head_path, device=self.device)
            card = load_head(head_path)[1]
            self._penalty_thresholds = (card.thresholds["flag"], card.thresholds["no_change"])
            check_thresholds(*self._penalty_thresholds)
            from leakloss.site_placement import SITE_CACHE_VERSION

            digest = hashlib.sha1(head_path.read_bytes()).hexdigest()
            # the placement's version too: sites placed another way (2026-12-07: at one hearing level) are other
            # results, and a resumed score-batch or evaluate scores its readings again
            self.reference_free_fingerprint = hashlib.sha1(
                f"{self.fingerprint}|rawconv|{digest}|{self._penalty.recognizer.name}|placement{SITE_CACHE_VERSION}"
                .encode()).hexdigest()[:16]
            self.reference_free_detail = (f"reference-free head rawconv on recognizer "
                                          f"{self._penalty.recognizer.name.split('@', 1)[0]} (flag >= "
                                          f"{self._penalty_thresholds[0]:.2f}, no change < {self._penalty_thresholds[1]:.2f}, "
                                          "from its card); no reference was compared")
        return self._penalty

    def score_reference_free(self, query: str | Path | Tensor, text: str, *, query_name: str | None = None) -> dict:
        """Score one reading with no reference: the shipped reference-free raw-conv head decides each site, placed
        and pooled as the penalty does (:func:`leakloss.penalty.locate_sites`, :class:`leakloss.penalty.LeakPenalty`),
        with the thresholds of the head's card. The query still passes the word check first. The result says so
        in ``reference_origin`` (``reference_free``); its sites use no reference (``references_used`` 0)."""
        if not isinstance(query, (str, Path, Tensor)):
            raise TypeError(f"query must be a path or a waveform tensor, got {type(query).__name__}")
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        penalty = self.load_reference_free()
        source = {"origin": "reference_free", "detail": self.reference_free_detail}
        try:
            result = self._score_reference_free(query, text, query_name, penalty)
        finally:
            self._passes.clear()
        return result | {"scorer": self.reference_free_fingerprint, "reference_origin": source}

    @torch.no_grad()
    def _score_reference_free(self, query, text: str, query_name: str | None, penalty) -> dict:
        from leakloss.site_placement import locate_sites
        from leakloss.text.normalize import TextError
        from leakloss.text.sites import no_word_reason

        q = _read(query, query_name)
        result = {"query": q.name, "text": text, "status": "scored", "words": [], "references": [],
                  "reference_checks": [], "warnings": list(self.setup_warnings)}
        if q.info is not None:
            result["audio"] = q.info.as_dict()
            result["warnings"] += [f"query: {w}" for w in q.info.warnings]
        try:
            all_words = self.finder(text)
        except TextError as err:
            return result | {"status": "failed", "reason": f"text: {err}"}
        words = [w for w in all_words if w.skipped is None]
        if not words:
            return result | {"status": "failed", "reason": f"text: {no_word_reason(all_words)}"}
        if q.wave is None:
            return result | {"status": "failed", "reason": f"query: {q.error}"}
        expected = [p for w in words for p in w.nepali]
        ok, detail = self.check_words(q.wave, text, expected, self.query_max_per)
        if not ok:
            return result | {"status": "quarantined", "reason": f"query failed the word check: {detail}",
                             "words": [self._word_json(w, None, [], "unscored" if w.skipped is None and w.testable_sites
                                                       else "not_tested") for w in all_words]}
        placed = locate_sites(q.wave, text, penalty.recognizer, words=words)
        probs = {}
        if placed.sites:
            wave = q.wave.to(next(penalty.parameters()).device)
            _, parts = penalty(waves=wave[None], sites=[placed.sites])
            for i, (k, site) in enumerate(zip(placed.word_indices, placed.sites)):
                if bool(parts.site_active[i]):
                    probs.setdefault(k, []).append((site, float(parts.site_probs[i])))
        flag, no_change = self._penalty_thresholds

        def sites_json(w, k) -> list[dict]:
            scored = list(probs.get(k, []))
            out_sites = []
            for s in w.testable_sites:
                out = {"kind": s.kind, "nepali": s.nepali, "hindi": s.hindi, "score": None, "decision": "unscored",
                       "references_used": 0}
                hit = next((j for j, (t, _) in enumerate(scored) if (t.kind, t.contrast) == (s.kind, s.contrast)),
                           None)
                if hit is None:
                    out["reason"] = f"{QUERY_SITE_UNMEASURED} (site placement: {placed.status})"
                else:
                    p = scored.pop(hit)[1]
                    if not math.isfinite(p):  # never a NaN in a result (its JSON would be invalid)
                        out["reason"] = "the head's probability at this site is not a number"
                    else:
                        out["score"] = shown_score(min(max(p, 0.0), 1.0), flag, no_change)
                        out["decision"] = site_decision(p, True, flag=flag, no_change=no_change)
                out_sites.append(out)
            return out_sites

        out_words = self._words_json(all_words, words, placed.alignment, sites_json)
        result["words"] = out_words
        tested = [s for w in out_words for s in w["sites"]]
        if tested and all(s["decision"] == "unscored" for s in tested):
            result["status"] = "unscored"
            result["reason"] = f"no tested site could be placed in the query (site placement: {placed.status})"
        return result

    def _words_json(self, all_words, words, alignment, sites_of) -> list[dict]:
        """Every word of the text in the result schema: ``not_tested`` for a skipped word or one without a testable
        site, else its sites (``sites_of(word, k)``, k its position among the spoken ``words``) and their decision."""
        spoken = {w.index: k for k, w in enumerate(words)}
        out_words = []
        for w in all_words:
            k = spoken.get(w.index)
            if w.skipped is not None or not w.testable_sites:
                out_words.append(self._word_json(w, alignment, [], "not_tested", k))
                continue
            sites_json = sites_of(w, k)
            decision = word_decision([s["decision"] for s in sites_json])
            out_words.append(self._word_json(w, alignment, sites_json, decision, k))
        return out_words

    def _site(self, w, site, q_ev, ref_evs) -> dict:
        key = (w.index, site.position)
        head = self.heads[site.kind]
        own = "b" if site.kind == "deletion" else "a"
        out = {"kind": site.kind, "nepali": site.nepali, "hindi": site.hindi, "score": None,
               "decision": "unscored", "references_used": 0}
        if not all(q_ev[k].ok and key in q_ev[k].sites for k in ("a", "b")):
            why = [f"recognizer {self.recognizers[k].name.split('@', 1)[0]}: "
                   f"{q_ev[k].reason if not q_ev[k].ok else q_ev[k].skipped.get(key, 'not measured')}"
                   for k in ("a", "b") if not (q_ev[k].ok and key in q_ev[k].sites)]
            out["reason"] = f"{QUERY_SITE_UNMEASURED} ({'; '.join(dict.fromkeys(why))})"  # once when a is b
            return out
        decisions, scores, notes = [], [], []
        flag, no_change = self.thresholds[site.kind]
        for r in ref_evs:
            if not all(r[k].ok and key in r[k].sites for k in ("a", "b")):
                continue
            feats = {k: site_feature_vector(q_ev[k].sites[key], r[k].sites[key], site.kind) for k in ("a", "b")}
            if not (bool(reference_qualifies(feats["a"])) and bool(reference_qualifies(feats["b"]))):
                continue
            score = float(head.score(feats[own][None])[0])
            gates = bool(gates_pass(feats["a"])) and bool(gates_pass(feats["b"]))
            decisions.append(site_decision(score, gates, flag=flag, no_change=no_change))
            scores.append(score)
            if decisions[-1] == "uncertain":
                notes.append(self._uncertain_note(score, feats, site.kind))
        out["references_used"] = len(decisions)
        out["decision"] = combine_references(decisions)
        if decisions:
            score = min(scores) if out["decision"] != "uncertain" else sum(scores) / len(scores)
            out["score"] = shown_score(score, flag, no_change)
        else:  # a "scored" reading's unscored site said nothing, and its references were listed as used
            out["reason"] = ("no reference qualified at this site (each was unmeasured there, or failed its checks "
                             "at it: its Nepali vowel too weak or not the better fit)")
        if out["decision"] == "uncertain":  # say which way: a score of 1.00 marked uncertain read as a contradiction
            if len(set(decisions)) > 1:  # in a fixed order: the same references in another order, the same result
                out["reason"] = "the references disagree (" + ", ".join(sorted(decisions)) + ")"
            else:
                out["reason"] = "; ".join(sorted(dict.fromkeys(notes)))
        return out

    def _uncertain_note(self, score: float, feats: dict, kind: str) -> str:
        """Why one reference left a site uncertain: a score between the thresholds, or a gate that failed."""
        flag, no_change = self.thresholds[kind]
        shown = shown_score(score, flag, no_change)
        if score < flag:
            return f"score {shown} between the no-change ({no_change}) and flag ({flag}) thresholds"
        failed = [f"recognizer {self.recognizers[k].name.split('@', 1)[0]}: {why}"
                  for k in ("a", "b") for why in failed_gates(feats[k])]
        return f"score {shown} is above the flag threshold ({flag}) but a gate failed ({'; '.join(failed)})"

    @staticmethod
    def _word_json(w, alignment, sites: list[dict], decision: str, spoken_index: int | None = None) -> dict:
        """``spoken_index``: the word's position among the non-skipped words (the aligner's order)."""
        start = end = None
        wa = alignment.word(spoken_index) if alignment is not None and alignment.ok and spoken_index is not None else None
        if wa is not None:
            start, end = round(wa.start, 3), round(wa.end, 3)
        return {"index": w.index, "word": w.word, "start": start, "end": end, "decision": decision, "sites": sites}
