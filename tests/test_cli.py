import json

import pytest
from typer.testing import CliRunner

from leakloss.cli import app
from leakloss.heads import HeadCard, MLPHead, RawConvHead, save_head

runner = CliRunner()
SENTENCE = "आज नेकपा र अरू दलका प्रतिनिधि बैठकमा आए।"


def test_sites_json_contract():
    r = runner.invoke(app, ["sites", SENTENCE, "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["text"] == SENTENCE
    nekpa = next(w for w in d["words"] if w["word"] == "नेकपा")
    assert set(nekpa) >= {"index", "word", "nepali", "hindi", "confidence", "sites"}
    assert nekpa["sites"][0] == {"kind": "deletion", "position": 3, "nepali": "ʌ", "hindi": None, "testable": True}
    assert d["words"][-1]["skipped"] == "punctuation"


def test_sites_table_and_default_example():
    r = runner.invoke(app, ["sites"])
    assert r.exit_code == 0 and "नेकपा" in r.stdout and "testable site" in r.stdout


def test_g2p_json_lines():
    r = runner.invoke(app, ["g2p", "नेकपा", "हैन", "--json"])
    assert r.exit_code == 0
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    # issue 15 added the per-vowel steps ("vowels") and the model's word "probability" to the contract
    assert {k: v for k, v in rows[0].items() if k not in ("vowels", "probability")} == {
        "word": "नेकपा", "phones": ["n", "e", "k", "ʌ", "p", "aː"], "source": rows[0]["source"],
        "confidence": rows[0]["confidence"]}
    assert set(rows[0]) == {"word", "phones", "source", "confidence", "vowels", "probability"}
    assert rows[0]["source"] in ("lexicon", "suffix", "rules", "model") and rows[1]["phones"][1] == "ʌi̯"


@pytest.mark.parametrize("text", ["", "   ", "...।", "Hello world", "123 456"])
def test_bad_text_is_a_clear_error(text):
    r = runner.invoke(app, ["sites", text])
    assert r.exit_code == 2
    assert "error" in r.stderr and "Traceback" not in r.output


def test_mixed_script_words_are_skipped_entries():
    r = runner.invoke(app, ["sites", "नेकपाabc हैन", "--json"])
    assert r.exit_code == 0
    words = json.loads(r.stdout)["words"]
    assert words[0]["skipped"] and words[1]["word"] == "हैन"


def test_ten_thousand_words(tmp_path):
    f = tmp_path / "big.txt"
    f.write_text(" ".join(["नेकपा"] * 10_000), encoding="utf-8")
    r = runner.invoke(app, ["sites", "--file", str(f), "--json"])
    assert r.exit_code == 0 and len(json.loads(r.stdout)["words"]) == 10_000


def test_invalid_utf8_file(tmp_path):
    f = tmp_path / "bad.txt"
    f.write_bytes(b"\xff\xfe\xfa")
    r = runner.invoke(app, ["sites", "--file", str(f)])
    assert r.exit_code == 2 and "UTF-8" in r.stderr


def test_g2p_non_devanagari_word_exits_nonzero():
    r = runner.invoke(app, ["g2p", "hello", "--json"])
    assert r.exit_code == 2 and "error" in json.loads(r.stdout.splitlines()[0])


@pytest.mark.parametrize("text", ["।।", "😀", "! ?"])
def test_g2p_of_punctuation_or_symbols_only_is_an_error_as_in_sites(text):
    for command in ("g2p", "sites"):
        r = runner.invoke(app, [command, text])
        assert r.exit_code == 2 and "error: no Devanagari word" in r.stderr, (command, r.stderr)


def test_recognize_missing_file():
    r = runner.invoke(app, ["recognize", "/nonexistent.wav"])
    assert r.exit_code == 2 and "error" in r.stderr


def test_heads_cards_from_dir(tmp_path):
    rows = [{"head": "deletion", "pair_kind": "physical", "caught": 5, "total": 6, "false_flags": 0, "shams": 6}]
    save_head(tmp_path / "deletion", MLPHead(), HeadCard("deletion", {}, "b", "1", heldout=rows))
    r = runner.invoke(app, ["heads", "--dir", str(tmp_path), "--json"])
    assert r.exit_code == 0
    card = json.loads(r.stdout.splitlines()[0])
    assert card["head"] == "deletion" and card["heldout"] == rows and card["architecture"]["hidden"] == 16
    empty = runner.invoke(app, ["heads", "--dir", str(tmp_path / "nothing")])
    assert empty.exit_code == 2


def test_heads_prints_every_cards_held_out_rows(tmp_path):
    # only the first card's table was printed: the reference-free head's rows were dropped
    rows = [{"head": "deletion", "pair_kind": "physical", "caught": 5, "total": 6, "false_flags": 0, "shams": 6}]
    other = [{"head": "rawconv", "pair_kind": "physical", "caught": 1, "total": 2, "false_flags": 1, "shams": 2}]
    save_head(tmp_path / "deletion", MLPHead(), HeadCard("deletion", {}, "b", "1", heldout=rows))
    save_head(tmp_path / "quality", MLPHead(), HeadCard("quality", {}, "b", "1", heldout=rows))
    save_head(tmp_path / "rawconv", RawConvHead(), HeadCard("rawconv", {}, "b", "1", heldout=other))
    r = runner.invoke(app, ["heads", "--dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert r.stdout.count("| deletion | ") == 1 and r.stdout.count("| rawconv | ") == 1


@pytest.mark.parametrize("damage", ["deep", "folder"])
def test_a_head_card_too_deep_or_that_is_a_folder_is_one_error_line(tmp_path, damage):
    # a RecursionError / IsADirectoryError traceback
    save_head(tmp_path / "deletion", MLPHead(), HeadCard("deletion", {}, "b", "1"))
    card = tmp_path / "deletion.json"
    card.unlink()
    if damage == "deep":
        card.write_text("[" * 5000 + "]" * 5000)
    else:
        card.mkdir()
    r = runner.invoke(app, ["heads", "--dir", str(tmp_path)])
    assert r.exit_code == 2 and "Traceback" not in r.output and "not a valid head card" in r.stderr, r.output


def test_a_full_disk_on_stdout_is_one_error_line_and_exit_2():
    # every command printed a traceback box when stdout could not be written
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "leakloss.cli", "testset"], stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "error: No space left on device" in done.stderr


def test_g2p_file_with_dandas_attached(tmp_path):
    # issue 14: `g2p --file` rejected every word with a danda attached (`sites` splits it off)
    f = tmp_path / "words.txt"
    f.write_text("नेपाल सुन्दर छ। \"हैन\" ॥\n", encoding="utf-8")
    r = runner.invoke(app, ["g2p", "--file", str(f), "--json"])
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [row["word"] for row in rows if "phones" in row] == ["नेपाल", "सुन्दर", "छ", "हैन"]
    assert [row["skipped"] for row in rows if "skipped" in row] == ["punctuation"] * 4
    assert not any("error" in row for row in rows)


def test_g2p_shows_the_deciding_step_and_probability():
    r = runner.invoke(app, ["g2p", "सडकमा", "नेकपा", "--json"])
    assert r.exit_code == 0
    model_row, lex_row = [json.loads(line) for line in r.stdout.splitlines()]
    assert model_row["source"] == "model" and 0 < model_row["probability"] <= 1
    assert model_row["vowels"] and all(v["step"] == "model" and 0 <= v["p_keep"] <= 1 for v in model_row["vowels"])
    assert lex_row["vowels"] == [{"unit": 1, "letter": "क", "kept": True, "step": "lexicon", "p_keep": None}]
    r = runner.invoke(app, ["g2p", "सडकमा"])
    assert r.exit_code == 0 and "model" in r.stdout and "P(keep)" in r.stdout


def test_sites_one_very_long_word_is_an_error(tmp_path):
    # issue 14: one 20k-letter word took 19 GB and 300 s in the phone alignment
    f = tmp_path / "w.txt"
    f.write_text("क" * 20000 + "\n", encoding="utf-8")
    r = runner.invoke(app, ["sites", "--file", str(f)])
    assert r.exit_code == 2 and "error:" in r.output and "characters" in r.output
    r = runner.invoke(app, ["g2p", "क" * 500, "--json"])
    assert r.exit_code == 2 and "error" in json.loads(r.stdout.splitlines()[0])


def test_names_and_texts_in_brackets_are_printed_as_they_are(tmp_path):
    """A '[/x]' in a system name, a reason or a card was rich markup: a MarkupError traceback, or eaten."""
    from tests.test_schema import result

    rows = [{"head": "deletion", "pair_kind": "physical", "voice_family": "[/v]", "caught": 5, "total": 6,
             "false_flags": 0, "shams": 6}]
    save_head(tmp_path / "heads" / "deletion", MLPHead(), HeadCard("deletion", {}, "[/x]", "1", heldout=rows))
    r = runner.invoke(app, ["heads", "--dir", str(tmp_path / "heads")])
    assert r.exit_code == 0, r.output
    assert "[/x]" in r.stdout and "[/v]" in r.stdout
    for system in ("a", "b"):
        (tmp_path / system).mkdir()
        (tmp_path / system / "r1.json").write_text(json.dumps(result(), ensure_ascii=False), encoding="utf-8")
    r = runner.invoke(app, ["compare", f"[/x]={tmp_path / 'a'}", f"f5[v1]={tmp_path / 'b'}",
                            "--out", str(tmp_path / "cmp")])
    assert r.exit_code == 0, r.output
    assert "[/x]" in r.stdout and "f5[v1]" in r.stdout


@pytest.mark.parametrize("command", ["g2p", "sites"])
@pytest.mark.parametrize("token", ["[/]", "[#]", "[/]!"])
def test_bracketed_punctuation_is_shown_as_typed(command, token):
    """`leakloss g2p नेपाल "[/]"` was a MarkupError traceback; "[#]" printed an empty word cell."""
    r = runner.invoke(app, [command, f"नेपाल {token}"])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert token in r.stdout


def test_control_and_bidi_characters_reach_the_terminal_as_codes():
    # a raw ESC in a word drove the terminal (colours, cursor moves); a raw U+202E reordered the line
    for command in (["sites", "नेकपा \x1b[31mred \u202eर"], ["g2p", "नेकपा", "\x1b[2J"]):
        r = runner.invoke(app, command)
        assert "\x1b" not in r.output and "\u202e" not in r.output, r.output
        assert "[U+001B]" in r.output


def test_options_the_reference_free_head_does_not_read_are_refused_with_it(tmp_path):
    # --heads was accepted and dropped: the shipped reference-free head decided whatever it named
    from tests.tiny_models import TEXT, write_clip

    write_clip(tmp_path / "reading.wav")
    for command in (["score", str(tmp_path / "reading.wav"), "--text", TEXT], ["score-batch", str(tmp_path / "m.jsonl"),
                    "--out", str(tmp_path / "b")], ["evaluate", f"x={tmp_path}", "--out", str(tmp_path / "e")]):
        ignored = CliRunner().invoke(app, [*command, "--reference-free", "--heads", str(tmp_path)])
        assert ignored.exit_code == 2 and "Traceback" not in ignored.output, ignored.output
        assert "error: --heads has no effect with --reference-free" in ignored.output, ignored.output
    both = CliRunner().invoke(app, ["score", str(tmp_path / "reading.wav"), "--text", TEXT, "--reference-free",
                                    "--recognizer-a", "a", "--recognizer-b", "b"])
    assert both.exit_code == 2 and "--recognizer-a, --recognizer-b have no effect" in both.output, both.output


@pytest.mark.slow
def test_score_without_ref_scores_against_synthesised_teacher_references(tmp_path):
    """It printed "every site will be 'unscored' (references are required)" and tested nothing."""
    from tests.conftest import embedded_ready

    if not embedded_ready():
        pytest.skip("embedded recognizers/heads not built")
    from leakloss.audio import save_audio
    from leakloss.speech.synth import HELDOUT_HINDI_VOICE, speak_text

    text = "आज नेकपा र अरू दलका प्रतिनिधि बैठकमा आए।"
    save_audio(tmp_path / "reading.wav", speak_text(text, HELDOUT_HINDI_VOICE).waveform)
    r = CliRunner().invoke(app, ["score", str(tmp_path / "reading.wav"), "--text", text,
                                 "--json", str(tmp_path / "r.json"), "--html", str(tmp_path / "r.html")])
    assert r.exit_code == 0, r.output
    assert "references synthesised by the embedded teacher voices teacher0, teacher2" in r.stderr
    assert "references: synthesised (embedded teacher voices teacher0, teacher2)" in r.stdout
    result = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert result["status"] == "scored" and result["reference_origin"]["origin"] == "synthesised"
    assert len(result["references"]) == 2
    sites = [s for w in result["words"] for s in w["sites"]]
    assert sites and all(s["references_used"] >= 1 and s["decision"] != "unscored" for s in sites)
    assert "synthesised (embedded teacher voices" in (tmp_path / "r.html").read_text(encoding="utf-8")
    free = CliRunner().invoke(app, ["score", str(tmp_path / "reading.wav"), "--text", text, "--reference-free",
                                    "--json", "-"])
    assert free.exit_code == 0, free.output
    result = json.loads(free.stdout)
    assert result["reference_origin"]["origin"] == "reference_free" and result["references"] == []
    assert any(s["decision"] == "flagged" for w in result["words"] for s in w["sites"])  # the Hindi base leaks
    both = CliRunner().invoke(app, ["score", str(tmp_path / "reading.wav"), "--text", text, "--reference-free",
                                    "--ref", str(tmp_path / "reading.wav")])
    assert both.exit_code == 2 and "not both" in both.output


def test_recognize_listens_with_the_real_speech_recognizer_unless_told(tmp_path):
    """`leakloss recognize` defaulted to A, trained on espeak only (95% PER on real speech)."""
    import json as json_module

    import numpy as np
    import soundfile as sf

    sf.write(tmp_path / "q.wav", (0.1 * np.sin(np.arange(16000) * 0.05)).astype("float32"), 16000)
    r = runner.invoke(app, ["recognize", str(tmp_path / "q.wav"), "--json"])
    assert r.exit_code == 0, r.output
    assert json_module.loads(r.stdout)["recognizer"].startswith("wb@")  # the id, with its weights hash
    r = runner.invoke(app, ["recognize", str(tmp_path / "q.wav"), "--json", "--recognizer", "a"])
    assert r.exit_code == 0 and json_module.loads(r.stdout)["recognizer"].startswith("a@")


def test_recognize_runs_the_recognizer_once(tmp_path, monkeypatch):
    # the frames came from one pass and the phones from greedy(), a second: twice the compute on every file
    import numpy as np
    import soundfile as sf

    from leakloss.acoustic.recognizer import Recognizer

    sf.write(tmp_path / "q.wav", (0.1 * np.sin(np.arange(16000) * 0.05)).astype("float32"), 16000)
    model = Recognizer.load("a")
    passes = []
    real = type(model).forward
    monkeypatch.setattr(type(model), "forward", lambda self, *a, **k: passes.append(1) or real(self, *a, **k))
    monkeypatch.setattr(Recognizer, "load", lambda *a, **k: model)
    r = runner.invoke(app, ["recognize", str(tmp_path / "q.wav"), "--json", "--recognizer", "a"])
    assert r.exit_code == 0 and len(passes) == 1, r.output


_SLEEPER = """
import os, signal, sys, time
from pathlib import Path
out = Path(sys.argv[1])
got = []
def note(signum, frame):
    got.append(signum)
    out.write_text(" ".join(map(str, got)))
for s in (signal.SIGINT, signal.SIGTERM):
    signal.signal(s, note)
(out.parent / "ready").write_text(str(os.getpid()))
deadline = time.time() + 20
while not got and time.time() < deadline:
    time.sleep(0.05)
time.sleep(0.5)  # a second delivery of the same signal would land here
sys.exit(7)
"""


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_training_command_passes_a_signal_on_once_and_waits_for_the_training(tmp_path, signame):
    # subprocess.call killed the trainer 0.25 s after a SIGINT (mid-save) and left it training on after a SIGTERM
    import os
    import signal
    import subprocess
    import sys
    import time

    (tmp_path / "sleeper.py").write_text(_SLEEPER)
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    parent = subprocess.Popen([sys.executable, "-c", "import sys; from leakloss.cli import run_module; "
                               f"sys.exit(run_module('sleeper', [{str(tmp_path / 'got')!r}]))"], env=env)
    for _ in range(400):
        if (tmp_path / "ready").exists():
            break
        time.sleep(0.05)
    child = int((tmp_path / "ready").read_text())
    os.kill(parent.pid, getattr(signal, signame))
    assert parent.wait(timeout=30) == 7  # the training's own exit, after it handled the signal
    assert (tmp_path / "got").read_text() == str(int(getattr(signal, signame)))  # once, not twice
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)  # no orphan left training
