"""End-to-end: a small `leakloss demo` run, and its index.html in a real headless browser."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import needs_embedded

PROBE = """<!DOCTYPE html><html><body><pre id="out">PENDING</pre>
<iframe id="f" src="index.html" width="1100" height="900"></iframe><script>
const f = document.getElementById('f');
f.addEventListener('load', async () => {
  const imgs = [...f.contentDocument.querySelectorAll('img')];
  await Promise.all(imgs.map(i => i.complete ? 0 : new Promise(d => { i.onload = d; i.onerror = d; })));
  const res = imgs.map(i => ({src: i.getAttribute('src'), ok: i.naturalWidth > 0}));
  document.getElementById('out').textContent = 'RESULT' + JSON.stringify(res) + 'END';
});
</script></body></html>"""


def _browser():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    pytest.skip("chromium not installed: apt-get install -y chromium (Debian) to run browser tests")


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    from leakloss.demo import DemoConfig, run_demo

    out = tmp_path_factory.mktemp("demo")
    result = run_demo(DemoConfig(out=out, sentences=4, f5_steps=20, f5_items=8, f5_probe_words=1, progress=False))
    return out, result


@needs_embedded
@pytest.mark.slow
def test_demo_writes_every_artefact_and_separates_the_systems(demo_run):
    out, result = demo_run
    for rel in ("index.html", "comparison/comparison.md", "comparison/comparison.png", "finetune/leak_curves.png"):
        assert (out / rel).is_file(), rel
    reports = list((out / "reports").rglob("*.html"))
    assert len(reports) == 8
    systems = result["comparison"]["systems"]
    assert systems["Hindi base"]["key_flagged"]["count"] >= systems["teacher"]["key_flagged"]["count"]


@needs_embedded
@pytest.mark.slow
def test_the_fine_tune_stage_starts_from_the_hindi_base_and_probes_its_own_unseen_words(demo_run):
    # issue 41: the stage fine-tuned a tiny F5 from scratch, which never spoke; it now fine-tunes the committed
    # Hindi base, and its probe set (test-word phrases the fine-tune never contains) is measured every 5 updates
    import csv

    import torch

    from leakloss.config import checkpoints_path

    out, _ = demo_run
    card = json.loads((Path(checkpoints_path("f5_hindi_base")) / "model.json").read_text(encoding="utf-8"))
    for name in ("with_penalty", "without_penalty"):
        ckpt = torch.load(out / "finetune" / name / "ckpts" / "model_last.pt", map_location="cpu", weights_only=True)
        state = ckpt["model_state_dict"]
        blocks = {k.split(".")[2] for k in state if k.startswith("transformer.transformer_blocks.")}
        assert len(blocks) == card["architecture"]["depth"], name
        assert state["transformer.proj_out.weight"].shape[1] == card["architecture"]["dim"], name
        rows = list(csv.DictReader((out / "finetune" / name / "leak_curves.csv").open(encoding="utf-8")))
        assert [int(r["step"]) for r in rows if r["name"] == "leak_probe/sites"] == [5, 10, 15, 20], name


@needs_embedded
@pytest.mark.slow
def test_demo_rerun_reuses_caches(demo_run):
    from leakloss.demo import DemoConfig, run_demo

    out, first = demo_run
    stamp = (out / "results" / "teacher" / ".stamp").stat().st_mtime_ns
    again = run_demo(DemoConfig(out=out, sentences=4, f5_steps=20, f5_items=8, f5_probe_words=1, progress=False))
    assert (out / "results" / "teacher" / ".stamp").stat().st_mtime_ns == stamp
    assert again["minutes"] < first["minutes"]


@needs_embedded
@pytest.mark.slow
@pytest.mark.browser
def test_index_opens_in_headless_chromium(demo_run, tmp_path):
    out, _ = demo_run
    browser = _browser()
    base = [browser, "--headless", "--disable-gpu", "--no-sandbox", f"--user-data-dir={tmp_path / 'profile'}"]
    (out / "probe.html").write_text(PROBE, encoding="utf-8")
    probe = subprocess.run([*base, "--allow-file-access-from-files", "--virtual-time-budget=10000", "--dump-dom",
                            (out / "probe.html").as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r"RESULT(.*?)END", probe.stdout)
    assert found, probe.stderr[-1000:]
    images = json.loads(found.group(1))
    assert len(images) >= 2 and all(i["ok"] for i in images), images
    shot = tmp_path / "index.png"
    run = subprocess.run([*base, "--window-size=1100,1400", f"--screenshot={shot}", (out / "index.html").as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and shot.read_bytes()[:4] == b"\x89PNG"
    report = next((out / "reports" / "hindi_base").glob("*.html"))
    dom = subprocess.run([*base, "--dump-dom", report.as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert "<audio" in dom


@needs_embedded
@pytest.mark.slow
def test_a_rerun_with_other_f5_steps_starts_the_fine_tune_stage_afresh(demo_run):
    """F5 resumed the first run's checkpoints in the same folders: it trained nothing, wiped the curves and failed
    with a traceback ("no finite points of 'leak/penalty'")."""
    from integrations.f5_tts import read_leak_curve
    from leakloss.demo import DemoConfig, run_demo

    out, _ = demo_run
    run_demo(DemoConfig(out=out, sentences=4, f5_steps=8, f5_items=8, f5_probe_words=1, progress=False))
    for name in ("with_penalty", "without_penalty"):
        flow = read_leak_curve(out / "finetune" / name / "leak_curves.csv", "loss/flow")
        assert flow and max(step for step, _ in flow) == 8, name  # 8 new updates, not the old 20


def test_the_fine_tune_never_trains_on_the_probe_sets_test_words():
    from leakloss.demo import finetune_texts, probe_words
    from train_f5.data import is_test_word

    texts, probes = finetune_texts(24), probe_words(8)
    assert len(texts) == 24 and len(probes) == 8
    assert all(is_test_word(p.word) and p.word in p.phrase.split() for p in probes)
    trained = {w for t in texts for w in t.split()}
    assert not any(is_test_word(w) for w in trained) and not {p.word for p in probes} & trained


def test_the_demo_shows_its_systems_by_name_never_by_folder(tmp_path):
    """The comparison, its plot and the index said "hindi_base" (the folder's name) to readers."""
    from leakloss.demo import SYSTEM_NAMES, DemoConfig, _compare, _index

    result = {"query": "s1.wav", "text": "आज नेकपा आए", "status": "scored", "sentence_id": "s1", "references": ["r.wav"],
              "words": [{"index": 0, "word": "नेकपा", "start": 0.1, "end": 0.4, "decision": "flagged", "key": True,
                         "sites": [{"kind": "deletion", "nepali": "ʌ", "hindi": None, "score": 0.9,
                                    "decision": "flagged", "references_used": 2}]}]}
    dirs = {}
    for folder in SYSTEM_NAMES:
        dirs[folder] = tmp_path / "results" / folder
        dirs[folder].mkdir(parents=True)
        (dirs[folder] / "s1.json").write_text(json.dumps(result, ensure_ascii=False), encoding="utf-8")
    cfg = DemoConfig(out=tmp_path, progress=False)
    for folder in SYSTEM_NAMES:  # an earlier run's reading, not this run's: not counted
        (dirs[folder] / "s2.json").write_text(json.dumps(result | {"sentence_id": "s2"}, ensure_ascii=False),
                                              encoding="utf-8")
    comparison = _compare(cfg, dirs, [{"sentence_id": "s1", "text": "आज नेकपा आए"}])
    assert sorted(comparison["systems"]) == ["Hindi base", "teacher"]
    assert all(s["readings"] == 1 for s in comparison["systems"].values())
    md = (tmp_path / "comparison" / "comparison.md").read_text(encoding="utf-8")
    assert "| Hindi base |" in md and "hindi_base" not in md
    index = _index(cfg, [], comparison, None, [{"sentence_id": "s1", "text": "आज नेकपा आए"}]).read_text(encoding="utf-8")
    shown = re.sub(r'(href|src)="[^"]*"', "", index)  # links may name the folders; the text may not
    assert "Hindi base · s1" in shown and "hindi_base" not in shown


@pytest.mark.slow  # finding the sites of every held-out sentence: about 15 s
def test_demo_sentences_says_when_the_request_is_capped():
    """--sentences 100000 used 52 sentences without saying so (issue 43, defect 18)."""
    from leakloss.demo import demo_sentences

    few, note = demo_sentences(3)
    assert len(few) == 3 and note is None
    every, note = demo_sentences(100_000)
    assert len(every) > 3 and few == every[:3]
    assert note == (f"--sentences 100000 asked for more sentences than the demo has: {len(every)} held-out "
                    "sentences with a testable site are used")
    assert demo_sentences(len(every)) == (every, None)


@pytest.mark.slow
def test_the_capped_request_is_warned_on_the_terminal_and_in_the_summary(tmp_path, monkeypatch, capsys):
    """The demo's stages are replaced: only the warning's way to the terminal, the index and the result is run."""
    import leakloss.demo as demo
    import train_heads.evaluate as evaluate

    every, _ = demo.demo_sentences(100_000)
    seen = {}
    monkeypatch.setattr(demo, "_heads", lambda cfg: (tmp_path / "heads", []))
    monkeypatch.setattr(evaluate, "heldout_markdown", lambda rows: "held-out table")
    monkeypatch.setattr(demo, "_readings", lambda cfg, chosen: seen.setdefault("chosen", chosen) and [])
    monkeypatch.setattr(demo, "_score", lambda cfg, heads, items: {})
    monkeypatch.setattr(demo, "_compare", lambda cfg, dirs, items: {"systems": {}})
    monkeypatch.setattr(demo, "_finetune", lambda cfg: None)
    monkeypatch.setattr(demo, "_index", lambda cfg, heldout, comparison, curves, items, notes=():
                        seen.setdefault("notes", list(notes)) and tmp_path / "index.html")
    result = demo.run_demo(demo.DemoConfig(out=tmp_path / "out", sentences=100_000, progress=False))
    said = f"--sentences 100000 asked for more sentences than the demo has: {len(every)} held-out sentences"
    assert seen["chosen"] == every and len(result["warnings"]) == 1 and said in result["warnings"][0]
    assert seen["notes"] == result["warnings"]  # on the index page
    printed = " ".join(capsys.readouterr().out.split())
    assert printed.count(f"warning: {said}") == 2  # before the work, and again in the closing summary
