import json

import pytest
from typer.testing import CliRunner

from leakloss.cli import app
from leakloss.heads import HeadCard, MLPHead, save_head

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
    assert rows[0] == {"word": "नेकपा", "phones": ["n", "e", "k", "ʌ", "p", "aː"], "source": rows[0]["source"],
                       "confidence": rows[0]["confidence"]}
    assert rows[0]["source"] in ("lexicon", "suffix", "rules") and rows[1]["phones"][1] == "ʌi̯"


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
