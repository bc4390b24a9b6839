"""Measure the scorer against blind listeners: precision, recall, false alarms, agreement.

Input is a CSV with one row per listener judgement of one word in one reading::

    word,reading,listener,label[,mos]
    नेकपा,swar_v1_s03,L01,rejected,3

* ``label``: ``accepted`` (sounds Nepali) or ``rejected`` (the listener hears a Hindi leak).
* ``reading``: the stem of the scorer's result file (``swar_v1_s03`` -> ``swar_v1_s03.json``).
* ``word``: the word as written in the result; when it occurs twice in a reading, give its
  index instead as ``#3``.
* ``mos`` (optional): the listener's 1-5 opinion score of the whole reading, repeated on
  each of that reading's rows (blank cells are allowed).

Truth is the listener's label (``rejected`` = positive), one unit per judgement, and the
scorer's prediction is ``decision == "flagged"``. Uncertain words count as not flagged and
are also reported on their own, with how often listeners rejected them. Words the scorer
did not judge (``unscored``/``not_tested``) and every word of a reading that is not ``scored``
(``quarantined``, ``unscored`` or ``failed``) make no claim, so they are left out of precision
and recall and only counted, by the reading's status and with its reason. A failed reading may
hold no words at all: a label on it is kept by the word as written in the CSV. Intervals are
95 % cluster bootstrap over listeners with 2,000 resamples, as in NepTTS-Bench (seed 001).
"""

from __future__ import annotations

import csv
import json
import math
import re
import unicodedata
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

from leakloss.atomic import created_folder, write_files_atomic
from leakloss.eval.compare import OutputFolderError, check_output_folder, markdown_text
from leakloss.eval.stats import (
    Interval,
    detection_rates,
    detection_rates_bootstrap,
    format_count,
    krippendorff_alpha_nominal,
    spearman_rho,
    wilson_interval,
)
from leakloss.schema import STATUSES, TESTED, load_result

__all__ = ["REQUIRED_COLUMNS", "LABELS", "ListenerDataError", "listener_agreement", "write_listener_report"]

REQUIRED_COLUMNS = ("word", "reading", "listener", "label")
LABELS = ("accepted", "rejected")
MOS_RANGE = (1.0, 5.0)
N_RESAMPLES = 2000
SEED = 0
#: Reading statuses whose words make no claim: labels on them are left out and counted.
LEFT_OUT = tuple(st for st in STATUSES if st != "scored")


class ListenerDataError(ValueError):
    """A labels file that cannot be used; the message names the file, line and problem."""


def _norm(text: str) -> str:
    # Spreadsheets and keyboards disagree on Unicode forms of the same Devanagari.
    return unicodedata.normalize("NFC", text.strip())


def _read_rows(path: Path) -> tuple[list[dict], bool]:
    """Rows of the labels CSV as dicts with a ``line`` number; whether a mos column exists."""
    if not path.is_file():
        raise ListenerDataError(f"labels file '{path}' does not exist or is not a file")
    try:
        # utf-8-sig: spreadsheet exports often start with a byte-order mark.
        with path.open(encoding="utf-8-sig", newline="") as fh:
            reader = csv.DictReader(fh)
            if not reader.fieldnames:
                raise ListenerDataError(f"labels file '{path}' is empty; expected a header {','.join(REQUIRED_COLUMNS)}")
            # Header names are matched case- and space-insensitively ("Label ", "MOS").
            header = [(_norm(h).lower() if h else "") for h in reader.fieldnames]
            twice = sorted({h for h in header if h and header.count(h) > 1})
            if twice:  # DictReader keeps the last one silently: a swapped label column flipped the result
                raise ListenerDataError(f"labels file '{path}': column(s) {', '.join(twice)} appear more than once "
                                        "in the header")
            missing = [c for c in REQUIRED_COLUMNS if c not in header]
            if missing:
                raise ListenerDataError(
                    f"labels file '{path}' lacks column(s) {', '.join(missing)}; "
                    f"found {', '.join(header) or 'none'}, need {','.join(REQUIRED_COLUMNS)}[,mos]"
                )
            reader.fieldnames = header
            rows = []
            for row in reader:
                if None in row:  # DictReader's rest key: fields beyond the header would vanish
                    raise ListenerDataError(f"labels file '{path}' line {reader.line_num}: "
                                            f"{len(header) + len(row[None])} fields, the header has {len(header)}")
                rows.append({**row, "line": reader.line_num})
    except UnicodeDecodeError as exc:
        raise ListenerDataError(f"labels file '{path}' is not UTF-8 text: {exc}") from exc
    except csv.Error as exc:  # e.g. a field over the csv module's size limit, a NUL byte
        raise ListenerDataError(f"labels file '{path}' line {reader.line_num}: not readable CSV ({exc})") from exc
    if not rows:
        raise ListenerDataError(f"labels file '{path}' has a header but no labels")
    return rows, "mos" in header


def _parse_row(row: Mapping, path: Path, has_mos: bool) -> dict:
    where = f"labels file '{path}', line {row['line']}"
    out = {}
    for col in REQUIRED_COLUMNS:
        value = row.get(col)
        if value is None or not _norm(value):
            raise ListenerDataError(f"{where}: '{col}' is empty")
        out[col] = _norm(value)
    reading = out["reading"]
    if "/" in reading or "\\" in reading or reading in (".", ".."):  # a name in the results folder, not a path
        raise ListenerDataError(f"{where}: reading must be a result name (<reading>.json in the results folder), "
                                f"not a path: {reading!r}")
    out["label"] = out["label"].lower()
    if out["label"] not in LABELS:
        raise ListenerDataError(f"{where}: label must be accepted or rejected, got {out['label']!r}")
    out["mos"] = None
    if has_mos and row.get("mos") and row["mos"].strip():
        try:
            mos = float(row["mos"])
        except ValueError:
            raise ListenerDataError(f"{where}: mos must be a number, got {row['mos']!r}") from None
        if not (math.isfinite(mos) and MOS_RANGE[0] <= mos <= MOS_RANGE[1]):
            raise ListenerDataError(f"{where}: mos must be between {MOS_RANGE[0]:g} and {MOS_RANGE[1]:g}, got {mos}")
        out["mos"] = mos
    out["where"] = where
    return out


def _find_word(result: Mapping, word: str, where: str) -> Mapping:
    """The result word a label refers to: by text, or by index written ``#3``."""
    words = result["words"]
    if re.fullmatch(r"#[0-9]+", word):  # ASCII digits: str.isdigit() also takes '²', which int() refuses
        hits = [w for w in words if w["index"] == int(word[1:])]
        if not hits:
            raise ListenerDataError(f"{where}: reading has no word with index {word[1:]}")
        return hits[0]
    hits = [w for w in words if _norm(w["word"]) == word]
    if not hits:
        known = " ".join(w["word"] for w in words)
        raise ListenerDataError(f"{where}: word {word!r} is not in the reading (words: {known})")
    if len(hits) > 1:
        idx = ", ".join(f"#{w['index']}" for w in hits)
        raise ListenerDataError(f"{where}: word {word!r} occurs {len(hits)} times in the reading; label it by index ({idx})")
    return hits[0]


def _iv(iv: Interval | None) -> dict | None:
    if iv is None:
        return None
    return {"estimate": iv.estimate, "low": iv.low, "high": iv.high, "n_undefined": iv.n_undefined}


def _share(k: int, n: int) -> dict:
    """A listener-rejected share with a Wilson interval (None when there is nothing to count)."""
    w = wilson_interval(k, n) if n else None
    return {"rejected": k, "total": n, "text": format_count(k, n), "wilson": _iv(w)}


def listener_agreement(labels_csv: Path, results_dir: Path) -> dict:
    """Compare listener labels with the scorer's word decisions.

    Args:
        labels_csv: CSV with columns ``word,reading,listener,label`` and optionally ``mos``
            (see the module docstring).
        results_dir: folder holding ``<reading>.json`` for every reading in the CSV.

    Returns:
        JSON-ready dict: ``n_labels``, ``n_listeners``, ``n_readings``; ``detection``
        (``tp``/``fp``/``fn``/``tn``/``n`` and ``precision``, ``recall``, ``false_alarm_rate``
        each ``{"estimate", "low", "high", "n_undefined"}`` or ``None`` when undefined);
        ``uncertain`` and ``not_judged`` (listener-rejected shares with Wilson intervals);
        ``left_out_labels`` (status -> labels on readings of that status, left out of every
        rate: ``quarantined``, ``unscored``, ``failed``) with ``left_out_reasons`` (status ->
        reason -> labels) and ``left_out_readings`` (status -> readings); ``quarantined_labels`` (the quarantined count); ``alpha``
        (nominal Krippendorff over listeners, or ``None`` with ``alpha_note``); ``mos``
        (``None`` without a mos column, else ``{"rho", "n_readings", "note"}`` for per-reading
        flag share vs mean MOS).

    Raises:
        ListenerDataError: missing file or columns, an empty label cell, an unknown label,
            a bad mos, a reading without a result file, a word not in its reading (but for a
            failed reading, which may hold none), an ambiguous word, or the same listener
            labelling one word twice.
        ResultError: a result file that does not follow the format.
    """
    path, folder = Path(labels_csv), Path(results_dir)
    if not folder.is_dir():
        raise ListenerDataError(f"results folder '{folder}' does not exist or is not a folder")
    raw, has_mos = _read_rows(path)
    rows = [_parse_row(r, path, has_mos) for r in raw]

    readings = sorted({r["reading"] for r in rows})
    # by the normalised name on both sides: NFC rewrites some letters (क़ U+0958 -> क + nukta), so the file
    # a result was written under need not be the name as the CSV spells it
    files: dict[str, Path] = {}
    for p in sorted(folder.glob("*.json")):
        if p.is_file():
            if _norm(p.stem) in files:  # one would silently stand for the other and take its labels
                raise ListenerDataError(f"'{files[_norm(p.stem)].name}' and '{p.name}' in '{folder}' are the same "
                                        "reading name in another Unicode form: rename one")
            files[_norm(p.stem)] = p
    missing = [name for name in readings if name not in files]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ListenerDataError(f"no result in '{folder}' for reading(s) {shown} (expected <reading>.json)")
    results = {name: load_result(files[name]) for name in readings}

    seen: dict[tuple, str] = {}
    units = []
    for r in rows:
        res = results[r["reading"]]
        if res["status"] == "failed":
            # A failed reading (unreadable audio or text) may hold no words: the label is left
            # out anyway, so it is kept by its word as written when it cannot be resolved.
            try:
                found = _find_word(res, r["word"], r["where"])
                index, decision = found["index"], found["decision"]
            except ListenerDataError:
                index, decision = r["word"], None
        else:
            found = _find_word(res, r["word"], r["where"])
            index, decision = found["index"], found["decision"]
        key = (r["reading"], index, r["listener"])
        if key in seen:
            raise ListenerDataError(f"{r['where']}: listener {r['listener']} already labelled this word ({seen[key]})")
        seen[key] = r["where"]
        units.append({**r, "index": index, "decision": decision, "status": res["status"],
                      "reason": res.get("reason")})

    # Agreement between listeners needs no scorer: every labelled word is a unit.
    ratings: dict[tuple, dict[str, str]] = defaultdict(dict)
    for u in units:
        ratings[(u["reading"], u["index"])][u["listener"]] = u["label"]
    try:
        alpha, alpha_note = krippendorff_alpha_nominal(ratings), None
    except ValueError as exc:
        alpha, alpha_note = None, str(exc)

    scored = [u for u in units if u["status"] == "scored"]
    judged = [u for u in scored if u["decision"] in TESTED]  # any row order: the bootstrap sorts its clusters
    detection: dict = {"n": 0, "note": "no labelled word was judged by the scorer"}
    if judged:
        pred = [u["decision"] == "flagged" for u in judged]
        truth = [u["label"] == "rejected" for u in judged]
        point = detection_rates(pred, truth)
        boot = detection_rates_bootstrap(pred, truth, [u["listener"] for u in judged],
                                         n_resamples=N_RESAMPLES, seed=SEED)
        detection = {k: point[k] for k in ("tp", "fp", "fn", "tn", "n")}
        detection.update({k: _iv(v) for k, v in boot.items()})
        detection["listeners"] = len({u["listener"] for u in judged})  # the bootstrap's clusters
        detection["note"] = None if detection["listeners"] > 1 else "one listener: no bootstrap interval"

    uncertain = [u for u in judged if u["decision"] == "uncertain"]
    not_judged = [u for u in scored if u["decision"] not in TESTED]
    left_out = {st: [u for u in units if u["status"] == st] for st in LEFT_OUT}
    left_out_reasons = {}
    for st, us in left_out.items():
        counts: dict[str, int] = defaultdict(int)
        for u in us:
            counts[u["reason"] or "no reason given"] += 1
        left_out_reasons[st] = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return {
        "labels_csv": str(path),
        "results_dir": str(folder),
        "n_labels": len(units),
        "n_listeners": len({u["listener"] for u in units}),
        "n_readings": len(readings),
        "n_resamples": N_RESAMPLES,
        "seed": SEED,
        "detection": detection,
        "uncertain": _share(sum(u["label"] == "rejected" for u in uncertain), len(uncertain)),
        "not_judged": _share(sum(u["label"] == "rejected" for u in not_judged), len(not_judged)),
        "quarantined_labels": len(left_out["quarantined"]),
        "left_out_labels": {st: len(us) for st, us in left_out.items()},
        "left_out_reasons": left_out_reasons,
        # status -> the readings whose labels were left out with it (their reasons are grouped above)
        "left_out_readings": {st: sorted({u["reading"] for u in us}) for st, us in left_out.items()},
        "alpha": alpha,
        "alpha_note": alpha_note,
        "mos": _mos_agreement(units, results) if has_mos else None,
    }


def _mos_agreement(units: list[dict], results: Mapping[str, Mapping]) -> dict:
    """Spearman rho between a reading's flagged share of judged words and its mean MOS."""
    per_listener: dict[tuple[str, str], float] = {}
    for u in units:
        if u["mos"] is None:
            continue
        key = (u["reading"], u["listener"])
        # One opinion per listener per reading, however many word rows repeat it.
        if key in per_listener and per_listener[key] != u["mos"]:
            raise ListenerDataError(
                f"{u['where']}: listener {u['listener']} gives reading {u['reading']} mos {u['mos']:g} "
                f"here but {per_listener[key]:g} on another row"
            )
        per_listener[key] = u["mos"]
    by_reading: dict[str, list[float]] = defaultdict(list)
    for (reading, _), mos in per_listener.items():
        by_reading[reading].append(mos)

    shares, means, used = [], [], []
    for reading, scores in sorted(by_reading.items()):
        res = results[reading]
        judged = [w for w in res["words"] if w["decision"] in TESTED]
        if res["status"] != "scored" or not judged:
            continue  # no claim from the scorer, nothing to correlate
        shares.append(sum(w["decision"] == "flagged" for w in judged) / len(judged))
        means.append(sum(scores) / len(scores))
        used.append(reading)
    out = {"rho": None, "n_readings": len(used), "readings": used, "note": None}
    try:
        out["rho"] = spearman_rho(shares, means)
    except ValueError as exc:
        out["note"] = str(exc)
    return out


def _fmt_iv(iv: Mapping | None, k: int, n: int, n_listeners: int) -> str:
    """The estimate with its bootstrap interval; ``k``/``n`` when there is no interval (one listener)."""
    if iv is not None:
        return f"{iv['estimate']:.3f} [{iv['low']:.3f}–{iv['high']:.3f}]"
    if not n:
        return "undefined"
    return f"{k / n:.3f} [no interval: {n_listeners} listener]" if n_listeners < 2 else "undefined"


def _markdown(result: Mapping) -> str:
    d = result["detection"]
    nl = d.get("listeners", result["n_listeners"])
    lines = [
        "# Scorer against listeners",
        "",
        f"{result['n_labels']} labels from {result['n_listeners']} listeners on {result['n_readings']} readings. "
        "A word is positive when the listener rejected it (heard a Hindi leak) and predicted "
        "positive when the scorer flagged it. 95 % cluster bootstrap over listeners "
        f"({result['n_resamples']:,} resamples).",
        "",
    ]
    if d["n"]:
        lines += [
            "| Measure | Estimate [95% interval] | Counts |",
            "|---|---|---|",
            f"| Precision | {_fmt_iv(d['precision'], d['tp'], d['tp'] + d['fp'], nl)} | {d['tp']} of {d['tp'] + d['fp']} flags rejected by the listener |",
            f"| Recall | {_fmt_iv(d['recall'], d['tp'], d['tp'] + d['fn'], nl)} | {d['tp']} of {d['tp'] + d['fn']} rejected words flagged |",
            f"| False-alarm rate | {_fmt_iv(d['false_alarm_rate'], d['fp'], d['fp'] + d['tn'], nl)} | {d['fp']} of {d['fp'] + d['tn']} accepted words flagged |",
            "",
        ]
    else:
        lines += [f"Precision and recall: {d['note']}.", ""]
    u, nj = result["uncertain"], result["not_judged"]
    lines.append(f"- Uncertain words (counted as not flagged above): listeners rejected {u['text']}.")
    lines.append(f"- Words the scorer did not judge (unscored or not tested): listeners rejected {nj['text']}.")
    left = result.get("left_out_labels") or {"quarantined": result["quarantined_labels"]}
    reasons = result.get("left_out_reasons") or {}
    if not any(left.values()):
        lines.append("- Labels on readings the scorer did not score (quarantined, unscored or failed), left out: 0.")
    for status, n in left.items():
        if n:
            why = reasons.get(status) or {}
            because = f" ({'; '.join(f'{markdown_text(k)}: {v}' for k, v in why.items())})" if why else ""
            lines.append(f"- Labels on {status} readings, left out: {n}{because}.")
            named = (result.get("left_out_readings") or {}).get(status)  # older results do not name them
            if named:
                lines.append(f"  Readings: {', '.join(markdown_text(r) for r in named)}.")
    alpha = f"{result['alpha']:.3f}" if result["alpha"] is not None else f"undefined ({result['alpha_note']})"
    lines.append(f"- Krippendorff's alpha (nominal) between listeners: {alpha}.")
    mos = result["mos"]
    if mos is not None:
        rho = f"{mos['rho']:.3f}" if mos["rho"] is not None else f"undefined ({mos['note']})"
        lines.append(f"- Spearman rho, per-reading flagged share vs mean MOS, {mos['n_readings']} readings: {rho}.")
    return "\n".join(lines) + "\n"


def write_listener_report(result: dict, out_dir: str | Path) -> dict[str, Path]:
    """Write ``listeners.md`` and ``listeners.json`` into ``out_dir`` (created), atomically.

    Raises:
        ValueError: ``result`` is not the output of :func:`listener_agreement`.
        OutputFolderError: ``out_dir`` is, is inside, or contains the results folder, or would
            write over the labels file (checked before anything is written).
    """
    needed = ("detection", "uncertain", "not_judged", "alpha", "n_labels")
    if not isinstance(result, Mapping) or any(k not in result for k in needed):
        raise ValueError("result must be the dict returned by listener_agreement")
    out = check_output_folder(out_dir, {"results folder": result["results_dir"]} if result.get("results_dir") else {})
    paths = {"md": out / "listeners.md", "json": out / "listeners.json"}
    labels = result.get("labels_csv")
    if labels and any(Path(labels).resolve() == p.resolve() for p in paths.values()):
        raise OutputFolderError(
            f"the output folder {out} would write over the labels file {labels}; give another folder")
    # everything is made before the folder: a failure leaves no empty folder behind
    text = json.dumps(result, ensure_ascii=False, indent=2, allow_nan=False) + "\n"
    files = {paths["json"]: text.encode("utf-8"), paths["md"]: _markdown(result).encode("utf-8")}
    with created_folder(out):
        # as one unit: a folder in the way of the md had left a new json beside an old md
        write_files_atomic(files)
    return paths

