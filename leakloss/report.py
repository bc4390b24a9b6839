"""Self-contained HTML pages for scorer results: one page per reading, and a run index.

A reading's page answers the seed's "Can you hear it?": the sentence, every word with
the scorer's decision (colour plus the decision in words, so it survives greyscale
printing), and for each flagged or uncertain word a player of the word cut at the
aligner's boundaries with :data:`CLIP_PAD_S` either side, next to one player of the
whole sentence. Audio is embedded as base64 WAV ``data:`` URIs and the styles are
inline, so the page can be mailed or archived as one file; a Content-Security-Policy
forbids any network load, so a stray external reference fails loudly, not silently.

Everything that came from a result (text, words, paths, reasons) is HTML-escaped.

The result format (one JSON object per reading) is :mod:`leakloss.schema`; every page
checks its result with :func:`leakloss.schema.validate_result` first.
"""

from __future__ import annotations

import base64
import html
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import quote, urlsplit

from torch import Tensor

from leakloss.atomic import write_text_atomic
from leakloss.audio import AudioError, audio_to_wav_bytes
from leakloss.constants import SAMPLE_RATE
from leakloss.schema import DECISIONS, TESTED, rejected_references, validate_result
from leakloss.text.normalize import punctuation_side, visible

__all__ = [
    "reading_words",
    "reference_source_text",
    "CLIP_PAD_S",
    "BOUNDARY_TOLERANCE_S",
    "render_report",
    "render_index",
    "write_report",
]

CLIP_PAD_S = 0.120  # context either side of a word clip, as in the seed's players
# Aligner frames (20 ms) can put a word end just past the last sample; more than this means
# the audio and the result do not belong together.
BOUNDARY_TOLERANCE_S = 0.05
PLAYED = ("flagged", "uncertain")  # decisions that get a word player

# Foreground / background per decision; text labels carry the meaning too.
_COLOURS = {
    "flagged": ("#b71c1c", "#fdecea"),
    "uncertain": ("#8a5300", "#fff3d6"),
    "no_change": ("#1b5e20", "#e8f5e9"),
    "unscored": ("#455a64", "#eceff1"),
    "not_tested": ("#757575", "#fafafa"),
}
_MEANING = {
    "flagged": "the scorer hears the Hindi change at a tested vowel",
    "uncertain": "score between the thresholds, a flag score whose gates failed, or references disagree "
                 "(each site says which)",
    "no_change": "tested vowel sounds Nepali",
    "unscored": "tested vowel, not decided: no trusted Nepali reference qualified there, the query could not be "
                "measured there, or the reading was quarantined (the site or the status says which)",
    "not_tested": "no modelled Nepali/Hindi vowel contrast in this word",
}
_FONT = '"Noto Sans Devanagari", "Lohit Devanagari", "Mukta", "Nirmala UI", system-ui, sans-serif'
_CSS = f"""
body {{ font-family: {_FONT}; margin: 2rem auto; max-width: 62rem; padding: 0 1rem;
       color: #212121; line-height: 1.45; }}
h1 {{ font-size: 1.35rem; margin-bottom: .2rem; }}
h2 {{ font-size: 1.1rem; margin-top: 1.8rem; border-bottom: 1px solid #ddd; padding-bottom: .2rem; }}
.meta {{ color: #616161; font-size: .9rem; word-break: break-all; }}
.sentence {{ font-size: 1.5rem; margin: .6rem 0; }}
.chips span {{ display: inline-block; margin: .15rem .1rem; padding: .05rem .4rem;
              border-radius: .3rem; border: 1px solid; font-size: 1.25rem; }}
.banner {{ background: #fff3d6; border: 1px solid #8a5300; padding: .6rem .8rem; border-radius: .3rem; }}
table {{ border-collapse: collapse; width: 100%; font-size: .95rem; }}
th, td {{ border: 1px solid #ddd; padding: .3rem .5rem; text-align: left; vertical-align: top; }}
th {{ background: #f5f5f5; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }}
.decision {{ font-weight: 600; border-radius: .25rem; padding: .05rem .35rem; white-space: nowrap; }}
.key {{ font-size: .75rem; background: #263238; color: #fff; border-radius: .2rem;
        padding: 0 .3rem; margin-left: .3rem; vertical-align: middle; }}
.sites td {{ border: none; padding: 0 .4rem 0 0; }}
audio {{ height: 2rem; max-width: 15rem; }}
ul.legend {{ list-style: none; padding: 0; margin: .3rem 0; font-size: .9rem; }}
ul.legend li {{ margin: .15rem 0; }}
figure {{ margin: 1rem 0; }} figure img {{ max-width: 100%; border: 1px solid #eee; }}
"""
_REPORT_CSP = "default-src 'none'; style-src 'unsafe-inline'; media-src data:; img-src data:"


# --- writing -----------------------------------------------------------------------------------


def write_report(path: str | Path, html_text: str) -> Path:
    """Write a page from :func:`render_report` or :func:`render_index` atomically.

    Raises:
        ValueError: ``html_text`` is not a string or the name does not end in .html/.htm.
        OSError: the folder does not exist or the write fails.
    """
    if not isinstance(html_text, str):
        raise ValueError(f"html must be a string, got {type(html_text).__name__}")
    p = Path(path)
    if p.suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"report '{p}' must end in .html so a browser opens it as a page")
    return write_text_atomic(p, html_text)


# --- rendering helpers -------------------------------------------------------------------------

def _e(value: object) -> str:
    """HTML-escaped, with bidirectional controls shown as ``[U+202E]``: a raw one in a text or a file name
    would reorder the rest of the page (a name shown other than it is); so are control characters (NUL, BEL,
    ESC...: not allowed in HTML, invisible where a browser keeps them)."""
    return html.escape(visible(str(value)), quote=True)


def _wav_uri(wave: Tensor, sample_rate: int) -> str:
    return "data:audio/wav;base64," + base64.b64encode(audio_to_wav_bytes(wave, sample_rate)).decode("ascii")


def _player(uri: str, label: str) -> str:
    return f'<audio controls preload="auto" src="{uri}" aria-label="{_e(label)}"></audio>'


def _decision_chip(decision: str) -> str:
    fg, bg = _COLOURS[decision]
    return f'<span class="decision" style="color:{fg};background:{bg}">{_e(decision.replace("_", " "))}</span>'


def _legend() -> str:
    items = "".join(f"<li>{_decision_chip(d)} {_e(_MEANING[d])}</li>" for d in DECISIONS)
    return f'<ul class="legend">{items}</ul>'


def _check_wave(wave: object, sample_rate: object) -> tuple[Tensor | None, int]:
    """The query audio as a 1-D tensor (or None) and a checked sample rate."""
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, int) or sample_rate <= 0:
        raise ValueError(f"sample_rate must be a positive integer number of Hz, got {sample_rate!r}")
    if wave is None:
        return None, sample_rate
    if not isinstance(wave, Tensor):
        raise ValueError(f"query_wave must be a torch.Tensor or None, got {type(wave).__name__}")
    w = wave.detach().cpu()
    if w.dim() == 2 and w.shape[0] == 1:
        w = w[0]
    if w.dim() != 1 or w.numel() == 0:
        raise ValueError(f"query_wave must be non-empty mono audio [time] or [1, time], got shape {tuple(wave.shape)}")
    if not w.is_floating_point():
        raise ValueError(f"query_wave must hold float samples in [-1, 1], got {w.dtype}")
    return w, sample_rate


def _clip_bounds(start: float, end: float, n_samples: int, sample_rate: int, where: str) -> tuple[int, int]:
    """Sample range of a word with CLIP_PAD_S either side, clamped to the audio."""
    duration = n_samples / sample_rate
    if start >= duration or end > duration + BOUNDARY_TOLERANCE_S:
        raise ValueError(
            f"{where}: boundaries {start:.3f}-{end:.3f} s lie outside the audio ({duration:.3f} s); "
            "is this the audio the result was scored on?"
        )
    lo = max(0, int(math.floor((start - CLIP_PAD_S) * sample_rate)))
    hi = min(n_samples, int(math.ceil((end + CLIP_PAD_S) * sample_rate)))
    return lo, hi


def _sites_cell(sites: Sequence[Mapping]) -> str:
    if not sites:
        return '<span class="meta">none</span>'
    rows = []
    for s in sites:
        score = "—" if s.get("score") is None else f"{s['score']:.3f}"
        hindi = "∅" if s.get("hindi") is None else s["hindi"]  # deletion: no Hindi vowel
        rows.append(
            f"<tr><td>{_e(s['kind'])}</td><td>{_e(s['nepali'])} → {_e(hindi)}</td>"
            f'<td class="num">{score}</td><td>{_e(s["decision"])}</td>'
            f'<td class="num">{s["references_used"]} ref</td>'
            + (f'<td class="meta">{_e(s["reason"])}</td>' if s.get("reason") else "") + "</tr>"
        )
    return f'<table class="sites">{"".join(rows)}</table>'


#: quotes typed the same on both sides (Unicode Po, not Pi/Pf): the first opens, the next closes
STRAIGHT_QUOTES = ('"', "'")


def reading_words(words: Sequence[Mapping]) -> list[tuple[Mapping, str]]:
    """A result's words as a reader sees them: ``(word entry, its text with the punctuation around it)``.

    The scorer keeps punctuation and symbols as entries of their own (``not_tested``, no sites; their index is
    their place in the text). Shown as words, ``?`` became a row, a chip and one more of "N words"; here an
    opening mark joins the word after it and any other the word before it (:func:`punctuation_side`); straight
    quotes take turns, opening then closing. A text of punctuation only keeps its entries.
    """
    ordered = sorted(words, key=lambda w: w["index"])
    out: list[list] = []
    opening = ""  # marks waiting for the next word
    quoted: set[str] = set()  # straight quotes opened and not yet closed
    for w in ordered:
        side = punctuation_side(w["word"]) if w["decision"] == "not_tested" and not w["sites"] else None
        if side is not None and w["word"] in STRAIGHT_QUOTES:  # one mark for both sides: they take turns
            side = "previous" if w["word"] in quoted else "next"
            quoted ^= {w["word"]}
        if side is None:
            out.append([w, opening + w["word"]])
            opening = ""
        elif side == "previous" and out and not opening:
            out[-1][1] += w["word"]
        else:  # an opening mark, or a closing one before any word
            opening += w["word"]
    if not out:
        return [(w, w["word"]) for w in ordered]
    if opening:
        out[-1][1] += opening
    return [(w, text) for w, text in out]


def reference_source_text(result: Mapping) -> str:
    """Where a result's references came from, in words: ``references: given`` / ``references: synthesised
    (embedded teacher voices ...)`` / ``references: none, reference-free (...)``."""
    source = result.get("reference_origin")
    if source is None:
        return "references: given"
    if source["origin"] == "reference_free":
        return f"references: none, reference-free ({source['detail']})"
    return f"references: {source['origin']} ({source['detail']})"


def _summary(words: Sequence[Mapping]) -> str:
    counts = Counter(w["decision"] for w in words)
    tested = sum(counts[d] for d in TESTED)
    parts = [f"{counts[d]} {d.replace('_', ' ')}" for d in DECISIONS if counts[d]]
    return f"{len(words)} words, {tested} judged: " + (", ".join(parts) if parts else "none")


# --- pages -------------------------------------------------------------------------------------

def render_report(
    result: dict,
    query_wave: Tensor | None,
    sample_rate: int = SAMPLE_RATE,
    *,
    title: str | None = None,
) -> str:
    """One self-contained HTML page for one reading.

    Args:
        result: a scorer result (see the module docstring; checked by :func:`validate_result`).
        query_wave: the query audio ``[t]`` or ``[1, t]`` at ``sample_rate``, float in [-1, 1];
            ``None`` renders the page without players (and says so).
        sample_rate: rate of ``query_wave`` in Hz.
        title: page title; defaults to "leakloss: <query file name>".

    Returns:
        The page as a string; write it with :func:`write_report`.

    Raises:
        ResultError: the result does not follow the format.
        ValueError: bad ``query_wave`` / ``sample_rate``, or word boundaries outside the audio.
    """
    result = validate_result(result)
    wave, sample_rate = _check_wave(query_wave, sample_rate)
    shown = reading_words(result["words"])
    words = [w for w, _ in shown]
    page_title = title if title is not None else f"leakloss: {Path(result['query']).name}"

    head = [f"<h1>{_e(page_title)}</h1>"]
    meta = [f"query {_e(result['query'])}"]
    if result.get("system"):
        meta.insert(0, f"system {_e(result['system'])}")
    if result.get("sentence_id"):
        meta.append(f"sentence {_e(result['sentence_id'])}")
    head.append(f'<p class="meta">{" · ".join(meta)}</p>')
    head.append(f'<p class="sentence" lang="ne">{_e(result["text"])}</p>')

    if result["status"] == "quarantined":
        reason = result.get("reason") or "no reason given"
        head.append(
            f'<p class="banner"><strong>Quarantined:</strong> {_e(reason)}. '
            "Its words are not counted in any rate.</p>"
        )
    elif result.get("reason"):
        head.append(f'<p class="banner"><strong>Note:</strong> {_e(result["reason"])}</p>')
    source = result.get("reference_origin")
    if source is not None and source["origin"] == "reference_free":  # decided by another head: said up front
        head.append(f'<p class="banner"><strong>Reference-free:</strong> {_e(source["detail"])}. '
                    "No trusted Nepali reading was compared.</p>")
    warnings = result.get("warnings")
    if isinstance(warnings, list) and warnings:  # the audio checks (clipping, resampling...), in words
        items = "".join(f"<li>{_e(w)}</li>" for w in warnings)
        head.append(f'<div class="banner warnings"><strong>Warnings:</strong><ul>{items}</ul></div>')

    chips = "".join(
        '<span style="color:{0};background:{1};border-color:{0}" title="{2}">{3}</span>'.format(
            *_COLOURS[w["decision"]], _e(w["decision"]), _e(text))
        for w, text in shown
    )
    head.append(f'<p class="chips" lang="ne">{chips}</p>')
    head.append(f'<p class="meta">{_e(_summary(words))}</p>')

    if wave is None:
        head.append('<p class="meta">No audio was given, so there are no players on this page.</p>')
    else:
        # One sentence player for the page: embedding it in every row would repeat the audio.
        uri = _wav_uri(wave, sample_rate)
        head.append(f"<p><strong>Whole sentence</strong> ({wave.numel() / sample_rate:.2f} s)<br>"
                    f"{_player(uri, 'whole sentence')}</p>")

    rows = []
    for w, text in shown:
        where = f"word {w['index']} ({w['word']})"
        if w["start"] is None:
            span = '<span class="meta">not aligned</span>'
        else:
            span = f"{w['start']:.2f}–{w['end']:.2f}"
        listen = ""
        if w["decision"] in PLAYED:
            if wave is None:
                listen = '<span class="meta">no audio</span>'
            elif w["start"] is None:
                listen = '<span class="meta">no boundaries</span>'
            else:
                lo, hi = _clip_bounds(w["start"], w["end"], wave.numel(), sample_rate, where)
                try:
                    listen = _player(_wav_uri(wave[lo:hi], sample_rate), f"word {w['word']}")
                except AudioError as exc:
                    raise ValueError(f"{where}: cannot embed the clip: {exc}") from exc
        key = '<span class="key">key</span>' if w.get("key") else ""
        rows.append(
            f'<tr><td class="num">{w["index"]}</td><td lang="ne">{_e(text)}{key}</td>'
            f"<td>{_decision_chip(w['decision'])}</td><td class=\"num\">{span}</td>"
            f"<td>{_sites_cell(w['sites'])}</td><td>{listen}</td></tr>"
        )
    table = (
        "<h2>Words</h2>" + _legend()
        + f"<p class=\"meta\">Word players are cut at the aligner's boundaries with "
        f"{CLIP_PAD_S * 1000:.0f} ms either side.</p>"
        + "<table><thead><tr><th>#</th><th>Word</th><th>Decision</th><th>Time (s)</th>"
        "<th>Sites: kind, Nepali → Hindi, score, decision, references</th><th>Listen</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    refs = result["references"]
    rejected = rejected_references(result)
    origin = f'<p class="meta">{_e(reference_source_text(result))}</p>'
    ref_html = (
        "<h2>References</h2>" + origin
        + (f"<ul>{''.join(f'<li class=meta>{_e(r)}</li>' for r in refs)}</ul>" if refs
           else '<p class="meta">No trusted Nepali reference was used.</p>')
        # a reference given but not used is said with its reason (it was only in the JSON's reference_checks)
        + (f"<h3>Not used ({len(rejected)})</h3><ul>"
           + "".join(f"<li><span class=meta>{_e(r)}</span>: {_e(why)}</li>" for r, why in rejected) + "</ul>"
           if rejected else "")
    )
    return _page(page_title, "".join(head) + table + ref_html, csp=_REPORT_CSP)


def _page(title: str, body: str, *, csp: str | None) -> str:
    csp_meta = f'<meta http-equiv="Content-Security-Policy" content="{csp}">' if csp else ""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">{csp_meta}'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head>\n"
        f"<body>{body}</body></html>\n"
    )


def _relative_href(href: object, where: str) -> str:
    """A link target that stays inside the run folder, percent-quoted for an attribute."""
    if not isinstance(href, str) or not href.strip():
        raise ValueError(f"{where}: needs a non-empty relative path, got {href!r}")
    parts = urlsplit(href)
    # Relative only: an index is moved and archived with its run folder.
    if parts.scheme or parts.netloc or href.startswith(("/", "\\")):
        raise ValueError(f"{where}: '{href}' must be a path relative to the index, not a URL or absolute path")
    if ".." in href.replace("\\", "/").split("/"):
        raise ValueError(f"{where}: '{href}' leaves the run folder ('..'); link only to files inside it")
    # a file path, quoted whole: 'a#1.html' linked to file 'a' (fragment '1.html'), as '%' was already quoted
    return _e(quote(href, safe="/.-_~"))


def _index_entry(entry: object, i: int) -> str:
    where = f"entries[{i}]"
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where}: must be a dict, got {type(entry).__name__}")
    kind = entry.get("kind")
    heading = f"<h2>{_e(entry['title'])}</h2>" if entry.get("title") else ""
    note = f'<p class="meta">{_e(entry["note"])}</p>' if entry.get("note") else ""
    if kind == "image":
        alt = _e(entry.get("alt") or entry.get("title") or "figure")
        if "png" in entry:
            if not isinstance(entry["png"], (bytes, bytearray)) or not entry["png"]:
                raise ValueError(f"{where}: 'png' must be non-empty PNG bytes")
            src = "data:image/png;base64," + base64.b64encode(entry["png"]).decode("ascii")
        elif "src" in entry:
            src = _relative_href(entry["src"], where)
        else:
            raise ValueError(f"{where}: an image needs 'png' (bytes, embedded) or 'src' (relative path)")
        return f'{heading}<figure><img src="{src}" alt="{alt}"></figure>{note}'
    if kind == "table":
        cols, rows = entry.get("columns"), entry.get("rows")
        if not isinstance(cols, Sequence) or isinstance(cols, str) or not cols:
            raise ValueError(f"{where}: a table needs a non-empty list 'columns'")
        if not isinstance(rows, Sequence) or isinstance(rows, str):
            raise ValueError(f"{where}: a table needs a list 'rows'")
        body = []
        for r, row in enumerate(rows):
            if isinstance(row, str) or not isinstance(row, Sequence) or len(row) != len(cols):
                raise ValueError(f"{where}: row {r} must be a list of {len(cols)} cells, got {row!r}")
            body.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>")
        head = "".join(f"<th>{_e(c)}</th>" for c in cols)
        return f"{heading}<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{note}"
    if kind == "link":
        href = _relative_href(entry.get("href"), where)
        text = _e(entry.get("text") or entry.get("href"))
        return f'{heading}<p><a href="{href}">{text}</a></p>{note}'
    if kind == "text":
        if not isinstance(entry.get("text"), str):
            raise ValueError(f"{where}: a text entry needs a string 'text'")
        return f"{heading}<p>{_e(entry['text'])}</p>{note}"
    raise ValueError(f"{where}: kind must be one of image, table, link, text, got {kind!r}")


def render_index(entries: list[dict], title: str) -> str:
    """A run's index page, linking and showing its artefacts.

    Each entry is a dict with ``kind`` and optional ``title`` (a section heading) and ``note``:

    * ``{"kind": "image", "png": bytes}`` embeds a PNG; ``{"kind": "image", "src": "a.png"}``
      links it relatively (optional ``alt``).
    * ``{"kind": "table", "columns": [...], "rows": [[...], ...]}``; cells are shown as text.
    * ``{"kind": "link", "href": "reports/x.html", "text": "..."}``: relative paths only.
    * ``{"kind": "text", "text": "..."}``.

    Raises:
        ValueError: an unknown kind, a missing field, a ragged table row, or a link that
            is absolute, a URL or leaves the folder with ``..`` (an index travels with its run folder).
    """
    if not isinstance(title, str):
        raise ValueError(f"title must be a string, got {type(title).__name__}")
    if not isinstance(entries, Sequence) or isinstance(entries, str):
        raise ValueError(f"entries must be a list of dicts, got {type(entries).__name__}")
    body = f"<h1>{_e(title)}</h1>" + "".join(_index_entry(e, i) for i, e in enumerate(entries))
    if not entries:
        body += '<p class="meta">This run has no artefacts yet.</p>'
    # No CSP here: relative images and links are the point of an index.
    return _page(title, body, csp=None)
