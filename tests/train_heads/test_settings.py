"""train_heads settings that cannot work are one error line (exit 2) before any model loads or trains."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from leakloss.config import compose_config
from leakloss.checks import SettingsError
from train_heads.pipeline import check_settings, run
from leakloss.speech.festival import EXCLUDED_PACKAGES

_EXCLUDED = sorted(EXCLUDED_PACKAGES)[0]  # the exclusion list names them; this test only checks the refusal

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("override, message", [
    ("num_threads=0", r"num_threads must be a whole number >= 1, got 0"),  # torch raised RuntimeError mid-run
    ("num_threads=abc", r"num_threads must be a whole number >= 1, got 'abc'"),
    ("seed=abc", r"seed must be a whole number in \[0, 4294967295\], got 'abc'"),
    ("seed=-1", r"seed must be a whole number in \[0, 4294967295\], got -1"),  # seed_everything's traceback
    ("head_seed=1.5", r"head_seed must be a whole number in \[0, 4294967295\], got 1.5"),
    ("head_seed=4294967296", r"head_seed must be a whole number in \[0, 4294967295\]"),
    ("heads.deletion.max_epochs=-1", r"heads.deletion.max_epochs must be a whole number >= 1, got -1"),  # forever
    ("heads.deletion.max_epochs=0", r"heads.deletion.max_epochs must be a whole number >= 1"),  # exported untrained
    ("heads.quality.batch_size=0", r"heads.quality.batch_size must be a whole number >= 1"),
    ("heads.deletion.module.lr=nan", r"heads.deletion.module.lr must be a finite number in \(0, inf\), got nan"),
    ("heads.rawconv.module.outside_weight=nan", r"outside_weight must be a finite number in \[0, inf\)"),  # NaN head
    # exported a constant head that flags every site
    ("heads.deletion.model.hidden=0", r"heads.deletion.model: ValueError: hidden must be a whole number >= 1, got 0"),
    ("heads.rawconv.model.width=0", r"heads.rawconv.model: ValueError: width must be a whole number >= 1, got 0"),
    ("heads.deletion.kind=vowel", r"heads.deletion.kind must be one of deletion, quality, got 'vowel'"),  # no head
    ("heads.deletion.recognizer=c", r"heads.deletion.recognizer must be one of a, b, got 'c'"),  # KeyError
    ("data.max_sentences=abc", r"data.max_sentences must be a whole number >= 1, got 'abc'"),  # TypeError
    ("data.max_sentences=0", r"data.max_sentences must be a whole number >= 1, got 0"),  # an empty held-out table
    # a negative count was a slice that dropped sentences or clips, a fraction a TypeError after the training
    ("data.short_vowel_sentences=-1", r"data.short_vowel_sentences must be a whole number >= 0, got -1"),
    ("data.short_vowel_sentences=2.5", r"data.short_vowel_sentences must be a whole number >= 0, got 2.5"),
    ("data.short_vowel_sentences=null", r"data.short_vowel_sentences must be a whole number >= 0, got None"),
    ("data.short_vowel_train_sentences=-2", r"data.short_vowel_train_sentences must be a whole number >= 0, got -2"),
    ("data.short_vowel_train_sentences=abc", r"data.short_vowel_train_sentences must be a whole number >= 0"),
    ("data.short_vowel_teacher_voices=0", r"data.short_vowel_teacher_voices must be a whole number >= 1, got 0"),
    ("data.short_vowel_teacher_voices=-1", r"data.short_vowel_teacher_voices must be a whole number >= 1, got -1"),
    ("+data.real_speech_clips=-1", r"data.real_speech_clips must be a whole number >= 0, got -1"),
    ("+data.real_speech_clips=2.5", r"data.real_speech_clips must be a whole number >= 0, got 2.5"),
    # recorded voices: a traceback after the recognizers loaded
    ("data.recorded_voices=[fest-slt]", r"data.recorded_voices: recorded voice 'fest-slt' is of the unseen family"),
    ("data.recorded_voices=[flite-slt]", r"data.recorded_voices: recorded voice 'flite-slt' is of the unseen family"),
    ("data.recorded_voices=[fest-kal,nope]", r"data.recorded_voices: unknown recorded voice 'nope'; known: fest-kal"),
    ("data.heldout_recorded_voices=[nope]", r"data.heldout_recorded_voices: unknown recorded voice 'nope'"),
    # a voice of the exclusion list (leakloss.speech.festival.EXCLUDED_PACKAGES): refused by name, never loaded
    (f"data.heldout_recorded_voices=[{_EXCLUDED}]", rf"data.heldout_recorded_voices: '{_EXCLUDED}' is an "),
    ("data.recorded_voices=fest-kal", r"data.recorded_voices must be a list of recorded voice names, got 'fest-kal'"),
    ("data.recorded_voices=[1]", r"data.recorded_voices must be a list of recorded voice names, got 1 in it"),
    # a recipe's own settings: Hydra's report after the other heads had trained
    ("+heads.rawconv.recipe.real_repeat=0", r"heads.rawconv.recipe: ValueError: real_repeat must be >= 1, got 0"),
    # a frame head with no positive kind trained on short-vowel negatives only and exported with exit 0
    ("heads.rawconv.kinds=[vowel]", r"heads.rawconv.kinds must be a non-empty list of deletion, quality"),
    ("heads.rawconv.kinds=[]", r"heads.rawconv.kinds must be a non-empty list"),
    # yes/no settings: a string read as true (resume=no resumed)
    ("heads.rawconv.resume=no", r"heads.rawconv.resume must be true or false, got 'no'"),
    ("heads.deletion.select_best=off", r"heads.deletion.select_best must be true or false, got 'off'"),
    ("progress=nope", r"progress must be true or false, got 'nope'"),
    # set for each head by the pipeline: accepted, then replaced without a word
    ("+trainer.max_epochs=1", r"trainer.max_epochs is set for each head by the pipeline"),
    ("+trainer.accumulate_grad_batches=0", r"trainer.accumulate_grad_batches must be a whole number >= 1, got 0"),
])
def test_bad_settings_are_refused_before_any_model_loads(override, message, monkeypatch):
    import leakloss.acoustic.recognizer as recognizer

    monkeypatch.setattr(recognizer.Recognizer, "load", lambda *a, **k: pytest.fail("a recognizer loaded"))
    cfg = compose_config("train_heads", ["experiment=smoke", override])
    with pytest.raises(SettingsError, match=message):
        run(cfg)


@pytest.mark.parametrize("key", ["cache_dir", "out_dir", "export_dir"])
def test_folders_under_a_regular_file_are_refused_before_any_model_loads(key, tmp_path, monkeypatch):
    import leakloss.acoustic.recognizer as recognizer

    monkeypatch.setattr(recognizer.Recognizer, "load", lambda *a, **k: pytest.fail("a recognizer loaded"))
    (tmp_path / "file").write_text("x")
    cfg = compose_config("train_heads", ["experiment=smoke", f"{key}={tmp_path / 'file' / 'sub'}"])
    with pytest.raises(SettingsError, match=rf"{key}: .*sub cannot be created: .*file is not a folder"):
        run(cfg)


def test_an_out_dir_that_the_export_would_replace_is_refused(tmp_path, monkeypatch):
    # export_dir=out_dir: the export replaced the folder and the run's logs and checkpoints went with it
    import leakloss.acoustic.recognizer as recognizer

    monkeypatch.setattr(recognizer.Recognizer, "load", lambda *a, **k: pytest.fail("a recognizer loaded"))
    for out, export in ((tmp_path / "same", tmp_path / "same"), (tmp_path / "e" / "out", tmp_path / "e")):
        cfg = compose_config("train_heads", ["experiment=smoke", f"out_dir={out}", f"export_dir={export}"])
        with pytest.raises(SettingsError, match="must not be export_dir or inside it"):
            run(cfg)
    check_settings(compose_config("train_heads", ["experiment=smoke", f"out_dir={tmp_path / 'o'}",
                                                  f"export_dir={tmp_path / 'o' / 'export'}"]))  # inside out_dir: fine


def test_a_file_where_a_head_logs_is_refused(tmp_path, monkeypatch):
    """Lightning's out_dir/deletion/checkpoints failed as a traceback after the recognizers and features."""
    import leakloss.acoustic.recognizer as recognizer

    monkeypatch.setattr(recognizer.Recognizer, "load", lambda *a, **k: pytest.fail("a recognizer loaded"))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "deletion").write_text("x")
    cfg = compose_config("train_heads", ["experiment=smoke", f"out_dir={tmp_path / 'out'}",
                                         f"export_dir={tmp_path / 'export'}"])
    with pytest.raises(SettingsError, match=r"out_dir: .*deletion is a file; head deletion logs"):
        run(cfg)


def test_a_frame_layer_the_recognizer_lacks_is_refused_before_the_pairs(tmp_path, monkeypatch):
    # 99 (or -3 on wb) failed with a traceback after the pairs and the other heads
    import train_heads.pipeline as pipeline

    monkeypatch.setattr(pipeline, "build_pairs", lambda *a, **k: pytest.fail("pairs built"))
    for layer, message in ((99, r"conv layer 99 out of range"), (-3, r"got -3"), (True, r"got True")):
        cfg = compose_config("train_heads", ["experiment=smoke", f"out_dir={tmp_path / 'o'}",
                                             f"export_dir={tmp_path / 'e'}", f"++heads.rawconv.frame_layer={layer}"])
        with pytest.raises(SettingsError, match=rf"heads.rawconv.frame_layer must be a layer of recognizer a@.*"
                                                rf"{message}"):
            run(cfg)


@pytest.mark.parametrize("overrides", [
    ["experiment=default"],
    ["experiment=whisper_frame"],  # held-out recorded voices of the unseen family: what they are for
    ["experiment=smoke", "data.short_vowel_sentences=0", "data.short_vowel_train_sentences=null",
     "+data.real_speech_clips=null"],  # null: all
    ["experiment=smoke", "data.recorded_voices=null", "data.heldout_recorded_voices=null"],
])
def test_the_shipped_settings_pass(overrides):
    check_settings(compose_config("train_heads", overrides))


def test_a_cache_dir_that_the_export_would_replace_is_refused(tmp_path, monkeypatch):
    # cache_dir inside export_dir: the atomic export deleted the cached pairs and features, without a word
    import leakloss.acoustic.recognizer as recognizer

    monkeypatch.setattr(recognizer.Recognizer, "load", lambda *a, **k: pytest.fail("a recognizer loaded"))
    for cache in (tmp_path / "export", tmp_path / "export" / "cache"):
        cfg = compose_config("train_heads", ["experiment=smoke", f"out_dir={tmp_path / 'out'}",
                                             f"export_dir={tmp_path / 'export'}", f"cache_dir={cache}"])
        with pytest.raises(SettingsError, match=r"cache_dir \(.*\) must not be export_dir or inside it"):
            run(cfg)
    check_settings(compose_config("train_heads", ["experiment=smoke", f"out_dir={tmp_path / 'out'}",
                                                  f"export_dir={tmp_path / 'c' / 'export'}",
                                                  f"cache_dir={tmp_path / 'c'}"]))  # the export inside it: fine


@pytest.mark.parametrize("override, message", [
    ("num_threads=0", "error: num_threads must be a whole number >= 1"),
    ("recognizer.a=/nonexistent/recognizer", "error: "),  # RecognizerLoadError: was a traceback
])
def test_the_entry_point_prints_one_error_line_and_exits_2(tmp_path, override, message):
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="offline")
    r = subprocess.run([sys.executable, "-m", "train_heads", "experiment=smoke", override,
                        f"hydra.run.dir={tmp_path / 'run'}", f"out_dir={tmp_path / 'out'}",
                        f"export_dir={tmp_path / 'export'}"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith(message), r.stderr[-2000:]
    assert "Traceback" not in r.stderr


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize("key", ["out_dir", "export_dir", "cache_dir"])
def test_folders_that_cannot_be_created_are_refused_before_any_model_loads(key, tmp_path, monkeypatch):
    # out_dir=/proc/x: os.access says yes to root; the run trained every head, then a FileNotFoundError traceback
    import leakloss.acoustic.recognizer as recognizer

    monkeypatch.setattr(recognizer.Recognizer, "load", lambda *a, **k: pytest.fail("a recognizer loaded"))
    others = {k: f"{k}={tmp_path / k}" for k in ("out_dir", "export_dir", "cache_dir")}
    cfg = compose_config("train_heads", ["experiment=smoke", *(v for k, v in others.items() if k != key),
                                         f"{key}=/proc/x"])
    with pytest.raises(SettingsError, match=rf"{key}: /proc/x cannot be created in /proc"):
        run(cfg)


def test_a_held_out_word_in_no_sentence_is_said_before_the_build(capsys):
    # a word in no sentence held nothing out, without a word, after the whole pair build
    from train_heads.pipeline import check_heldout_words

    check_heldout_words(compose_config("train_heads", ["experiment=smoke", "data.heldout_words=['नेकप', 'नेकपा', zzz]"]))
    assert "warning: data.heldout_words: 'नेकप', 'zzz' are in none of the built-in sentences" in capsys.readouterr().err
    check_heldout_words(compose_config("train_heads", ["experiment=smoke", "data.heldout_words=['नेकपा', 'हैन']"]))
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("value", ["'नेकपा'", "abc", "['नेकपा', 3]", "['नेकपा', ' ']"])
def test_held_out_words_that_are_not_a_list_of_words_are_refused(value):
    # a string was split into its letters, each held out, with one warning line
    from leakloss.checks import SettingsError
    from train_heads.pipeline import check_heldout_words

    with pytest.raises(SettingsError, match=r"data\.heldout_words must be a list of words"):
        check_heldout_words(compose_config("train_heads", ["experiment=smoke", f"data.heldout_words={value}"]))


def test_a_head_left_as_an_experiments_settings_only_is_said_so():
    # experiment=smoke sets heads.rawconv.max_epochs: after '~head@heads.rawconv' that alone stayed, and the run
    # failed with "heads.rawconv.batch_size must be a whole number >= 1, got None"
    from leakloss.checks import SettingsError
    from train_heads.pipeline import check_settings

    cfg = compose_config("train_heads", ["experiment=smoke", "~head@heads.rawconv"])
    with pytest.raises(SettingsError, match=r"heads\.rawconv is not a whole head config .*'~heads\.rawconv'"):
        check_settings(cfg)
    check_settings(compose_config("train_heads", ["experiment=smoke", "~heads.rawconv"]))  # the way it says
