"""``leakloss evaluate``: one command from a TTS system's readings to its report.

Each system is ``NAME=PATH``: F5's ``metadata.csv`` (``audio|text`` lines, audio relative to the csv's
folder; F5's ``audio_file|text`` header is skipped) or a folder holding one, or a folder of WAVs named by a
test set's ids (``--testset FILE``). Every reading goes through ``score-batch``'s Lightning predict loop
(:func:`leakloss.batch.score_batch`: resumable, progress bar), against the embedded teacher's synthesised
references unless ``reference_free``. Then the comparison (:mod:`leakloss.eval.compare`: per system, per
contrast kind, per word, Wilson and sentence-bootstrap intervals), a word report with players per reading
(:func:`leakloss.report.render_report`) and the index (:func:`write_index`, the demo's too).

Layout of ``OUT``: ``manifests/NAME.jsonl`` and ``results/NAME/*.json`` (kept: a rerun resumes), and
``report/`` (``index.html``, ``comparison/``, ``reports/NAME/*.html``, ``evaluation.json``), written whole
by :func:`leakloss.atomic.atomic_directory` once every reading is scored: an interrupted run leaves the
previous report as it was. A reading that cannot be scored for its input (audio missing or unreadable, a text
with no Devanagari word, an id the test set does not know) is never dropped silently: it is listed by name in
the returned summary (the terminal) and in the report. A reading is known by its file name without extension, or
where two readings of one system share that name, by its path in the metadata's folder with ``__`` for each
separator (``spk1__utt1.wav``); the comparison counts this run's readings only, not every result ``results/NAME/``
keeps.
"""

from __future__ import annotations

import json
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from leakloss.atomic import write_text_atomic

METADATA = "metadata.csv"
AUDIO_SUFFIXES = (".wav", ".flac", ".aiff", ".aif")
#: audio formats a reading may come in that evaluate does not read: named as such, not as "missing"
OTHER_AUDIO_SUFFIXES = (".mp3", ".ogg", ".opus", ".m4a", ".aac", ".wma", ".webm")
#: What the report folder holds (atomic_directory replaces it only if it holds nothing else).
REPORT_FILES = ("index.html", "evaluation.json", "comparison/", "reports/")


class EvaluateError(ValueError):
    """An evaluation that cannot start (a bad system spec, folder, test set); the message says what to fix."""


@dataclass
class SystemReadings:
    name: str
    source: Path
    items: list[dict] = field(default_factory=list)  # score-batch manifest lines (absolute paths)
    problems: list[dict] = field(default_factory=list)  # {"reading", "reason"}: bad input, not scored


def parse_system(spec: str) -> tuple[str, Path]:
    """``NAME=PATH`` -> (name, path); a name becomes a folder name, so it must be a plain one."""
    name, sep, path = spec.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise EvaluateError(f"{spec!r}: give each system as NAME=FOLDER_OR_METADATA")
    if "/" in name or "\\" in name or name.startswith(".") or any(unicodedata.category(c)[0] == "C" for c in name):
        raise EvaluateError(f"system name {name!r} must be a plain name (no '/', '\\', control characters, not "
                            "starting with '.'): it names the system's folders")
    from leakloss.batch import MAX_ID_BYTES

    if len(name.encode("utf-8")) > MAX_ID_BYTES:  # failed at the first file write, naming a temporary file
        raise EvaluateError(f"system name {name[:40]!r}... is {len(name.encode('utf-8'))} bytes in UTF-8, at most "
                            f"{MAX_ID_BYTES}: it names the system's folders")
    return name, Path(path)


def read_testset(path: str | Path) -> dict[str, dict]:
    """A test set TSV -> ``{id: {"text", "key_words": [...], "key_kinds": {word: [kind, ...]}}}``.

    Columns by header (``id``, ``text``, a key-word column whose name starts with ``key``, words separated by
    commas or spaces, and the optional ``sites`` column ``leakloss testset`` writes: JSON, each key word's sites as
    ``[kind, contrast, position]``); without a header: id, text, key words. ``key_kinds`` holds the contrast kinds
    the ``sites`` column names for each key word (a ``--kind quality`` set: quality only), and is empty without it:
    a key word then counts by all its sites.

    Raises:
        EvaluateError: unreadable, no rows, a row without id or text, a repeated id, a key word that is not a word
            of its text (a misspelt key word had vanished from the count without a word), a row without key words
            beside rows with them (two measures mixed), or a ``sites`` cell that is not that JSON.
    """
    from leakloss.textfile import text_lines

    path = Path(path)
    try:  # (line number in the file, line): comments and blank lines are not rows, but count in the numbers
        numbered = [(n, ln) for n, ln in enumerate(text_lines(path.read_text(encoding="utf-8-sig")), 1) if ln.strip()]
    except (OSError, UnicodeDecodeError) as err:
        raise EvaluateError(f"cannot read test set {path}: {err}") from err
    lines = [(n, ln) for n, ln in numbered if not ln.startswith("#")]
    # `leakloss testset` writes its header as a comment ("#id\ttext\tkey_words\tsites"), which a user may put
    # other comments above: any comment before the first row (only the first was read, and the sites column of a
    # commented set was dropped without a word)
    leading = [(n, ln[1:]) for n, ln in numbered[:next((i for i, (_, ln) in enumerate(numbered)
                                                        if not ln.startswith("#")), len(numbered))]]
    header = next(((n, c) for n, c in leading if {"id", "text"} <= {x.strip().lower() for x in c.split("\t")}), None)
    if header is not None:
        lines.insert(0, header)
    head = [c.strip().lower() for c in lines[0][1].split("\t")] if lines else []
    if "id" in head and "text" in head:
        id_col, text_col = head.index("id"), head.index("text")
        key_col = next((i for i, c in enumerate(head) if c.startswith("key")), None)
        sites_col = head.index("sites") if "sites" in head else None
        rows = lines[1:]
    else:
        id_col, text_col, key_col, sites_col = 0, 1, 2, None
        rows = lines
    if not rows:  # a header alone (commented or not) was {}: every metadata line then "in no sentence"
        raise EvaluateError(f"test set {path} has no rows")
    out: dict[str, dict] = {}
    where: dict[str, int] = {}  # each id's line
    for n, line in rows:
        cells = line.split("\t")
        if len(cells) <= max(id_col, text_col) or not cells[id_col].strip() or not cells[text_col].strip():
            raise EvaluateError(f"{path}:{n}: need an id and a text (tab-separated)")
        sid = cells[id_col].strip()
        if sid in out:
            raise EvaluateError(f"{path}:{n}: id {sid!r} repeated")
        keys = cells[key_col] if key_col is not None and key_col < len(cells) else ""
        text = cells[text_col].strip()
        words = _text_words(text)
        if not words:  # its readings could be matched by any text without a word
            raise EvaluateError(f"{path}:{n}: the text of {sid!r} has no Devanagari word")
        key_words = []
        for key in keys.replace(",", " ").split():
            form = _text_words(key)  # a key word copied with its danda or quotes is the word
            if len(form) != 1 or form[0] not in words:
                raise EvaluateError(f"{path}:{n}: key word {key!r} is not a word of the text")
            key_words.append(form[0])
        cell = cells[sites_col].strip() if sites_col is not None and sites_col < len(cells) else ""
        out[sid] = {"text": text, "key_words": key_words,
                    "key_kinds": _key_kinds(sid, text, keys, cell, f"{path}:{n}") if cell else {}}
        where[sid] = n
    keyless = [sid for sid, e in out.items() if not e["key_words"]]
    if keyless and len(keyless) < len(out):  # its every tested word would count beside the others' key words
        raise EvaluateError(f"{path}:{where[keyless[0]]}: {keyless[0]!r} has no key word while other rows have "
                            "theirs: give each row its key words (or none to any, to count every tested word)")
    return out


def _key_kinds(sid: str, text: str, keys: str, cell: str, where: str) -> dict[str, list[str]]:
    """The contrast kinds a test set's ``sites`` cell names for each key word, read as ``leakloss testset`` reads
    its own lines (:func:`leakloss.testset.parse_line`: one entry per key word, ``[kind, contrast, position]``)."""
    from leakloss.testset import TestSetError, parse_line

    try:
        item = parse_line("\t".join((sid, text, keys.replace(",", " "), cell)), where)
    except TestSetError as err:
        raise EvaluateError(str(err)) from None
    # keyed as key_words are (a key word typed with its danda was "घर।" here and "घर" there: its kinds were lost)
    return {(_text_words(k.word) or (_word_form(k.word),))[0]: sorted({s.kind for s in k.sites})
            for k in item.key_words}


def _text_words(text: str) -> tuple[str, ...]:
    """The Devanagari words of ``text`` in the scorer's normal form, punctuation, numbers and Latin words left out:
    what a key word must be one of (:func:`_sentence_key` matches sentences)."""
    from leakloss.text.normalize import split_text_words

    try:
        return tuple(_word_form(w) for w in split_text_words(text))
    except ValueError:  # a text the normaliser refuses: its NFC form as one word, matched exactly
        return (_word_form(text),) if text.strip() else ()


def _sentence_key(text: str) -> tuple[str, ...]:
    """What a metadata line's text is matched to a test-set sentence by: every spoken token in the scorer's normal
    form (words, numbers, Latin words), punctuation left out, so a dropped danda or a changed space or quote is the
    same sentence. The Devanagari words alone made "म १० बजे" and "म ११ बजे" one sentence."""
    from leakloss.text.normalize import normalize_devanagari, split_words
    from leakloss.text.sites import UNSPOKEN_SKIPS

    try:
        return tuple(_number_form(t.text) if t.skipped == "digits" else _word_form(t.text)
                     for t in split_words(normalize_devanagari(text)) if t.skipped not in UNSPOKEN_SKIPS)
    except ValueError:  # a text the normaliser refuses: its NFC form, matched exactly
        return (_word_form(text),) if text.strip() else ()


_DEVANAGARI_DIGITS = str.maketrans("०१२३४५६७८९", "0123456789")


def _number_form(token: str) -> str:
    """A number as a sentence key holds it: ASCII digits, no group commas (``१०`` is ``10``, ``1,000`` is ``1000``)."""
    return token.translate(_DEVANAGARI_DIGITS).replace(",", "")


def _word_form(text: str) -> str:
    """``text`` as the scorer writes its words and texts (:func:`leakloss.text.normalize.normalize_devanagari`:
    NFC, zero-width joiners and other invisibles dropped), so that a key word or a transcript typed with a ZWJ
    matches the result's words (it never matched, and every tested word was counted instead)."""
    from leakloss.text.normalize import TextError, normalize_devanagari

    try:
        return normalize_devanagari(text)
    except TextError:
        return unicodedata.normalize("NFC", text)


#: at most this many audio files no metadata line names are listed one by one; the rest are counted in one line
UNLISTED_SHOWN = 10


def shown_path(path: Path) -> str:
    """``path`` as a problem names it: a file name that is not UTF-8 (Latin-1 bytes on a Linux disk) with its bytes
    escaped, so that the terminal, the JSON and the report can print it."""
    from leakloss.atomic import is_utf8

    text = str(path)
    return text if is_utf8(text) else text.encode("utf-8", "backslashreplace").decode("utf-8")


def _unlisted_audio(metadata: Path, listed: set[Path]) -> list[dict]:
    """Audio files in the metadata's folder, or in its subfolders that hold audio it lists, that no line names:
    each a problem (the first :data:`UNLISTED_SHOWN`, then one line counting the rest); a WAV without a transcript
    had vanished without a word."""
    root = metadata.parent.resolve()
    folders = {root} | {a.parent for a in listed if a.parent.is_relative_to(root)}
    unlisted = [f for folder in sorted(folders) if folder.is_dir() for f in sorted(folder.iterdir())
                if f.suffix.lower() in AUDIO_SUFFIXES and f.is_file() and f.resolve() not in listed]
    out = [{"reading": shown_path(f), "reason": f"no line of {metadata.name} names it"}
           for f in unlisted[:UNLISTED_SHOWN]]
    if len(unlisted) > UNLISTED_SHOWN:
        out.append({"reading": str(root), "reason": f"{len(unlisted) - UNLISTED_SHOWN} more audio files no line of "
                    f"{metadata.name} names"})
    return out


def _extra_field(text: str) -> str | None:
    """The field after the text of a metadata line, if its ``|`` separate one (``text|spk1``: a field with no
    Devanagari letter; ``text|text``: LJSpeech's normalised copy), else None: a ``|`` typed as the danda
    (``म घर जान्छु | ऊ आयो |``) is part of the text."""
    *head, last = text.split("|")
    last = last.strip()
    if not head or not last:
        return None
    if not any("\u0900" <= c <= "\u097f" for c in last) or last == head[-1].strip():
        return last
    return None


def _reading_problem(audio: Path, text: str) -> str | None:
    """Why a reading cannot be scored for its input, or None."""
    from leakloss.audio import AudioError, load_audio
    from leakloss.batch import _text_problem as text_problem

    try:
        if not audio.is_file():
            return f"audio {audio} is missing"
        load_audio(audio)
    except (AudioError, OSError) as err:  # is_file() raises on EACCES; load_audio says why as AudioError
        return f"audio {audio} is unreadable: {err}"
    problem = text_problem(text)
    return None if problem is None else problem.replace("field 'text'", "the text")


def _path_id(audio: Path, base: Path) -> str:
    """A reading's id from its path in ``base`` (or its absolute path), the folders joined by ``__``."""
    try:
        parts = audio.relative_to(base).parts
    except ValueError:  # an absolute path in the metadata
        parts = audio.parts[1:]
    return "__".join(p for p in parts if p not in ("..", "."))  # ../a/utt1.wav: a__utt1.wav, not a hidden name


def _metadata_path(path: Path) -> Path | None:
    if path.is_file():
        return path
    if path.is_dir() and (path / METADATA).is_file():
        return path / METADATA
    return None


def read_system(name: str, path: Path, testset: dict[str, dict] | None = None) -> SystemReadings:
    """The readings of one system and the ones that cannot be scored (each with its reason).

    Raises:
        EvaluateError: the path is neither a metadata.csv, a folder with one, nor (with a test set) a folder.
    """
    from leakloss.atomic import path_problem
    from leakloss.batch import _id_problem
    from leakloss.textfile import text_lines

    system = SystemReadings(name, path)
    by_text: dict[tuple[str, ...], list[str]] = {}  # a sentence's words -> its ids (a set may repeat a sentence)
    for sid, entry in (testset or {}).items():
        by_text.setdefault(_sentence_key(entry["text"]), []).append(sid)
    metadata = _metadata_path(path)
    rows: list[tuple[str, Path, str, str]] = []  # (reading name, audio, text, sentence id)
    if metadata is not None:
        try:
            lines = text_lines(metadata.read_text(encoding="utf-8-sig"))
        except (OSError, UnicodeDecodeError) as err:
            raise EvaluateError(f"system {name!r}: cannot read {metadata}: {err}") from err
        refused: set[Path] = set()  # audio of lines refused by name: said once, with the line's reason
        said: set[str] = set()  # test-set ids a listed line reads (refused, or a repeated sentence): said with it
        first = next((n for n, line in enumerate(lines, 1) if line.strip()), 0)
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            audio, sep, text = line.partition("|")
            where = f"{metadata}:{n}"
            if n == first and audio.strip().lower() in ("audio_file", "audio", "file"):
                continue  # F5's header (below blank lines too: it was read as audio named audio_file)
            named = metadata.parent / audio.strip()
            if not sep or not audio.strip():
                system.problems.append({"reading": where, "reason": "not an 'audio|text' line"})
                if audio.strip() and path_problem(named, utf8=False) is None:  # a bare file name: listed here,
                    refused.add(named.resolve())  # not also as audio "no line names"
                continue
            # a line refused below still speaks for its sentence: not listed again as unread (an extra field cut)
            said.update(by_text.get(_sentence_key(text.split("|")[0].strip()), []))
            if (problem := path_problem(named, utf8=False)) is not None:  # a NUL raised in resolve() and is_file()
                system.problems.append({"reading": where, "reason": f"audio {problem}"})
                continue
            if (extra := _extra_field(text)) is not None:  # audio|text|spk1, id|text|normalized: the extra field
                system.problems.append({"reading": where, "reason": f"a field after the text ({extra!r}): evaluate "
                                        "reads 'audio|text' lines"})  # was scored as part of the text
                refused.add(named.resolve())
                continue
            text = text.strip()
            matches = by_text.get(_sentence_key(text), [])
            sid = matches[0] if len(matches) == 1 else ""
            if testset is not None and not sid:  # its key words are unknown: counted, it would mix another measure in
                why = ("its text is no sentence of the test set (--testset): not scored" if not matches else
                       f"its text is the sentence of ids {', '.join(matches)} of the test set: name its audio by "
                       "its id (a folder of WAVs named by the ids) to tell which; not scored")
                system.problems.append({"reading": f"{where} ({audio.strip()})", "reason": why})
                refused.add(named.resolve())
                continue
            rows.append((f"{where} ({audio.strip()})", named, text, sid))
        if metadata.name == METADATA:  # a system's own folder (a metadata file of another name may share one)
            system.problems += _unlisted_audio(metadata, {a.resolve() for _, a, _, _ in rows} | refused)
        if testset is not None:  # a sentence the system did not read is said, as a missing WAV of a folder is
            read = {sid for *_, sid in rows}
            system.problems += [{"reading": sid, "reason": f"no line of {metadata.name} reads this test-set sentence: "
                                 "not scored"} for sid in testset if sid not in read | said]
        # a reading is known by its file name; where two share one (spk1/utt1.wav, spk2/utt1.wav; x.wav, x.flac),
        # each by its path in the metadata's folder, separators as "__"
        stems = Counter(audio.stem for _, audio, _, sid in rows if not sid)
        ids = [sid or (audio.stem if stems[audio.stem] == 1 else _path_id(audio, metadata.parent))
               for _, audio, _, sid in rows]
    elif path.is_dir() and testset is not None:
        files = sorted(f for f in path.iterdir() if f.is_file())
        for sid, entry in testset.items():
            # the suffix in any case (ne-001.WAV was "missing"); two readable files of one id are refused, not picked
            named = [f for f in files if f.stem == sid]
            readable = [f for f in named if f.suffix.lower() in AUDIO_SUFFIXES]
            if len(readable) > 1:  # ne-001.wav and ne-001.WAV: which one is the reading is not ours to guess
                system.problems.append({"reading": ", ".join(map(shown_path, readable)), "reason": f"{len(readable)} "
                                        f"audio files for id {sid!r}: keep one; not scored"})
                continue
            audio = readable[0] if readable else None
            named = [f for f in named if f.suffix.lower() in OTHER_AUDIO_SUFFIXES] if audio is None else named
            if audio is None and named:  # ne-001.mp3: not "missing", and not silently passed over
                system.problems.append({"reading": shown_path(named[0]), "reason": f"not a supported audio format "
                                        f"({', '.join(AUDIO_SUFFIXES)})"})
                continue
            audio = audio or path / f"{sid}.wav"
            rows.append((str(audio), audio, entry["text"], sid))
        ids = [sid for *_, sid in rows]
        known = set(testset)
        for f in files:
            if f.suffix.lower() in AUDIO_SUFFIXES + OTHER_AUDIO_SUFFIXES and f.stem not in known:
                system.problems.append({"reading": shown_path(f), "reason": "its name is no id of the test set"})
        for f in sorted(f for f in path.iterdir() if f.is_dir()):  # never read: said, not passed over
            system.problems.append({"reading": shown_path(f), "reason": "a folder: evaluate reads the audio files named by "
                                    "the test set's ids in the system's folder itself, not in its subfolders"})
    elif path.is_dir():
        raise EvaluateError(f"system {name!r}: {path} has no {METADATA}; give one (audio|text lines) or --testset "
                            "with WAVs named by its ids")
    else:
        raise EvaluateError(f"system {name!r}: {path} does not exist")
    seen: dict[str, str] = {}
    for (reading, audio, text, sid), rid in zip(rows, ids, strict=True):
        problem = _id_problem(rid) or _reading_problem(audio, text)  # an id becomes the result's file name
        if problem is not None:
            system.problems.append({"reading": reading, "reason": problem})
            continue
        if rid in seen:
            system.problems.append({"reading": reading, "reason": f"a second reading of id {rid!r} (first: {seen[rid]})"})
            continue
        seen[rid] = reading
        item = {"id": rid, "query": str(audio.absolute()), "text": text, "system": name}
        if sid:
            item["sentence_id"] = sid
        system.items.append(item)
    return system


def _scored_audio(path: str | Path, result: dict):
    """``(wave, None)``: the audio ``result`` was scored on, for its report page; ``(None, reason)`` when it cannot
    be read, or its bytes are no longer those scored (``input_sha1``): the result's word boundaries are not this
    file's, and its clips would be other speech."""
    from leakloss.audio import load_audio
    from leakloss.batch import file_sha1

    recorded, now = (result.get("input_sha1") or {}).get("query"), file_sha1(path)
    if recorded is not None and now is None:
        return None, "its audio is gone or cannot be read since it was scored: its page has no audio"
    if recorded is not None and now != recorded:
        return None, "its audio changed since it was scored (rerun to score it again): its page has no audio"
    try:
        return load_audio(path)[0], None
    except Exception as err:  # noqa: BLE001 - any reason the file cannot be read now: reported, page without audio
        return None, f"its audio cannot be read for the report ({type(err).__name__}: {err}): its page has no audio"


def mark_key_words(result: dict, key_words: list[str], key_kinds: dict[str, list[str]] | None = None) -> bool:
    """Mark ``result``'s key words (``"key": true``) as the demo does; a reading whose key words have no tested
    site marks none (every tested word then counts). ``key_kinds``: the contrast kinds a key word is counted by
    (:func:`read_testset`), written as its ``"key_kinds"``: a ``--kind quality`` set's key word flagged for a
    deletion is not a quality flag (:func:`leakloss.eval.compare.key_units`). Returns whether ``result`` changed."""
    before = json.dumps(result["words"], ensure_ascii=False)
    keys = {_word_form(k) for k in key_words}
    kinds = {_word_form(k): v for k, v in (key_kinds or {}).items()}
    for w in result["words"]:
        form = _word_form(w["word"])
        w["key"] = form in keys
        if w["key"] and form in kinds:
            w["key_kinds"] = list(kinds[form])
        else:
            w.pop("key_kinds", None)
    if not any(w["key"] and w["sites"] for w in result["words"]):
        for w in result["words"]:
            w.pop("key", None)
            w.pop("key_kinds", None)
    return json.dumps(result["words"], ensure_ascii=False) != before


def write_index(folder: Path, comparison: dict, links: list[dict], *, title: str, intro: str,
                before: list[dict] = (), after: list[dict] = (), problems: list[dict] = ()) -> Path:
    """The index page of a comparison (``evaluate``'s and the demo's): ``intro``, the ``before`` entries, the
    comparison's plot and table (key words flagged with both intervals, per kind), the ``after`` entries, the
    readings that could not be scored for their input, and ``links`` (``{"href", "text"}``) to the word reports."""
    from leakloss.eval.compare import format_rate, mixed_origins, origin_text
    from leakloss.report import render_index, write_report
    from leakloss.schema import KINDS

    entries = [{"kind": "text", "title": "What this is", "text": intro}, *before,
               {"kind": "image", "title": "Key words flagged", "src": "comparison/comparison.png"}]
    rows = []
    for name, s in comparison["systems"].items():
        k = s["key_flagged"]
        undecided = s.get("by_kind_undecided") or {}  # beside each kind's rate, as comparison.md has it
        # the bootstrap's own column: "—" without an interval (one sentence), as comparison.md has it, not the count
        rows.append([name, format_rate(k), format_rate(k, "bootstrap") if k.get("bootstrap") else "—",
                     *(cell for kind in KINDS
                       for cell in (format_rate(s["by_kind"][kind]), str(undecided.get(kind, "—")))),
                     f"{s['scored']} of {s['readings']}", str(s["quarantined"]), str(s["unscored"]), str(s["failed"]),
                     origin_text(s)])
    entries.append({"kind": "table", "title": "Comparison", "rows": rows,
                    "columns": ["system", "key words flagged (Wilson 95%)", "sentence bootstrap 95%",
                                *(c for kind in KINDS for c in (f"{kind} (Wilson 95%)", f"{kind} undecided")),
                                "readings scored", "quarantined",
                                "unscored", "failed", "references"]})
    if (mixed := mixed_origins(comparison)) is not None:
        entries.append({"kind": "text", "title": "Not comparable as they stand", "text": mixed})
    entries.append({"kind": "link", "title": "The whole comparison", "href": "comparison/comparison.md",
                    "text": "comparison.md: by word, and why readings were left out (also .json)"})
    entries += list(after)
    if problems:
        entries.append({"kind": "table", "title": "Readings not scored: bad input", "columns": ["system", "reading", "why"],
                        "rows": [[p["system"], p["reading"], p["reason"]] for p in problems]})
    entries += [{"kind": "link", "title": "Word reports" if i == 0 else None, "href": link["href"],
                 "text": link["text"]} for i, link in enumerate(links)]
    path = folder / "index.html"
    write_report(path, render_index(entries, title))
    return path


class EvaluateInterrupted(KeyboardInterrupt):
    """Ctrl-C while scoring: the results written are kept (a rerun resumes), the report was not written."""

    def __init__(self, system: str, summary: dict) -> None:
        super().__init__(f"interrupted while scoring {system}")
        self.system, self.summary = system, summary


def _score_systems(readings: list[SystemReadings], out: Path, sets: dict[str, dict] | None, scoring: dict,
                   dirs: dict, **batch_kwargs) -> None:
    """Score each system's readings into ``out/results/NAME`` (resumable: :func:`leakloss.batch.score_batch`), its
    summary into ``scoring``, its folder into ``dirs``; then mark the test set's key words in the results."""
    from leakloss.batch import BatchInterrupted, score_batch
    from leakloss.schema import load_result

    for system in readings:
        manifest = out / "manifests" / f"{system.name}.jsonl"
        results = dirs[system.name] = out / "results" / system.name
        manifest.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(manifest, "".join(json.dumps(i, ensure_ascii=False) + "\n" for i in system.items))
        try:
            scoring[system.name] = score_batch(manifest, results, **batch_kwargs)
        except BatchInterrupted as err:
            raise EvaluateInterrupted(system.name, err.summary) from None
        for item in system.items:  # key words from the test set (score-batch's done-check ignores them)
            entry = (sets or {}).get(item.get("sentence_id", ""))
            path = results / f"{item['id']}.json"
            if entry is not None and path.is_file():
                result = load_result(path)
                if mark_key_words(result, entry["key_words"], entry.get("key_kinds")):
                    write_text_atomic(path, json.dumps(result, ensure_ascii=False, indent=1))


def _result_stamps(folder: Path) -> dict[str, int]:
    """Each result file under ``folder`` with its modification time (ns): what a run wrote there, told apart from
    what an earlier run left."""
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*.json")} if folder.is_dir() else {}


def evaluate(systems: dict[str, Path], out: str | Path, *, testset: str | Path | None = None,
             reference_free: bool = False, progress: bool = True, accelerator: str = "cpu", devices: str = "1",
             strategy: str = "auto", **scorer_kwargs) -> dict:
    """Score every reading of every system and write the report (see the module docstring).

    Returns:
        ``{"index", "comparison", "problems": [{"system", "reading", "reason"}] (readings not scored),
        "without_audio": [{"system", "reading", "reason"}] (scored readings whose audio changed since: their pages
        have no audio), "scoring": {system: summary}}``.

    Raises:
        EvaluateError: a bad system, test set or output folder, or a system with no reading to score.
        EvaluateInterrupted: Ctrl-C (rerun to resume).
        leakloss.batch.BatchError, model load errors, OSError: as :func:`leakloss.batch.score_batch`.
    """
    from leakloss.atomic import atomic_directory, outermost_missing, output_folder_problem, replace_problem
    from leakloss.eval.compare import compare_results, write_comparison
    from leakloss.report import render_report, write_report
    from leakloss.schema import load_result

    if not systems:
        raise EvaluateError("give at least one system as NAME=FOLDER_OR_METADATA")
    out = Path(out)
    if (problem := output_folder_problem(out)) is not None:
        raise EvaluateError(f"--out {problem}")
    if (problem := replace_problem(out / "report", REPORT_FILES)) is not None:  # before hours of scoring, not after
        raise EvaluateError(f"--out: {problem}")
    sets = read_testset(testset) if testset is not None else None
    readings = [read_system(name, Path(path), sets) for name, path in systems.items()]
    problems = [{"system": s.name, **p} for s in readings for p in s.problems]
    empty = [s.name for s in readings if not s.items]
    if empty:
        listed = "; ".join(f"{p['reading']}: {p['reason']}" for p in problems if p["system"] in empty)
        raise EvaluateError(f"system(s) {', '.join(map(repr, empty))}: no reading to score ({listed or 'none listed'})")
    scoring, dirs = {}, {}
    created = outermost_missing(out)  # what this call creates (out, or a missing parent of it)
    # in an --out that exists: the folders this run makes there
    made = [m for m in (outermost_missing(out / "manifests"), outermost_missing(out / "results"),
                        *(outermost_missing(out / "results" / s.name) for s in readings)) if m is not None]
    manifests_before = {m: m.read_text(encoding="utf-8") if m.is_file() else None  # what this run will rewrite
                        for m in (out / "manifests" / f"{s.name}.jsonl" for s in readings)}
    results_before = _result_stamps(out / "results")
    try:
        _score_systems(readings, out, sets, scoring, dirs, accelerator=accelerator, devices=devices,
                       strategy=strategy, progress=progress, reference_free=reference_free, **scorer_kwargs)
    except EvaluateInterrupted:
        raise
    except BaseException:
        # refused before this run scored a reading (bad heads, an unusable accelerator): --out as it was
        if _result_stamps(out / "results") == results_before:
            import shutil

            if created is not None:
                shutil.rmtree(created, ignore_errors=True)
            else:  # an --out that was there keeps what it held, not this run's manifests
                for folder in made:
                    shutil.rmtree(folder, ignore_errors=True)
                for manifest, text in manifests_before.items():
                    if text is None:
                        manifest.unlink(missing_ok=True)
                    elif manifest.is_file() and manifest.read_text(encoding="utf-8") != text:
                        write_text_atomic(manifest, text)
        raise
    # this run's readings only: results/NAME/ also keeps earlier runs' (a reading since removed or not scored)
    comparison = compare_results(dirs, files={s.name: [dirs[s.name] / f"{i['id']}.json" for i in s.items]
                                              for s in readings})
    origin = ("the shipped reference-free head decided every site (no reference compared)" if reference_free
              else "each reading was compared with the embedded teacher's readings of its text, synthesised in two "
                   "voices (no references were given)")
    without_audio: list[dict] = []  # scored readings whose audio changed (or went) since: pages without audio
    with atomic_directory(out / "report", owned=REPORT_FILES) as tmp:
        write_comparison(comparison, tmp / "comparison")
        links = []
        for system in readings:
            for item in system.items:
                result = load_result(dirs[system.name] / f"{item['id']}.json")
                wave, reason = _scored_audio(item["query"], result)
                if reason is not None:  # scored and counted; its page says there is no audio, the index says why
                    without_audio.append({"system": system.name, "reading": item["id"], "reason": reason})
                href = f"reports/{system.name}/{item['id']}.html"
                (tmp / "reports" / system.name).mkdir(parents=True, exist_ok=True)
                write_report(tmp / href, render_report(result, wave, title=f"{system.name} · {item['id']}"))
                links.append({"href": href, "text": f"{system.name} · {item['id']} · {result['status']} · {item['text']}"})
        summary = {"systems": {s.name: str(s.source) for s in readings}, "references": origin,
                   "problems": problems, "without_audio": without_audio, "scoring": scoring}
        write_text_atomic(tmp / "evaluation.json", json.dumps(summary, ensure_ascii=False, indent=1))
        after = [{"kind": "table", "title": "Report pages without audio (scored and counted)",
                  "columns": ["system", "reading", "why"],
                  "rows": [[p["system"], p["reading"], p["reason"]] for p in without_audio]}] if without_audio else []
        write_index(tmp, comparison, links, title="leakloss evaluation", problems=problems, after=after,
                    intro=f"{len(readings)} system(s) scored word by word: {origin}. Counted: key words of scored "
                          "readings (every tested word where a reading has no key word). A flag is a candidate for a "
                          "listener, not a verdict.")
    return {"index": out / "report" / "index.html", "comparison": comparison, "problems": problems,
            "without_audio": without_audio, "scoring": scoring}
