"""Site placement: where a text's testable contrast sites lie in time on a reading (forced alignment).

:func:`place_sites` aligns the text's Nepali phones to the audio with a frozen recognizer and returns each
testable site's span as a :class:`~leakloss.timing.TimedSite`; :func:`locate_sites` also says why there are
none; :func:`place_dataset_sites` places a training set's sites once, cached beside the data.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor

from leakloss.constants import SAMPLE_RATE
from leakloss.functional.leak import at_hearing_level
from leakloss.penalty import check_wave
from leakloss.schema import PlacementStatus
from leakloss.textfile import parse_json, text_lines
from leakloss.timing import TimedSite

#: the shortest span a placed site gets (s): a phone aligned past the audio's end keeps a span to be heard in
MIN_SITE_SPAN_S = 0.01


class SitePlacement(NamedTuple):
    """Where :func:`place_sites` stands for one reading: the sites, or why there are none."""

    sites: list[TimedSite]
    status: PlacementStatus  # leakloss.schema says what each means
    word_indices: tuple[int, ...] = ()  # sites[i] belongs to words[word_indices[i]] (the words placed)
    alignment: object = None  # the word alignment the sites were placed by (leakloss.acoustic.align), when it ran


def locate_sites(wave: Tensor, text: str, recognizer, finder=None, words=None) -> SitePlacement:
    """:func:`place_sites` with the reason when there are none. ``wave [t]`` 16 kHz.

    Audio the recognizer cannot read (NaN/Inf samples, shorter than one recognizer frame, silent: a peak under
    :data:`leakloss.acoustic.features.SILENCE_PEAK`) is a status, not an exception; a wave that is not one float ``[samples]`` tensor raises
    :class:`leakloss.penalty.PenaltyInputError`, whatever the text; a text the finder rejects raises its
    :class:`leakloss.text.normalize.TextError`.
    """
    from leakloss.text.sites import SiteFinder

    check_wave(wave, "wave")
    if words is None:
        words = [w for w in (finder or SiteFinder())(text) if w.skipped is None]
    finite = bool(torch.isfinite(wave).all())
    frames = int(recognizer.frame_lengths(torch.tensor([wave.shape[0]]))[0])
    peak = float(wave.detach().abs().max()) if finite and wave.numel() else 0.0
    if (unplaced := unplaceable(words, frames, peak, finite)) is not None:
        return unplaced
    with torch.no_grad():
        log_probs, frames = recognizer(at_hearing_level(wave)[None])  # where sites lie must not move with the gain
    n = int(frames[0])
    return place_on_log_probs(log_probs[0], n, words, recognizer, duration_s=wave.shape[0] / SAMPLE_RATE)


def unplaceable(words, frames: int, peak: float, finite: bool = True) -> SitePlacement | None:
    """Why no site can be placed on a reading before it is aligned, in the one order every placement path keeps:
    ``words`` (the finder's) have no testable site, its samples are not ``finite``, it is shorter than one recognizer
    frame (``frames``), or silent (``peak`` under :data:`leakloss.acoustic.features.SILENCE_PEAK`, measured before
    the audio is brought to a hearing level: made loud, noise would be aligned); None when it can be aligned."""
    from leakloss.acoustic.features import SILENCE_PEAK

    if not any(w.testable_sites for w in words):
        return SitePlacement([], "no_testable_site")
    if not finite:
        return SitePlacement([], "not_finite")
    if frames < 1:
        return SitePlacement([], "too_short")
    if peak < SILENCE_PEAK:
        return SitePlacement([], "silent")
    return None


def place_on_log_probs(log_probs: Tensor, n_frames: int, words, recognizer,
                       duration_s: float | None = None) -> SitePlacement:
    """The placement once the recognizer has run: ``words``' Nepali phones aligned to one utterance's
    ``log_probs [f, v]`` (its first ``n_frames``), each testable site spanning its phone's segment
    (:meth:`leakloss.acoustic.align.AlignmentResult.phone_segments`: a CTC spike is often 20 ms of a 70 ms vowel),
    ending by the audio's end (``duration_s``, else the frames' extent: the last phone's segment reaches 60 ms
    past its frames). Status ``placed``, or ``alignment_failed`` when the words do not align (or none of them has a
    site)."""
    from leakloss.acoustic.align import align_words

    alignment = align_words(log_probs[:n_frames], n_frames, [w.nepali for w in words], recognizer.phoneset,
                            recognizer.frame_rate, words=[w.word for w in words])
    if not alignment.ok:
        return SitePlacement([], "alignment_failed", alignment=alignment)
    end = n_frames / recognizer.frame_rate if duration_s is None else duration_s
    out, owners = [], []
    for k, w in enumerate(words):
        spans = alignment.phone_segments(k)
        if spans is None:
            continue
        for s in w.testable_sites:
            a, b = spans[s.position]
            out.append(TimedSite(a, max(min(b, end), a + MIN_SITE_SPAN_S), s.kind, s.contrast, w.word))
            owners.append(k)
    return SitePlacement(out, "placed" if out else "alignment_failed", tuple(owners), alignment)


def place_sites(wave: Tensor, text: str, recognizer, finder=None) -> list[TimedSite]:
    """Testable sites of ``text`` placed in time on ``wave [t]`` (forced alignment of the Nepali phones).

    Returns ``[]`` (the item then contributes zero) when there is no testable site, the alignment fails, or
    the audio cannot be read: NaN/Inf samples, shorter than one recognizer frame, or silent (:func:`locate_sites`
    says which). A text the site finder refuses (e.g. a word too long) raises its ``TextError``.
    """
    return locate_sites(wave, text, recognizer, finder).sites


SITE_CACHE_VERSION = 4  # 2: keys include the finder's fingerprint; 3: sites span phone segments, not spikes;
#                         4: placed at one hearing level (functional.leak.at_hearing_level), ending by the audio's end
#: placement statuses that are not failures (a cache row's ``status``: rows written before 2026-12-07 have none)
PLACED_OR_NOTHING_TO_PLACE = ("placed", "no_testable_site")


def row_status(row: dict) -> str | None:
    """A site-cache row's placement status, or None: none recorded (a row written before 2026-12-07), or not one
    of :data:`leakloss.schema.PLACEMENT_STATUSES` (a damaged row: its sites stand, its status is unknown)."""
    from leakloss.schema import PLACEMENT_STATUSES

    status = row.get("status")
    return status if isinstance(status, str) and status in PLACEMENT_STATUSES else None


def placement_id(recognizer, finder) -> str:
    """What decides where an item's sites are: the recognizer's id and the site finder's fingerprint
    (:attr:`leakloss.text.sites.SiteFinder.fingerprint`; a finder without one is known by its class)."""
    return f"{recognizer.name}|{getattr(finder, 'fingerprint', type(finder).__qualname__)}"


def site_key(wave16: Tensor, text: str, placement: str) -> str:
    """Site-cache key of one item: sha256 of the 16 kHz float32 wave bytes + ``|text|`` + :func:`placement_id`."""
    import hashlib

    h = hashlib.sha256(wave16.detach().float().cpu().numpy().tobytes())
    h.update(f"|{text}|{placement}".encode())
    return h.hexdigest()


def place_dataset_sites(items: Sequence[tuple[Tensor, str]], recognizer, cache: str | Path | None = None,
                        finder=None) -> list[list[TimedSite]]:
    """Sites of every ``(wave16k [t], text)`` training item placed on its ground-truth audio, once.

    With ``cache`` (e.g. ``DATASET_DIR/leak_sites.jsonl``) the placements are stored next to the dataset,
    one JSON line per item keyed by :func:`site_key` (a hash of the audio, the text and :func:`placement_id`:
    another recognizer, frontend, lexicon or confidence floor is another key), and reused: a training run
    aligns each utterance once, not once per step. Items whose alignment fails get ``[]`` (they then
    contribute zero to the penalty), and a warning counts them by status (``alignment_failed``, ``too_short``,
    ``not_finite``, ``bad_text``: a text the frontend rejects; texts without a testable site are not failures),
    placed now or read from the cache (each row keeps its status; rows written before 2026-12-07 have none and are
    not counted: delete the file to recount). The file is rewritten atomically when anything new was placed.

    An item that is not a ``(float tensor [t], str)`` pair raises :class:`leakloss.penalty.PenaltyInputError` naming
    its index (a caller's bug, not a status) before anything is placed for it; ``items`` is read once, one item at a
    time (a lazy dataset is never held whole), and what was placed before the bad item is cached.
    """
    import json

    from leakloss.penalty import PenaltyInputError
    from leakloss.text.normalize import TextError
    from leakloss.text.sites import SiteFinder

    finder = finder or SiteFinder()
    cache = Path(cache) if cache is not None else None
    known: dict[str, tuple[list[TimedSite], str | None]] = {}  # key -> (sites, placement status if recorded)
    if cache is not None and cache.exists():
        unreadable = 0
        for line in text_lines(cache.read_bytes().decode("utf-8", errors="replace")):
            try:
                row = parse_json(line)
                if row.get("version") == SITE_CACHE_VERSION:
                    known[str(row["key"])] = ([TimedSite(**d) for d in row["sites"]], row_status(row))
            except (ValueError, TypeError, KeyError, AttributeError):
                unreadable += 1
        if unreadable:  # a cache can be rebuilt: say so and place those items again
            import warnings

            warnings.warn(f"{cache}: {unreadable} unreadable line(s) ignored; their items are placed again",
                          stacklevel=2)
    out, added, failed = [], 0, {}
    placement = placement_id(recognizer, finder)
    try:  # one pass (a lazy dataset holds one wave at a time); what was placed is cached even if an item is bad
        for i, item in enumerate(items):
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise PenaltyInputError(f"items[{i}] must be a (wave16k [samples], text) pair, got "
                                        f"{type(item).__name__}")
            wave, text = item
            check_wave(wave, f"items[{i}] wave")  # a numpy wave was an AttributeError in the cache key
            if not isinstance(text, str):
                raise PenaltyInputError(f"items[{i}] text must be a string, got {type(text).__name__}")
            key = site_key(wave, text, placement)
            if key not in known:
                try:
                    placed = locate_sites(wave, text, recognizer, finder)
                except TextError:  # one rejected text must not lose the others' placements
                    placed = SitePlacement([], "bad_text")
                known[key] = (list(placed.sites), placed.status)
                added += 1
            sites, status = known[key]
            if status is not None and status not in PLACED_OR_NOTHING_TO_PLACE:  # counted when reused too
                failed[status] = failed.get(status, 0) + 1
            out.append(list(sites))
    finally:
        if cache is not None and added:
            from leakloss.atomic import write_text_atomic

            cache.parent.mkdir(parents=True, exist_ok=True)
            rows = ({"version": SITE_CACHE_VERSION, "key": k, "sites": [vars(site) for site in v],
                     **({"status": status} if status is not None else {})} for k, (v, status) in known.items())
            write_text_atomic(cache, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    if failed:  # never silently: these items train without the penalty
        import warnings

        counts = ", ".join(f"{status}: {n}" for status, n in sorted(failed.items()))
        warnings.warn(f"{sum(failed.values())} of {len(out)} items could not be placed and get no sites "
                      f"({counts}); they contribute nothing to the penalty", stacklevel=2)
    return out
