"""F5-prepared dataset folders (``raw.arrow`` + ``duration.json`` from F5's ``prepare_csv_wavs``) for the leak
penalty: site placement over the whole folder as a Lightning ``predict`` loop, a lazy site cache, and an F5
training dataset whose texts carry their site key.

Cache format: the one of :func:`leakloss.site_placement.place_dataset_sites` (``SITE_CACHE_VERSION``; one JSON line
per item, ``key`` = :func:`leakloss.site_placement.site_key`: the 16 kHz wave, the text and :func:`leakloss.site_placement.placement_id`
-- recognizer id and site-finder fingerprint), extended with
``audio_path``, ``text`` and ``recognizer`` fields. A file written here is read by ``place_dataset_sites`` as is
(same keys, same ``sites``), and this module reads that function's files too (rows without ``audio_path``).

Shapes: t samples (16 kHz unless said), d mel bins, n mel frames.
"""

from __future__ import annotations

import json
import math
import os
import sys
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import BasePredictionWriter
from torch.utils.data import DataLoader, Dataset

from leakloss.audio import resample
from leakloss.constants import SAMPLE_RATE
from leakloss.functional.leak import at_hearing_level
from leakloss.site_placement import (PLACED_OR_NOTHING_TO_PLACE, SITE_CACHE_VERSION, SitePlacement,
                                     placement_id, row_status, site_key)
from leakloss.textfile import parse_json, text_lines
from leakloss.timing import TimedSite

SITES_FILE = "leak_sites.jsonl"
#: F5's ``CustomDataset`` trains only on clips of 0.3 .. 30 s (it skips to the next index otherwise)
F5_MIN_S, F5_MAX_S = 0.3, 30.0


class PreparedDatasetError(ValueError):
    """An F5-prepared dataset folder is missing files or holds data the fine-tune cannot use."""


# ---------------------------------------------------------------------------------------------------------------
# the prepared folder


@dataclass
class Prepared:
    """An opened F5-prepared folder: ``rows`` (memory-mapped ``datasets.Dataset``: audio_path, text, duration)."""

    dir: Path
    rows: Any
    durations: list[float]

    def __len__(self) -> int:
        return len(self.rows)

    def text(self, index: int) -> str:
        return row_text(self.rows[index]["text"])

    def audio_path(self, index: int) -> str:
        return self.rows[index]["audio_path"]


def row_text(text: str | Sequence[str]) -> str:
    """F5 stores each text as the list of tokens ``convert_char_to_pinyin`` made (chars for Devanagari)."""
    return text if isinstance(text, str) else "".join(text)


def open_prepared(data_dir: str | os.PathLike) -> Prepared:
    """Open ``data_dir/raw.arrow`` + ``duration.json`` as F5's ``load_dataset("CustomDatasetPath")`` does."""
    from datasets import Dataset as HFDataset

    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise PreparedDatasetError(f"{data_dir} is not a folder (expected F5's prepare_csv_wavs output)")
    missing = [name for name in ("raw.arrow", "duration.json") if not (data_dir / name).is_file()]
    if missing:
        raise PreparedDatasetError(
            f"{data_dir} lacks {' and '.join(missing)}: prepare it with "
            "`python -m f5_tts.train.datasets.prepare_csv_wavs metadata.csv OUT_DIR`")
    try:
        rows = HFDataset.from_file(str(data_dir / "raw.arrow"))
    except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid (a ValueError): empty or not an Arrow stream
        raise PreparedDatasetError(f"{data_dir / 'raw.arrow'} is not an Arrow table F5 wrote: {err}") from err
    for column in ("audio_path", "text", "duration"):
        if column not in rows.column_names:
            raise PreparedDatasetError(f"{data_dir / 'raw.arrow'} has no {column!r} column (columns: {rows.column_names})")
    try:
        durations = parse_json((data_dir / "duration.json").read_text(encoding="utf-8"))["duration"]
        if not isinstance(durations, list):  # {"duration": 5} was a TypeError from len(), a dict a KeyError
            raise TypeError(f"'duration' is a {type(durations).__name__}, not a list")
    except (ValueError, KeyError, TypeError) as err:  # ValueError: bad JSON or bytes that are not UTF-8
        raise PreparedDatasetError(f"{data_dir / 'duration.json'} is not F5's {{'duration': [...]}}: {err}") from err
    if len(durations) != len(rows):
        raise PreparedDatasetError(f"{data_dir}: duration.json has {len(durations)} entries for {len(rows)} rows")
    if not len(rows):
        raise PreparedDatasetError(f"{data_dir}: raw.arrow has no rows")
    check_row_fields(data_dir / "raw.arrow", rows["audio_path"], rows["text"])
    bad = [i for i, d in enumerate(durations) if not _is_duration(d)]
    if bad:
        shown = ", ".join(f"entry {i} ({durations[i]!r})" for i in bad[:5])
        raise PreparedDatasetError(f"{data_dir / 'duration.json'}: {len(bad)} of {len(durations)} durations are not "
                                   f"finite numbers of seconds >= 0: {shown}")
    return Prepared(data_dir, rows, [float(d) for d in durations])


def _is_duration(value: object) -> bool:
    from leakloss.checks import is_finite_number

    return is_finite_number(value) and value >= 0  # an int of 400 digits was an OverflowError in math.isfinite


def check_row_fields(arrow: Path, audio_paths: Sequence[object], texts: Sequence[object], max_listed: int = 5) -> None:
    """Every row has an ``audio_path`` (a non-empty string) and a ``text`` (a string or F5's list of strings).

    A null field (a hand-made or edited ``raw.arrow``) failed later as a ``TypeError`` deep in the checks.
    Raises :class:`PreparedDatasetError` naming the first rows that fail."""
    problems = []
    for i, (path, text) in enumerate(zip(audio_paths, texts)):
        if not isinstance(path, str) or not path:
            problems.append(f"row {i} (audio_path {path!r})")
        if not (isinstance(text, str) or (isinstance(text, list) and all(isinstance(t, str) for t in text))):
            problems.append(f"row {i} (text {text!r:.40})")
    if problems:
        raise PreparedDatasetError(f"{arrow}: {len(problems)} fields are empty or not text: "
                                   f"{', '.join(problems[:max_listed])}")


def _is_devanagari(ch: str) -> bool:
    return 0x0900 <= ord(ch) <= 0x097F and unicodedata.category(ch) != "Cn"


def check_texts(prepared: Prepared, vocab: Mapping[str, int], max_listed: int = 5) -> None:
    """Every text has Devanagari letters and only vocab characters (F5 maps unknown ones to id 0: silently wrong).

    Raises :class:`PreparedDatasetError` naming the first rows that fail.
    """
    no_devanagari, unknown = [], {}
    for i in range(len(prepared)):
        text = prepared.text(i)
        if not any(_is_devanagari(c) for c in text):
            no_devanagari.append(i)
        for c in set(text) - set(vocab):
            unknown.setdefault(c, i)
    if no_devanagari:
        shown = ", ".join(f"row {i} ({prepared.text(i)[:30]!r})" for i in no_devanagari[:max_listed])
        raise PreparedDatasetError(f"{len(no_devanagari)} of {len(prepared)} texts have no Devanagari: {shown}")
    if unknown:
        shown = ", ".join(f"{c!r} (U+{ord(c):04X}, row {i})" for c, i in list(unknown.items())[:max_listed])
        raise PreparedDatasetError(f"{len(unknown)} characters of the texts are not in the vocab: {shown}")


#: how far a file's length may be from its ``duration.json`` entry (F5's prepare measures the file itself)
DURATION_TOLERANCE_S = 0.1


def check_audio_files(prepared: Prepared, max_listed: int = 5) -> None:
    """Every row's ``audio_path`` is an audio file (a missing one failed inside the site placement's loader)
    whose length is the row's ``duration.json`` entry (an emptied or swapped file would train on the wrong mel
    length; F5's ``DynamicBatchSampler`` sizes batches by those entries). Reads only the headers.

    Raises :class:`PreparedDatasetError` naming the first rows that fail."""
    import soundfile as sf

    paths = list(prepared.rows["audio_path"])  # one column read, not a row read per item
    missing = [i for i, path in enumerate(paths) if not Path(path).is_file()]
    if missing:
        shown = ", ".join(f"row {i} ({paths[i]})" for i in missing[:max_listed])
        raise PreparedDatasetError(f"{len(missing)} of {len(prepared)} rows have no audio file: {shown}")
    problems = []
    for i, path in enumerate(paths):
        try:
            with open(path, "rb") as f:  # opened by Python: a name that is not UTF-8 still opens
                info = sf.info(f)
        except (sf.LibsndfileError, OSError, RuntimeError) as err:
            problems.append(f"row {i} ({path}: not readable audio: {str(err).splitlines()[0] if str(err) else err!r})")
            continue
        seconds = info.frames / info.samplerate if info.samplerate else 0.0
        if abs(seconds - prepared.durations[i]) > DURATION_TOLERANCE_S:
            problems.append(f"row {i} ({path} lasts {seconds:.2f} s, duration.json says {prepared.durations[i]:.2f} s)")
    if problems:
        raise PreparedDatasetError(f"{len(problems)} of {len(prepared)} rows do not match their audio: "
                                   f"{', '.join(problems[:max_listed])}")


def read_vocab(path: str | os.PathLike) -> dict[str, int]:
    """``vocab.txt`` as F5's ``get_tokenizer(path, "custom")`` reads it (one token a line, line number = id)."""
    path = Path(path)
    if not path.is_file():
        raise PreparedDatasetError(f"no vocab file at {path} (the vocab.txt the dataset and checkpoint use)")
    try:
        with path.open(encoding="utf-8") as f:
            tokens = [line[:-1] if line.endswith("\n") else line for line in f]
    except UnicodeDecodeError as err:
        raise PreparedDatasetError(f"{path} is not UTF-8 text (one token a line): {err}") from err
    vocab: dict[str, int] = {}
    for i, token in enumerate(tokens):
        if token in vocab:  # collapsed, the model had fewer embeddings than ids and the export renumbered them
            raise PreparedDatasetError(f"{path}: token {token!r} is on lines {vocab[token] + 1} and {i + 1}: each "
                                       "token once (its line number is its id)")
        vocab[token] = i
    return vocab


# ---------------------------------------------------------------------------------------------------------------
# audio and keys


def load_audio(path: str | os.PathLike) -> tuple[torch.Tensor, int]:
    """``(wave [t] float32 mono, sample rate)``: soundfile, channels averaged (as F5's ``CustomDataset``)."""
    import soundfile as sf

    try:
        data, rate = sf.read(str(path), dtype="float32", always_2d=True)  # [t, c]
    except (sf.LibsndfileError, OSError, RuntimeError) as err:
        raise PreparedDatasetError(f"{path}: not readable audio: {err}") from err
    if not np.isfinite(data).all():  # the placement failed with an IndexError, training on it a NaN model
        raise PreparedDatasetError(f"{path}: holds NaN/Inf samples (a damaged clip): repair it or leave it out")
    return torch.from_numpy(np.ascontiguousarray(data.mean(axis=1))), int(rate)


def to_16k(wave: torch.Tensor, rate: int) -> torch.Tensor:
    return wave if rate == SAMPLE_RATE or not wave.numel() else resample(wave, rate, SAMPLE_RATE)




# ---------------------------------------------------------------------------------------------------------------
# the cache, read lazily


def _parse_row(line: str | bytes) -> dict | None:
    """One cache line as a row of this cache version, or None: another version, a torn line of a killed run, or
    a damaged one (not JSON, not an object, a key that is not text, sites that are not TimedSite fields).
    A None row is not placed: its item is placed again, never a traceback mid-run."""
    try:
        row = parse_json(line)  # a line nested too deeply or with a 5,000-digit number is damaged, not a traceback
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(row, dict) or row.get("version") != SITE_CACHE_VERSION or not isinstance(row.get("key"), str):
        return None
    sites = row.get("sites")
    if not isinstance(sites, list):
        return None
    try:
        [TimedSite(**d) for d in sites]
    except (TypeError, ValueError):
        return None
    return row


def _read_lines(path: Path) -> list[str]:
    # a file that is not UTF-8 is read with its bad bytes replaced: those lines fail to parse, are placed again
    return text_lines(path.read_bytes().decode("utf-8", errors="replace"))


class SiteCache:
    """Byte offsets of each JSONL row by key: :meth:`sites` reads one line from disk per lookup.

    Only ``{key: offset}`` stays in memory (no site lists, no waves). Rows of other cache versions are ignored.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.offsets: dict[str, int] = {}
        if not self.path.is_file():
            return
        with self.path.open("rb") as f:
            offset = 0
            for line in f:
                row = _parse_row(line) if line.strip() else None
                if row is not None:
                    self.offsets.setdefault(row["key"], offset)
                offset += len(line)

    def __contains__(self, key: object) -> bool:
        return key in self.offsets

    def __len__(self) -> int:
        return len(self.offsets)

    def row(self, key: str) -> dict | None:
        offset = self.offsets.get(key)
        if offset is None:
            return None
        with self.path.open("rb") as f:  # opened per lookup: safe across forks and threads
            f.seek(offset)
            return parse_json(f.readline())

    def sites(self, key: str | None) -> list[TimedSite]:
        """The sites of ``key`` (``[]`` for unknown keys and for items placed without sites)."""
        row = self.row(key) if key is not None else None
        return [TimedSite(**d) for d in row["sites"]] if row else []

    def status(self, key: str) -> str | None:
        """The placement status of ``key`` (:func:`leakloss.site_placement.row_status`; None: unknown key, or none
        recorded)."""
        row = self.row(key)
        return row_status(row) if row else None

    def rows(self) -> Iterator[dict]:
        for key in self.offsets:
            yield self.row(key)


#: How far a cached site may end past its clip (alignment frames, the 10 ms least site length), in seconds
SITE_END_SLACK_S = 0.1


def sites_within(sites: Sequence[TimedSite], duration_s: float) -> list[TimedSite]:
    """The sites that lie inside a clip of ``duration_s`` seconds: a cached site at 1e9 s (a damaged or foreign
    ``leak_sites.jsonl``) was counted and trained on."""
    return [s for s in sites if s.start >= 0 and s.end <= duration_s + SITE_END_SLACK_S]


class SiteText(str):
    """A text that carries its site key (and its clip's length in seconds, when known) through F5's
    ``collate_fn`` and ``CFM`` (they only iterate its chars)."""

    site_key: str | None
    duration_s: float | None

    def __new__(cls, text: str, site_key: str | None, duration_s: float | None = None) -> "SiteText":
        obj = super().__new__(cls, text)
        obj.site_key, obj.duration_s = site_key, duration_s
        return obj

    def __reduce__(self):  # DataLoader workers pickle items
        return (SiteText, (str(self), self.site_key, self.duration_s))


def cache_lookup(cache: SiteCache):
    """A ``LeakAwareCFM.site_lookup``: texts from :class:`PreparedF5Dataset` carry their key (and clip length:
    sites outside the clip are left out); others have none."""

    def lookup(text: str) -> list[TimedSite]:
        sites = cache.sites(getattr(text, "site_key", None))
        duration = getattr(text, "duration_s", None)
        return sites if duration is None else sites_within(sites, duration)

    return lookup


# ---------------------------------------------------------------------------------------------------------------
# placement: a Lightning predict loop


def sites_from_log_probs(log_probs: torch.Tensor, n_frames: int, text: str, recognizer, finder) -> list[TimedSite]:
    """The sites of :func:`placement_from_log_probs` (kept for callers of the name before 2026-12-07)."""
    return placement_from_log_probs(log_probs, n_frames, text, recognizer, finder).sites


def placement_from_log_probs(log_probs: torch.Tensor, n_frames: int, text: str, recognizer, finder,
                             duration_s: float | None = None, peak: float | None = None) -> SitePlacement:
    """:func:`leakloss.site_placement.locate_sites` after the recognizer: ``log_probs [f, v]`` of one utterance ->
    its sites, or the status that says why there are none, in ``locate_sites``' order: the text (``bad_text``: one
    the frontend rejects, counted as :func:`leakloss.site_placement.place_dataset_sites` counts it; it was a
    traceback mid-placement; ``no_testable_site``), then the audio (``too_short`` under one frame, ``silent``: a
    ``peak`` under :data:`~leakloss.acoustic.features.SILENCE_PEAK`, measured before the audio was levelled)."""
    from leakloss.site_placement import place_on_log_probs, unplaceable
    from leakloss.text.normalize import TextError

    try:
        words = [w for w in finder(text) if w.skipped is None]
    except TextError:
        return SitePlacement([], "bad_text")
    # load_audio refuses NaN/Inf samples: a placed clip is finite
    if (unplaced := unplaceable(words, n_frames, math.inf if peak is None else peak)) is not None:
        return unplaced
    return place_on_log_probs(log_probs, n_frames, words, recognizer, duration_s=duration_s)


class _PlacementItems(Dataset):
    """Items of a prepared folder in duration order (little padding per batch); known keys skip the wave."""

    def __init__(self, prepared: Prepared, placement: str, known: set[str]) -> None:
        self.prepared, self.placement, self.known = prepared, placement, known
        self.order = sorted(range(len(prepared)), key=lambda i: prepared.durations[i])

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, position: int) -> dict:
        index = self.order[position]
        path, text = self.prepared.audio_path(index), self.prepared.text(index)
        wave, rate = load_audio(path)
        wave16 = to_16k(wave, rate)
        key = site_key(wave16, text, self.placement)
        todo = key not in self.known
        return {"index": index, "audio_path": path, "text": text, "key": key, "wave": wave16 if todo else None}


def _collate_placement(items: list[dict]) -> dict:
    todo = [it for it in items if it["wave"] is not None]
    length = max((it["wave"].numel() for it in todo), default=0)
    waves = torch.zeros(len(todo), length)
    for row, it in enumerate(todo):  # heard at one level, as locate_sites hears a reading
        waves[row, : it["wave"].numel()] = at_hearing_level(it["wave"])
    peaks = [float(it["wave"].abs().max()) if it["wave"].numel() else 0.0 for it in todo]  # before the level
    return {"items": [{k: v for k, v in it.items() if k != "wave"} for it in items], "todo": [it["key"] for it in todo],
            "waves": waves, "lengths": torch.tensor([it["wave"].numel() for it in todo], dtype=torch.long),
            "peaks": peaks}


class SitePlacer(L.LightningModule):
    """``predict_step(batch) -> [row]``: one batched recognizer pass, then a forced alignment per item.

    The recognizer is frozen (eval, no grad); items already in the cache are passed through as ``None``.
    """

    def __init__(self, recognizer, finder=None) -> None:
        super().__init__()
        from leakloss.text.sites import SiteFinder

        self.recognizer = recognizer
        self.finder = finder or SiteFinder()

    def predict_step(self, batch: dict, batch_idx: int = 0) -> list[dict]:
        rows, by_key = [], {}
        if batch["todo"]:
            with torch.no_grad():
                log_probs, frames = self.recognizer(batch["waves"].to(self.device), batch["lengths"].to(self.device))
            by_key = {key: (log_probs[row].cpu(), int(frames[row]), int(batch["lengths"][row]) / SAMPLE_RATE,
                            batch["peaks"][row]) for row, key in enumerate(batch["todo"])}
        for item in batch["items"]:
            if item["key"] not in by_key:
                continue
            lp, n, duration, peak = by_key.pop(item["key"])  # a duplicate clip in one batch is placed once
            # empty and silent clips get locate_sites' statuses (both were "alignment_failed")
            placed = placement_from_log_probs(lp, n, item["text"], self.recognizer, self.finder, duration_s=duration,
                                              peak=peak)
            rows.append({"version": SITE_CACHE_VERSION, "key": item["key"], "sites": [vars(s) for s in placed.sites],
                         "status": placed.status, "audio_path": item["audio_path"], "text": item["text"],
                         "recognizer": self.recognizer.name})
        return rows


class _JsonlPartWriter(BasePredictionWriter):
    """Appends each batch's rows to ``<cache>.part<rank>.<pid>`` and flushes: a killed run keeps what it placed.

    A fresh file per run and rank: an earlier run's part may end in a torn line, which must not swallow a new row.
    """

    def __init__(self, cache_path: Path) -> None:
        super().__init__(write_interval="batch")
        self.cache_path = cache_path
        self.written = 0

    def part(self, rank: int) -> Path:
        return self.cache_path.with_name(f"{self.cache_path.name}.part{rank}.{os.getpid()}")

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
        if not prediction:
            return
        with self.part(trainer.global_rank).open("a", encoding="utf-8") as f:
            f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in prediction)
            f.flush()
        self.written += len(prediction)


def _parts(cache_path: Path) -> list[Path]:
    return sorted(cache_path.parent.glob(f"{cache_path.name}.part*"))


def _known_keys(cache_path: Path) -> set[str]:
    known: set[str] = set()
    for path in [cache_path, *_parts(cache_path)]:
        if path.is_file():
            for line in _read_lines(path):
                row = _parse_row(line) if line.strip() else None
                if row is not None:  # a torn or damaged line is placed again
                    known.add(row["key"])
    return known


def merge_parts(cache_path: str | os.PathLike) -> int:
    """Fold ``<cache>.part*`` into ``<cache>`` (one row per key, first wins), atomically; returns the row count."""
    from leakloss.atomic import write_text_atomic

    cache_path = Path(cache_path)
    rows: dict[str, str] = {}
    dropped = 0
    for path in [cache_path, *_parts(cache_path)]:
        if not path.is_file():
            continue
        for line in _read_lines(path):
            row = _parse_row(line) if line.strip() else None
            if row is None:
                dropped += bool(line.strip())
                continue
            rows.setdefault(row["key"], line)
    if dropped:
        print(f"warning: {cache_path}: {dropped} damaged or other-version line(s) dropped (their items are "
              "placed again)", file=sys.stderr)
    write_text_atomic(cache_path, "".join(line + "\n" for line in rows.values()))
    for path in _parts(cache_path):
        path.unlink()
    return len(rows)


@dataclass
class PlacementSummary:
    """What :func:`place_prepared_sites` did and what the cache now says about the folder."""

    cache: Path
    items: int  # rows of the folder
    placed: int  # aligned in this run
    reused: int  # found in the cache
    with_sites: int  # items of the folder with at least one site
    sites: int  # sites over the folder
    per_kind: dict[str, int]
    not_placed: dict[str, int] = field(default_factory=dict)  # items whose placement failed, by status (no sites)
    item_sites: tuple[int, ...] = ()  # sites of each row of the folder, in its order (0: none, or not in the cache)


def place_prepared_sites(data_dir: str | os.PathLike, recognizer, *, batch_size: int = 8,
                         trainer: L.Trainer | None = None, num_workers: int = 0, finder=None,
                         cache_path: str | os.PathLike | None = None) -> PlacementSummary:
    """Place the contrast sites of every item of an F5-prepared folder on its audio, into ``data_dir/leak_sites.jsonl``.

    Resumable: items whose key (audio + text + recognizer id + finder fingerprint) is already in the cache or in a ``.part`` file
    of an interrupted run are not aligned again. ``trainer`` sets devices/strategy (e.g.
    ``L.Trainer(accelerator="gpu", devices=8, strategy="ddp")``: each rank writes its part, rank 0 merges);
    default: one CPU process.
    """
    prepared = open_prepared(data_dir)
    cache_path = Path(cache_path) if cache_path is not None else prepared.dir / SITES_FILE
    from leakloss.text.sites import SiteFinder

    finder = finder or SiteFinder()
    placement = placement_id(recognizer, finder)
    known = _known_keys(cache_path)
    items = _PlacementItems(prepared, placement, known)
    loader = DataLoader(items, batch_size=batch_size, shuffle=False, num_workers=num_workers,
                        collate_fn=_collate_placement)
    writer = _JsonlPartWriter(cache_path)
    trainer = trainer or L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                                   enable_model_summary=False)
    trainer.callbacks.append(writer)
    run_interruptibly(trainer, lambda: trainer.predict(SitePlacer(recognizer, finder), dataloaders=loader,
                                                       return_predictions=False))
    trainer.strategy.barrier()
    if trainer.is_global_zero:
        merge_parts(cache_path)
    trainer.strategy.barrier()
    return summarize(prepared, cache_path, placement, placed=writer.written)


def run_interruptibly(trainer: L.Trainer, call: Callable[[], Any]) -> Any:
    """``call()`` (a Lightning entry point of ``trainer``), with Ctrl-C and SIGTERM reaching the caller as a
    :class:`KeyboardInterrupt` (the part files written so far are kept: a rerun resumes from them). Lightning turned
    Ctrl-C into ``sys.exit(1)`` (exit 1 means a diverged run here) and left SIGINT ignored, and it only logged a
    SIGTERM: the placement went on and training after it."""
    import signal

    handler = signal.getsignal(signal.SIGINT)
    try:
        out = call()
    except SystemExit:
        if trainer.interrupted:
            raise KeyboardInterrupt("interrupted during the site placement") from None
        raise
    finally:
        if signal.getsignal(signal.SIGINT) is not handler and handler is not None:
            signal.signal(signal.SIGINT, handler)
    if getattr(trainer, "received_sigterm", False):
        raise KeyboardInterrupt("SIGTERM during the site placement")
    return out


def summarize(prepared: Prepared, cache_path: Path, placement: str, placed: int = 0) -> PlacementSummary:
    """Count what the cache holds for the folder's items (keys recomputed from the audio: stale rows do not count)."""
    cache = SiteCache(cache_path)
    with_sites = sites = found = 0
    per_kind: dict[str, int] = {}
    not_placed: dict[str, int] = {}
    outside: list[str] = []  # cached sites that lie outside their clip: not counted, never trained on
    item_sites_count = [0] * len(prepared)
    for i in range(len(prepared)):
        wave, rate = load_audio(prepared.audio_path(i))
        wave16 = to_16k(wave, rate)
        key = site_key(wave16, prepared.text(i), placement)
        if key not in cache:
            continue
        found += 1
        cached, status = cache.sites(key), cache.status(key)
        if status is not None and status not in PLACED_OR_NOTHING_TO_PLACE:
            not_placed[status] = not_placed.get(status, 0) + 1
        duration = wave16.numel() / SAMPLE_RATE
        item_sites = sites_within(cached, duration)
        outside += [f"{Path(prepared.audio_path(i)).name} ({s.start:g}-{s.end:g} s of {duration:.2f} s)"
                    for s in cached if s not in item_sites]
        with_sites += bool(item_sites)
        sites += len(item_sites)
        item_sites_count[i] = len(item_sites)
        for s in item_sites:
            per_kind[s.kind] = per_kind.get(s.kind, 0) + 1
    if outside:
        print(f"warning: {cache_path}: {len(outside)} cached site(s) lie outside their clip and are ignored: "
              f"{', '.join(outside[:3])}{' ...' if len(outside) > 3 else ''} (delete the file to place the sites "
              "again)", file=sys.stderr)
    if not_placed:  # never silently: these items train without the penalty
        counts = ", ".join(f"{status}: {n}" for status, n in sorted(not_placed.items()))
        print(f"warning: {sum(not_placed.values())} of {len(prepared)} items could not be placed and get no sites "
              f"({counts}); they train without the leak penalty", file=sys.stderr)
    return PlacementSummary(cache_path, len(prepared), placed, found - placed, with_sites, sites, per_kind,
                            not_placed, tuple(item_sites_count))


# ---------------------------------------------------------------------------------------------------------------
# training items


class PreparedF5Dataset(Dataset):
    """F5's ``CustomDataset`` over a prepared folder, whose texts are :class:`SiteText` (they carry the site key).

    ``__getitem__`` -> ``{"mel_spec": [d, n], "text": SiteText}``; clips outside 0.3-30 s are skipped to the next
    index as F5 does. ``get_frame_len`` reads ``duration.json`` (F5's ``DynamicBatchSampler``). Keys are
    recomputed from the audio, so an edited clip simply has no sites (never someone else's).
    """

    def __init__(self, prepared: Prepared, placement: str, mel_spec_kwargs: Mapping[str, Any]) -> None:
        from f5_tts.model.modules import MelSpec

        self.prepared, self.placement = prepared, placement
        self.mel_spec = MelSpec(**mel_spec_kwargs)
        self.rate, self.hop = self.mel_spec.target_sample_rate, self.mel_spec.hop_length

    def __len__(self) -> int:
        return len(self.prepared)

    def get_frame_len(self, index: int) -> float:
        return self.prepared.durations[index] * self.rate / self.hop

    def __getitem__(self, index: int) -> dict[str, Any]:
        for _ in range(len(self.prepared)):
            if F5_MIN_S <= self.prepared.durations[index] <= F5_MAX_S:
                break
            index = (index + 1) % len(self.prepared)
        wave, rate = load_audio(self.prepared.audio_path(index))
        text = self.prepared.text(index)
        wave16 = to_16k(wave, rate)
        key = site_key(wave16, text, self.placement)
        wave24 = wave if rate == self.rate else resample(wave, rate, self.rate)
        with torch.no_grad():
            mel = self.mel_spec(wave24[None])[0]  # [d, n]
        return {"mel_spec": mel, "text": SiteText(text, key, wave16.numel() / SAMPLE_RATE)}


def trainable_count(prepared: Prepared, max_frames: float | None = None) -> int:
    """Clips F5 trains on: those of 0.3-30 s and, with frame batches of ``max_frames`` mel frames, no longer than
    that (F5's ``DynamicBatchSampler`` leaves a longer clip out, without a word)."""
    return sum(map(lambda d: is_trainable(d, max_frames), prepared.durations))


def is_trainable(duration_s: float, max_frames: float | None = None) -> bool:
    """Whether F5 trains on a clip of ``duration_s``: 0.3-30 s and, with frame batches of ``max_frames`` mel frames,
    no longer than that."""
    from leakloss.constants import MEL_HOP, MEL_SAMPLE_RATE

    return F5_MIN_S <= duration_s <= F5_MAX_S and (max_frames is None
                                                   or duration_s * MEL_SAMPLE_RATE / MEL_HOP <= max_frames)


__all__ = [
    "F5_MAX_S", "F5_MIN_S", "PlacementSummary", "Prepared", "PreparedDatasetError", "PreparedF5Dataset", "SITES_FILE",
    "SITE_END_SLACK_S",
    "SiteCache", "SitePlacer", "SiteText", "cache_lookup", "check_audio_files", "check_row_fields", "check_texts",
    "is_trainable",
    "load_audio", "merge_parts", "open_prepared", "place_prepared_sites", "read_vocab", "row_text", "site_key",
    "placement_from_log_probs", "sites_from_log_probs", "sites_within", "summarize", "to_16k", "trainable_count",
]
