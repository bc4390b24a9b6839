"""Compare systems by how often the scorer flags their key words ("What did it find?").

For each system, a folder of result JSON files (one per reading, see :mod:`leakloss.report`)
becomes the seed's line "36 of 100 (36.0%) [27.3–45.8]": among SCORED readings, how many
key words were flagged, with a Wilson 95 % interval and a cluster-bootstrap 95 % interval
that resamples whole sentences (readings of one sentence in several voices are not
independent: the same text invites the same slip).

Counted words ("units"): the words marked ``"key": true`` in a reading; a reading with no
key word contributes every word the scorer tested (decision other than ``not_tested``), and its
not-tested words are counted beside the rate.
A rate counts the units the scorer judged (:data:`leakloss.schema.TESTED`: flagged, uncertain,
no_change); uncertain ones are in the total, never flags; unscored and not-tested key words are
reported beside the rate, never in it (counting them as "not flagged" would lower it). Words and
sentences are compared in NFC (results written by other tools may use another Unicode form).
Readings that are not ``scored`` (``quarantined``, ``unscored``, ``failed``) are left out of
every rate; the report counts each of them, with their reasons, per system.
"""

from __future__ import annotations

import io
import json
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

from leakloss.atomic import created_folder, write_files_atomic
from leakloss.eval.stats import (
    Interval,
    format_count,
    rate_with_interval,
    wilson_interval,
)
from leakloss.schema import DECISIONS, KINDS, REFERENCE_ORIGINS, STATUSES, TESTED, load_result, reference_origin

__all__ = ["OutputFolderError", "check_output_folder", "compare_results", "write_comparison", "format_rate",
           "key_units"]

N_RESAMPLES = 2000
SEED = 0


class OutputFolderError(OSError, ValueError):
    """An output folder that would mix a report with the results it was made from.

    An ``OSError`` (like a folder that cannot be written) and a ``ValueError`` (a bad argument).
    """


def check_output_folder(out_dir: str | Path, inputs: Mapping[str, str | Path]) -> Path:
    """Refuse an output folder that is, is inside, or contains one of the ``inputs`` folders.

    A report written into a results folder becomes one more ``*.json`` "result" there (and the
    next run over that folder fails on it); nothing is written here, so call it before writing.

    Args:
        out_dir: the output folder (need not exist yet).
        inputs: what each input folder is (e.g. ``"results folder of system 'a'"``) -> its path.

    Raises:
        OutputFolderError: the folders overlap; the message names both.
    """
    out = Path(out_dir)
    out_r = out.resolve()
    for what, folder in inputs.items():
        inp = Path(folder).resolve()
        if out_r == inp:
            relation = "is"
        elif out_r.is_relative_to(inp):
            relation = "is inside"
        elif inp.is_relative_to(out_r):
            relation = "contains"
        else:
            continue
        raise OutputFolderError(
            f"the output folder {out} {relation} the {what} ({folder}): the report would be mixed with "
            "the results it is made from; give an output folder outside every results folder"
        )
    return out


def key_units(result: Mapping) -> tuple[list[Mapping], bool]:
    """The words of one reading that count, and whether they are marked key words.

    Returns:
        ``(words, marked)``: the ``"key": true`` words if any (``marked=True``), else every
        word with a decision other than ``not_tested`` (``marked=False``). A key word with ``"key_kinds"`` (a test
        set of one contrast kind, :func:`leakloss.evaluate.mark_key_words`) counts by its sites of those kinds
        only: its ``sites`` cut to them, its ``decision`` theirs (:func:`leakloss.decision.word_decision`).
    """
    keys = [_counted_by_kinds(w) for w in result["words"] if w.get("key")]
    if keys:
        return keys, True
    return [w for w in result["words"] if w["decision"] != "not_tested"], False


def _counted_by_kinds(word: Mapping) -> Mapping:
    """``word`` as it counts: with ``"key_kinds"``, its sites of those kinds and their word decision."""
    from leakloss.decision import word_decision

    kinds = word.get("key_kinds")
    if not kinds:
        return word
    sites = [s for s in word["sites"] if s["kind"] in kinds]
    return {**word, "sites": sites, "decision": word_decision([s["decision"] for s in sites])}


def _interval_dict(iv: Interval | None) -> dict | None:
    if iv is None:
        return None
    return {"estimate": iv.estimate, "low": iv.low, "high": iv.high}


def _rate(flags: Sequence[bool], clusters: Sequence[str] | None) -> dict:
    """count/total with Wilson and (given clusters) sentence-bootstrap intervals, JSON-ready."""
    if not flags:
        return {"count": 0, "total": 0, "rate": None, "wilson": None, "bootstrap": None,
                "text": format_count(0, 0)}
    r = rate_with_interval(list(flags), clusters, n_resamples=N_RESAMPLES, seed=SEED)
    return {**r, "wilson": _interval_dict(r["wilson"]), "bootstrap": _interval_dict(r["bootstrap"])}


def format_rate(rate: Mapping, interval: str = "wilson") -> str:
    """The seed's form, ``"36 of 100 (36.0%) [27.3–45.8]"``; no brackets when there is no interval."""
    iv = rate.get(interval)
    if iv is None:
        return rate["text"]
    return f"{rate['text']} [{100 * iv['low']:.1f}–{100 * iv['high']:.1f}]"


def _load_dir(name: str, folder: Path, files: Sequence[Path] | None = None) -> list[tuple[Path, dict]]:
    if not folder.is_dir():
        raise ValueError(f"system '{name}': results folder '{folder}' does not exist or is not a folder")
    files = sorted(folder.glob("*.json") if files is None else map(Path, files))
    if not files:
        raise ValueError(f"system '{name}': no *.json results in '{folder}'")
    return [(f, load_result(f)) for f in files]


def _system_summary(name: str, folder: Path, files: Sequence[Path] | None = None) -> dict:
    loaded = _load_dir(name, folder, files)
    by_status = {s: [(f, r) for f, r in loaded if r["status"] == s] for s in STATUSES}
    scored, quarantined = by_status["scored"], by_status["quarantined"]

    flags: list[bool] = []
    clusters: list[str] = []
    decisions: Counter[str] = Counter()
    by_kind: dict[str, tuple[list[bool], list[str]]] = {k: ([], []) for k in KINDS}
    kind_undecided: Counter[str] = Counter()  # counted words with sites of a kind, none of them decided
    by_word: dict[str, list[bool]] = defaultdict(list)
    unmarked: list[str] = []
    no_unit: list[str] = []
    for f, r in scored:
        units, marked = key_units(r)
        if not marked:
            unmarked.append(f.name)
        # Sentence = the cluster; a sentence_id survives edits to punctuation, the text is the fallback.
        sentence = r.get("sentence_id") or unicodedata.normalize("NFC", r["text"])
        decisions.update(w["decision"] for w in units)
        if not marked:  # every tested word counts: its not-tested words are the ones beside the rate
            decisions["not_tested"] += sum(w["decision"] == "not_tested" for w in r["words"])
        judged = [w for w in units if w["decision"] in TESTED]
        if not judged:
            no_unit.append(f.name)
        for w in judged:
            flagged = w["decision"] == "flagged"
            flags.append(flagged)
            clusters.append(sentence)
            by_word[unicodedata.normalize("NFC", w["word"])].append(flagged)
            for kind in KINDS:
                of_kind = [s for s in w["sites"] if s["kind"] == kind]
                sites = [s for s in of_kind if s["decision"] in TESTED]
                if sites:
                    # A word counts once per kind, flagged if any site of that kind is.
                    by_kind[kind][0].append(any(s["decision"] == "flagged" for s in sites))
                    by_kind[kind][1].append(sentence)
                elif of_kind:  # counted beside the kind's rate, never silently left out of it
                    kind_undecided[kind] += 1
        for w in units:  # a word left undecided as a whole (e.g. unscored): each kind it has sites of
            if w["decision"] not in TESTED:
                kind_undecided.update({s["kind"] for s in w["sites"] if s["kind"] in KINDS})

    reasons = {
        s: dict(Counter(r.get("reason") or "no reason given" for _, r in by_status[s]).most_common())
        for s in STATUSES if s != "scored"
    }
    return {
        "folder": str(folder),
        "readings": len(loaded),
        "scored": len(scored),
        "quarantined": len(quarantined),
        "unscored": len(by_status["unscored"]),
        "failed": len(by_status["failed"]),
        "statuses": {s: len(by_status[s]) for s in STATUSES},
        # what decided the sites: the user's references, the teacher's synthesised ones, or the reference-free head
        "reference_origins": {o: n for o in REFERENCE_ORIGINS if (n := sum(reference_origin(r) == o
                                                                            for _, r in loaded))},
        # what scored the counted readings (Scorer.fingerprint: heads, recognizers, thresholds, frontend); a
        # result written without one is left out (not known)
        "scorers": dict(Counter(r["scorer"] for _, r in scored if r.get("scorer")).most_common()),
        "quarantine_reasons": reasons["quarantined"],
        "reasons": reasons,
        # status -> the result files left out with it (the reasons above say why, grouped)
        "left_out": {st: sorted(f.name for f, _ in by_status[st]) for st in STATUSES if st != "scored"},
        "readings_without_key_word": unmarked,
        "readings_without_counted_word": no_unit,
        "sentences": len(set(clusters)),
        "key_flagged": _rate(flags, clusters),
        "decisions": {d: decisions[d] for d in DECISIONS},
        "by_kind": {k: _rate(*by_kind[k]) for k in KINDS},
        "by_kind_undecided": {k: kind_undecided[k] for k in KINDS},
        "by_word": {
            word: {**_rate(v, None), "wilson": _interval_dict(wilson_interval(sum(v), len(v)))}
            for word, v in sorted(by_word.items())
        },
    }


def compare_results(dirs: dict[str, Path], files: Mapping[str, Sequence[Path]] | None = None) -> dict:
    """Per-system key-word flag rates with intervals, by contrast kind and by word.

    Args:
        dirs: system name -> folder of result ``*.json`` files (one per reading).
        files: system name -> the result files to count (default: every ``*.json`` in its folder), e.g. one
            evaluation's readings where the folder also keeps an earlier run's.

    Returns:
        JSON-ready ``{"systems": {name: summary}, "n_resamples", "seed", "units"}``; each summary
        has ``folder``; reading counts ``readings``, ``scored``, ``quarantined``, ``unscored``,
        ``failed`` (also as ``statuses``); ``reference_origins`` (readings by what decided their sites: ``given``
        references, ``synthesised`` ones, the ``reference_free`` head); ``scorers`` (scored readings by the
        fingerprint of the scorer that made them, where the result records one); ``reasons`` (status -> reason ->
        readings, for every status but ``scored``; ``quarantine_reasons`` is its quarantined part); ``left_out``
        (status -> the result files left out with it); ``sentences``,
        ``key_flagged`` (``count``, ``total``, ``rate``, ``wilson``, ``bootstrap``, ``text``),
        ``decisions`` (counts over the counted words), ``by_kind`` and ``by_word`` (same rate
        form; ``by_word`` has no bootstrap, one word rarely spans enough sentences), ``by_kind_undecided``
        (judged words whose sites of a kind were all left undecided, e.g. ``unscored``: beside that kind's rate) and
        ``readings_without_key_word`` (files whose tested words were counted instead) and
        ``readings_without_counted_word`` (scored files that gave no word to count).

    Raises:
        ValueError: no systems, a missing or empty folder, or (as ``ResultError``) a result
            file that does not follow the format.
    """
    if not isinstance(dirs, Mapping) or not dirs:
        raise ValueError("dirs must map at least one system name to its results folder")
    systems = {}
    for name, folder in dirs.items():
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"system names must be non-empty strings, got {name!r}")
        systems[name] = _system_summary(name, Path(folder), (files or {}).get(name))
    return {
        "units": "key words of scored readings (every tested word where a reading marks no key word)",
        "interval": "95%: Wilson; cluster bootstrap over sentences",
        "n_resamples": N_RESAMPLES,
        "seed": SEED,
        "systems": systems,
    }


def _markdown(result: Mapping) -> str:
    lines = [
        "# Key words flagged",
        "",
        "Words: the key words of scored readings (every tested word where a reading marks no key word); "
        "95 % Wilson interval in brackets, cluster bootstrap over sentences "
        f"({result['n_resamples']:,} resamples, none with one sentence) alongside. A rate counts the words the "
        "scorer judged (uncertain ones in the total, never as flags); unscored and not-tested words are counted "
        "beside it, never in it. Quarantined, unscored and failed readings are left out of every rate; the "
        "table of readings counts them.",
        "",
        "| System | Key words flagged | Sentence bootstrap | Uncertain words | Unscored words | Not-tested words |",
        "|---|---|---|---|---|---|",
    ]
    for name, s in result["systems"].items():
        k = s["key_flagged"]
        boot = k["bootstrap"]
        boot_txt = f"[{100 * boot['low']:.1f}–{100 * boot['high']:.1f}]" if boot else "—"
        lines.append(
            f"| {markdown_text(name)} | {format_rate(k)} | {boot_txt} | {s['decisions']['uncertain']} "
            f"| {s['decisions']['unscored']} | {s['decisions']['not_tested']} |"
        )
    lines += [
        "",
        "## Readings",
        "",
        "One per result file; only scored readings are counted in the rates.",
        "",
        "| System | Readings | Scored | Quarantined | Unscored | Failed | References |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in result["systems"].items():
        st = s["statuses"]
        lines.append(f"| {markdown_text(name)} | {s['readings']} | " + " | ".join(str(st[x]) for x in STATUSES)
                     + f" | {origin_text(s)} |")
    mixed = mixed_origins(result, markdown_text)
    if mixed:
        lines += ["", f"**Not comparable as they stand:** {mixed}."]
    lines += ["", "## By contrast kind", "",
              "A word counts once per kind it has a decided site of; words whose sites of a kind were all left "
              "undecided are counted beside the rate.", "",
              "| System | Deletion | Deletion undecided | Quality | Quality undecided |", "|---|---|---|---|---|"]
    for name, s in result["systems"].items():
        undecided = s.get("by_kind_undecided") or {}  # older comparison.json files do not have it
        lines.append(f"| {markdown_text(name)} | {format_rate(s['by_kind']['deletion'])} "
                     f"| {undecided.get('deletion', '—')} | {format_rate(s['by_kind']['quality'])} "
                     f"| {undecided.get('quality', '—')} |")
    for name, s in result["systems"].items():
        lines += ["", f"## {markdown_text(name)}: by word", "", "| Word | Flagged |", "|---|---|"]
        lines += [f"| {markdown_text(w)} | {format_rate(r)} |" for w, r in s["by_word"].items()]
        # Older comparison.json files have only the quarantine reasons.
        reasons = s.get("reasons") or {"quarantined": s["quarantine_reasons"]}
        left_out = s.get("left_out") or {}  # older comparison.json files do not name them
        for status, why in reasons.items():
            if why:
                n = sum(why.values())
                lines += ["", f"{status.capitalize()} ({n} reading{'s' if n != 1 else ''}, left out): "
                          + "; ".join(f"{markdown_text(k)} ({v})" for k, v in why.items())]
                if left_out.get(status):
                    lines.append("Files: " + ", ".join(markdown_text(f) for f in left_out[status]))
        if s["readings_without_key_word"]:
            lines += ["", f"{len(s['readings_without_key_word'])} readings mark no key word; "
                      "all their tested words were counted."]
        empty = s.get("readings_without_counted_word") or []
        if empty:
            lines += ["", f"{len(empty)} scored reading{'s' if len(empty) != 1 else ''} gave no word to count "
                      "(no key word or tested word the scorer judged): " + ", ".join(markdown_text(f) for f in empty)]
    return "\n".join(lines) + "\n"


def origin_text(summary: Mapping) -> str:
    """``given 3, synthesised 2``: a system's readings by what decided their sites (``—`` for a comparison.json
    written before the field)."""
    origins = summary.get("reference_origins")
    return ", ".join(f"{o.replace('_', '-')} {n}" for o, n in origins.items()) if origins else "—"


def mixed_origins(result: Mapping, name_text=str) -> str | None:
    """Why the systems' rates were decided by different things (references given, synthesised, or the
    reference-free head; else other scorers: heads, recognizers, thresholds or frontend), within a system or
    between systems (system names through ``name_text``); None when one thing decided them all."""
    for field, what in (("reference_origins", "against different kinds of reference (see References)"),
                        # two heads or thresholds flag at other rates: their rates sat side by side without a word
                        ("scorers", ("by different scorers (other heads, recognizers, thresholds or frontend: "
                                     "see scorers in comparison.json)"))):
        per_system = {name: set(s.get(field) or {}) for name, s in result["systems"].items()}
        within = [name for name, found in per_system.items() if len(found) > 1]
        if within:
            return (f"{', '.join(name_text(n) for n in within)} mix{'es' if len(within) == 1 else ''} readings "
                    f"scored {what}")
        if len({frozenset(f) for f in per_system.values() if f}) > 1:
            return f"the systems were scored {what}"
    return None


def markdown_text(text: str) -> str:
    """``text`` (a system name, a word, a reason: data, not markup) as plain text in a Markdown table cell or
    line: a pipe would split a cell, a newline end the row, ``<``/``>`` passed raw HTML into the page
    (``<script>`` in a system name ran in a Markdown viewer), and ``[x](url)`` made a link (a backslash escape
    after its ``]``: a viewer shows the text as it was); control and bidi characters are shown as ``[U+001B]``
    (:func:`leakloss.text.normalize.visible`): the file is printed to a terminal, which an ESC drives."""
    from leakloss.text.normalize import visible

    escaped = visible(str(text)).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    # link and image syntax: "[x](javascript:...)" in a name was a link a reader could follow. Only "](" and "][" are
    # escaped: the file is also printed as it is to a terminal, where every escape shows ("f5[v1]" stays as it is)
    escaped = escaped.replace("](", "]\\(").replace("][", "]\\[")
    return escaped.replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def _plot_figure(result: Mapping):
    """Bar chart of key-word flag rates with Wilson whiskers (a matplotlib ``Figure``, laid out)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import (
        Figure,  # no pyplot: no global state, no display needed
    )

    names = list(result["systems"])
    rates = [result["systems"][n]["key_flagged"] for n in names]
    fig = Figure(figsize=(max(4.0, 1.4 * len(names) + 1.5), 3.6), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    x = range(len(names))
    heights = [100 * (r["rate"] or 0.0) for r in rates]
    lows = [h - 100 * r["wilson"]["low"] if r["wilson"] else 0.0 for h, r in zip(heights, rates)]
    highs = [100 * r["wilson"]["high"] - h if r["wilson"] else 0.0 for h, r in zip(heights, rates)]
    ax.bar(x, heights, color="#c62828", alpha=0.8, yerr=[lows, highs], capsize=6, ecolor="#212121")
    for i, r in enumerate(rates):
        label = f"{r['count']} of {r['total']}" if r["total"] else "no data"
        # Above the whisker, so a short bar's label never sits on its interval.
        ax.text(i, heights[i] + highs[i] + 2, label, ha="center", va="bottom", fontsize=9, color="#212121")
    ax.set_xticks(list(x), names, parse_math=False)  # system names are text: "$x$" is no formula
    ax.set_ylabel("key words flagged (%)")
    # Room above 100% for the label over a whisker that reaches 100 (it sat on the title); ticks stop at 100.
    ax.set_ylim(0, 115)
    ax.set_yticks(range(0, 101, 20))
    ax.spines["left"].set_bounds(0, 100)
    ax.set_title("Key words flagged, 95% Wilson interval", fontsize=10, pad=8)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig


def _plot_png(result: Mapping) -> bytes:
    """:func:`_plot_figure` as PNG bytes."""
    buf = io.BytesIO()
    _plot_figure(result).savefig(buf, format="png")
    return buf.getvalue()


def write_comparison(result: dict, out_dir: str | Path) -> dict[str, Path]:
    """Write ``comparison.md``, ``comparison.json`` and ``comparison.png`` into ``out_dir``.

    The three are written as one unit (:func:`leakloss.atomic.write_files_atomic`): a failure leaves the folder as
    it was. ``out_dir`` is created (and removed again, with the parents this made, when the write fails).

    Returns:
        ``{"md": path, "json": path, "png": path}``.

    Raises:
        ValueError: ``result`` is not the output of :func:`compare_results`.
        OutputFolderError: ``out_dir`` is, is inside, or contains a system's results folder
            (checked before anything is written).
    """
    if not isinstance(result, Mapping) or not isinstance(result.get("systems"), Mapping) or not result["systems"]:
        raise ValueError("result must be the dict returned by compare_results (with a non-empty 'systems')")
    out = check_output_folder(out_dir, {
        f"results folder of system '{name}'": s["folder"]
        for name, s in result["systems"].items() if isinstance(s, Mapping) and s.get("folder")
    })
    paths = {"md": out / "comparison.md", "json": out / "comparison.json", "png": out / "comparison.png"}
    # everything is made before anything is written: a failure leaves no partial comparison (and no empty folder)
    png, text, md = _plot_png(result), json.dumps(result, ensure_ascii=False, indent=2, allow_nan=False) + "\n", \
        _markdown(result)
    with created_folder(out):
        # as one unit: a folder in the way of the png had left a new json and md beside an old png
        write_files_atomic({paths["json"]: text.encode("utf-8"), paths["md"]: md.encode("utf-8"), paths["png"]: png})
    return paths
