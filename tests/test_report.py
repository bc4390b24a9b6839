"""Tests for leakloss.report: result checks, the reading page, the index page, atomic writes."""

from __future__ import annotations

import base64
import copy
import io
import json
import math
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from leakloss.atomic import write_text_atomic
from leakloss.report import CLIP_PAD_S, render_index, render_report, write_report
from leakloss.schema import DECISIONS, ResultError, load_result, validate_result
from leakloss.text.normalize import BIDI_CONTROLS

SR = 16_000
EVIL = "<script>alert('x')</script>"


def sine(seconds: float = 2.0, freq: float = 220.0) -> torch.Tensor:
    t = torch.arange(int(round(seconds * SR)), dtype=torch.float64) / SR
    return (0.4 * torch.sin(2 * math.pi * freq * t)).to(torch.float32)


def site(kind: str = "deletion", score: float | None = 0.9, decision: str = "flagged", refs: int = 2) -> dict:
    return {"kind": kind, "nepali": "ʌ", "hindi": None if kind == "deletion" else "ə",
            "score": score, "decision": decision, "references_used": refs}


def make_result() -> dict:
    """A 2 s reading with one word of each decision, the first and last near the edges."""
    return {
        "query": "runs/swar/v1_s03.wav",
        "text": "आज नेकपा र अरू दलका आए",
        "status": "scored",
        "system": "swar",
        "sentence_id": "s03",
        "words": [
            {"index": 0, "word": "आज", "start": 0.05, "end": 0.30, "decision": "uncertain",
             "sites": [site("quality", 0.3, "uncertain", 1)]},
            {"index": 1, "word": "नेकपा", "start": 0.30, "end": 0.70, "decision": "flagged", "key": True,
             "sites": [site("deletion", 1.0, "flagged", 2)]},
            {"index": 2, "word": "र", "start": 0.70, "end": 0.80, "decision": "no_change",
             "sites": [site("quality", 0.05, "no_change", 2)]},
            {"index": 3, "word": "अरू", "start": 0.80, "end": 1.10, "decision": "unscored",
             "sites": [site("deletion", None, "unscored", 0)]},
            {"index": 4, "word": "दलका", "start": None, "end": None, "decision": "not_tested", "sites": []},
            {"index": 5, "word": "आए", "start": 1.60, "end": 2.00, "decision": "flagged",
             "sites": [site("quality", 0.8, "flagged", 2)]},
        ],
        "references": ["refs/teacher_v2_s03.wav", "refs/teacher_v3_s03.wav"],
    }


def audio_uris(page: str) -> list[str]:
    return re.findall(r'<audio controls[^>]* src="(data:audio/wav;base64,[^"]+)"', page)


def decode(uri: str) -> np.ndarray:
    data, rate = sf.read(io.BytesIO(base64.b64decode(uri.split(",", 1)[1])), dtype="float32")
    assert rate == SR
    return data


# --- the reading page ------------------------------------------------------------------------

def test_page_shows_sentence_words_decisions_and_legend():
    page = render_report(make_result(), sine())
    assert page.startswith("<!DOCTYPE html>")
    assert "आज नेकपा र अरू दलका आए" in page
    for word in ("आज", "नेकपा", "र", "अरू", "दलका", "आए"):
        assert f">{word}<" in page
    # every decision appears in the legend with its colour, and "key" marks the key word
    legend = page[page.index('class="legend"'):page.index("</ul>")]
    for decision in DECISIONS:
        assert decision.replace("_", " ") in legend
    assert "#b71c1c" in page and "#1b5e20" in page
    assert 'नेकपा<span class="key">key</span>' in page
    assert "not aligned" in page  # the word without boundaries


def test_site_scores_and_references_are_shown():
    page = render_report(make_result(), sine())
    assert "1.000" in page and "0.050" in page and "0.300" in page
    assert "—" in page  # the unscored site has no score
    assert "ʌ → ∅" in page and "ʌ → ə" in page
    assert "2 ref" in page and "0 ref" in page
    assert "refs/teacher_v2_s03.wav" in page and "refs/teacher_v3_s03.wav" in page


def test_players_for_flagged_and_uncertain_words_plus_whole_sentence():
    wave = sine()
    uris = audio_uris(render_report(make_result(), wave))
    # sentence + uncertain आज + flagged नेकपा + flagged आए; not no_change/unscored/not_tested
    assert len(uris) == 4
    assert np.allclose(decode(uris[0]), wave.numpy(), atol=1 / 32768)


@pytest.mark.parametrize(
    "position, start, end",
    [
        (1, 0.05, 0.30),  # starts within the pad: clip starts at sample 0
        (2, 0.30, 0.70),  # middle: 120 ms either side
        (3, 1.60, 2.00),  # ends at the last sample: clip ends there
    ],
)
def test_word_clip_is_cut_at_boundaries_with_pad_clamped(position, start, end):
    wave = sine()
    clip = decode(audio_uris(render_report(make_result(), wave))[position])
    lo = max(0, math.floor((start - CLIP_PAD_S) * SR))
    hi = min(wave.numel(), math.ceil((end + CLIP_PAD_S) * SR))
    assert clip.shape[0] == hi - lo
    assert np.allclose(clip, wave[lo:hi].numpy(), atol=1 / 32768)


def test_wave_of_shape_1_by_t_is_accepted():
    assert len(audio_uris(render_report(make_result(), sine()[None]))) == 4


def test_without_audio_there_are_no_players_and_the_page_says_so():
    page = render_report(make_result(), None)
    assert "<audio" not in page
    assert "No audio was given" in page


def test_page_is_self_contained():
    page = render_report(make_result(), sine())
    assert "http://" not in page and "https://" not in page
    assert all(src.startswith("data:") for src in re.findall(r'src="([^"]*)"', page))
    assert "<link" not in page and "<script" not in page
    assert "Content-Security-Policy" in page and "default-src 'none'" in page


def test_all_user_text_is_escaped():
    r = make_result()
    r["text"] = f"आज {EVIL}"
    r["query"] = f"runs/{EVIL}.wav"
    r["system"] = EVIL
    r["sentence_id"] = EVIL
    r["words"][1]["word"] = EVIL
    r["words"][1]["sites"][0]["nepali"] = EVIL
    r["words"][1]["sites"][0]["hindi"] = EVIL  # (a decision outside the schema is rejected, not rendered)
    r["references"] = [f'refs/"{EVIL}.wav']
    r["status"], r["reason"] = "quarantined", EVIL
    page = render_report(r, sine(), title=EVIL)
    assert "<script" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert 'refs/&quot;&lt;script' in page


def test_bidi_controls_are_shown_not_obeyed():
    # a raw U+202E in a text or a file name reversed the rest of the page as the browser showed it
    r = make_result()
    r["query"] = "runs/a\u202egnp.wav"
    r["reason"], r["status"] = "x\u2066y", "quarantined"
    page = render_report(r, sine(), title="t\u202bu")
    assert not any(c in page for c in BIDI_CONTROLS)
    assert "runs/a[U+202E]gnp.wav" in page and "t[U+202B]u" in page and "x[U+2066]y" in page


def test_control_characters_are_shown_not_written_raw():
    # a NUL or ESC in a text or file name went into the page raw: not allowed in HTML, invisible in a browser
    r = make_result()
    r["query"] = "runs/a\x00b.wav"
    r["reason"], r["status"] = "x\x1b[31my\x85", "quarantined"
    page = render_report(r, sine(), title="t\x07u")
    assert not any(chr(c) in page for c in [*range(0, 9), 11, 12, *range(14, 32), *range(0x7F, 0xA0)])
    assert "runs/a[U+0000]b.wav" in page and "t[U+0007]u" in page and "x[U+001B][31my[U+0085]" in page


def test_quarantined_reading_shows_status_and_reason():
    r = make_result()
    r["status"], r["reason"] = "quarantined", "word check failed: CER 0.31"
    page = render_report(r, sine())
    assert "Quarantined:" in page and "word check failed: CER 0.31" in page
    assert "Quarantined:" not in render_report(make_result(), sine())


def test_default_title_is_the_query_file_name_and_title_overrides():
    assert "<title>leakloss: v1_s03.wav</title>" in render_report(make_result(), None)
    assert "<title>Swar, voice 1</title>" in render_report(make_result(), None, title="Swar, voice 1")


def test_boundaries_outside_the_audio_are_an_error():
    with pytest.raises(ValueError, match="outside the audio"):
        render_report(make_result(), sine(1.0))  # the last word is at 1.6-2.0 s


def test_small_overrun_from_aligner_frames_is_clamped():
    r = make_result()
    r["words"][5]["end"] = 2.0 + 0.04  # within BOUNDARY_TOLERANCE_S
    assert decode(audio_uris(render_report(r, sine()))[3]).shape[0] == SR * 2 - math.floor(1.48 * SR)


@pytest.mark.parametrize(
    "wave, sample_rate, message",
    [
        (sine().repeat(2, 1), SR, "mono"),
        (torch.zeros(0), SR, "mono"),
        ((sine() * 1000).to(torch.int16), SR, "float"),
        (sine().numpy(), SR, "torch.Tensor"),
        (sine(), 0, "sample_rate"),
        (sine(), True, "sample_rate"),
    ],
)
def test_bad_audio_arguments_are_clear_errors(wave, sample_rate, message):
    with pytest.raises(ValueError, match=message):
        render_report(make_result(), wave, sample_rate)


# --- result format ---------------------------------------------------------------------------

def _broken(path: str, value) -> dict:
    r = make_result()
    target, *rest = path.split(".")
    obj = r
    keys = [target, *rest]
    for k in keys[:-1]:
        obj = obj[int(k)] if k.isdigit() else obj[k]
    last = keys[-1]
    if value is KeyError:
        del obj[last]
    else:
        obj[int(last) if last.isdigit() else last] = value
    return r


@pytest.mark.parametrize(
    "path, value, message",
    [
        ("status", "done", "status must be one of"),
        ("text", KeyError, "missing required field 'text'"),
        ("query", 3, "'query' must be a string"),
        ("words", None, "'words' must be a list"),
        ("references", "a.wav", "'references' must be a list"),
        ("words.1.decision", "maybe", r"words\[1\].decision must be one of"),
        ("words.1.index", True, r"words\[1\].index"),
        ("words.1.index", 0, "index 0 appears more than once"),
        ("words.1.start", None, "both be numbers or both null"),
        ("words.1.start", 0.9, "0 <= start <= end"),
        ("words.1.end", float("nan"), "finite numbers"),
        ("words.1.key", "yes", "key must be true or false"),
        ("words.1.sites", KeyError, "sites must be a list"),
        ("words.1.sites.0.kind", "stress", "kind must be one of"),
        ("words.1.sites.0.score", 1.5, r"score must be a number in \[0, 1\]"),
        ("words.1.sites.0.references_used", -1, "references_used"),
    ],
)
def test_malformed_results_name_the_field(path, value, message):
    with pytest.raises(ResultError, match=message):
        validate_result(_broken(path, value))
    with pytest.raises(ResultError, match=message):
        render_report(_broken(path, value), None)


def test_validate_result_accepts_the_format_and_does_not_mutate():
    r = make_result()
    before = copy.deepcopy(r)
    assert validate_result(r) == before
    render_report(r, sine())
    assert r == before


def test_load_result_reads_and_names_bad_files(tmp_path):
    good = tmp_path / "a.json"
    good.write_text(json.dumps(make_result(), ensure_ascii=False), encoding="utf-8")
    assert load_result(good)["text"] == make_result()["text"]
    bad = tmp_path / "b.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ResultError, match=r"b\.json' is not valid JSON"):
        load_result(bad)
    with pytest.raises(ResultError, match="cannot be read"):
        load_result(tmp_path / "missing.json")
    wrong = tmp_path / "c.json"
    wrong.write_text(json.dumps({**make_result(), "status": "x"}), encoding="utf-8")
    with pytest.raises(ResultError, match=r"c\.json'.*status"):
        load_result(wrong)


# --- writing ---------------------------------------------------------------------------------

def test_write_report_writes_atomically_and_leaves_no_temp(tmp_path):
    page = render_report(make_result(), sine())
    out = write_report(tmp_path / "r.html", page)
    assert out.read_text(encoding="utf-8") == page
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~mask


def test_failed_write_keeps_the_old_file_and_removes_the_temp(tmp_path, monkeypatch):
    target = tmp_path / "r.html"
    target.write_text("old", encoding="utf-8")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        write_report(target, "<p>new</p>")
    assert target.read_text(encoding="utf-8") == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_write_errors(tmp_path):
    with pytest.raises(ValueError, match=r"must end in \.html"):
        write_report(tmp_path / "r.txt", "<p></p>")
    with pytest.raises(ValueError, match="must be a string"):
        write_report(tmp_path / "r.html", b"<p></p>")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        write_text_atomic(tmp_path / "nope" / "r.html", "x")


# --- index page ------------------------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


def test_index_embeds_and_links_artefacts():
    page = render_index(
        [
            {"kind": "image", "title": "Flag rates", "png": PNG},
            {"kind": "image", "src": "comparison.png", "alt": "chart"},
            {"kind": "table", "title": "Systems", "columns": ["System", "Flagged"],
             "rows": [["swar", "36 of 100 (36.0%) [27.3–45.8]"], ["teacher", "4 of 104 (3.8%)"]]},
            {"kind": "link", "href": "reports/swar v1.html", "text": "Swar, voice 1"},
            {"kind": "text", "text": "Frozen scorer v84.", "note": "research preview"},
        ],
        "Run 2024-06",
    )
    assert "data:image/png;base64," + base64.b64encode(PNG).decode() in page
    assert 'src="comparison.png"' in page and 'alt="chart"' in page
    assert "<td>36 of 100 (36.0%) [27.3–45.8]</td>" in page
    assert 'href="reports/swar%20v1.html"' in page and ">Swar, voice 1</a>" in page
    assert "Frozen scorer v84." in page and "research preview" in page
    assert "<h1>Run 2024-06</h1>" in page


def test_index_escapes_text():
    page = render_index([{"kind": "table", "title": EVIL, "columns": [EVIL], "rows": [[EVIL]]},
                         {"kind": "link", "href": "a.html", "text": EVIL}], EVIL)
    assert "<script" not in page


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"kind": "link", "href": "https://example.com/x"}, "relative"),
        ({"kind": "link", "href": "javascript:alert(1)"}, "relative"),
        ({"kind": "link", "href": "/etc/passwd"}, "relative"),
        ({"kind": "link", "href": ""}, "non-empty"),
        ({"kind": "link", "href": "../other-run/index.html"}, "leaves the run folder"),
        ({"kind": "link", "href": "reports/../../x.html"}, "leaves the run folder"),
        ({"kind": "image", "src": "..\\secret.png"}, "leaves the run folder"),
        ({"kind": "image"}, "needs 'png'"),
        ({"kind": "image", "png": b""}, "non-empty PNG"),
        ({"kind": "table", "columns": ["a", "b"], "rows": [["1"]]}, "row 0 must be a list of 2"),
        ({"kind": "table", "columns": [], "rows": []}, "columns"),
        ({"kind": "text"}, "string 'text'"),
        ({"kind": "video"}, "kind must be one of"),
        ("not a dict", "must be a dict"),
    ],
)
def test_index_rejects_bad_entries(entry, message):
    with pytest.raises(ValueError, match=message):
        render_index([entry], "run")


def test_index_keeps_links_with_dots_in_names():
    page = render_index([{"kind": "link", "href": "reports/a..b.html"}, {"kind": "image", "src": "./x.png"}], "run")
    assert 'href="reports/a..b.html"' in page and 'src="./x.png"' in page


def test_index_links_name_files_whose_names_hold_url_characters():
    """'reports/a#1.html' linked to file 'reports/a' (fragment '1.html'), 'b?x=1.html' to 'b': dead links."""
    from urllib.parse import unquote, urljoin, urlsplit

    names = ["reports/a#1.html", "reports/b?x=1.html", "reports/c d%20é.html"]
    page = render_index([{"kind": "link", "href": n, "text": str(i)} for i, n in enumerate(names)], "run")
    hrefs = re.findall(r'href="([^"]*)"', page)
    for name, href in zip(names, hrefs, strict=True):
        url = urlsplit(urljoin("file:///run/index.html", href))
        assert not url.query and not url.fragment and unquote(url.path) == f"/run/{name}", href


def test_empty_index_says_so():
    assert "no artefacts yet" in render_index([], "run")


# --- in a real browser -----------------------------------------------------------------------

def _browser() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("chromium not installed: apt-get install -y chromium (Debian) to run browser tests")


# A probe page loads the report in an iframe and waits for each player's metadata, so the
# check covers decoding under the report's own Content-Security-Policy.
PROBE = """<!DOCTYPE html><html><body><pre id="out">PENDING</pre>
<iframe id="f" src="report.html" width="1100" height="900"></iframe><script>
const f = document.getElementById('f');
f.addEventListener('load', async () => {
  const audios = [...f.contentDocument.querySelectorAll('audio')];
  const res = await Promise.all(audios.map(a => new Promise(done => {
    if (a.readyState >= 1) return done({ok: true, duration: a.duration});
    a.addEventListener('loadedmetadata', () => done({ok: true, duration: a.duration}));
    a.addEventListener('error', () => done({ok: false, code: a.error && a.error.code}));
    a.load();
  })));
  document.getElementById('out').textContent = 'RESULT' + JSON.stringify(res) + 'END';
});
</script></body></html>"""


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.browser
def test_report_opens_in_headless_chromium_and_players_load(tmp_path):
    browser = _browser()
    report = write_report(tmp_path / "report.html", render_report(make_result(), sine()))
    base = [browser, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}"]

    dom = _run([*base, "--dump-dom", report.as_uri()], tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    players = re.findall(r"<audio[^>]*>", dom.stdout)
    assert len(players) == 4 and all('src="data:audio/wav;base64,' in p for p in players)

    (tmp_path / "probe.html").write_text(PROBE, encoding="utf-8")
    probe = _run([*base, "--allow-file-access-from-files", "--virtual-time-budget=10000",
                  "--dump-dom", (tmp_path / "probe.html").as_uri()], tmp_path)
    found = re.search(r"RESULT(.*?)END", probe.stdout)
    assert found, f"players did not report back: {probe.stdout[-500:]} {probe.stderr[-1000:]}"
    loaded = json.loads(found.group(1))
    assert [p["ok"] for p in loaded] == [True] * 4
    # sentence 2 s; आज 0-0.42 s (clamped); नेकपा 0.18-0.82 s; आए 1.48-2 s (clamped)
    assert [round(p["duration"], 2) for p in loaded] == [2.0, 0.42, 0.64, 0.52]

    shot = tmp_path / "report.png"
    run = _run([*base, "--window-size=1100,1000", f"--screenshot={shot}", report.as_uri()], tmp_path)
    assert run.returncode == 0 and shot.is_file(), run.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a blank page is ~5 kB


def test_audio_warnings_are_shown_and_escaped():
    r = make_result()
    r["warnings"] = ["query: 42.0% of samples clipped (|x| >= 0.999)", f"reference {EVIL}.wav: resampled"]
    page = render_report(r, sine())
    assert "Warnings:" in page and "42.0% of samples clipped" in page
    assert "<script" not in page and "reference &lt;script&gt;" in page
    assert "Warnings:" not in render_report(make_result(), sine())  # a clean reading has no banner


def test_unscored_reading_is_a_valid_result_and_says_why():
    r = make_result()
    r["status"], r["reason"] = "unscored", "every reference rejected: r1.wav: word check: CER 0.40"
    assert validate_result(r)["status"] == "unscored"
    assert "every reference rejected" in render_report(r, sine())


def test_punctuation_is_attached_to_words_never_a_word_of_its_own():
    """The scorer keeps "?" and the danda as entries of their own: the page showed them as words (a row, a chip,
    and one more of "N words")."""
    from leakloss.report import reading_words

    result = make_result()
    result["text"] = "आज नेकपा र अरू दलका आए?"
    punct = {"start": None, "end": None, "decision": "not_tested", "sites": []}
    result["words"][1:1] = [{"index": 1, "word": ",", **punct}]
    result["words"].insert(0, {"index": 0, "word": "“", **punct})
    for k, w in enumerate(result["words"]):
        w["index"] = k
    result["words"].append({"index": len(result["words"]), "word": "?", **punct})
    result["words"].append({"index": len(result["words"]), "word": "।", **punct})
    shown = [text for _, text in reading_words(result["words"])]
    assert shown == ["“आज,", "नेकपा", "र", "अरू", "दलका", "आए?।"]
    page = render_report(result, sine())
    cells = re.findall(r'<td lang="ne">(.*?)</td>', page)
    assert [re.sub(r"<span class=\"key\">key</span>", "", c) for c in cells] == shown
    assert "6 words" in page and ">?<" not in page and ">।<" not in page


def test_straight_quotes_open_then_close():
    # a straight " is Unicode Po: both joined the word before them (उनले" नमस्ते" भने)
    from leakloss.report import reading_words

    punct = {"start": None, "end": None, "decision": "not_tested", "sites": []}
    tokens = ["उनले", '"', "नमस्ते", '"', "भने", "'", "हो", "'"]
    words = [{"index": i, "word": t, **punct} for i, t in enumerate(tokens)]
    assert [text for _, text in reading_words(words)] == ["उनले", '"नमस्ते"', "भने", "'हो'"]


def test_a_text_of_punctuation_only_keeps_its_entries():
    from leakloss.report import reading_words

    words = [{"index": 0, "word": "?", "start": None, "end": None, "decision": "not_tested", "sites": []}]
    assert [text for _, text in reading_words(words)] == ["?"]


def test_the_page_says_where_its_references_came_from_and_labels_reference_free():
    from leakloss.report import render_report

    base = {"query": "q.wav", "text": "नेकपा", "status": "scored", "references": [], "reference_checks": [],
            "words": [{"index": 0, "word": "नेकपा", "start": None, "end": None, "decision": "no_change",
                       "sites": [{"kind": "deletion", "nepali": "ʌ", "hindi": None, "score": 0.1,
                                  "decision": "no_change", "references_used": 0}]}]}
    free = render_report(base | {"reference_origin": {"origin": "reference_free", "detail": "head rawconv"}}, None)
    assert "Reference-free:" in free and "references: none, reference-free (head rawconv)" in free
    synthesised = {"origin": "synthesised", "detail": "embedded teacher voices teacher0, teacher2"}
    page = render_report(base | {"references": ["r.wav"], "reference_origin": synthesised}, None)
    assert "references: synthesised (embedded teacher voices teacher0, teacher2)" in page and "Reference-free" not in page
    assert "references: given" in render_report(base, None)
