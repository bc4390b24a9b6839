"""``leakloss evaluate``: a system's folder (F5 metadata.csv or test-set ids) to a report; bad input reported by name,
an interrupted run resumes, the report appears whole; end to end on the embedded teacher and Hindi base."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from typer.testing import CliRunner

from leakloss.evaluate import EvaluateError, EvaluateInterrupted, evaluate, mark_key_words, read_system, read_testset
from tests.conftest import needs_embedded
from tests.tiny_models import TEXT, save_tiny_models, write_clip

runner = CliRunner()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return save_tiny_models(tmp_path_factory.mktemp("tiny-models"))


def _kwargs(models):
    return dict(recognizer_a=str(models["a"]), recognizer_b=str(models["b"]), heads_dir=models["heads"],
                word_check=lambda w, t: (True, "test"), progress=False)


def _metadata(folder, lines):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metadata.csv").write_text("audio_file|text\n" + "\n".join(lines) + "\n", encoding="utf-8")
    return folder


def test_bad_metadata_lines_are_reported_by_name_never_dropped(tmp_path):
    (tmp_path / "sys").mkdir()
    write_clip(tmp_path / "sys" / "good.wav")
    (tmp_path / "sys" / "broken.wav").write_bytes(b"RIFF not audio")
    write_clip(tmp_path / "sys" / "latin.wav")
    folder = _metadata(tmp_path / "sys", [f"good.wav|{TEXT}", f"gone.wav|{TEXT}", f"broken.wav|{TEXT}",
                                          "latin.wav|hello world", "no separator here"])
    system = read_system("mine", folder)
    assert [i["id"] for i in system.items] == ["good"]
    reasons = {p["reading"]: p["reason"] for p in system.problems}
    assert len(reasons) == 4, reasons
    gone, broken, latin, bare = (next(r for k, r in reasons.items() if name in k)
                                 for name in ("gone.wav", "broken.wav", "latin.wav", ":6"))
    assert "missing" in gone and "unreadable" in broken and "Devanagari" in latin and "audio|text" in bare


def test_readings_sharing_a_file_name_are_told_apart_and_a_bad_id_is_one_reading_not_scored(tmp_path):
    # spk1/utt1.wav beside spk2/utt1.wav: the second was "a second reading of id 'utt1'" and never scored; an id that
    # cannot be a file name stopped the whole evaluation with a manifest error
    folder = tmp_path / "sys"
    names = ["spk1/utt1.wav", "spk2/utt1.wav", "good.wav", ".hidden.wav", "क" * 70 + ".wav"]
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        write_clip(folder / name)
    system = read_system("mine", _metadata(folder, [f"{name}|{TEXT}" for name in names]))
    assert [i["id"] for i in system.items] == ["spk1__utt1.wav", "spk2__utt1.wav", "good"]
    reasons = [p["reason"] for p in system.problems]
    assert len(reasons) == 2 and "plain file name" in reasons[0] and "too long" in reasons[1], reasons
    # paths up from the metadata's folder: ../a/utt1.wav is a__utt1.wav, not a hidden '..__a__utt1.wav'
    for name in ("a/utt1.wav", "b/utt1.wav"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        write_clip(tmp_path / name)
    system = read_system("up", _metadata(tmp_path / "up", [f"../a/utt1.wav|{TEXT}", f"../b/utt1.wav|{TEXT}"]))
    assert [i["id"] for i in system.items] == ["a__utt1.wav", "b__utt1.wav"] and not system.problems


def test_a_folder_named_by_test_set_ids(tmp_path):
    (tmp_path / "set.tsv").write_text(f"id\ttext\tkey_words\nn1\t{TEXT}\tनेकपा\nn2\t{TEXT}\tबैठकमा\n", encoding="utf-8")
    testset = read_testset(tmp_path / "set.tsv")
    assert testset["n1"]["key_words"] == ["नेकपा"]
    (tmp_path / "wavs").mkdir()
    write_clip(tmp_path / "wavs" / "n1.wav")
    write_clip(tmp_path / "wavs" / "stray.wav")
    system = read_system("mine", tmp_path / "wavs", testset)
    assert [(i["id"], i["sentence_id"]) for i in system.items] == [("n1", "n1")]
    reasons = {p["reading"].rsplit("/", 1)[-1]: p["reason"] for p in system.problems}
    assert "missing" in reasons["n2.wav"] and "no id of the test set" in reasons["stray.wav"]
    with pytest.raises(EvaluateError, match="metadata.csv"):
        read_system("mine", tmp_path / "wavs")


def test_key_words_are_marked_as_the_demo_marks_them():
    result = {"words": [{"word": "नेकपा", "sites": [{"kind": "deletion"}]}, {"word": "आज", "sites": []}]}
    assert mark_key_words(result, ["नेकपा"]) and [w.get("key") for w in result["words"]] == [True, False]
    assert not mark_key_words(result, ["नेकपा"])  # unchanged: not rewritten
    assert mark_key_words(result, ["आज"]) and all("key" not in w for w in result["words"])  # no site: none marked


@pytest.mark.parametrize("args, message", [
    (["nameless"], "NAME=FOLDER_OR_METADATA"),
    (["a/b=x"], "plain name"),
    (["x={tmp}"], "has no metadata.csv"),
    (["x={tmp}/nowhere"], "does not exist"),
    (["x={tmp}", "--testset", "{tmp}/none.tsv"], "no such file"),
])
def test_cli_errors_are_one_line_exit_2(tmp_path, args, message):
    from leakloss.cli import app

    r = runner.invoke(app, ["evaluate", *(a.format(tmp=tmp_path) for a in args), "--out", str(tmp_path / "out")])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "error:" in r.output and message in r.output, r.output


def test_an_interrupted_evaluate_resumes_and_the_report_appears_whole(tmp_path, models, monkeypatch):
    from leakloss.scorer import Scorer

    (tmp_path / "sys").mkdir()
    for i in range(2):
        write_clip(tmp_path / "sys" / f"s{i}.wav", seed=i)
    folder = _metadata(tmp_path / "sys", [f"s0.wav|{TEXT}", f"s1.wav|{TEXT}", f"gone.wav|{TEXT}"])
    real, calls = Scorer.score, []

    def score(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Scorer, "score", score)
    out = tmp_path / "out"
    with pytest.raises(EvaluateInterrupted):
        evaluate({"mine": folder}, out, **_kwargs(models))
    assert not (out / "report").exists()  # no half report
    assert [p.name for p in (out / "results" / "mine").glob("*.json")] == ["s0.json"]
    monkeypatch.setattr(Scorer, "score", real)
    summary = evaluate({"mine": folder}, out, **_kwargs(models))
    assert summary["scoring"]["mine"]["skipped_existing"] == 1 and summary["scoring"]["mine"]["processed"] == 1
    index = (out / "report" / "index.html").read_text(encoding="utf-8")
    assert "gone.wav" in index and "missing" in index  # the bad line, by name, in the report
    assert {p.name for p in (out / "report" / "reports" / "mine").iterdir()} == {"s0.html", "s1.html"}
    result = json.loads((out / "results" / "mine" / "s1.json").read_text(encoding="utf-8"))
    assert result["reference_origin"]["origin"] == "synthesised"
    assert [r.rsplit("/", 1)[-1].split("-")[0] for r in result["references"] + [c["reference"] for c in
                                                                                result["reference_checks"]]][-2:] \
        == ["teacher0", "teacher2"]


def test_a_rerun_replaces_the_report_and_counts_only_this_runs_readings(tmp_path, models):
    # a rerun on the same --out was refused after scoring ("report holds 'comparison', 'reports'"); and the
    # comparison counted every result in results/NAME/, a reading since removed from the metadata among them
    (tmp_path / "sys").mkdir()
    for i in range(2):
        write_clip(tmp_path / "sys" / f"s{i}.wav", seed=i)
    folder = _metadata(tmp_path / "sys", [f"s0.wav|{TEXT}", f"s1.wav|{TEXT}"])
    out = tmp_path / "out"
    first = evaluate({"mine": folder}, out, **_kwargs(models))
    assert first["comparison"]["systems"]["mine"]["readings"] == 2
    _metadata(folder, [f"s1.wav|{TEXT}"])
    again = evaluate({"mine": folder}, out, **_kwargs(models))
    assert again["scoring"]["mine"]["skipped_existing"] == 1
    assert again["comparison"]["systems"]["mine"]["readings"] == 1
    assert {p.name for p in (out / "report" / "reports" / "mine").iterdir()} == {"s1.html"}
    (out / "report" / "notes.txt").write_text("mine")  # a folder holding what evaluate never wrote: refused first
    with pytest.raises(EvaluateError, match="notes.txt"):
        evaluate({"mine": tmp_path / "nowhere"}, out, **_kwargs(models))


# --- end to end on the embedded default ---------------------------------------------------------------

@pytest.fixture(scope="module")
def systems(tmp_path_factory):
    """`leakloss testset --out s.tsv`, then the embedded teacher and the Hindi base read its first sentences into
    two F5 folders (as the demo reads)."""
    from leakloss.audio import save_audio
    from leakloss.cli import app
    from leakloss.speech.references import teacher_reading
    from leakloss.speech.synth import HELDOUT_HINDI_VOICE, HELDOUT_TEACHER_VOICE, speak_text
    from leakloss.testset import parse_testset

    root = tmp_path_factory.mktemp("systems")
    r = runner.invoke(app, ["testset", "--out", str(root / "s.tsv")])
    assert r.exit_code == 0, r.output
    sentences = [item.text for item in parse_testset((root / "s.tsv").read_text(encoding="utf-8"))[:2]]
    for name, speak in (("teacher", lambda t: teacher_reading(t, HELDOUT_TEACHER_VOICE)),
                        ("hindi", lambda t: speak_text(t, HELDOUT_HINDI_VOICE))):
        lines = []
        for i, text in enumerate(sentences):
            (root / name).mkdir(exist_ok=True)
            save_audio(root / name / f"s{i}.wav", speak(text).waveform)
            lines.append(f"s{i}.wav|{text}")
        _metadata(root / name, lines)
    with open(root / "hindi" / "metadata.csv", "a", encoding="utf-8") as f:
        f.write(f"lost.wav|{sentences[0]}\n")
    return root


@pytest.fixture(scope="module")
def evaluated(systems, tmp_path_factory):
    from leakloss.cli import app

    out = tmp_path_factory.mktemp("evaluation")
    r = runner.invoke(app, ["evaluate", f"teacher={systems / 'teacher'}", f"hindi={systems / 'hindi' / 'metadata.csv'}",
                            "--out", str(out)])
    return out, r


@needs_embedded
@pytest.mark.slow
def test_evaluate_with_no_references_separates_teacher_and_hindi_base(evaluated):
    out, r = evaluated
    assert r.exit_code == 1 and "Traceback" not in r.output, r.output  # 1: a reading was not scored
    assert "lost.wav" in r.stderr and "missing" in r.stderr  # the bad line, by name, on the terminal
    assert "1 reading(s) not scored" in r.stderr
    comparison = json.loads((out / "report" / "comparison" / "comparison.json").read_text(encoding="utf-8"))
    teacher, hindi = (comparison["systems"][n]["key_flagged"] for n in ("teacher", "hindi"))
    assert hindi["total"] and teacher["total"]
    assert hindi["rate"] > teacher["rate"], (hindi["text"], teacher["text"])
    for rate in (teacher, hindi):
        assert rate["wilson"]["low"] <= rate["rate"] <= rate["wilson"]["high"] and rate["bootstrap"] is not None
    for name in ("teacher", "hindi"):
        for f in (out / "results" / name).glob("*.json"):
            assert json.loads(f.read_text(encoding="utf-8"))["reference_origin"]["origin"] == "synthesised"
    index = (out / "report" / "index.html").read_text(encoding="utf-8")
    assert "sentence bootstrap" in index and "lost.wav" in index and "synthesised" in index
    assert len(re.findall(r'href="reports/', index)) == 4


@needs_embedded
@pytest.mark.slow
@pytest.mark.browser
def test_the_evaluation_index_opens_in_headless_chromium_with_its_players(evaluated, tmp_path):
    from tests.test_demo import PROBE, _browser

    out, _ = evaluated
    report = out / "report"
    browser = _browser()
    base = [browser, "--headless", "--disable-gpu", "--no-sandbox", f"--user-data-dir={tmp_path / 'profile'}"]
    (report / "probe.html").write_text(PROBE, encoding="utf-8")
    probe = subprocess.run([*base, "--allow-file-access-from-files", "--virtual-time-budget=10000", "--dump-dom",
                            (report / "probe.html").as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r"RESULT(.*?)END", probe.stdout)
    assert found, probe.stderr[-1000:]
    images = json.loads(found.group(1))
    assert images and all(i["ok"] for i in images), images
    shot = tmp_path / "index.png"
    run = subprocess.run([*base, "--window-size=1100,1400", f"--screenshot={shot}", (report / "index.html").as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and shot.read_bytes()[:4] == b"\x89PNG"
    page = next((report / "reports" / "hindi").glob("*.html"))
    dom = subprocess.run([*base, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert "<audio" in dom


def test_the_shipped_test_set_reads_as_evaluate_expects(tmp_path):
    """`leakloss testset --out set.tsv` then `evaluate --testset set.tsv`: the same ids, texts and key words."""
    from leakloss.testset import format_testset, load_testset

    items = load_testset()
    (tmp_path / "set.tsv").write_text(format_testset(items), encoding="utf-8")
    read = read_testset(tmp_path / "set.tsv")
    assert list(read) == [item.id for item in items]
    for item in items:
        assert read[item.id]["text"] == item.text
        assert read[item.id]["key_words"] == [k.word for k in item.key_words]


def test_extra_fields_and_audio_no_line_names_are_reported_not_scored_or_dropped(tmp_path):
    # id|text|normalized: 'आए।|spk1' was scored as the text; a WAV beside the metadata with no line vanished
    folder = tmp_path / "sys"
    (folder / "wavs").mkdir(parents=True)
    for name in ("wavs/r1.wav", "wavs/r2.wav", "wavs/orphan.wav", "top.wav"):
        write_clip(folder / name)
    write_clip(folder / "wavs" / "r3.wav")
    system = read_system("mine", _metadata(folder, [f"wavs/r1.wav|{TEXT}", f"wavs/r2.wav|{TEXT}|spk1",
                                                    f"wavs/r3.wav|{TEXT} | {TEXT} |"]))  # '|' typed as the danda
    assert [(i["id"], i["text"]) for i in system.items] == [("r1", TEXT), ("r3", f"{TEXT} | {TEXT} |")]
    reasons = {p["reading"].rsplit("/", 1)[-1]: p["reason"] for p in system.problems}
    assert "a field after the text ('spk1')" in reasons["metadata.csv:3"]
    assert "no line of metadata.csv names it" in reasons["orphan.wav"]
    assert "no line of metadata.csv" in reasons["top.wav"] and len(reasons) == 3
    for i in range(12):  # a shared corpus folder: ten listed by name, the rest counted in one line
        write_clip(folder / "wavs" / f"more{i:02d}.wav")
    system = read_system("mine", folder)
    assert len(system.problems) == 12 and "4 more audio files no line of metadata.csv names" in system.problems[-1]["reason"]
    other = _metadata(tmp_path / "other", [f"../sys/wavs/r1.wav|{TEXT}"])  # audio outside its folder: not scanned
    assert read_system("other", other).problems == []


def test_test_set_audio_in_any_case_and_formats_it_cannot_read_are_told(tmp_path):
    # ne-001.WAV was "missing"; ne-002.mp3 too, and never named
    (tmp_path / "set.tsv").write_text(f"id\ttext\tkey_words\nn1\t{TEXT}\tनेकपा\nn2\t{TEXT}\tनेकपा\n", encoding="utf-8")
    (tmp_path / "wavs").mkdir()
    write_clip(tmp_path / "wavs" / "n1.WAV")
    (tmp_path / "wavs" / "n2.mp3").write_bytes(b"ID3 not read")
    (tmp_path / "wavs" / "n1.txt").write_text("notes")  # not audio: not a reading
    system = read_system("mine", tmp_path / "wavs", read_testset(tmp_path / "set.tsv"))
    assert [i["query"].rsplit("/", 1)[-1] for i in system.items] == ["n1.WAV"]
    assert [(p["reading"].rsplit("/", 1)[-1], p["reason"]) for p in system.problems] == [
        ("n2.mp3", "not a supported audio format (.wav, .flac, .aiff, .aif)")]
    (tmp_path / "wavs" / "n2.mp3").rename(tmp_path / "wavs" / "n2.txt")
    system = read_system("mine", tmp_path / "wavs", read_testset(tmp_path / "set.tsv"))
    assert [p["reason"].endswith("n2.wav is missing") for p in system.problems] == [True]


def test_test_set_ids_with_two_audio_files_other_names_and_subfolders_are_told_not_guessed(tmp_path):
    # ne-001.wav beside ne-001.WAV: the upper-case one was scored, the other never named; a stray .mp3 and a
    # subfolder were passed over without a word
    (tmp_path / "set.tsv").write_text(f"id\ttext\tkey_words\nn1\t{TEXT}\tनेकपा\nn2\t{TEXT}\tनेकपा\n",
                                      encoding="utf-8")
    (tmp_path / "wavs" / "old").mkdir(parents=True)
    for name in ("n1.wav", "n1.WAV", "n2.flac"):
        write_clip(tmp_path / "wavs" / name)
    (tmp_path / "wavs" / "stray.mp3").write_bytes(b"ID3 not read")
    system = read_system("mine", tmp_path / "wavs", read_testset(tmp_path / "set.tsv"))
    assert [i["query"].rsplit("/", 1)[-1] for i in system.items] == ["n2.flac"]
    reasons = [p["reason"] for p in system.problems]
    assert len(reasons) == 3
    assert "2 audio files for id 'n1': keep one; not scored" in reasons[0]
    assert "n1.WAV" in system.problems[0]["reading"] and "n1.wav" in system.problems[0]["reading"]
    assert reasons[1] == "its name is no id of the test set" and system.problems[1]["reading"].endswith("stray.mp3")
    assert "a folder" in reasons[2] and system.problems[2]["reading"].endswith("old")


def test_a_metadata_line_with_a_nul_or_a_bare_file_name_is_one_problem_each(tmp_path):
    # a NUL in an audio path raised ValueError (embedded null byte) in resolve(); a line 'a.wav' without its text
    # was listed twice, once as audio "no line names"
    folder = tmp_path / "sys"
    folder.mkdir()
    write_clip(folder / "a.wav")
    write_clip(folder / "b.wav")
    system = read_system("mine", _metadata(folder, ["a.wav", f"x\x00.wav|{TEXT}", f"b.wav|{TEXT}"]))
    assert [i["id"] for i in system.items] == ["b"]
    reasons = {p["reading"].rsplit("/", 1)[-1]: p["reason"] for p in system.problems}
    assert reasons == {"metadata.csv:2": "not an 'audio|text' line",  # line 1 is F5's header
                       "metadata.csv:3": reasons["metadata.csv:3"]} and "NUL" in reasons["metadata.csv:3"]


def test_an_audio_file_that_cannot_be_accessed_is_unreadable_not_a_stop(tmp_path, monkeypatch):
    # load_audio let PermissionError escape (its docstring promises AudioError): evaluate stopped the whole run
    import leakloss.audio

    folder = tmp_path / "sys"
    folder.mkdir()
    write_clip(folder / "a.wav")

    def denied(path, size):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(leakloss.audio, "_wav_truncation", denied)
    with pytest.raises(leakloss.audio.AudioError, match="cannot be accessed: Permission denied"):
        leakloss.audio.load_audio(folder / "a.wav")
    system = read_system("mine", _metadata(folder, [f"a.wav|{TEXT}"]))
    assert system.items == [] and "unreadable" in system.problems[0]["reason"]


def test_a_key_word_that_is_no_word_of_its_text_is_refused_and_one_with_its_danda_is_the_word(tmp_path):
    # a misspelt key word vanished from the count without a word (the others of its sentence still counted)
    (tmp_path / "set.tsv").write_text(f"id\ttext\tkey_words\nn1\t{TEXT}\tनेकपा, आए।\n", encoding="utf-8")
    assert read_testset(tmp_path / "set.tsv")["n1"]["key_words"] == ["नेकपा", "आए"]
    (tmp_path / "typo.tsv").write_text(f"# a comment\nid\ttext\tkey_words\n\nn1\t{TEXT}\tनेकपा बैठकम\n",
                                       encoding="utf-8")
    with pytest.raises(EvaluateError, match=r"typo.tsv:4: key word 'बैठकम' is not a word of the text"):
        read_testset(tmp_path / "typo.tsv")  # the file's line, comments and blank lines counted
    (tmp_path / "bad.tsv").write_text("id\ttext\tkey_words\nn1\tabc 123\t\n", encoding="utf-8")
    with pytest.raises(EvaluateError, match=r":2: the text of 'n1' has no Devanagari word"):
        read_testset(tmp_path / "bad.tsv")  # its readings would have matched any text without a word


def test_metadata_texts_match_test_set_sentences_by_their_words_and_others_are_not_scored(tmp_path):
    # a reading whose text lost its danda got no sentence id, no key words, and every tested word counted, unsaid
    (tmp_path / "set.tsv").write_text(f"id\ttext\tkey_words\nn1\t{TEXT}\tनेकपा\n", encoding="utf-8")
    testset = read_testset(tmp_path / "set.tsv")
    folder = _metadata(tmp_path / "sys", [f"a.wav|{TEXT.rstrip('।')}", "b.wav|आज घर जाऊँ।"])
    write_clip(folder / "a.wav")
    write_clip(folder / "b.wav")
    system = read_system("mine", folder, testset)
    assert [(i["id"], i["sentence_id"]) for i in system.items] == [("n1", "n1")]
    assert [p["reason"] for p in system.problems] == ["its text is no sentence of the test set (--testset): not scored"]
    # a sentence the set holds twice (punctuation aside) cannot tell a metadata reading's id: said, not guessed
    (tmp_path / "twice.tsv").write_text(f"id\ttext\tkey_words\nn1\t{TEXT}\tनेकपा\nn2\t{TEXT.rstrip('।')}\tआए\n",
                                        encoding="utf-8")
    system = read_system("mine", folder, read_testset(tmp_path / "twice.tsv"))
    assert not system.items and "the sentence of ids n1, n2 of the test set" in system.problems[0]["reason"]
    assert not any(p["reading"] in ("n1", "n2") for p in system.problems)  # said with the line, not again


def test_a_test_set_sentence_no_metadata_line_reads_is_listed(tmp_path):
    # a metadata system that read 1 of the set's 2 sentences was scored on that one: the other was dropped unsaid
    (tmp_path / "set.tsv").write_text(f"id\ttext\tkey_words\nn1\t{TEXT}\tनेकपा\nn2\tआज घर जाऊँ।\tघर\n",
                                      encoding="utf-8")
    folder = _metadata(tmp_path / "sys", [f"a.wav|{TEXT}"])
    write_clip(folder / "a.wav")
    system = read_system("mine", folder, read_testset(tmp_path / "set.tsv"))
    assert [i["id"] for i in system.items] == ["n1"]
    assert system.problems == [{"reading": "n2", "reason": "no line of metadata.csv reads this test-set sentence: "
                                "not scored"}]
    # a line refused for its own fault is the one problem of its sentence, not also "no line reads it"
    _metadata(folder, [f"a.wav|{TEXT}|spk1", "b.wav|आज घर जाऊँ।"])
    write_clip(folder / "b.wav")
    system = read_system("mine", folder, read_testset(tmp_path / "set.tsv"))
    assert [p["reason"].split(" (")[0] for p in system.problems] == ["a field after the text"]


def test_key_words_typed_with_a_zero_width_joiner_still_match():
    # राष्‍ट्रपतिको (with a ZWJ, as the shared data writes it) never matched the scorer's word: every tested word counted
    result = {"words": [{"word": "राष्ट्रपतिको", "sites": [{"kind": "deletion"}]}, {"word": "अवधि", "sites": [{}]}]}
    assert mark_key_words(result, ["राष्\u200dट्रपतिको"]) and [w.get("key") for w in result["words"]] == [True, False]


def test_a_refusal_before_any_reading_is_scored_leaves_no_output_folder(tmp_path, models):
    # bad heads left out/manifests/a.jsonl; a 250-character system name failed on a temporary file's name
    folder = _metadata(tmp_path / "sys", [f"r1.wav|{TEXT}"])
    write_clip(folder / "r1.wav")
    kwargs = _kwargs(models) | {"heads_dir": tmp_path / "no_heads"}
    with pytest.raises(Exception, match="head"):
        evaluate({"a": folder}, tmp_path / "out", **kwargs)
    assert not (tmp_path / "out").exists()
    with pytest.raises(Exception, match="head"):  # the parents it made go too
        evaluate({"a": folder}, tmp_path / "new" / "deeper" / "out", **kwargs)
    assert not (tmp_path / "new").exists()
    from leakloss.evaluate import parse_system

    with pytest.raises(EvaluateError, match="bytes in UTF-8, at most 200"):
        parse_system("a" * 250 + f"={folder}")


def test_the_index_counts_readings_not_scored_and_links_the_whole_comparison(tmp_path):
    # a system with most readings unscored showed a clean rate, and comparison.md (with the reasons) had no link
    from leakloss.eval.compare import compare_results
    from leakloss.evaluate import write_index
    from tests.eval.test_compare import reading, write_dir

    unscored = [reading("flagged", f"s{i}", status="unscored") | {"reason": "every reference rejected"}
                for i in range(5)]
    comparison = compare_results({"sys": write_dir(tmp_path / "sys", [reading("flagged", "s9"), *unscored])})
    page = write_index(tmp_path, comparison, [], title="t", intro="i").read_text(encoding="utf-8")
    for cell in ("readings scored", "unscored", "failed", "references", "1 of 6", "given 6"):
        assert f">{cell}<" in page, cell
    assert 'href="comparison/comparison.md"' in page


def test_the_index_counts_each_kinds_undecided_words_beside_its_rate(tmp_path):
    # comparison.md had the column; the index, the page evaluate sends a person to, did not
    from leakloss.eval.compare import compare_results
    from leakloss.evaluate import write_index
    from tests.eval.test_compare import reading, write_dir

    r = reading("flagged", "s1", kinds=("deletion", "quality"))
    r["words"][1]["sites"][1]["decision"] = "unscored"  # its quality site was not decided
    comparison = compare_results({"sys": write_dir(tmp_path / "sys", [r, reading("no_change", "s2")])})
    assert comparison["systems"]["sys"]["by_kind_undecided"] == {"deletion": 0, "quality": 1}
    page = write_index(tmp_path, comparison, [], title="t", intro="i").read_text(encoding="utf-8")
    headers = re.findall(r"<th[^>]*>([^<]*)</th>", page)
    row = page[page.index("<td>sys</td>"):]
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", row[: row.index("</tr>")])
    assert cells[headers.index("deletion undecided")] == "0" and cells[headers.index("quality undecided")] == "1"


def test_a_reading_replaced_while_it_was_scored_gets_a_report_without_audio_and_a_problem_line(tmp_path, models,
                                                                                              monkeypatch):
    # the report stage embedded the new file's audio under the old file's boundaries: a ValueError traceback
    # ("boundaries ... lie outside the audio"), and the result recorded the new file's SHA-1, so no rerun rescored it
    from leakloss.scorer import Scorer

    folder = _metadata(tmp_path / "sys", [f"s0.wav|{TEXT}"])
    write_clip(folder / "s0.wav", seconds=1.0)
    real = Scorer.score

    def score(self, *args, **kwargs):
        result = real(self, *args, **kwargs)
        # a word a listener is sent to (the tiny models align none), so the page embeds its clip
        result["words"][1] |= {"start": 0.3, "end": 0.6, "decision": "flagged"}
        write_clip(folder / "s0.wav", seconds=0.2, seed=5)  # the TTS's next checkpoint wrote over it meanwhile
        return result

    monkeypatch.setattr(Scorer, "score", score)
    summary = evaluate({"mine": folder}, tmp_path / "out", **_kwargs(models))
    assert [p["reading"] for p in summary["without_audio"]] == ["s0"] and not summary["problems"]
    assert "changed since it was scored" in summary["without_audio"][0]["reason"]
    assert summary["comparison"]["systems"]["mine"]["readings"] == 1  # scored and counted, not "not scored"
    page = (tmp_path / "out" / "report" / "reports" / "mine" / "s0.html").read_text(encoding="utf-8")
    assert "no audio" in page and "data:audio" not in page
    index = (tmp_path / "out" / "report" / "index.html").read_text(encoding="utf-8")
    assert "Report pages without audio" in index and "Readings not scored" not in index
    monkeypatch.setattr(Scorer, "score", real)
    again = evaluate({"mine": folder}, tmp_path / "out", **_kwargs(models))
    assert again["scoring"]["mine"]["processed"] == 1  # the changed file is scored again, not taken as done
    assert again["without_audio"] == []


def test_a_reading_removed_after_it_was_scored_is_told_as_gone_not_as_changed(tmp_path):
    from leakloss.batch import file_sha1
    from leakloss.evaluate import _scored_audio

    clip = write_clip(tmp_path / "a.wav")
    result = {"input_sha1": {"query": file_sha1(clip), "refs": []}}
    wave, reason = _scored_audio(clip, result)
    assert wave is not None and reason is None
    clip.unlink()
    wave, reason = _scored_audio(clip, result)
    assert wave is None and "gone or cannot be read" in reason


def test_a_run_refused_before_scoring_leaves_an_existing_out_as_it_was(tmp_path, models):
    # a bad --devices in an existing (empty) --out left out/manifests/NAME.jsonl behind
    from leakloss.batch import BatchError

    (tmp_path / "sys").mkdir()
    write_clip(tmp_path / "sys" / "s0.wav")
    folder = _metadata(tmp_path / "sys", [f"s0.wav|{TEXT}"])
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises((BatchError, EvaluateError, ValueError)):
        evaluate({"mine": folder}, out, devices="many", **_kwargs(models))
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("order", [("mine", "new"), ("new", "mine")])
def test_a_run_refused_before_scoring_keeps_an_earlier_runs_results_and_manifests(tmp_path, models, order):
    # an --out holding an earlier run's results kept this failed run's manifests: the first system's is written
    # before the refusal, a rewritten one ("mine") or a new one ("new")
    from leakloss.batch import BatchError

    (tmp_path / "sys").mkdir()
    write_clip(tmp_path / "sys" / "s0.wav")
    folder = _metadata(tmp_path / "sys", [f"s0.wav|{TEXT}"])
    out = tmp_path / "out"
    (out / "results" / "old").mkdir(parents=True)
    (out / "results" / "old" / "r.json").write_text("{}")
    (out / "manifests").mkdir()
    (out / "manifests" / "mine.jsonl").write_text("earlier\n")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises((BatchError, EvaluateError, ValueError)):
        evaluate({name: folder for name in order}, out, devices="many", **_kwargs(models))
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_a_file_name_that_is_not_utf8_is_named_printably_among_the_problems(tmp_path):
    import os

    (tmp_path / "set.tsv").write_text(f"id\ttext\tkey_words\nn1\t{TEXT}\tनेकपा\n", encoding="utf-8")
    (tmp_path / "wavs").mkdir()
    write_clip(tmp_path / "wavs" / "n1.wav")
    os.link(tmp_path / "wavs" / "n1.wav", os.fsdecode(str(tmp_path / "wavs").encode() + b"/x\xff.wav"))
    system = read_system("mine", tmp_path / "wavs", read_testset(tmp_path / "set.tsv"))
    (problem,) = system.problems
    assert problem["reading"].endswith("x\\udcff.wav") and problem["reason"] == "its name is no id of the test set"
    problem["reading"].encode("utf-8")  # the terminal, the JSON and the report can print it


def test_a_file_where_the_report_goes_is_refused_before_scoring(tmp_path, monkeypatch):
    # OUT/report as a file passed the early check and was refused by the report's writer, after every reading
    import leakloss.batch

    monkeypatch.setattr(leakloss.batch, "score_batch", lambda *a, **k: pytest.fail("scored before the check"))
    folder = _metadata(tmp_path / "sys", [f"r1.wav|{TEXT}"])
    write_clip(folder / "r1.wav")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "report").write_text("mine")
    with pytest.raises(EvaluateError, match="report is a file, not a folder: it is not replaced"):
        evaluate({"a": folder}, tmp_path / "out")
    assert (tmp_path / "out" / "report").read_text() == "mine"


def test_the_shipped_test_set_is_read_with_its_commented_header_and_each_key_words_kinds(tmp_path):
    # `leakloss testset` writes "#id\ttext\tkey_words\tsites": the header was skipped as a comment, so the sites
    # column (each key word's contrast kinds) was never read and a --kind quality set counted deletion flags
    from leakloss.testset import format_testset, load_testset

    (tmp_path / "q.tsv").write_text(format_testset(load_testset("quality")), encoding="utf-8")
    quality = read_testset(tmp_path / "q.tsv")
    assert len(quality) == len(load_testset("quality"))
    assert {k for e in quality.values() for kinds in e["key_kinds"].values() for k in kinds} == {"quality"}
    (tmp_path / "all.tsv").write_text(format_testset(load_testset()), encoding="utf-8")
    both = read_testset(tmp_path / "all.tsv")
    assert {k for e in both.values() for kinds in e["key_kinds"].values() for k in kinds} == {"deletion", "quality"}
    assert all(set(e["key_kinds"]) == set(e["key_words"]) for e in both.values())
    (tmp_path / "bad.tsv").write_text(f"id\ttext\tkey_words\tsites\nn1\t{TEXT}\tनेकपा\t{{\"नेकपा\": [[\"vowel\"]]}}\n",
                                      encoding="utf-8")
    with pytest.raises(EvaluateError, match=r"bad.tsv:2: key word 'नेकपा' needs \[kind, contrast, position\]"):
        read_testset(tmp_path / "bad.tsv")
    for cell in ("not json", "[" * 100_000, '{"नेकपा": [["quality", "x", 1]], "नेकपा ": [["deletion", "x", 1]]}'):
        (tmp_path / "junk.tsv").write_text(f"id\ttext\tkey_words\tsites\nn1\t{TEXT}\tनेकपा\t{cell}\n",
                                           encoding="utf-8")
        with pytest.raises(EvaluateError, match=r"junk.tsv:2: sites"):  # deep nesting was a RecursionError
            read_testset(tmp_path / "junk.tsv")
    # a comment first and one row: read (a comment that is no header was taken for one, and the set had "no rows")
    (tmp_path / "one.tsv").write_text(f"# my notes\nn1\t{TEXT}\tनेकपा\n", encoding="utf-8")
    assert list(read_testset(tmp_path / "one.tsv")) == ["n1"]
    # a comment above the written header: its sites column was dropped without a word (only the first line
    # was looked at), and every key word counted by all its sites
    (tmp_path / "noted.tsv").write_text("# quality subset\n" + format_testset(load_testset("quality")),
                                        encoding="utf-8")
    assert read_testset(tmp_path / "noted.tsv") == quality


def test_a_key_word_typed_with_its_danda_keeps_its_kinds(tmp_path):
    # the kinds were keyed "आए।" and the key words "आए": the word counted by all its sites
    cell = '{"आए।": [["quality", "e->ɛ", 1]]}'
    (tmp_path / "set.tsv").write_text(f"id\ttext\tkey_words\tsites\nn1\t{TEXT}\tआए।\t{cell}\n", encoding="utf-8")
    entry = read_testset(tmp_path / "set.tsv")["n1"]
    assert entry["key_words"] == ["आए"] and entry["key_kinds"] == {"आए": ["quality"]}


@pytest.mark.parametrize("content", ["id\ttext\tkey_words\n", "#id\ttext\tkey_words\tsites\n",
                                     "# notes\n#id\ttext\tkey_words\n\n"])
def test_a_test_set_with_a_header_and_no_rows_says_so(tmp_path, content):
    # an uncommented header alone was {}, and evaluate then blamed every metadata line
    (tmp_path / "empty.tsv").write_text(content, encoding="utf-8")
    with pytest.raises(EvaluateError, match="has no rows"):
        read_testset(tmp_path / "empty.tsv")


def test_mark_key_words_writes_the_kinds_a_key_word_counts_by():
    result = {"words": [{"word": "नेकपा", "sites": [{"kind": "deletion"}, {"kind": "quality"}]},
                        {"word": "आए", "sites": [{"kind": "deletion"}], "key_kinds": ["deletion"]}]}
    assert mark_key_words(result, ["नेकपा"], {"नेकपा": ["quality"]})
    assert result["words"][0]["key_kinds"] == ["quality"] and "key_kinds" not in result["words"][1]
    assert not mark_key_words(result, ["नेकपा"], {"नेकपा": ["quality"]})  # unchanged the second time
    assert mark_key_words(result, ["नेकपा"]) and "key_kinds" not in result["words"][0]


def test_a_metadata_line_is_matched_to_its_test_sentence_with_its_numbers_and_latin_words(tmp_path):
    # by the Devanagari words alone "म १० बजे" was "म ११ बजे" (both refused as one sentence), and a COVID line was
    # scored as the Ebola sentence; a number in the other script is the same number (11 is ११)
    rows = {"n1": "म १० बजे घर आएँ।", "n2": "म ११ बजे घर आएँ।", "n3": "Ebola ले नेकपा बन्द गर्‍यो।"}
    (tmp_path / "set.tsv").write_text("id\ttext\tkey_words\n" + "".join(f"{k}\t{t}\tघर\n" if k != "n3" else
                                                                        f"{k}\t{t}\tनेकपा\n" for k, t in rows.items()),
                                      encoding="utf-8")
    folder = tmp_path / "sys"
    folder.mkdir()
    for name in ("a.wav", "b.wav", "c.wav"):
        write_clip(folder / name)
    # blank lines before F5's header: the header was read as audio named audio_file
    (folder / "metadata.csv").write_text("\n\naudio_file|text\na.wav|म 11 बजे घर आएँ\nb.wav|म १० बजे घर आएँ\n"
                                         "c.wav|COVID ले नेकपा बन्द गर्‍यो\n", encoding="utf-8")
    system = read_system("mine", folder, read_testset(tmp_path / "set.tsv"))
    assert sorted((i["query"].rsplit("/", 1)[-1], i["sentence_id"]) for i in system.items) == [("a.wav", "n2"),
                                                                                              ("b.wav", "n1")]
    (c_line, unread) = system.problems
    assert c_line["reading"].endswith("(c.wav)") and "no sentence of the test set" in c_line["reason"]
    assert unread["reading"] == "n3" and "no line of metadata.csv reads this test-set sentence" in unread["reason"]


def test_a_row_without_key_words_beside_rows_with_them_is_refused(tmp_path):
    # its every tested word counted beside the other rows' key words: two measures in one figure
    (tmp_path / "mixed.tsv").write_text(f"id\ttext\tkey_words\nn1\t{TEXT}\tनेकपा\nn2\t{TEXT} फेरि\t\n", encoding="utf-8")
    with pytest.raises(EvaluateError, match=r"mixed.tsv:3: 'n2' has no key word while other rows have theirs"):
        read_testset(tmp_path / "mixed.tsv")
    (tmp_path / "none.tsv").write_text(f"id\ttext\nn1\t{TEXT}\nn2\t{TEXT} फेरि\n", encoding="utf-8")
    assert [e["key_words"] for e in read_testset(tmp_path / "none.tsv").values()] == [[], []]  # one measure
