"""Many readings at once: ``score-batch`` as a Lightning predict loop.

Each manifest line is ``{"id": str, "query": path, "text": str, "refs": [path, ...]}`` (paths relative
to the manifest's folder; optional ``system`` and ``sentence_id`` strings are copied to the result).
An item without ``refs`` (or with ``[]``) is scored against the embedded teacher's readings of its text
(:func:`leakloss.speech.references.synthesised_references`, cached by text); with ``reference_free`` no item
has references and the reference-free head decides. Every result says which in ``reference_origin``.
Results go to ``OUT/<id>.json`` in the ``score`` format, written atomically (:mod:`leakloss.atomic`).

Before any work, the whole manifest is checked (every bad line is reported, with its number) and so
are the output folder, the accelerator/devices/strategy and the recognizers and heads. After that,
every item ends in a result: a problem with one item (a missing or truncated file, even an
unexpected error) is a ``failed`` result with its reason, never a crash of the run.

Resuming: an item counts as done only if its result file parses, follows the result format, belongs
to the same id, query, text and references, and is not ``failed``; everything else (missing, empty,
truncated, failed, made with other references) is scored again. Recognizers and heads are loaded
once per process; ``devices``/``strategy`` spread the work over GPUs and nodes (never more processes
than items to score: a shorter run uses fewer devices).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import unicodedata
from collections import Counter
from pathlib import Path
from typing import Sequence

import lightning as L
from torch.utils.data import Dataset

from leakloss.atomic import in_the_way, is_utf8, output_folder_problem, path_problem, write_text_atomic
from leakloss.schema import STATUSES, ResultError, load_result, reference_origin
from leakloss.textfile import parse_json, text_lines

#: Longest id in UTF-8 bytes: ``.<id>.json.<random>.tmp`` (the atomic write) must stay under the
#: usual 255-byte file-name limit.
MAX_ID_BYTES = 200
_MAX_LISTED = 20  # manifest problems listed in one error message
#: Most devices one ``--devices`` may name (a count or an index): more than any machine has, small enough
#: that Lightning never overflows on it.
MAX_DEVICES = 1024


class BatchError(ValueError):
    """A score-batch run that cannot start; the message says what to fix."""


class BatchManifestError(BatchError):
    """A manifest that cannot be read or has bad lines (all of them listed, with line numbers)."""


class BatchConfigError(BatchError):
    """A bad output folder, accelerator, devices or strategy."""


# --- the manifest ------------------------------------------------------------------------------

def _unicode_problem(value: str) -> str | None:
    return None if is_utf8(value) else "is not valid Unicode (a lone surrogate)"


def _path_problem(value: object, what: str) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return f"{what} must be a non-empty path string, got {value!r}"
    if "\x00" in value:
        return f"{what} contains a NUL character"
    bad = _unicode_problem(value)
    return f"{what} {bad}" if bad else None


def _id_problem(value: str) -> str | None:
    bad = _unicode_problem(value)
    if bad:
        return f"id {value!r} {bad}"
    if any(unicodedata.category(c) == "Cc" for c in value):
        return f"id {value!r} contains a control character; ids become file names"
    # bidi controls reorder the file name and the terminal line ('x\u202enosj.exe'); ZWNJ/ZWJ belong to Devanagari
    if any(unicodedata.category(c) == "Cf" and c not in "\u200c\u200d" for c in value):
        return f"id {value!r} contains an invisible format character (bidi control, zero-width space); ids become file names"
    if not value.strip() or "/" in value or "\\" in value or value.startswith("."):
        return f"id {value!r} must be a plain file name (no '/', '\\', not starting with '.')"
    n = len(value.encode("utf-8"))
    if n > MAX_ID_BYTES:
        return f"id is too long ({n} bytes in UTF-8, at most {MAX_ID_BYTES}): ids become file names"
    return None


@functools.cache
def _site_finder():
    from leakloss.text.sites import SiteFinder

    return SiteFinder()  # loads the frontend: once per process, not per line


def _text_problem(text: str) -> str | None:
    """Why the scorer would fail on ``text`` whatever the audio (the check ``score`` makes on --text): a
    rerun cannot fix it, so it is a manifest error, not a failed item."""
    from leakloss.text.normalize import TextError

    if not text.strip():
        return "field 'text' is empty"
    if bad := _unicode_problem(text):
        return f"field 'text' {bad}"
    try:
        words = _site_finder()(text)
    except (TextError, ValueError) as err:
        return f"field 'text' cannot be read: {err}"
    if not any(w.skipped is None for w in words):
        from leakloss.text.sites import no_word_reason

        return f"field 'text' has {no_word_reason(words)}: {text!r:.60}"
    return None


#: the fields of one score-batch manifest line (the last two are optional labels copied into the result)
MANIFEST_FIELDS = ("id", "query", "text", "refs", "system", "sentence_id")


def _line_problems(d: object) -> list[str]:
    if not isinstance(d, dict):
        return [f"must be a JSON object {{\"id\", \"query\", \"text\", \"refs\"}}, got a {type(d).__name__}"]
    problems = []
    for key, typ, name in (("id", str, "a string"), ("query", str, "a string"), ("text", str, "a string"),
                           ("refs", list, "a list of paths")):
        if key == "refs" and key not in d:  # no references: the embedded teacher's are synthesised
            continue
        if key not in d:
            problems.append(f"missing field {key!r}")
        elif not isinstance(d[key], typ):
            problems.append(f"field {key!r} must be {name}, got {d[key]!r:.60}")
    for key in ("system", "sentence_id"):
        if key in d and not isinstance(d[key], str):
            problems.append(f"field {key!r} must be a string when given, got {d[key]!r:.60}")
        elif key in d and (bad := _unicode_problem(d[key])):  # copied into the result: its write failed the run
            problems.append(f"field {key!r} {bad}")
    unknown = sorted(set(d) - set(MANIFEST_FIELDS))
    if unknown:  # a misspelt "sytem" or "sentence-id" vanished from every result
        problems.append(f"unknown field(s) {', '.join(map(repr, unknown))} (known: {', '.join(MANIFEST_FIELDS)})")
    if any(not p.startswith("unknown field") for p in problems):  # the values below need the right types
        return problems
    problems += [p for p in (_id_problem(d["id"]), _path_problem(d["query"], "query"), _text_problem(d["text"])) if p]
    problems += [p for i, r in enumerate(d.get("refs", [])) if (p := _path_problem(r, f"refs[{i}]"))]
    return problems


def read_batch_manifest(path: str | Path) -> list[dict]:
    """Read and check a whole JSONL manifest; paths come back resolved against its folder.

    Raises:
        BatchManifestError: unreadable file, no items, or bad lines: every bad line is listed with its
            number (not JSON, not an object, a missing or mistyped field, an id that is not a safe
            file name, a duplicate id, a path with a NUL, a text with no Devanagari word to score...).
    """
    path = Path(path)
    if (problem := path_problem(path, utf8=False)) is not None:
        raise BatchManifestError(f"manifest {problem}")
    try:
        lines = text_lines(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError) as err:
        raise BatchManifestError(f"cannot read manifest {path}: {err}") from err
    items, problems, first_line, first_query = [], [], {}, {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = parse_json(line)
        except json.JSONDecodeError as err:
            problems.append((n, f"not valid JSON ({err.msg} at column {err.colno})"))
            continue
        bad = _line_problems(d)
        if not bad and d["id"] in first_line:
            bad = [f"duplicate id {d['id']!r} (first on line {first_line[d['id']]})"]
        if bad:
            problems += [(n, p) for p in bad]
            continue
        first_line[d["id"]] = n
        # resolved: results (and resuming) depend neither on the run's cwd nor on how the manifest's path is spelt
        base = path.absolute().parent.resolve()  # the folder, not a symlinked manifest's target: its paths are
        # relative to where the link lies
        item = d | {"query": str(base / d["query"]), "refs": [str(base / r) for r in d.get("refs", [])]}
        # a folder or file name that is not UTF-8, or too long, stopped the whole run at its first result write; a
        # symlink loop, with a traceback
        named = [("query", item["query"])] + [(f"refs[{i}]", r) for i, r in enumerate(item["refs"])]
        bad = [f"{what} {why}" for what, value in named if (why := path_problem(value)) is not None]
        if bad:
            problems += [(n, b) for b in bad]
            continue
        real = os.path.realpath(item["query"])
        if real in first_query:  # scored twice and counted twice by compare: said, not refused (a test of the scorer
            # may read one file on purpose)
            print(f"warning: manifest line {n}: query {d['query']!r} is the audio of line {first_query[real]} again; "
                  "compare will count it as two readings", file=sys.stderr)
        first_query.setdefault(real, n)
        items.append(item)
    if problems:
        lines_out = [f"  line {n}: {p}" for n, p in problems[:_MAX_LISTED]]
        if len(problems) > _MAX_LISTED:
            lines_out.append(f"  ... and {len(problems) - _MAX_LISTED} more")
        raise BatchManifestError(f"manifest {path}: {len(problems)} problem{'s' if len(problems) > 1 else ''} "
                                 "(nothing was scored):\n" + "\n".join(lines_out))
    if not items:
        raise BatchManifestError(f"manifest {path} has no items (one JSON object per line)")
    return items


# --- the run configuration ------------------------------------------------------------------------

def parse_devices(value: str | int | list[int]) -> int | str | list[int]:
    """``--devices``: a count from 1 to :data:`MAX_DEVICES`, ``-1`` (all), ``auto``, or a comma-separated
    list (or a list) of indices below :data:`MAX_DEVICES`.

    Raises:
        BatchConfigError: anything else.
    """
    text = value.strip() if isinstance(value, str) else None
    if text == "auto":
        return "auto"
    try:
        if isinstance(value, list) or (text is not None and "," in text):
            ids = value if text is None else [int(x) for x in text.split(",")]
            if ids and all(type(i) is int and 0 <= i < MAX_DEVICES for i in ids):  # bool is no index
                return ids
        else:
            n = value if text is None else int(text)
            if type(n) is int and (0 < n <= MAX_DEVICES or n == -1):
                return n
    except ValueError:
        pass
    raise BatchConfigError(f"--devices must be a number from 1 to {MAX_DEVICES}, -1 (all), 'auto' or a comma-separated "
                           f"list of device indices such as 0,1; got {value!r:.60}")


def _check_out_dir(out_dir: Path) -> None:
    if (problem := path_problem(out_dir)) is not None:
        raise BatchConfigError(f"--out {problem}")
    if out_dir.exists() and not out_dir.is_dir():
        raise BatchConfigError(f"--out {out_dir} is a file, not a folder: give a folder for the <id>.json results")
    if (problem := output_folder_problem(out_dir)) is not None:  # a write probe: os.access says yes to root
        raise BatchConfigError(f"--out {problem}")


def _make_trainer(accelerator: str, devices, strategy: str, progress: bool) -> L.Trainer:
    import logging

    # Lightning's "GPU available: ..." / tip lines are info for a training log, noise before a CLI's one line
    loggers = [logging.getLogger(name) for name in ("lightning", "lightning.pytorch", "lightning.fabric")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    try:
        return L.Trainer(accelerator=accelerator, devices=devices, strategy=strategy, logger=False,
                         enable_progress_bar=progress, enable_checkpointing=False, enable_model_summary=False)
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _build_trainer(accelerator: str, devices, strategy: str, progress: bool) -> L.Trainer:
    """The Lightning trainer for the run; a configuration it refuses is a :class:`BatchConfigError`
    naming the option at fault (tried alone: the accelerator, then with the devices, then the strategy)."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    refused = (MisconfigurationException, ValueError, TypeError, RuntimeError, ImportError, OverflowError)
    try:
        return _make_trainer(accelerator, devices, strategy, progress)
    except refused as err:
        error = err
    for what, args in ((f"accelerator {accelerator!r} is not usable on this machine", (accelerator, "auto", "auto")),
                       (f"devices {devices!r} are not usable with accelerator {accelerator!r}",
                        (accelerator, devices, "auto"))):
        try:
            _make_trainer(*args, progress=False)
        except refused as err:
            raise BatchConfigError(f"{what}: {err}") from err
    raise BatchConfigError(f"strategy {strategy!r} is not usable with accelerator {accelerator!r} and devices "
                           f"{devices!r}: {error}") from error


# --- results -------------------------------------------------------------------------------------

def _check_results_spare_inputs(manifest: str | Path, items: list[dict], out_dir: Path) -> None:
    """No ``out_dir/<id>.json`` may be the manifest or an item's audio (writing it would destroy an input), nor a
    folder, device or pipe (the run would stop at that item)."""
    inputs = {Path(manifest).resolve(): "the manifest"}
    for d in items:
        for key, path in [("query", d["query"]), *(("refs", r) for r in d["refs"])]:
            inputs.setdefault(Path(path).resolve(), f"item {d['id']!r}'s {key}")
    blocked = []
    folder = out_dir.resolve()
    for d in items:
        # the result's own name is not resolved: a symlink there is replaced, its target never written
        result = folder / f"{d['id']}.json"
        if result in inputs:
            raise BatchManifestError(f"item {d['id']!r}: its result {result} is {inputs[result]}: writing it would "
                                     "destroy it (choose another --out or id)")
        if (what := in_the_way(result)) is not None:  # a folder or pipe there stopped the run mid-way
            blocked.append(f"{d['id']!r} ({result} is a {what})")
    if blocked:
        raise BatchManifestError(f"{len(blocked)} item(s) cannot write their result: {', '.join(blocked[:5])}"
                                 + (" ..." if len(blocked) > 5 else "") + "; remove it or choose another --out")


def file_sha1(path: str | Path) -> str | None:
    """The SHA-1 of a file's bytes, or None when it cannot be read."""
    import hashlib

    digest = hashlib.sha1()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def input_digests(item: dict) -> dict:
    """``{"query": sha1, "refs": [sha1, ...]}`` of an item's audio files: a result records what it scored, so
    a resumed run re-scores a file replaced at the same path (the next TTS checkpoint's readings)."""
    return {"query": file_sha1(item["query"]), "refs": [file_sha1(r) for r in item["refs"]]}


def result_is_done(path: str | Path, item: dict, scorer: str | None = None) -> bool:
    """True if ``path`` holds a finished result for ``item``: it parses, follows the result format,
    has the item's id, query, text and references, its audio files still hold the bytes it scored
    (``input_sha1``; a result without it is not done), and its status is not ``failed`` (failures are retried).
    ``scorer``: a :attr:`leakloss.scorer.Scorer.fingerprint`; a result another scorer made (other heads,
    recognizers, thresholds or frontend, or none recorded) is not done."""
    try:
        result = load_result(path)
    except ResultError:
        return False
    if (result.get("status") == "failed" or result.get("id") != item["id"] or result.get("query") != item["query"]
            or result.get("text") != item["text"]):
        return False
    if scorer is not None and result.get("scorer") != scorer:
        return False
    if any(result.get(k) != item.get(k) for k in ("system", "sentence_id")):
        return False  # relabelled in the manifest: the old labels stayed and fed compare's clusters
    recorded = result.get("input_sha1")
    if not isinstance(recorded, dict):
        return False
    now = input_digests(item)
    if recorded.get("query") != now["query"]:
        return False
    # every reference given is in reference_checks, in order; a quarantined query never reaches its
    # references (its result does not depend on them), so other references would not change it
    if result["status"] == "quarantined":
        return True
    if reference_origin(result) != item.get("reference_origin", {"origin": "given"})["origin"]:
        return False  # e.g. scored against synthesised references, now given the same paths as the user's
    checked = [c["reference"] for c in result.get("reference_checks", [])]
    return checked == item["refs"] and recorded.get("refs") == now["refs"]


def _failed_result(item: dict, reason: str, missing: Sequence[str] = ()) -> dict:
    """A ``failed`` result that still names every reference it was given (as the scorer's own failed results
    do): each missing one as missing, the others as not checked."""
    checks = [{"reference": ref, "used": False,
               "reason": "does not exist or is not a file" if ref in missing
               else "not checked: the reading could not be scored"} for ref in item["refs"]]
    return {"query": item["query"], "text": item["text"], "status": "failed", "reason": reason, "words": [],
            "references": [], "reference_checks": checks}


def _missing_reason(missing: Sequence[str]) -> str:
    if len(missing) == 1:
        return f"reference {missing[0]} does not exist or is not a file"
    return f"{len(missing)} references do not exist or are not files: {', '.join(missing)}"


class BatchInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) during :func:`score_batch`. ``summary`` is its summary over the items finished before
    it, plus ``not_scored``: the items left (their results were never started or are not written; a rerun of
    the same command scores them). The results written are kept."""

    def __init__(self, summary: dict) -> None:
        super().__init__(f"interrupted: {summary['not_scored']} of {summary['processed']} items not scored")
        self.summary = summary


class _Items(Dataset):
    def __init__(self, items: list[dict]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict:
        return self.items[i]


class ScoringModule(L.LightningModule):
    """Wraps a :class:`leakloss.scorer.Scorer`; ``predict_step`` scores one reading and writes it.

    ``scorer``: an already loaded scorer to use on the CPU (score_batch loads one to check the models
    before the run); other devices load their own in :meth:`setup`.
    """

    def __init__(self, scorer_kwargs: dict, out_dir: str | Path, scorer=None) -> None:
        super().__init__()
        self.scorer_kwargs, self.out_dir, self.scorer = scorer_kwargs, Path(out_dir), scorer

    def setup(self, stage: str) -> None:
        from leakloss.scorer import Scorer

        if self.scorer is None or self.device.type != "cpu":
            self.scorer = Scorer(**self.scorer_kwargs, device=str(self.device))

    def predict_step(self, batch: list[dict], batch_idx: int) -> list[tuple[str, str]]:
        done = []
        for item in batch:
            # a reference not there yet fails the item, so the next run retries it (as a missing query): scored
            # without it, the result counted as done and the reference was never used
            missing = [ref for ref in item["refs"] if not Path(ref).is_file()]
            # the bytes about to be scored, read first: a file replaced while it is scored keeps the old digest,
            # so the next run scores it again (read after, the new file's digest marked the old result done)
            digests = input_digests(item)
            free = item.get("reference_origin", {}).get("origin") == "reference_free"
            try:
                result = (_failed_result(item, _missing_reason(missing), missing) if missing
                          else self.scorer.score_reference_free(item["query"], item["text"]) if free
                          else self.scorer.score(item["query"], item["text"], item["refs"]))
            except Exception as err:  # noqa: BLE001 - one bad item must not end the run; it is recorded
                result = _failed_result(item, f"unexpected error while scoring: {type(err).__name__}: {err}")
            result["id"] = item["id"]
            if "reference_origin" in item:
                result["reference_origin"] = item["reference_origin"]
            result["input_sha1"] = digests
            for key in ("system", "sentence_id"):
                if key in item:
                    result[key] = item[key]
            write_text_atomic(self.out_dir / f"{item['id']}.json", json.dumps(result, ensure_ascii=False, indent=1))
            done.append((item["id"], result["status"]))
        return done


def attach_references(items: list[dict], reference_free_detail: str | None = None) -> list[dict]:
    """Each item with its ``reference_origin``; an item without references gets the embedded teacher's
    synthesised readings of its text (cached: a text read by several systems is synthesised once).

    Raises:
        BatchConfigError: ``reference_free`` with an item that gives references (they would be ignored),
            or references that cannot be synthesised (the cache folder cannot be written).
    """
    from leakloss.audio import AudioError
    from leakloss.speech.references import ReferenceSynthesisError, given_origin, synthesised_origin, synthesised_references

    out = []
    for item in items:
        if reference_free_detail is not None:
            if item["refs"]:
                raise BatchConfigError(f"item {item['id']!r} gives references, but the run is reference-free: "
                                       "drop its refs or score with references")
            out.append(item | {"reference_origin": {"origin": "reference_free", "detail": reference_free_detail}})
        elif item["refs"]:
            out.append(item | {"reference_origin": given_origin()})
        else:
            try:
                refs = [str(p) for p in synthesised_references(item["text"])]
            except (ReferenceSynthesisError, AudioError, OSError) as err:
                raise BatchConfigError(f"item {item['id']!r}: no refs given and they cannot be synthesised: {err}") from err
            out.append(item | {"refs": refs, "reference_origin": synthesised_origin()})
    return out


def score_batch(manifest: str | Path, out_dir: str | Path, *, accelerator: str = "cpu", devices: int | str = 1,
                strategy: str = "auto", progress: bool = True, reference_free: bool = False, **scorer_kwargs) -> dict:
    """Score every item of ``manifest`` not already done into ``out_dir/<id>.json``.

    Items without ``refs`` are scored against synthesised teacher references (:func:`attach_references`);
    ``reference_free``: no item may give references, the reference-free head decides every site.

    Returns:
        ``{"total", "skipped_existing", "processed", "scored", "quarantined", "unscored", "failed",
        "failures": [{"id", "reason"}]}``: the status counts are over the items processed in this run.

    Raises:
        BatchManifestError: a bad manifest (nothing is written).
        BatchConfigError: a bad output folder, accelerator, devices or strategy (nothing is written).
        BatchInterrupted: Ctrl-C; its ``summary`` counts what was finished (the results written are kept).
        leakloss.acoustic.recognizer.RecognizerLoadError, leakloss.heads.HeadLoadError: unusable models.
        OSError: a result cannot be written (disk full...); results already written are kept.
    """
    items = read_batch_manifest(manifest)
    out_dir = Path(out_dir)
    _check_out_dir(out_dir)
    _check_results_spare_inputs(manifest, items, out_dir)
    devices = parse_devices(devices)
    trainer = _build_trainer(accelerator, devices, strategy, progress)
    from lightning.pytorch.accelerators import CPUAccelerator

    cpus = os.cpu_count() or 1
    if isinstance(trainer.accelerator, CPUAccelerator) and trainer.num_devices > cpus:
        raise BatchConfigError(f"--devices {devices}: {trainer.num_devices} processes on the CPU, but this machine has "
                               f"{cpus} CPU{'s' if cpus > 1 else ''}; give at most {cpus}")
    from leakloss.scorer import Scorer

    # load (and so check) the models once here, before any result is written: their fingerprint decides which
    # results are done. A single CPU process scores with this scorer, any other setup loads its own per process
    # (nothing big is pickled).
    scorer = Scorer(**scorer_kwargs, device="cpu")
    fingerprint, detail = scorer.fingerprint, None
    if reference_free:
        scorer.load_reference_free()  # loaded (and so checked) here; its fingerprint decides what is done
        fingerprint, detail = scorer.reference_free_fingerprint, scorer.reference_free_detail
    items = attach_references(items, detail)
    out_dir.mkdir(parents=True, exist_ok=True)
    todo = [d for d in items if not result_is_done(out_dir / f"{d['id']}.json", d, fingerprint)]
    summary = {"total": len(items), "skipped_existing": len(items) - len(todo), "processed": len(todo),
               **{s: 0 for s in STATUSES}, "failures": []}
    if not todo:
        return summary
    if trainer.num_devices > len(todo):
        # a process with no item to score breaks Lightning's distributed sampler: start one per item
        if trainer.is_global_zero:
            print(f"note: {len(todo)} item{'s' if len(todo) > 1 else ''} to score: using {len(todo)} of the "
                  f"{trainer.num_devices} devices", file=sys.stderr)
        trainer = _build_trainer(accelerator, devices[:len(todo)] if isinstance(devices, list) else len(todo),
                                 strategy, progress)
    from lightning.pytorch.strategies import SingleDeviceStrategy
    from torch.utils.data import DataLoader

    single_cpu = isinstance(trainer.strategy, SingleDeviceStrategy) and trainer.strategy.root_device.type == "cpu"
    module = ScoringModule(scorer_kwargs, out_dir, scorer=scorer if single_cpu else None)
    loader = DataLoader(_Items(todo), batch_size=1, collate_fn=list)
    import signal
    import threading

    previous = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None
    before = {d["id"]: _stamp(out_dir / f"{d['id']}.json") for d in todo}  # what this run has not written
    try:
        trainer.predict(module, loader, return_predictions=False)
    except SystemExit:
        if not trainer.interrupted:
            raise
        # Lightning turns Ctrl-C into sys.exit(1): a bare exit status, no word of what was done
        summary = _count_results(todo, out_dir, summary, interrupted=True, before=before)
        raise BatchInterrupted(summary) from None
    finally:
        if previous is not None:  # Lightning leaves SIGINT ignored after an interrupt
            signal.signal(signal.SIGINT, previous)
    return _count_results(todo, out_dir, summary, interrupted=False)


def _stamp(path: Path) -> tuple[int, int] | None:
    """``(mtime_ns, inode)`` of ``path``, None when absent: a result written since has another (an atomic write
    replaces the file)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_ino


def _count_results(todo: list[dict], out_dir: Path, summary: dict, *, interrupted: bool,
                   before: dict[str, tuple[int, int] | None] | None = None) -> dict:
    """``summary`` with the status counts of ``todo``'s results, read from the files (so items scored by other
    processes -- devices, nodes -- count too). ``interrupted``: an item without a result file written in this run
    (its file absent, or as ``before`` found it: an earlier run's failure or stale result) is not scored yet
    (counted in ``not_scored``), not failed."""
    counts: Counter[str] = Counter()
    not_scored = 0
    for d in todo:
        path = out_dir / f"{d['id']}.json"
        if interrupted and (not path.exists() or (before is not None and _stamp(path) == before.get(d["id"]))):
            not_scored += 1
            continue
        try:
            result = load_result(path)
        except ResultError as err:
            result = {"status": "failed", "reason": f"no valid result was written: {err}"}
        counts[result["status"]] += 1
        if result["status"] == "failed":
            summary["failures"].append({"id": d["id"], "reason": result.get("reason") or "no reason given"})
    summary.update({s: counts[s] for s in counts})
    if interrupted:
        summary["not_scored"] = not_scored
    return summary
