"""The contrast-pair manifest: one JSON object per line, validated on load.

A pair is two readings of the same sentence that differ (or, for the control, do not differ) at one
contrast site of one word, plus a trusted Nepali reference reading of the same sentence by another
voice. ``query`` carries the change (label 1), ``control`` does not (label 0): the sham splice for
physical pairs, the unedited teacher reading for natural and model pairs.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from leakloss.atomic import write_text_atomic
from leakloss.schema import KINDS, PAIR_KINDS, Kind, PairKind

SPLITS = ("train", "dev", "heldout")


class ManifestError(ValueError):
    """A manifest line that does not follow the schema (the message names file, line and field)."""


@dataclass(frozen=True)
class PairRecord:
    id: str
    pair_kind: PairKind
    kind: Kind
    contrast: str  # e.g. "ʌ->∅", "ʌi̯->ɛː"
    text: str
    sentence_id: str
    word_index: int
    word: str
    site_position: int  # index of the site in the word's Nepali phones
    nepali: str
    hindi: str | None
    query: str  # audio with the change (relative to the manifest's folder, or absolute)
    control: str  # audio without it
    reference: str  # a trusted Nepali reading of the same text by another voice
    voice: str
    split: str  # train | dev | heldout

    def key(self) -> tuple:
        """What makes two records duplicates: the same site and pair kind on the same audio."""
        return (self.pair_kind, self.sentence_id, self.word_index, self.site_position, self.query, self.control)


_FIELD_TYPES = {f.name: f.type for f in fields(PairRecord)}


def _check(d: dict, where: str) -> PairRecord:
    missing = [name for name in _FIELD_TYPES if name not in d]
    if missing:
        raise ManifestError(f"{where}: missing field(s) {', '.join(missing)}")
    extra = [k for k in d if k not in _FIELD_TYPES]
    if extra:
        raise ManifestError(f"{where}: unknown field(s) {', '.join(extra)}")
    for name in ("word_index", "site_position"):
        if not isinstance(d[name], int) or isinstance(d[name], bool) or d[name] < 0:
            raise ManifestError(f"{where}: field {name!r} must be a non-negative integer, got {d[name]!r}")
    for name in ("id", "text", "sentence_id", "word", "nepali", "query", "control", "reference", "voice", "contrast"):
        if not isinstance(d[name], str) or not d[name]:
            raise ManifestError(f"{where}: field {name!r} must be a non-empty string, got {d[name]!r}")
    if d["hindi"] is not None and not isinstance(d["hindi"], str):
        raise ManifestError(f"{where}: field 'hindi' must be a string or null")
    for name, allowed in (("pair_kind", PAIR_KINDS), ("kind", KINDS), ("split", SPLITS)):
        if d[name] not in allowed:
            raise ManifestError(f"{where}: field {name!r} must be one of {allowed}, got {d[name]!r}")
    if d["kind"] == "deletion" and d["hindi"] is not None:
        raise ManifestError(f"{where}: a deletion pair has 'hindi': null")
    return PairRecord(**d)


def read_manifest(path: str | Path) -> list[PairRecord]:
    """Load and validate a pair manifest; duplicates (same id, or same site on the same audio) are errors."""
    path = Path(path)
    records, ids, keys = [], {}, {}
    try:
        raw_lines = path.read_bytes().splitlines()
    except OSError as err:  # missing, a folder, unreadable
        raise ManifestError(f"{path}: cannot read the manifest ({err.strerror or err})") from err
    for n, raw in enumerate(raw_lines, 1):
        where = f"{path}:{n}"
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ManifestError(f"{where}: not UTF-8 text (byte {err.start}: {raw[err.start:err.start + 1]!r})") from err
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError as err:
            raise ManifestError(f"{where}: not valid JSON ({err.msg})") from err
        if not isinstance(d, dict):
            raise ManifestError(f"{where}: expected a JSON object")
        rec = _check(d, where)
        if rec.id in ids:
            raise ManifestError(f"{where}: duplicate id {rec.id!r} (first on line {ids[rec.id]})")
        if rec.key() in keys:
            raise ManifestError(f"{where}: duplicate pair of line {keys[rec.key()]} (same site and audio)")
        ids[rec.id], keys[rec.key()] = n, n
        records.append(rec)
    return records


def write_manifest(path: str | Path, records: list[PairRecord]) -> None:
    """Write atomically (temp file + rename), after checking for duplicates."""
    path = Path(path)
    seen: set = set()
    for r in records:
        if r.id in seen:
            raise ManifestError(f"duplicate id {r.id!r}")
        seen.add(r.id)
    write_text_atomic(path, "".join(json.dumps(asdict(r), ensure_ascii=False) + "\n" for r in records))


def resolve(manifest: str | Path, audio: str) -> Path:
    p = Path(audio)
    return p if p.is_absolute() else Path(manifest).parent / p
