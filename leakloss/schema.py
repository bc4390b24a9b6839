"""The one result schema: the words every producer and consumer of scorer results shares.

A *result* is one JSON object per reading (:class:`ReadingResult`), written by the scorer and
``score-batch`` and read by the report, ``compare``, ``listeners`` and the demo. The vocabulary is
fixed here as ``Literal`` types, with their values as tuples for checks (``KINDS``, ``DECISIONS``, ...),
and :func:`validate_result` is the single check of the format.

- ``Kind``: a contrast kind: ``deletion`` (a Nepali inherent vowel Hindi drops) or ``quality``
  (a vowel Hindi moves, ʌi̯ -> ɛː);
- ``Decision``: per word and per site; ``not_tested`` only for words (no modelled contrast);
- ``Status``: per reading: ``scored``; ``quarantined`` (the query failed its word check: not counted in
  any rate); ``unscored`` (readable, but nothing could be decided, e.g. every reference was rejected);
  ``failed`` (unreadable audio or text). Every status but ``scored`` carries a ``reason``.
- ``ReferenceOrigin``: where a result's references came from (``reference_origin``): ``given`` by the user,
  ``synthesised`` by the embedded teacher (no reference given), or ``reference_free`` (none: the shipped
  reference-free head decided each site); a result without the field had its references given.
- ``PairKind``: how a contrast pair of the manifest was made (``physical`` splice, ``natural`` edited
  reading, ``model`` Hindi voice); ``HeldoutKind`` adds ``short_vowel`` for the rows that count correct
  short vowels (controls only). A held-out row (:class:`HeldoutRow`, :func:`validate_heldout_row`) names
  the recorded-voice family it is restricted to in its own ``voice_family`` field, not in the kind.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, NotRequired, TypedDict, get_args

from leakloss.checks import is_finite_number
from leakloss.textfile import parse_json

Kind = Literal["deletion", "quality"]
Decision = Literal["flagged", "uncertain", "no_change", "unscored", "not_tested"]
SiteDecision = Literal["flagged", "uncertain", "no_change", "unscored"]
Status = Literal["scored", "quarantined", "unscored", "failed"]
PairKind = Literal["physical", "natural", "model"]
ReferenceOrigin = Literal["given", "synthesised", "reference_free"]
#: What a feature-table row or a held-out row counts: a manifest pair kind, or ``short_vowel``: correct
#: 40-60 ms vowels read fast by a teacher voice (no pair: control rows only, false flags, nothing to catch).
HeldoutKind = Literal[PairKind, "short_vowel"]

KINDS: tuple[Kind, ...] = get_args(Kind)
DECISIONS: tuple[Decision, ...] = get_args(Decision)
SITE_DECISIONS: tuple[SiteDecision, ...] = get_args(SiteDecision)
STATUSES: tuple[Status, ...] = get_args(Status)
PAIR_KINDS: tuple[PairKind, ...] = get_args(PairKind)
REFERENCE_ORIGINS: tuple[ReferenceOrigin, ...] = get_args(ReferenceOrigin)
HELDOUT_KINDS: tuple[HeldoutKind, ...] = get_args(HeldoutKind)
SHORT_VOWEL: HeldoutKind = "short_vowel"
#: Decisions of a word that was actually tested (the denominator of every flag rate).
TESTED: tuple[Decision, ...] = ("flagged", "uncertain", "no_change")

#: One utterance's acoustic evidence (``leakloss.acoustic.features.UtteranceEvidence``).
EvidenceStatus = Literal["ok", "bad_input", "silent", "alignment_failed", "no_testable_site"]
#: Where the sites of one reading stand for the penalty (``leakloss.penalty.SitePlacement``): ``placed``;
#: ``no_testable_site`` (the text has none); ``not_finite`` (NaN/Inf samples); ``too_short`` (under one
#: recognizer frame); ``silent`` (peak under ``leakloss.acoustic.features.SILENCE_PEAK``: nothing to place on, heard at
#: one level it would be noise made loud); ``alignment_failed``; ``bad_text`` (a text the frontend rejects: a dataset's
#: placement records it and goes on, where placing one reading raises).
PlacementStatus = Literal["placed", "no_testable_site", "not_finite", "too_short", "silent", "alignment_failed",
                          "bad_text"]
#: One reading's reward (``leakloss.reward.RewardResult``): ``scored``; ``no_testable_site`` (intelligible,
#: nothing to leak: 1.0); the rest get the worst reward by rule: ``unintelligible`` (failed the word check),
#: ``not_finite``, ``too_short``, ``silent`` (peak under ``leakloss.acoustic.features.SILENCE_PEAK``: heard at
#: one level, digital silence had been scored like the reading it was scaled from), ``alignment_failed``, ``no_word``
#: (no Devanagari word, or no text), ``bad_text`` (a text the frontend rejects), ``unsupported_language`` (an RL
#: input whose ``lang`` is not Nepali: a Hindi item got a Nepali leak reward that looked like a judgement).
RewardStatus = Literal["scored", "no_testable_site", "unintelligible", "not_finite", "too_short", "silent",
                       "alignment_failed", "no_word", "bad_text", "unsupported_language"]
#: One item of the path-margin term (``leakloss.margin_penalty.MarginParts.item_status``): ``ok`` (scored);
#: ``no_testable_site``, ``bad_text`` (a text the frontend rejects), ``not_finite``, ``too_short``, ``silent``,
#: ``alignment_failed``, ``plan_mismatch`` (a plan made on audio of another length or by another recognizer).
MarginStatus = Literal["ok", "no_testable_site", "bad_text", "not_finite", "too_short", "silent", "alignment_failed",
                       "plan_mismatch"]
EVIDENCE_STATUSES: tuple[EvidenceStatus, ...] = get_args(EvidenceStatus)
MARGIN_STATUSES: tuple[MarginStatus, ...] = get_args(MarginStatus)
PLACEMENT_STATUSES: tuple[PlacementStatus, ...] = get_args(PlacementStatus)
REWARD_STATUSES: tuple[RewardStatus, ...] = get_args(RewardStatus)
#: Reward statuses whose reward judges the reading (the others are the worst reward by rule).
JUDGED_REWARD_STATUSES: tuple[RewardStatus, ...] = ("scored", "no_testable_site")


class SiteResult(TypedDict):
    kind: Kind
    nepali: str
    hindi: str | None
    score: float | None  # in [0, 1]; None when no reference qualified
    decision: SiteDecision
    references_used: int
    reason: NotRequired[str]


class WordResult(TypedDict):
    index: int  # position in the text's words
    word: str
    start: float | None  # seconds, the aligner's boundaries; None when not aligned
    end: float | None
    decision: Decision
    sites: list[SiteResult]
    key: NotRequired[bool]  # a key word of the sentence (compare counts these)


class AudioCheck(TypedDict):
    """What reading the audio found (:meth:`leakloss.audio.AudioInfo.as_dict`)."""

    original_rate: int
    sample_rate: int
    channels: int
    duration_s: float
    resampled: bool
    downmixed: bool
    clipped_fraction: float
    warnings: list[str]  # e.g. clipping, resampling, downmixing, in words


class ReferenceCheck(TypedDict):
    reference: str
    used: bool
    reason: str | None
    audio: NotRequired[AudioCheck]


class InputDigests(TypedDict):
    query: str | None  # SHA-1 of the query file's bytes; None when it could not be read
    refs: list[str | None]


class ReferenceSource(TypedDict):
    origin: ReferenceOrigin
    detail: str  # in words: "embedded teacher voices teacher0, teacher2", "reference-free head rawconv (...)"


class ReadingResult(TypedDict):
    query: str
    text: str
    status: Status
    words: list[WordResult]
    references: list[str]  # the references used
    reference_checks: NotRequired[list[ReferenceCheck]]  # every reference given, used or not, and why
    reason: NotRequired[str]
    id: NotRequired[str]  # the manifest item's id (score-batch resumes by it)
    scorer: NotRequired[str]  # the scorer's fingerprint: heads, recognizers, thresholds, frontend (Scorer.fingerprint)
    system: NotRequired[str]
    sentence_id: NotRequired[str]
    audio: NotRequired[AudioCheck]  # the query's audio checks
    warnings: NotRequired[list[str]]  # every audio warning of the query and the references, prefixed by whose
    input_sha1: NotRequired[InputDigests]  # score-batch: the bytes it scored (a resumed run re-scores a changed file)
    reference_origin: NotRequired[ReferenceSource]  # absent: the references were given


def reference_origin(result: Mapping) -> ReferenceOrigin:
    """Where a (validated) result's references came from; ``given`` for results written before the field."""
    source = result.get("reference_origin")
    return source["origin"] if isinstance(source, Mapping) else "given"


class HeldoutRow(TypedDict):
    """One line of a held-out table (``train_heads/evaluate.py``; a head card's ``heldout``)."""

    head: str
    pair_kind: HeldoutKind
    caught: int  # queries flagged (0 for short_vowel: no queries)
    total: int  # queries
    false_flags: int  # controls flagged
    shams: int  # controls
    voice_family: NotRequired[str]  # the rows are of this voice family only (``espeak``, a Festival/flite family)
    unseen: NotRequired[bool]  # with voice_family: voices of a family (or speaker) the heads never trained on


class ResultError(ValueError):
    """A scorer result that does not follow the result format; the message names the field."""


def _is_count(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _check_str(obj: Mapping, key: str, where: str, *, optional: bool = False) -> None:
    if key not in obj:
        if optional:
            return
        raise ResultError(f"{where}: missing required field '{key}'")
    if not isinstance(obj[key], str):
        raise ResultError(f"{where}: '{key}' must be a string, got {type(obj[key]).__name__}")


def _check_present(obj: Mapping, keys: tuple[str, ...], where: str) -> None:
    """The keys the TypedDict requires, null allowed: a missing one passed as null and the report indexed it
    (a KeyError, not a ResultError)."""
    missing = [k for k in keys if k not in obj]
    if missing:
        raise ResultError(f"{where}: missing required field{'s' if len(missing) > 1 else ''} "
                          + ", ".join(f"'{k}'" for k in missing) + " (null when not known)")


def _check_one_of(obj: Mapping, key: str, allowed: tuple[str, ...], where: str) -> None:
    if obj.get(key) not in allowed:
        raise ResultError(f"{where}.{key} must be one of {', '.join(allowed)}, got {obj.get(key)!r}")


def _check_site(site: object, where: str) -> None:
    if not isinstance(site, Mapping):
        raise ResultError(f"{where}: must be an object, got {type(site).__name__}")
    _check_one_of(site, "kind", KINDS, where)
    _check_present(site, ("hindi", "score"), where)
    _check_str(site, "nepali", where)
    if site.get("hindi") is not None:
        _check_str(site, "hindi", where)
    score = site.get("score")
    if score is not None and not (is_finite_number(score) and 0.0 <= score <= 1.0):
        raise ResultError(f"{where}.score must be a number in [0, 1] or null, got {score!r}")
    _check_one_of(site, "decision", SITE_DECISIONS, where)
    if site["decision"] == "flagged" and score is None:  # a flag is a score at or above the head's threshold
        raise ResultError(f"{where}: a flagged site must carry its score, got null")
    if not _is_count(site.get("references_used")):
        raise ResultError(f"{where}.references_used must be a non-negative integer, got {site.get('references_used')!r}")
    _check_str(site, "reason", where, optional=True)


def _check_word(word: object, where: str) -> None:
    if not isinstance(word, Mapping):
        raise ResultError(f"{where}: must be an object, got {type(word).__name__}")
    if not _is_count(word.get("index")):
        raise ResultError(f"{where}.index must be a non-negative integer, got {word.get('index')!r}")
    _check_str(word, "word", where)
    _check_present(word, ("start", "end"), where)
    start, end = word.get("start"), word.get("end")
    if (start is None) != (end is None):
        raise ResultError(f"{where}: start and end must both be numbers or both null, got {start!r}, {end!r}")
    if start is not None:
        if not (is_finite_number(start) and is_finite_number(end)):
            raise ResultError(f"{where}: start and end must be finite numbers of seconds, got {start!r}, {end!r}")
        if not 0.0 <= start <= end:
            raise ResultError(f"{where}: need 0 <= start <= end, got start={start}, end={end}")
    _check_one_of(word, "decision", DECISIONS, where)
    if "key" in word and not isinstance(word["key"], bool):
        raise ResultError(f"{where}.key must be true or false, got {word['key']!r}")
    if "key_kinds" in word and not (isinstance(word["key_kinds"], list) and word["key_kinds"]
                                    and all(k in KINDS for k in word["key_kinds"])):
        raise ResultError(f"{where}.key_kinds must be a non-empty list of {', '.join(KINDS)}, got "
                          f"{word['key_kinds']!r:.80}")
    sites = word.get("sites")
    if not isinstance(sites, list):
        raise ResultError(f"{where}.sites must be a list (empty when nothing was tested), got {sites!r}")
    for j, site in enumerate(sites):
        _check_site(site, f"{where}.sites[{j}]")


def _check_audio(audio: object, where: str) -> None:
    if not isinstance(audio, Mapping):
        raise ResultError(f"{where} must be an object, got {type(audio).__name__}")
    for key in ("original_rate", "sample_rate", "channels"):
        if not _is_count(audio.get(key)):
            raise ResultError(f"{where}.{key} must be a non-negative integer, got {audio.get(key)!r}")
    for key in ("duration_s", "clipped_fraction"):
        if not (is_finite_number(audio.get(key)) and audio[key] >= 0):
            raise ResultError(f"{where}.{key} must be a non-negative number, got {audio.get(key)!r}")
    for key in ("resampled", "downmixed"):
        if not isinstance(audio.get(key), bool):
            raise ResultError(f"{where}.{key} must be true or false, got {audio.get(key)!r}")
    if not (isinstance(audio.get("warnings"), list) and all(isinstance(w, str) for w in audio["warnings"])):
        raise ResultError(f"{where}.warnings must be a list of strings, got {audio.get('warnings')!r}")


def validate_result(result: object, where: str = "result") -> ReadingResult:
    """Check one scorer result against the result format and return it (a shallow copy).

    ``where`` names the result in messages (a file path, usually).

    Raises:
        ResultError: not an object, a missing or mistyped field, an unknown status,
            decision or site kind, a status other than ``scored`` without a reason, bad word
            boundaries, or duplicate word indices.
    """
    if not isinstance(result, Mapping):
        raise ResultError(f"{where}: a result must be a JSON object, got {type(result).__name__}")
    _check_str(result, "query", where)
    _check_str(result, "text", where)
    for key in ("id", "system", "sentence_id", "reason", "scorer"):
        _check_str(result, key, where, optional=True)
    if result.get("status") not in STATUSES:
        raise ResultError(f"{where}: status must be one of {', '.join(STATUSES)}, got {result.get('status')!r}")
    if result["status"] != "scored" and not (result.get("reason") or "").strip():
        raise ResultError(f"{where}: a result with status {result['status']!r} must say why in 'reason'")
    words = result.get("words")
    if not isinstance(words, list):
        raise ResultError(f"{where}: 'words' must be a list, got {type(words).__name__}")
    for i, word in enumerate(words):
        _check_word(word, f"{where}: words[{i}]")
    dup = [i for i, c in Counter(w["index"] for w in words).items() if c > 1]
    if dup:
        raise ResultError(f"{where}: word index {dup[0]} appears more than once")
    refs = result.get("references")
    if not (isinstance(refs, list) and all(isinstance(r, str) for r in refs)):
        raise ResultError(f"{where}: 'references' must be a list of path strings, got {refs!r}")
    checks = result.get("reference_checks", [])
    if not (isinstance(checks, list) and all(isinstance(c, Mapping) and isinstance(c.get("reference"), str)
                                             and isinstance(c.get("used"), bool) for c in checks)):
        raise ResultError(f"{where}: 'reference_checks' must be a list of {{reference, used, reason}} objects")
    for k, check in enumerate(checks):
        reason = check.get("reason")
        if not (reason is None or isinstance(reason, str)):
            raise ResultError(f"{where}: reference_checks[{k}].reason must be a string or null, got {reason!r}")
        if not check["used"] and not (reason or "").strip():
            raise ResultError(f"{where}: reference_checks[{k}] ('{check['reference']}') is not used but gives no reason")
        if "audio" in check:
            _check_audio(check["audio"], f"{where}: reference_checks[{k}].audio")
    if "audio" in result:
        _check_audio(result["audio"], f"{where}: audio")
    warnings = result.get("warnings", [])
    if not (isinstance(warnings, list) and all(isinstance(w, str) for w in warnings)):
        raise ResultError(f"{where}: 'warnings' must be a list of strings, got {warnings!r}")
    if "reference_origin" in result:
        source = result["reference_origin"]
        if not (isinstance(source, Mapping) and source.get("origin") in REFERENCE_ORIGINS
                and isinstance(source.get("detail"), str) and source["detail"].strip()):
            raise ResultError(f"{where}: 'reference_origin' must be {{origin: one of {', '.join(REFERENCE_ORIGINS)}, "
                              f"detail: text}}, got {source!r:.80}")
        if source["origin"] == "reference_free" and refs:
            raise ResultError(f"{where}: a reference_free result uses no references, got {refs!r:.80}")
    if "input_sha1" in result:
        digests = result["input_sha1"]
        if not (isinstance(digests, Mapping) and (digests.get("query") is None or isinstance(digests["query"], str))
                and isinstance(digests.get("refs"), list)
                and all(d is None or isinstance(d, str) for d in digests["refs"])):
            raise ResultError(f"{where}: 'input_sha1' must be {{query, refs}} SHA-1 strings, got {digests!r:.80}")
    return dict(result)  # type: ignore[return-value]


def rejected_references(result: Mapping) -> list[tuple[str, str]]:
    """``(reference, why)`` for each reference a result was given but did not use (noise, the query itself, a
    failed word check): what a terminal and a report must say, not only ``reference_checks`` in the JSON."""
    return [(c["reference"], c.get("reason") or "not used")
            for c in result.get("reference_checks") or [] if isinstance(c, Mapping) and not c.get("used")]


_LEGACY_FAMILY = " — unseen"


def validate_heldout_row(row: object, where: str = "held-out row") -> HeldoutRow:
    """Check one held-out row and return it (a copy). A row written before ``voice_family`` existed
    (``"pair_kind": "physical (<family>[ — unseen])"``, shipped head cards) is returned in the two fields.

    Raises:
        ResultError: not an object, a pair kind outside :data:`HELDOUT_KINDS`, a mistyped ``voice_family``
            or ``unseen``, counts that are not non-negative integers or exceed their totals.
    """
    if not isinstance(row, Mapping):
        raise ResultError(f"{where}: a held-out row must be an object, got {type(row).__name__}")
    out = dict(row)
    kind = out.get("pair_kind")
    if isinstance(kind, str) and kind.startswith("physical (") and kind.endswith(")") and "voice_family" not in out:
        family = kind[len("physical ("):-1]
        out.update(pair_kind="physical", voice_family=family.removesuffix(_LEGACY_FAMILY),
                   unseen=family.endswith(_LEGACY_FAMILY))
    _check_str(out, "head", where)
    _check_one_of(out, "pair_kind", HELDOUT_KINDS, where)
    if "voice_family" in out and not (isinstance(out["voice_family"], str) and out["voice_family"]):
        raise ResultError(f"{where}.voice_family must be a non-empty string, got {out['voice_family']!r}")
    if "unseen" in out and ("voice_family" not in out or not isinstance(out["unseen"], bool)):
        raise ResultError(f"{where}.unseen must be true or false, with a voice_family, got {out['unseen']!r}")
    for key in ("caught", "total", "false_flags", "shams"):
        if not _is_count(out.get(key)):
            raise ResultError(f"{where}.{key} must be a non-negative integer, got {out.get(key)!r}")
    if out["caught"] > out["total"] or out["false_flags"] > out["shams"]:
        raise ResultError(f"{where}: caught/false_flags exceed total/shams ({out['caught']}/{out['total']}, "
                          f"{out['false_flags']}/{out['shams']})")
    if out["pair_kind"] == SHORT_VOWEL and out["total"]:
        raise ResultError(f"{where}: a short_vowel row has no queries (total 0), got total={out['total']}")
    return out  # type: ignore[return-value]


def load_result(path: str | Path) -> ReadingResult:
    """Read and validate one result JSON file.

    Raises:
        ResultError: missing or unreadable file, invalid JSON, or a result that does not
            follow the format (see :func:`validate_result`).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultError(f"result file '{p}' cannot be read: {exc}") from exc
    try:
        data = parse_json(text)
    except json.JSONDecodeError as exc:
        raise ResultError(f"result file '{p}' is not valid JSON: {exc}") from exc
    return validate_result(data, f"result file '{p}'")
