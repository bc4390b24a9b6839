"""`leakloss finetune-f5`: checks before training, and the new user's path end to end on the embedded preset."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("f5_tts")
pytest.importorskip("datasets")

import torch  # noqa: E402
from f5_tts.model import DiT  # noqa: E402

from integrations.finetune_f5 import FinetuneError, build_model, prepare  # noqa: E402
from leakloss.config import compose_config  # noqa: E402
from tests.conftest import needs_embedded  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PRESETS = sorted(p.stem for p in (ROOT / "leakloss" / "conf" / "f5").glob("*.yaml"))


class ChosenDiT(DiT):
    """A backbone class a preset's ``f5.backbone._target_`` can name instead of F5's ``DiT``."""


@pytest.fixture(scope="module")
def base_ckpt(tmp_path_factory) -> Path:
    """A randomly initialised Hindi-base F5 of the embedded preset's class and dims (the real weights come
    from `python -m train_f5`; tests never need them)."""
    from safetensors.torch import save_file

    from train_f5.model import hindi_base_f5

    path = tmp_path_factory.mktemp("base") / "model.safetensors"
    model = hindi_base_f5(seed=0)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return path


def _cfg(data: Path, ckpt: Path, *extra: str):
    return compose_config("finetune_f5", [f"data.dir={data}", f"f5.checkpoint={ckpt}", *extra])


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_builds_f5s_dit(preset):
    assert {"embedded", "indicf5", "f5_v1_base", "f5_v1_small"} <= set(PRESETS)
    cfg = compose_config("finetune_f5", [f"f5={preset}"])
    with torch.device("meta"):  # shapes only: Base is 336 M parameters
        model = build_model(cfg, {c: i for i, c in enumerate(" abc")})
    dim = model.transformer.dim
    assert dim == cfg.f5.arch.dim and len(model.transformer.transformer_blocks) == cfg.f5.arch.depth


def test_build_model_takes_the_backbone_class_from_the_config():
    cfg = compose_config("finetune_f5", ["f5=embedded"])
    vocab = {c: i for i, c in enumerate(" abc")}
    assert cfg.f5.backbone._target_ == "f5_tts.model.DiT" and type(build_model(cfg, vocab).transformer) is DiT
    chosen = compose_config("finetune_f5", ["f5=embedded", f"f5.backbone._target_={__name__}.ChosenDiT"])
    model = build_model(chosen, vocab)  # instantiate(f5.backbone), not a hard-coded DiT
    assert type(model.transformer) is ChosenDiT and model.transformer.dim == cfg.f5.arch.dim


def test_embedded_preset_is_the_hindi_base_class(base_ckpt):
    from train_f5.model import hindi_base_f5

    cfg = compose_config("finetune_f5", ["f5=embedded"])
    from integrations.finetune_f5 import resolve_vocab

    vocab, _ = resolve_vocab(cfg)
    ours, theirs = build_model(cfg, vocab).state_dict(), hindi_base_f5().state_dict()
    assert {k: v.shape for k, v in ours.items()} == {k: v.shape for k, v in theirs.items()}


@needs_embedded
def test_bad_inputs_are_refused_before_training(prepared_dir, base_ckpt, tmp_path):
    with pytest.raises(FinetuneError, match="raw.arrow"):
        prepare(_cfg(tmp_path, base_ckpt))
    with pytest.raises(FinetuneError, match="does not match the checkpoint"):  # F5's own sorted vocab of the data
        prepare(_cfg(prepared_dir, base_ckpt, f"f5.vocab={prepared_dir / 'vocab.txt'}"))
    with pytest.raises(FinetuneError, match="no checkpoint"):
        prepare(_cfg(prepared_dir, tmp_path / "none.safetensors"))


@needs_embedded
@pytest.mark.parametrize("override, message", [
    ("f5.arch.depth=2", r"does not fit the f5=hindi_base_f5 architecture: 0 missing, 0 shape-mismatched, 28 unexpected"),
    ("+f5.backbone.bogus=1", r"f5.backbone / f5.arch: TypeError: .*bogus"),  # Hydra's traceback after the placement
])
def test_a_model_the_checkpoint_does_not_fit_is_refused_before_the_site_placement(prepared_dir, base_ckpt, tmp_path,
                                                                                    monkeypatch, override, message):
    import integrations.f5_dataset

    def placed(*args, **kwargs):
        raise AssertionError("the sites were placed before the architecture was checked")

    monkeypatch.setattr(integrations.f5_dataset, "place_prepared_sites", placed)
    with pytest.raises(FinetuneError, match=message):
        prepare(_cfg(prepared_dir, base_ckpt, "f5=embedded", f"out_dir={tmp_path / 'run'}", override))


@pytest.mark.parametrize("override, message", [
    ("leak.weight=nan", r"leak.weight must be a finite number >= 0, got nan"),  # trained and exported a NaN model
    ("leak.weight=inf", r"leak.weight must be a finite number"),
    ("leak.weight=abc", r"leak.weight must be a finite number"),
    ("learning_rate=-1", r"learning_rate must be a finite number >= 0"),
    ("learning_rate=0", r"learning_rate must be > 0, got 0: the run would change no weight"),  # exported a card
    ("max_grad_norm=nan", r"max_grad_norm must be"),
    ("steps=abc", r"steps must be a whole number >= 2, got 'abc'"),
    # F5's schedule with no warm-up update stays at lr x 1e-8 all run (its decay scales the warm-up's start)
    ("steps=1", r"steps must be a whole number >= 2, got 1"),
    ("num_warmup_updates=0", r"num_warmup_updates must be a whole number >= 1, got 0"),
    ("steps=nan", r"steps must be a whole number"),
    ("ema_decay=2", r"ema_decay must be a finite number >= 0 and <= 1, got 2"),
    ("max_samples=0", r"max_samples must be a whole number >= 1, got 0"),
    ("probe.nfe=0", r"probe.nfe must be a whole number >= 1"),
    ("num_warmup_updates=-1", r"num_warmup_updates must be a whole number >= 1"),
    ("trainer.devices=2", r"trainer.devices=2: finetune-f5 places the sites on one device"),  # a traceback in rank 1
    ("trainer.devices=-1", r"trainer.devices=-1: finetune-f5 places the sites on one device"),
    ("trainer.devices=auto", r"trainer.devices=auto: finetune-f5 places the sites on one device"),  # every GPU
    ("trainer.devices='0,1'", r"trainer.devices=0,1: finetune-f5 places the sites on one device"),
    ("num_warmup_updates=1000", r"num_warmup_updates=1000 is not below steps=1000"),  # was cut to 999, silently
    ("num_threads=-2", r"num_threads must be a whole number >= 1, got -2"),  # torch raised mid-run
    ("seed=abc", r"seed must be a whole number >= 0"),
    ("seed=4294967296", r"seed must be a whole number in \[0, 4294967295\], got 4294967296"),  # numpy's bound
    ("mixed_precision=zz", r"mixed_precision must be one of no, bf16, fp16, got 'zz'"),  # failed after placement
    ("batch_size_type=zz", r"batch_size_type must be one of frame, sample, got 'zz'"),
    ("leak.mel_bridge=no", r"leak.mel_bridge must be true or false, got 'no'"),  # a truthy string: the bridge ran
    ("leak.bf16=1", r"leak.bf16 must be true or false, got 1"),
    ("leak.crop=maybe", r"leak.crop must be true or false or null, got 'maybe'"),
    ("leak.weight=0.1 leak.every=2000", r"the penalty first runs on update 2000, after the run's last"),
])
def test_bad_numbers_are_refused_before_any_data_is_read(tmp_path, override, message):
    with pytest.raises(FinetuneError, match=message):
        prepare(_cfg(tmp_path / "absent", tmp_path / "none.safetensors", *override.split(" ")))


@pytest.mark.parametrize("override, message", [
    ("save_every=0", r"save_every must be a whole number >= 1, got 0"),
    ("max_minutes=0", r"max_minutes must be a finite number > 0 or null, got 0"),
    ("max_minutes=nan", r"max_minutes must be a finite number > 0 or null"),
])
def test_bad_save_and_time_budgets_are_refused(tmp_path, override, message):
    with pytest.raises(FinetuneError, match=message):
        prepare(_cfg(tmp_path / "absent", tmp_path / "none.safetensors", override))


@pytest.mark.parametrize("override, message", [
    ("probe.texts=5", r"probe.texts must be null or a list of texts"),  # a TypeError after the placement
    ("probe.texts='नेकपा र अरू'", r"probe.texts must be null or a list of texts"),  # one probe per character
    ("probe.texts=[hello world]", r"probe.texts\[0\] 'hello world'"),  # logged "0% flagged" for ever
    ("probe.texts=['आज']", r"probe.texts\[0\] 'आज' has no testable contrast site"),
    ("leak.start_step=1000", r"leak.start_step=1000 is not before the run's last update \(steps=1000\)"),
    ("log_every=2000", r"log_every=2000 is more than steps=1000"),
    # logged on multiples of log_every, run on multiples of leak.every: 10 and 3 met on update 30 only
    ("leak.every=3", r"log_every=10 is not a multiple of leak.every=3"),
])
def test_settings_under_which_the_penalty_or_its_curves_never_act_are_refused(tmp_path, override, message):
    with pytest.raises(FinetuneError, match=message):
        prepare(_cfg(tmp_path / "absent", tmp_path / "none.safetensors", override))


@pytest.mark.parametrize("name, make_dir", [("ckpts", False), ("leak_curves.csv", True), ("run.json", True)])
def test_an_out_dir_entry_of_the_wrong_kind_is_refused_before_any_data_is_read(tmp_path, name, make_dir):
    out = tmp_path / "run"
    out.mkdir()
    (out / name).mkdir() if make_dir else (out / name).write_text("foreign")
    with pytest.raises(FinetuneError, match=rf"out_dir: .*{name} is a (file|folder), where the run writes"):
        prepare(_cfg(tmp_path / "absent", tmp_path / "none.safetensors", f"out_dir={out}"))


@pytest.mark.parametrize("stray", ["model_2.pt", "pretrained_model_1200000.safetensors"])
def test_a_checkpoint_f5_would_resume_from_in_place_of_model_last_is_refused(tmp_path, stray):
    # without model_last.pt F5 resumed from model_N.pt (unchecked, the card said update 0) or loaded a pretrained_*
    from integrations.finetune_f5 import check_resume

    out = tmp_path / "run"
    (out / "ckpts").mkdir(parents=True)
    (out / "ckpts" / stray).write_bytes(b"weights")
    with pytest.raises(FinetuneError, match=rf"ckpts/ holds '{stray}' but no model_last.pt: F5 would resume from it"):
        check_resume(_cfg(tmp_path / "data", tmp_path / "base.safetensors", f"out_dir={out}"))


def test_a_resume_on_another_corpus_at_the_same_folder_is_refused(tmp_path):
    # the clips of data.dir were replaced between two runs: the resume trained on, the card named the same folder
    from integrations.finetune_f5 import DATA_FINGERPRINT, check_resume

    data, out = tmp_path / "data", tmp_path / "run"
    data.mkdir()
    (data / "raw.arrow").write_bytes(b"five clips")
    (data / "duration.json").write_text('{"duration": [1, 2, 3, 4, 5]}')
    cfg = _cfg(data, tmp_path / "base.safetensors", f"out_dir={out}")
    _write_checkpoint(out, 2, cfg)
    assert check_resume(cfg) == 2
    (data / "raw.arrow").write_bytes(b"eight other clips")
    with pytest.raises(FinetuneError, match=rf"of a run with other settings: {DATA_FINGERPRINT}"):
        check_resume(cfg)
    recorded = json.loads((out / "run.json").read_text())
    del recorded["settings"][DATA_FINGERPRINT]  # a run recorded before the fingerprint: known by its folder
    (out / "run.json").write_text(json.dumps(recorded))
    assert check_resume(cfg) == 2


def test_a_resume_naming_the_same_checkpoint_by_another_path_is_the_same_run(tmp_path, monkeypatch):
    # the run gave f5.checkpoint absolute, the resume relative (or from another folder): it was refused as another run
    from integrations.finetune_f5 import check_resume

    data, out = tmp_path / "data", tmp_path / "run"
    data.mkdir()
    (data / "raw.arrow").write_bytes(b"clips")
    (data / "duration.json").write_text('{"duration": [1]}')
    (tmp_path / "base.safetensors").write_bytes(b"weights")
    cfg = _cfg(data, tmp_path / "base.safetensors", f"out_dir={out}")
    _write_checkpoint(out, 2, cfg)
    monkeypatch.chdir(tmp_path)
    assert check_resume(_cfg(data, "base.safetensors", f"out_dir={out}")) == 2
    recorded = json.loads((out / "run.json").read_text())
    recorded["settings"]["f5.checkpoint"] = "base.safetensors"  # recorded relative, before paths were made absolute
    (out / "run.json").write_text(json.dumps(recorded))
    assert check_resume(cfg) == 2
    (tmp_path / "other.safetensors").write_bytes(b"weights")
    with pytest.raises(FinetuneError, match=r"of a run with other settings: f5.checkpoint"):
        check_resume(_cfg(data, "other.safetensors", f"out_dir={out}"))


def test_an_out_dir_holding_other_files_and_no_run_is_refused(tmp_path):
    # a folder of the user's own leak_curves.csv and vocab.txt had them replaced without a word
    from integrations.finetune_f5 import check_resume

    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("the user's")
    (out / "vocab.txt").write_text("a run's")
    cfg = _cfg(tmp_path / "data", tmp_path / "base.safetensors", f"out_dir={out}")
    with pytest.raises(FinetuneError, match=r"holds 'notes.txt', which a finetune-f5 run does not write, and no "
                                            r"run.json"):
        check_resume(cfg)
    (out / "notes.txt").unlink()
    # a run's own files without run.json or checkpoint (the advice for a checkpoint without run.json: empty it)
    assert check_resume(cfg) == 0


def test_an_out_dir_that_is_the_data_folder_is_refused(tmp_path):
    # the export replaced the data's own vocab.txt (F5's vocab of the set) and mixed ckpts/ into it
    for out, data in ((tmp_path / "d", tmp_path / "d"), (tmp_path / "d" / "run", tmp_path / "d"),
                      (tmp_path / "run", tmp_path / "run" / "data")):
        with pytest.raises(FinetuneError, match=r"out_dir .* and data.dir .* must be separate folders"):
            prepare(_cfg(data, tmp_path / "none.safetensors", f"out_dir={out}"))


def test_an_addition_nothing_reads_is_refused():
    # +max_minutes=5 was accepted without a word when the config had no budget (it trained on)
    from leakloss.config import override_problem

    assert "'nope' is not a setting here" in override_problem("finetune_f5", ["data.dir=x", "+nope=5"])
    assert override_problem("finetune_f5", ["data.dir=x", "+trainer.strategy=ddp"]) is None  # a Trainer argument


def _write_checkpoint(out: Path, update: int, cfg=None) -> None:
    from integrations.finetune_f5 import record_run

    (out / "ckpts").mkdir(parents=True, exist_ok=True)
    torch.save({"update": update}, out / "ckpts" / "model_last.pt")
    if cfg is not None:
        record_run(cfg)


def test_a_resume_with_other_settings_is_refused_before_any_data_is_read(tmp_path):
    # F5 resumed silently from out_dir/ckpts: a rerun with leak.weight=0 trained nothing, wiped the curves and
    # relabelled the old weights in the card
    from integrations.finetune_f5 import check_resume

    out = tmp_path / "run"
    first = _cfg(tmp_path / "data", tmp_path / "base.safetensors", f"out_dir={out}", "leak.weight=0.1")
    assert check_resume(first) == 0  # nothing there: a fresh run
    _write_checkpoint(out, 3, first)
    assert check_resume(first) == 3
    # logging, probes, threads and the budgets may change on a resume
    assert check_resume(_cfg(tmp_path / "data", tmp_path / "base.safetensors", f"out_dir={out}", "leak.weight=0.1",
                             "log_every=1", "probe.every=0", "max_minutes=5", "save_every=1")) == 3
    with pytest.raises(FinetuneError, match=r"of a run with other settings: leak.weight \(0.1 -> 0\), "
                                            r"learning_rate \(1e-05 -> 0.001\)"):
        prepare(_cfg(tmp_path / "data", tmp_path / "base.safetensors", f"out_dir={out}", "leak.weight=0",
                     "learning_rate=0.001"))
    (out / "run.json").unlink()
    with pytest.raises(FinetuneError, match="holds an F5 checkpoint .* without the run.json"):
        check_resume(first)
    (out / "ckpts" / "model_last.pt").write_bytes(b"PK\x03\x04 cut")
    with pytest.raises(FinetuneError, match="model_last.pt: cannot be read"):
        check_resume(first)


@pytest.mark.parametrize("case, message", [
    ("no_config", "no Vocos folder with config.yaml"),
    ("other_config", r"not a loadable Vocos \(.*config.yaml: feature_extractor must be a mapping with a class_path"),
    ("no_weights", "has no model.safetensors or pytorch_model.bin"),
    ("foreign_weights", r"not a loadable Vocos \(.*RuntimeError: Error\(s\) in loading state_dict"),
    ("damaged_pickle", r"not a loadable Vocos \(.*UnpicklingError"),
])
def test_a_vocoder_folder_that_cannot_load_is_one_error(tmp_path, case, message):
    from safetensors.torch import save_file

    from integrations.finetune_f5 import load_vocoder

    folder = tmp_path / "voc"
    folder.mkdir()
    good = ("feature_extractor:\n  class_path: vocos.feature_extractors.MelSpectrogramFeatures\n  init_args:\n"
            "    sample_rate: 24000\n    n_fft: 1024\n    hop_length: 256\n    n_mels: 100\n    padding: center\n"
            "backbone:\n  class_path: vocos.models.VocosBackbone\n  init_args:\n    input_channels: 100\n"
            "    dim: 8\n    intermediate_dim: 16\n    num_layers: 1\n"
            "head:\n  class_path: vocos.heads.ISTFTHead\n  init_args:\n    dim: 8\n    n_fft: 1024\n"
            "    hop_length: 256\n    padding: center\n")
    if case != "no_config":
        (folder / "config.yaml").write_text("foo: 1\n" if case == "other_config" else good)
    if case in ("other_config", "foreign_weights"):
        save_file({"x": torch.zeros(2)}, str(folder / "model.safetensors"))
    if case == "damaged_pickle":
        (folder / "pytorch_model.bin").write_bytes(b"garbage")
    with pytest.raises(FinetuneError, match=message):
        load_vocoder(str(folder))


@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin"])
def test_a_local_vocos_folder_loads_as_f5_vocoder(tmp_path, weights):
    from integrations.finetune_f5 import load_vocoder
    from leakloss.vocoder import MelToWave
    from tests.tiny_models import write_vocos_folder

    vocos = write_vocos_folder(tmp_path / "voc", weights)
    mel = torch.randn(1, 12, 100)
    torch.testing.assert_close(load_vocoder(str(tmp_path / "voc"))(mel), MelToWave.from_vocos(vocos)(mel))


@needs_embedded  # the vocoder is loaded after the leak penalty
# through the CLI, a module function and a builtin (11-45 s each); every variant of tests/test_vocoder.py's HOSTILE,
# subprocess.call and posix.system among them, is refused by the loader the CLI calls
@pytest.mark.parametrize("variant", ["os.system", pytest.param("builtins.eval", marks=pytest.mark.slow)])
def test_cli_a_hostile_vocos_config_runs_nothing_and_exits_2(tmp_path, base_ckpt, prepared_dir, variant):
    # issue 43, defect 3: f5.vocoder=DIR ran whatever callable DIR/config.yaml named (os.system ran the command)
    from tests.test_vocoder import hostile_vocos_folder

    marker = tmp_path / "MARKER"
    hostile_vocos_folder(tmp_path / "voc", variant, marker)
    result = _cli("f5=embedded", f"data.dir={prepared_dir}", f"f5.checkpoint={base_ckpt}",
                  f"f5.vocoder={tmp_path / 'voc'}", f"out_dir={tmp_path / 'run'}", timeout=300)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "not one of the Vocos classes leakloss builds" in errors[0], result.stderr[-2000:]
    assert not marker.exists()


def test_an_out_dir_under_a_file_is_refused_before_any_data_is_read(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(FinetuneError, match=r"out_dir: .*run cannot be created: .*file is not a folder"):
        prepare(_cfg(tmp_path / "absent", tmp_path / "none.safetensors", f"out_dir={tmp_path / 'file' / 'run'}"))


def _rewrite_rows(src: Path, dst: Path, **column_values) -> Path:
    """A copy of the prepared folder ``src`` whose raw.arrow has ``{column: {row: value}}`` replaced."""
    from datasets import Dataset
    from datasets.arrow_writer import ArrowWriter

    shutil.copytree(src, dst)
    rows = Dataset.from_file(str(src / "raw.arrow")).to_dict()
    for column, changes in column_values.items():
        for row, value in changes.items():
            rows[column][row] = value
    (dst / "raw.arrow").unlink()
    with ArrowWriter(path=str(dst / "raw.arrow")) as writer:
        for i in range(len(rows["text"])):
            writer.write({k: rows[k][i] for k in rows})
        writer.finalize()
    return dst


def _corrupt(case: str, data: Path, ckpt: Path, tmp: Path) -> tuple[Path, Path, list[str]]:
    """``(data dir, checkpoint, extra overrides)`` with one unreadable input."""
    if case == "pickle_checkpoint":
        (tmp / "bad.pt").write_bytes(b"not a torch file")
        return data, tmp / "bad.pt", []
    if case == "list_checkpoint":
        torch.save([torch.zeros(2)], tmp / "list.pt")
        return data, tmp / "list.pt", []
    if case == "safetensors_checkpoint":
        (tmp / "bad.safetensors").write_bytes(b"\0" * 30)
        return data, tmp / "bad.safetensors", []
    if case == "latin1_vocab":
        (tmp / "vocab.txt").write_bytes("\u00e9\n".encode("latin-1"))
        return data, ckpt, [f"f5.vocab={tmp / 'vocab.txt'}"]
    copy = tmp / "data"
    if case == "missing_audio":
        return _rewrite_rows(data, copy, audio_path={1: str(tmp / "gone.wav")}), ckpt, []
    if case in ("empty_audio", "corrupt_audio"):  # an emptied or damaged file behind a prepared row
        bad = tmp / "bad.wav"
        if case == "empty_audio":
            import soundfile as sf

            sf.write(str(bad), torch.zeros(0).numpy(), 16_000)
        else:
            bad.write_bytes(b"RIFF not a wave")
        return _rewrite_rows(data, copy, audio_path={4: str(bad)}), ckpt, []
    if case == "null_audio_path":
        return _rewrite_rows(data, copy, audio_path={1: None}), ckpt, []
    if case == "null_text":
        return _rewrite_rows(data, copy, text={2: None}), ckpt, []
    shutil.copytree(data, copy)
    count = len(json.loads((data / "duration.json").read_text())["duration"])
    if case == "latin1_durations":
        (copy / "duration.json").write_bytes(b'{"duration": "\xe9"}')
    elif case == "nan_duration":
        (copy / "duration.json").write_text(json.dumps({"duration": [1.0] * (count - 1) + [float("nan")]}))
    elif case == "empty_arrow":
        (copy / "raw.arrow").write_bytes(b"")
    return copy, ckpt, []


@pytest.mark.parametrize("case, message", [
    ("pickle_checkpoint", r"bad.pt: not a readable F5 checkpoint .*weights_only"),  # was an UnpicklingError
    ("list_checkpoint", r"list.pt: holds a list, not a dict of named weight tensors"),
    ("safetensors_checkpoint", r"bad.safetensors: not a readable F5 checkpoint"),
    ("latin1_vocab", r"vocab.txt is not UTF-8 text"),
    ("latin1_durations", r"duration.json is not F5's"),
    ("empty_arrow", r"raw.arrow is not an Arrow table"),
    ("missing_audio", r"1 of 20 rows have no audio file: row 1 \(.*gone.wav\)"),  # failed inside the placement
    ("empty_audio", r"1 of 20 rows do not match their audio: row 4 \(.*bad.wav lasts 0.00 s, duration.json says"),
    ("corrupt_audio", r"1 of 20 rows do not match their audio: row 4 \(.*bad.wav: not readable audio"),
    ("null_audio_path", r"raw.arrow: 1 fields are empty or not text: row 1 \(audio_path None\)"),  # was a TypeError
    ("null_text", r"raw.arrow: 1 fields are empty or not text: row 2 \(text None\)"),  # was a TypeError
    ("nan_duration", r"duration.json: 1 of 20 durations are not finite numbers .*entry 19 \(nan\)"),
])
def test_unreadable_inputs_are_refused_by_name(prepared_dir, base_ckpt, tmp_path, case, message):
    data, ckpt, extra = _corrupt(case, prepared_dir, base_ckpt, tmp_path)
    with pytest.raises(FinetuneError, match=message):
        prepare(_cfg(data, ckpt, *extra))


@needs_embedded
def test_a_trainer_lightning_refuses_is_a_finetune_error(prepared_dir, base_ckpt):
    with pytest.raises(FinetuneError, match=r"trainer: MisconfigurationException: .*devices=0"):
        prepare(_cfg(prepared_dir, base_ckpt, "trainer.devices=0"))


def _prepare_folder(root: Path, rows: list[tuple[torch.Tensor, str]]) -> Path:
    import soundfile as sf

    from tests.integrations.conftest import prepare

    root.mkdir(parents=True, exist_ok=True)
    lines = ["audio_file|text"]
    for i, (wave, text) in enumerate(rows):
        path = root / f"c{i}.wav"
        sf.write(str(path), wave.numpy(), 16_000)
        lines.append(f"{path}|{text}")
    (root / "metadata.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return prepare(root / "metadata.csv", root / "data")


@needs_embedded
def test_texts_without_devanagari_and_datasets_without_sites_are_refused(base_ckpt, tmp_path):
    g = torch.Generator().manual_seed(0)
    latin = _prepare_folder(tmp_path / "latin", [(0.01 * torch.randn(16_000, generator=g), "hello there")] * 2)
    with pytest.raises(FinetuneError, match="no Devanagari"):
        prepare(_cfg(latin, base_ckpt))
    # Nepali texts over noise: nothing aligns, so no site could ever be scored
    noise = _prepare_folder(tmp_path / "noise", [(0.01 * torch.randn(24_000, generator=g), "घर जानु पर्छ"),
                                                 (0.01 * torch.randn(24_000, generator=g), "दिदीले नयाँ कलम")])
    with pytest.raises(FinetuneError, match="no testable contrast site"):
        prepare(_cfg(noise, base_ckpt))
    # F5 trains only on clips of 0.3-30 s: with none, it would have nothing to train on
    short = _prepare_folder(tmp_path / "short", [(0.01 * torch.randn(3_200, generator=g), "घर जानु पर्छ")] * 2)
    with pytest.raises(FinetuneError, match=r"none of its 2 clips lasts 0.3-30.0 s"):
        prepare(_cfg(short, base_ckpt))


@needs_embedded
def test_a_clip_with_nan_samples_is_refused_by_name(base_ckpt, tmp_path):
    # an IndexError in the forced alignment of the site placement (and a NaN flow loss had it been trained on)
    import soundfile as sf

    from integrations.f5_dataset import PreparedDatasetError

    g = torch.Generator().manual_seed(0)
    data = _prepare_folder(tmp_path / "nan", [(0.01 * torch.randn(24_000, generator=g), "घर जानु पर्छ")] * 2)
    wave = 0.01 * torch.randn(24_000, generator=g)
    wave[100:200] = float("nan")
    sf.write(str(tmp_path / "nan" / "c0.wav"), wave.numpy(), 16_000, subtype="FLOAT")
    with pytest.raises(PreparedDatasetError, match=r"c0.wav: holds NaN/Inf samples"):
        prepare(_cfg(data, base_ckpt))


def _cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="offline")
    env.pop("WANDB_API_KEY", None)
    return subprocess.run([sys.executable, "-m", "leakloss.cli", "finetune-f5", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_cli_error_and_exit_code_2_on_a_missing_dataset_and_a_broken_checkpoint(tmp_path, base_ckpt, prepared_dir):
    result = _cli(f"data.dir={tmp_path}", f"f5.checkpoint={base_ckpt}", timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "error:" in result.stderr and "raw.arrow" in result.stderr and "Traceback" not in result.stderr
    (tmp_path / "bad.pt").write_bytes(b"not a torch file")
    result = _cli(f"data.dir={prepared_dir}", f"f5.checkpoint={tmp_path / 'bad.pt'}", timeout=300)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "bad.pt: not a readable F5 checkpoint" in result.stderr
    data = _rewrite_rows(prepared_dir, tmp_path / "null", audio_path={3: None})
    result = _cli(f"data.dir={data}", f"f5.checkpoint={base_ckpt}", timeout=300)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == [
        f"error: {data / 'raw.arrow'}: 1 fields are empty or not text: row 3 (audio_path None)"]


@pytest.mark.slow
@needs_embedded
def test_new_users_path_prepare_place_finetune_and_f5_inference_loads_it(prepared_dir, base_ckpt, tmp_path):
    from f5_tts.infer.utils_infer import load_checkpoint, load_model
    from f5_tts.model import CFM, DiT

    from integrations.f5_dataset import place_prepared_sites
    from leakloss.penalty import LeakPenalty

    data = tmp_path / "data"
    shutil.copytree(prepared_dir, data)
    placed = place_prepared_sites(data, LeakPenalty.load().recognizer)  # "place sites"
    assert placed.sites > 0
    out = tmp_path / "run"
    steps = 4
    result = _cli("f5=embedded", f"data.dir={data}", f"f5.checkpoint={base_ckpt}", "leak.weight=0.1", f"steps={steps}",
                  "batch_size_type=sample", "batch_size_per_gpu=4", f"out_dir={out}", "log_every=1",
                  f"probe.every={steps}", "probe.nfe=2", "num_threads=2")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["updates"] == steps and summary["sites"] == placed.sites
    with open(out / "leak_curves.csv", newline="") as f:
        names = {r["name"] for r in csv.DictReader(f)}
    assert "leak/penalty" in names and any(n.startswith("leak/per_contrast/") for n in names)
    assert "leak_probe/flagged_share" in names
    assert list((out / "wandb").glob("offline-run-*")), "an offline W&B run"

    arch = dict(compose_config("finetune_f5", ["f5=embedded"]).f5.arch)
    vocab = out / "vocab.txt"
    model = load_model(DiT, arch, str(out / "model_last.safetensors"), vocab_file=str(vocab), device="cpu")
    assert isinstance(model, CFM)
    mel, _ = model.sample(torch.randn(1, 20, 100), ["घर"], 30, steps=2)  # F5's sampler runs on it
    assert torch.isfinite(mel).all()
    # F5's Trainer checkpoint too, through F5's own loader
    from f5_tts.model.utils import get_tokenizer

    char_map, size = get_tokenizer(str(vocab), "custom")
    again = CFM(transformer=DiT(**arch, text_num_embeds=size, mel_dim=100), vocab_char_map=char_map)
    load_checkpoint(again, str(out / "ckpts" / "model_last.pt"), "cpu", dtype=torch.float32)
    card = json.loads((out / "model_last.json").read_text(encoding="utf-8"))
    assert card["base"] == "hindi_base_f5" and card["update"] == steps
    assert card["mixed_precision"] == summary["mixed_precision"] == "no"  # what accelerate's autocast ran


@pytest.mark.slow
@needs_embedded
def test_a_run_out_of_time_saves_and_a_rerun_resumes_it_to_the_end(prepared_dir, base_ckpt, tmp_path):
    # there was no time budget and no checkpoint before the end (an interrupted run lost every update); a
    # resume restarted the curves at step 1 and the leak schedule at update 0
    data = tmp_path / "data"
    shutil.copytree(prepared_dir, data)
    out = tmp_path / "run"
    common = ["f5=embedded", f"data.dir={data}", f"f5.checkpoint={base_ckpt}", "leak.weight=0.1", "steps=3",
              "batch_size_type=sample", "batch_size_per_gpu=4", f"out_dir={out}", "log_every=1", "probe.every=0",
              "num_threads=2", "save_every=1"]
    first = _cli(*common, "max_minutes=0.0001")  # out of time after the first update
    assert first.returncode == 0, first.stderr[-3000:]
    summary = json.loads(first.stdout.strip().splitlines()[-1])
    assert summary["budget_reached"] is True and summary["updates"] == 1 and summary["planned_updates"] == 3
    assert json.loads((out / "model_last.json").read_text(encoding="utf-8"))["update"] == 1

    again = _cli(*common)
    assert again.returncode == 0, again.stderr[-3000:]
    summary = json.loads(again.stdout.strip().splitlines()[-1])
    assert summary["resumed_from_update"] == 1 and summary["updates"] == 3 and not summary["budget_reached"]
    with open(out / "leak_curves.csv", newline="") as f:
        steps = [int(r["step"]) for r in csv.DictReader(f) if r["name"] == "leak/penalty"]
    assert steps == [1, 2, 3]  # the first run's row kept, the resumed updates numbered on
    card = json.loads((out / "model_last.json").read_text(encoding="utf-8"))
    assert card["update"] == 3 and card["resumed_from_update"] == 1

    finished = _cli(*common)
    assert finished.returncode == 2 and "nothing to train" in finished.stderr, finished.stderr[-2000:]
    assert "Traceback" not in finished.stderr
    # said before any data is read (it came after the placement, the audio hashing and an F5 Trainer)
    with pytest.raises(FinetuneError, match=r"already holds update 3 of this run's 3: nothing to train"):
        prepare(compose_config("finetune_f5", common))
    # another setting is refused before any data is read: in process (a CLI start costs this test 10 s)
    other = [a for a in common if not a.startswith("leak.weight")] + ["leak.weight=0"]
    with pytest.raises(FinetuneError, match=r"of a run with other settings: leak.weight \(0.1 -> 0\)"):
        prepare(compose_config("finetune_f5", other))
    assert json.loads((out / "model_last.json").read_text(encoding="utf-8")) == card  # nothing relabelled


def test_a_checkpoint_with_network_weights_the_model_has_no_place_for_does_not_fit(base_ckpt):
    # f5.arch.depth=2 on the depth-4 base: one warning line, then a 2-block model fine-tuned from half the base
    from integrations.f5_tts import load_indicf5_checkpoint
    from integrations.finetune_f5 import checkpoint_fit_problem, resolve_vocab

    cfg = compose_config("finetune_f5", ["f5=embedded", "f5.arch.depth=2"])
    vocab, _ = resolve_vocab(cfg)
    problem = checkpoint_fit_problem(load_indicf5_checkpoint(build_model(cfg, vocab), base_ckpt))
    assert problem is not None and "0 missing, 0 shape-mismatched, 28 unexpected weights" in problem
    full = compose_config("finetune_f5", ["f5=embedded"])
    assert checkpoint_fit_problem(load_indicf5_checkpoint(build_model(full, vocab), base_ckpt)) is None


def test_a_base_whose_card_says_another_text_layout_does_not_fit(tmp_path, base_ckpt):
    # the text layout changes no weight shape: without its card, a filler-trained base loaded into the preset's
    # average-upsampling model fine-tuned weights as something they are not
    from omegaconf import OmegaConf

    from integrations.f5_tts import card_architecture_problem

    arch = OmegaConf.to_container(compose_config("finetune_f5", ["f5=embedded"]).f5.arch, resolve=True)
    ckpt = tmp_path / "model.safetensors"
    shutil.copy(base_ckpt, ckpt)
    assert card_architecture_problem(ckpt, arch) is None  # no card: nothing to compare
    card = {"architecture": {"_target_": "train_f5.model.hindi_base_f5", "dim": arch["dim"], "seed": 3}}
    (tmp_path / "model.json").write_text(json.dumps(card))  # written before the switch existed: filler layout
    layout = "text_embedding_average_upsampling"
    assert arch[layout] is True  # the embedded preset's layout since 2026-12-05
    assert f"says {layout}=False, the preset {layout}=True" in card_architecture_problem(ckpt, arch)
    card["architecture"][layout] = arch[layout]
    (tmp_path / "model.json").write_text(json.dumps(card))
    assert card_architecture_problem(ckpt, arch) is None
    (tmp_path / "model.json").write_text("{not json")
    assert card_architecture_problem(ckpt, arch) is None  # an unreadable card is not this check's business


@needs_embedded
def test_frame_batches_that_hold_no_clip_are_refused_and_clips_left_out_are_said(prepared_dir, base_ckpt, capsys):
    # below every clip: a ZeroDivisionError in F5's trainer; below some: they were dropped and counted as trainable
    import json

    from integrations.f5_dataset import open_prepared, trainable_count
    from leakloss.constants import MEL_HOP, MEL_SAMPLE_RATE

    frames = sorted(d * MEL_SAMPLE_RATE / MEL_HOP for d in json.loads(
        (prepared_dir / "duration.json").read_text())["duration"])
    with pytest.raises(FinetuneError, match=r"batch_size_per_gpu=\d+ mel frames holds none of the clips"):
        prepare(_cfg(prepared_dir, base_ckpt, "batch_size_type=frame", f"batch_size_per_gpu={int(frames[0]) - 1}"))
    middle = int(frames[len(frames) // 2])
    assert trainable_count(open_prepared(prepared_dir), max_frames=middle) == sum(f <= middle for f in frames)
    capsys.readouterr()
    prepare(_cfg(prepared_dir, base_ckpt, "batch_size_type=frame", f"batch_size_per_gpu={middle}"))
    left_out = sum(f > middle for f in frames)
    assert f"warning: {left_out} of {len(frames)} clips are longer than batch_size_per_gpu={middle}" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------
# issue 43: bad inputs found by an outside check

#: the check's ``B`` (no probe, no intermediate save, a row per update), with batches of 2 clips (seconds an update)
_B = ("f5=embedded", "probe.texts=[]", "save_every=null", "batch_size_type=sample", "batch_size_per_gpu=2",
      "log_every=1", "num_threads=2", "num_warmup_updates=1")


def _curve(path: Path) -> dict[int, dict[str, float]]:
    rows: dict[int, dict[str, float]] = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows.setdefault(int(r["step"]), {})[r["name"]] = float(r["value"])
    return rows


@pytest.mark.slow
@needs_embedded
@pytest.mark.parametrize("extra", [
    ("leak.crop=false",),  # exit 0, NaN weights saved, "final_leak_penalty": 0.0
    # the monitored baseline, with leak.crop left to its default (it once was a PenaltyInputError traceback on the
    # crop path's NaN RMS once the model's estimate went NaN)
    ("leak.weight=0",),
])
def test_a_diverged_finetune_stops_at_the_first_nonfinite_loss_saves_nothing_and_exits_1(
        tiny_prepared_dir, base_ckpt, tmp_path, extra):
    out = tmp_path / "run"
    result = _cli(*_B, f"data.dir={tiny_prepared_dir}", f"f5.checkpoint={base_ckpt}", f"out_dir={out}", "steps=3",
                  "learning_rate=1e30", *extra)
    assert result.returncode == 1, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert '"out_dir"' not in result.stdout  # no summary of a success
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "the training loss is not finite" in errors[0]
    assert "no checkpoint was written" in errors[0]
    # never a NaN model: no checkpoint, no export, no temporary file left behind
    assert not list(out.rglob("model_last*")) and not list(out.rglob("*.tmp")), sorted(out.rglob("*"))
    rows = _curve(out / "leak_curves.csv")
    last = rows[max(rows)]
    assert max(rows) <= 3 and math.isnan(last["loss/total"]) and last["loss/nonfinite"] == 1.0
    assert all(math.isfinite(r["loss/total"]) for step, r in rows.items() if step < max(rows))  # stopped at the first
    for key, value in last.items():  # a dead model's penalty is not measured: never 0.0 ("no leak")
        if key == "leak/penalty" or key.startswith(("leak/per_kind/", "leak/per_contrast/")):
            assert math.isnan(value), (key, value)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs Linux /proc")
def test_an_out_dir_that_cannot_be_created_is_refused_before_any_data_is_read(tmp_path):
    # /proc/x: os.access says yes to root, then record_run's mkdir was a traceback after the site placement
    with pytest.raises(FinetuneError, match=r"out_dir: /proc/x cannot be created in /proc"):
        prepare(_cfg(tmp_path / "absent", tmp_path / "none.safetensors", "out_dir=/proc/x"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="fp16 runs on a GPU")
def test_fp16_on_a_cpu_is_refused_not_recorded_as_what_ran(tmp_path):
    # accelerate's fp16 autocast does nothing on the CPU: the losses were fp32's while run.json and the card said fp16
    with pytest.raises(FinetuneError, match=r"mixed_precision=fp16 needs a CUDA GPU"):
        prepare(_cfg(tmp_path / "absent", tmp_path / "none.safetensors", "mixed_precision=fp16"))


def _fake_run(out: Path, ema: dict[str, torch.Tensor], update: int = 3) -> None:
    (out / "ckpts").mkdir(parents=True)
    torch.save({"ema_model_state_dict": ema | {"initted": torch.tensor(True), "step": torch.tensor(update)},
                "update": update}, out / "ckpts" / "model_last.pt")


def test_the_export_is_atomic_world_readable_and_writes_through_no_fixed_temp_name(tmp_path):
    # it was saved 0600 through .model_last.safetensors.tmp (a link planted there was written through)
    from safetensors.torch import load_file

    from integrations.finetune_f5 import export

    out = tmp_path / "run"
    ema = {"ema_model.w": torch.arange(6.0).reshape(2, 3)}
    _fake_run(out, ema)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    (out / ".model_last.safetensors.tmp").symlink_to(victim)
    old = os.umask(0o022)
    try:
        path = export(out, {" ": 0, "क": 1}, {"base": "x"})
    finally:
        os.umask(old)
    assert victim.read_text() == "keep"
    for name in ("model_last.safetensors", "vocab.txt", "model_last.json"):
        assert (out / name).stat().st_mode & 0o777 == 0o644, name
    assert torch.equal(load_file(str(path))["ema_model.w"], ema["ema_model.w"])
    assert json.loads((out / "model_last.json").read_text(encoding="utf-8"))["update"] == 3
    assert sorted(p.name for p in out.iterdir() if p.name.endswith(".tmp")) == [".model_last.safetensors.tmp"]


def test_an_export_of_nonfinite_weights_writes_nothing(tmp_path):
    from integrations.f5_tts import TrainingDivergedError
    from integrations.finetune_f5 import export

    out = tmp_path / "run"
    _fake_run(out, {"ema_model.w": torch.tensor([1.0, float("nan")])})
    with pytest.raises(TrainingDivergedError, match=r"update 3: the EMA weights .* hold NaN/Inf \(ema_model.w\)"):
        export(out, {" ": 0}, {})
    assert sorted(p.name for p in out.iterdir()) == ["ckpts"]


def _interrupted(monkeypatch, capsys, out: Path) -> str:
    import integrations.finetune_f5 as finetune

    def interrupt(cfg):
        raise KeyboardInterrupt

    monkeypatch.setattr(finetune, "run", interrupt)
    monkeypatch.setattr(sys, "argv", ["finetune_f5", "data.dir=x", f"out_dir={out}", "save_every=200"])
    with pytest.raises(SystemExit) as stop:
        finetune.main()
    assert stop.value.code == 130
    return capsys.readouterr().err


def test_an_interrupt_before_the_first_checkpoint_does_not_name_a_resume_point(tmp_path, monkeypatch, capsys):
    # it said the rerun resumes from "update 0" of a checkpoint that did not exist
    out = tmp_path / "run"
    err = _interrupted(monkeypatch, capsys, out)
    assert "interrupted before the first checkpoint" in err and "starts afresh" in err and "update 0" not in err
    _write_checkpoint(out, 7)
    err = _interrupted(monkeypatch, capsys, out)
    assert "(update 7; saved every save_every=200 updates) is what rerunning the same command resumes from" in err


@needs_embedded
def test_clips_outside_f5s_span_are_named_in_a_warning(base_ckpt, tmp_path, capsys):
    # F5 skips them without a word: they were seen only as items_trainable
    g = torch.Generator().manual_seed(0)
    data = _prepare_folder(tmp_path / "mixed", [(0.01 * torch.randn(24_000, generator=g), "घर जानु पर्छ"),
                                                (0.01 * torch.randn(1_600, generator=g), "घर जानु पर्छ"),
                                                (0.01 * torch.randn(24_000, generator=g), "दिदीले नयाँ कलम")])
    capsys.readouterr()
    with pytest.raises(FinetuneError, match="cannot load the leak penalty"):  # stops right after the checks
        prepare(_cfg(data, base_ckpt, f"leak.head={tmp_path / 'none.safetensors'}"))
    assert "warning: 1 of 3 clips last outside F5's 0.3-30.0 s and are left out of training: c1.wav (0.10 s)" \
        in capsys.readouterr().err


def test_the_leak_flags_reach_both_terms_of_the_model(tmp_path):
    """leak.weight / leak.paired_weight / leak.paired_recognizer and the schedule flags reach LeakAwareCFM; the
    paired term loads its recognizer by name (a folder here: a tiny recognizer)."""
    from integrations.finetune_f5 import leak_model_kwargs, load_text_term
    from leakloss.margin_penalty import PathMarginPenalty
    from leakloss.paired_penalty import PairedPosteriorPenalty
    from leakloss.vocoder import MelToWave
    from tests.tiny_models import save_tiny_models

    folders = save_tiny_models(tmp_path / "models")
    cfg = _cfg(tmp_path / "data", tmp_path / "base.safetensors", "f5=embedded", "leak.weight=0.2",
               "leak.paired_weight=0.3", f"leak.paired_recognizer={folders['a']}", "leak.crop=false",
               "leak.every=2", "leak.start_step=1", "leak.bf16=true", "leak.item_fraction=0.5",
               "leak.margin_weight=0.4", f"leak.margin_recognizer={folders['b']}")
    paired, margin = load_text_term(cfg, "paired"), load_text_term(cfg, "margin")
    assert isinstance(paired, PairedPosteriorPenalty) and paired.recognizer.name.startswith(str(folders["a"]))
    assert isinstance(margin, PathMarginPenalty) and margin.recognizer.name.startswith(str(folders["b"]))
    stand_in = torch.nn.Identity()  # the reference-free penalty: loaded by prepare, any module here
    plan = dict(penalty=stand_in, vocoder=MelToWave.tiny(0), cache_path=tmp_path / "sites.jsonl",
                paired_penalty=paired, margin_penalty=margin)
    model = build_model(cfg, {c: i for i, c in enumerate(" abc")}, **leak_model_kwargs(cfg, plan))
    assert model.leak_penalty is stand_in and model.leak_weight == 0.2
    assert model.paired_penalty is paired and model.paired_weight == 0.3
    assert model.margin_penalty is margin and model.margin_weight == 0.4
    assert (model.leak_crop, model.leak_bf16, model.leak_every, model.leak_start_step) == (False, True, 2, 1)
    assert model.leak_item_fraction == 0.5
    # leak.crop null (the default): crop on a finite receptive field, not on Whisper states
    from integrations.finetune_f5 import resolve_leak_crop
    from leakloss.acoustic.whisper_recognizer import WhisperRecognizer

    class Holding(torch.nn.Module):
        def __init__(self, recognizer):
            super().__init__()
            self.recognizer = recognizer

    whisper_like = Holding(torch.nn.Module())
    whisper_like.recognizer.crop_margin_s = WhisperRecognizer.crop_margin_s
    assert resolve_leak_crop(None, Holding(paired.recognizer)) is True  # a wav2vec2 recognizer
    assert resolve_leak_crop(None, whisper_like) is False and resolve_leak_crop(None, stand_in) is False
    assert resolve_leak_crop(True, whisper_like) is True and resolve_leak_crop(False, Holding(paired.recognizer)) is False
    bridged = Holding(whisper_like.recognizer)
    bridged.mel_bridge = torch.nn.Identity()  # leak.mel_bridge=true: whole by default, the encoder on crops asked
    assert resolve_leak_crop(None, bridged) is False and resolve_leak_crop(False, bridged) is False
    assert resolve_leak_crop(True, bridged) is True
    # off by default: no recognizer loaded, no paired term
    off = _cfg(tmp_path / "data", tmp_path / "base.safetensors", "f5=embedded")
    assert off.leak.paired_weight == 0.0 and off.leak.paired_recognizer == "wb"
    assert off.leak.margin_weight == 0.0 and off.leak.margin_recognizer == "wb"
    assert load_text_term(off, "paired") is None and load_text_term(off, "margin") is None
    model = build_model(off, {c: i for i, c in enumerate(" abc")},
                        **leak_model_kwargs(off, dict(plan, paired_penalty=None, margin_penalty=None)))
    assert model.paired_penalty is None and model.paired_weight == 0.0
    assert model.margin_penalty is None and model.margin_weight == 0.0


@pytest.mark.parametrize("override, message", [
    ("leak.paired_weight=nan", r"leak.paired_weight must be a finite number >= 0, got nan"),
    ("leak.paired_weight=-1", r"leak.paired_weight must be a finite number >= 0"),
    ("leak.paired_recognizer=''", r"leak.paired_recognizer must be a recognizer name"),
    ("leak.paired_recognizer=null", r"leak.paired_recognizer must be a recognizer name"),
    ("leak.margin_weight=nan", r"leak.margin_weight must be a finite number >= 0, got nan"),
    ("leak.margin_weight=-0.5", r"leak.margin_weight must be a finite number >= 0"),
    ("leak.margin_recognizer=''", r"leak.margin_recognizer must be a recognizer name"),
    # an off term's recognizer changed nothing, and the card's settings said it had
    ("leak.paired_recognizer=nosuch", r"leak.paired_recognizer=nosuch has no effect while leak.paired_weight is 0"),
    ("leak.margin_recognizer=w", r"leak.margin_recognizer=w has no effect while leak.margin_weight is 0"),
    ("leak.item_fraction=0", r"leak.item_fraction must be a number in \(0, 1\], got 0"),
    ("leak.item_fraction=1.5", r"leak.item_fraction must be a number in \(0, 1\]"),
    ("leak.item_fraction=nan", r"leak.item_fraction must be a number in \(0, 1\]"),
    ("leak.item_fraction=true", r"leak.item_fraction must be a number in \(0, 1\]"),
])
def test_bad_paired_settings_are_refused_before_any_data_is_read(tmp_path, override, message):
    with pytest.raises(FinetuneError, match=message):
        prepare(_cfg(tmp_path / "data", tmp_path / "none.safetensors", override))


@pytest.mark.parametrize("term", ["paired", "margin"])
def test_a_term_recognizer_that_cannot_load_is_one_error(tmp_path, term):
    from integrations.finetune_f5 import load_text_term

    cfg = _cfg(tmp_path / "data", tmp_path / "base.safetensors", f"leak.{term}_weight=0.1",
               f"leak.{term}_recognizer={tmp_path / 'missing'}")
    with pytest.raises(FinetuneError, match=rf"leak.{term}_recognizer=.*missing.*cannot load the {term} term's recognizer"):
        load_text_term(cfg, term)


def test_a_run_recorded_before_the_paired_term_resumes_and_its_recognizer_matters_only_when_on(tmp_path):
    from integrations.finetune_f5 import RUN_FILE, check_resume

    out = tmp_path / "run"
    cfg = _cfg(tmp_path / "data", tmp_path / "base.safetensors", f"out_dir={out}")
    _write_checkpoint(out, 3, cfg)
    recorded = json.loads((out / RUN_FILE).read_text(encoding="utf-8"))
    recorded["settings"] = {k: v for k, v in recorded["settings"].items()
                            if not k.startswith(("leak.paired", "leak.margin"))}
    (out / RUN_FILE).write_text(json.dumps(recorded), encoding="utf-8")  # as written before the two terms
    assert check_resume(cfg) == 3
    for term in ("paired", "margin"):
        assert check_resume(_cfg(tmp_path / "data", tmp_path / "base.safetensors", f"out_dir={out}",
                                 f"leak.{term}_recognizer=w")) == 3  # off: the recognizer changes nothing
        with pytest.raises(FinetuneError, match=rf"leak.{term}_weight \(0.0 -> 0.5\)"):
            check_resume(_cfg(tmp_path / "data", tmp_path / "base.safetensors", f"out_dir={out}",
                              f"leak.{term}_weight=0.5"))


def test_a_run_recorded_before_the_item_fraction_scored_every_item(tmp_path):
    from integrations.finetune_f5 import RUN_FILE, check_resume

    out = tmp_path / "run"
    cfg = _cfg(tmp_path / "data", tmp_path / "base.safetensors", f"out_dir={out}")  # the default: 1.0
    _write_checkpoint(out, 3, cfg)
    recorded = json.loads((out / RUN_FILE).read_text(encoding="utf-8"))
    del recorded["settings"]["leak.item_fraction"]
    (out / RUN_FILE).write_text(json.dumps(recorded), encoding="utf-8")  # as written before the setting existed
    assert check_resume(cfg) == 3
    with pytest.raises(FinetuneError, match=r"leak.item_fraction \(1.0 -> 0.25\)"):
        check_resume(_cfg(tmp_path / "data", tmp_path / "base.safetensors", f"out_dir={out}", "leak.item_fraction=0.25"))


@pytest.mark.slow
@needs_embedded
def test_cli_a_finetune_with_all_three_terms_logs_them_apart_and_names_their_recognizers(tiny_prepared_dir, base_ckpt,
                                                                                        tmp_path):
    from leakloss.acoustic.recognizer import EMBEDDED_DIR

    if not (EMBEDDED_DIR / "wb" / "head.safetensors").exists():
        pytest.skip("recognizer wb not built")
    out = tmp_path / "run"
    result = _cli(*_B, f"data.dir={tiny_prepared_dir}", f"f5.checkpoint={base_ckpt}", f"out_dir={out}", "steps=2",
                  "leak.weight=0.1", "leak.paired_weight=0.5",
                  "leak.margin_weight=0.5")  # leak.paired_recognizer, leak.margin_recognizer: wb, the default
    assert result.returncode == 0, result.stderr[-3000:]
    rows = _curve(out / "leak_curves.csv")
    assert set(rows) == {1, 2}
    for row in rows.values():
        for term in ("paired", "margin"):
            assert {"leak/penalty", "leak/weight", f"{term}/penalty", f"{term}/weight", f"{term}/active_sites"} <= set(row)
            assert math.isfinite(row[f"{term}/penalty"]) and row[f"{term}/penalty"] >= 0
    assert any(r["paired/weight"] > 0 and r["paired/active_sites"] > 0 for r in rows.values())
    # the vocoded espeak clips align on wb: the margin term plans and scores sites
    assert any(r["margin/weight"] > 0 and r["margin/active_sites"] > 0 for r in rows.values())
    card = json.loads((out / "model_last.json").read_text(encoding="utf-8"))
    assert card["paired_recognizer"].startswith("wb@") and card["leak"]["paired_weight"] == 0.5
    assert card["margin_recognizer"].startswith("wb@") and card["leak"]["margin_weight"] == 0.5
    assert card["leak"]["crop"] is False  # as it ran (the default null: no crop on Whisper states), not null


def test_a_built_in_name_stays_a_name_in_the_run_identity_whatever_folder_shares_it(tmp_path, monkeypatch):
    # a folder named wb in the working directory made run.json record a path that was never loaded
    from integrations.finetune_f5 import run_identity

    monkeypatch.chdir(tmp_path)
    (tmp_path / "wb").mkdir()
    (tmp_path / "embedded").mkdir()
    ident = run_identity(_cfg(tmp_path / "data", tmp_path / "base.safetensors", "leak.paired_weight=0.1"))
    assert ident["leak.paired_recognizer"] == "wb" and ident["f5.vocoder"] == "embedded"


def test_sites_count_for_training_only_in_the_clips_f5_trains_on():
    # the refusal and the card counted sites over the whole folder: with all of them in clips F5 skips (outside
    # 0.3-30 s, longer than the frame batch) the run trained on with a penalty that never acted, exit 0
    from types import SimpleNamespace

    from integrations.finetune_f5 import trainable_sites
    from leakloss.constants import MEL_HOP, MEL_SAMPLE_RATE

    summary = SimpleNamespace(item_sites=(2, 0, 3, 4, 1))
    prepared = SimpleNamespace(durations=[36.6, 1.2, 2.0, 6.0, 0.1])  # too long, no site, 2 s, 6 s, too short
    assert trainable_sites(summary, prepared, None) == 3 + 4
    two_seconds = 2.0 * MEL_SAMPLE_RATE / MEL_HOP
    assert trainable_sites(summary, prepared, two_seconds) == 3  # the 6 s clip is longer than the frame batch
    assert trainable_sites(SimpleNamespace(item_sites=()), prepared, None) == 0  # a summary without per-item counts


def test_a_site_cache_place_that_cannot_be_written_is_refused_before_the_placement(tmp_path):
    # a folder at leak_sites.jsonl was an IsADirectoryError traceback after the placement (a part file left behind)
    from integrations.finetune_f5 import check_site_cache_place

    (tmp_path / "leak_sites.jsonl").mkdir()
    with pytest.raises(FinetuneError, match="leak_sites.jsonl is not a file, where the site cache is written"):
        check_site_cache_place(tmp_path / "leak_sites.jsonl")
    check_site_cache_place(tmp_path / "other.jsonl")  # absent and writable: fine


def test_the_probe_is_prompted_by_a_clip_of_a_few_seconds_not_always_row_0():
    # a 0.05 s row 0 gave 0.3 s syntheses that never aligned (probe curves NaN all run)
    from integrations.finetune_f5 import probe_prompt_row

    assert probe_prompt_row([0.05, 36.0, 1.0, 4.0, 6.0]) == 3
    assert probe_prompt_row([0.05, 1.0, 36.0]) == 1  # none of 2-15 s: the first F5 trains on
    assert probe_prompt_row([0.05]) == 0


def test_a_resume_after_a_clip_was_replaced_under_its_name_size_and_mtime_is_refused(tmp_path):
    # the corpus fingerprint hashed raw.arrow and duration.json only: other audio under the same name (cp -p,
    # rsync -t, a restored backup) resumed the run as the same corpus
    import soundfile as sf

    from integrations.finetune_f5 import DATA_FINGERPRINT, check_resume, data_fingerprint

    g = torch.Generator().manual_seed(0)
    data = _prepare_folder(tmp_path / "corpus", [(0.01 * torch.randn(24_000, generator=g), "घर जानु पर्छ"),
                                                 (0.01 * torch.randn(24_000, generator=g), "दिदीले नयाँ कलम")])
    out = tmp_path / "run"
    cfg = _cfg(data, tmp_path / "base.safetensors", f"out_dir={out}")
    _write_checkpoint(out, 2, cfg)
    assert check_resume(cfg) == 2
    clip = tmp_path / "corpus" / "c0.wav"
    before = clip.stat()
    sf.write(str(clip), (0.01 * torch.randn(24_000, generator=g)).numpy(), 16_000)  # same format and length
    os.utime(clip, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (clip.stat().st_size, clip.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    with pytest.raises(FinetuneError, match=rf"of a run with other settings: {DATA_FINGERPRINT}"):
        check_resume(cfg)
    # a run recorded before the audio was hashed (a bare hex): compared with the hash of that form, which cannot
    # see the audio, and still refused on other texts or clips
    recorded = json.loads((out / "run.json").read_text())
    recorded["settings"][DATA_FINGERPRINT] = data_fingerprint(data, audio=False)
    (out / "run.json").write_text(json.dumps(recorded))
    assert ":" not in recorded["settings"][DATA_FINGERPRINT] and check_resume(cfg) == 2
    recorded["settings"][DATA_FINGERPRINT] = "0123456789abcdef"
    (out / "run.json").write_text(json.dumps(recorded))
    with pytest.raises(FinetuneError, match=rf"of a run with other settings: {DATA_FINGERPRINT}"):
        check_resume(cfg)


def test_a_read_only_data_dir_without_a_site_cache_is_refused_before_the_placement(tmp_path, monkeypatch):
    from integrations.finetune_f5 import check_site_cache_place

    _deny_writes(monkeypatch, tmp_path)
    with pytest.raises(FinetuneError, match=r"is not writable and holds no site cache \(leak_sites.jsonl\): the "
                                            "sites are placed and written there"):
        check_site_cache_place(tmp_path / "leak_sites.jsonl")
    (tmp_path / "leak_sites.jsonl").write_text("")
    assert check_site_cache_place(tmp_path / "leak_sites.jsonl") is False  # read-only, a cache to read


def _deny_writes(monkeypatch, folder: Path) -> None:
    """``os.access(folder, W_OK)`` says no (the tests may run as root, where a chmod changes nothing)."""
    real, folder = os.access, folder.resolve()
    monkeypatch.setattr(os, "access", lambda path, mode, *a, **k: False if mode & os.W_OK
                        and Path(path).resolve() == folder else real(path, mode, *a, **k))


def _folder_state(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_size, p.read_bytes()) for p in sorted(folder.iterdir())}


@needs_embedded
def test_a_read_only_data_dir_whose_site_cache_is_complete_is_used_and_left_untouched(prepared_dir, base_ckpt,
                                                                                       tmp_path, monkeypatch):
    # it was refused as "not writable" even when its cache held every item: nothing had to be written there
    from integrations.f5_dataset import SITES_FILE

    data = tmp_path / "data"
    shutil.copytree(prepared_dir, data)  # the clips stay the fixture's; the cache is this folder's
    placed = prepare(_cfg(data, base_ckpt))["summary"]  # writable: the sites are placed (or completed) and cached
    assert (data / SITES_FILE).is_file() and placed.sites > 0
    _deny_writes(monkeypatch, data)
    state = _folder_state(data)
    plan = prepare(_cfg(data, base_ckpt))
    assert _folder_state(data) == state  # nothing written, renamed or touched
    summary = plan["summary"]
    assert (summary.items, summary.placed, summary.reused, summary.sites) == (placed.items, 0, placed.items,
                                                                              placed.sites)
    lines = (data / SITES_FILE).read_text(encoding="utf-8").splitlines()
    (data / SITES_FILE).write_text("\n".join(lines[1:]) + "\n", encoding="utf-8")  # one item short
    with pytest.raises(FinetuneError, match=rf"data.dir={data} is not writable and its site cache \({SITES_FILE}\) "
                                            rf"lacks 1 of {placed.items} items .*copy the prepared folder somewhere "
                                            "writable"):
        prepare(_cfg(data, base_ckpt))


@pytest.mark.parametrize("override, message", [
    ("data.dir=null", r"data.dir must be a path, got None"),
    ("out_dir=null", r"out_dir must be a path, got None"),
    ("f5.vocab=5", r"f5.vocab must be a path or null, got 5"),
    ("f5.vocab=[a]", r"f5.vocab must be a path or null"),
    ("f5.checkpoint=5", r"f5.checkpoint must be a path, got 5"),
    ("f5.vocoder=5", r"f5.vocoder must be a path, got 5"),
    ("leak.head=5", r"leak.head must be a path or null, got 5"),
    ("ema_decay=1.0", r"ema_decay must be < 1, got 1"),
])
def test_path_settings_of_another_type_and_a_frozen_average_are_refused_before_any_data_is_read(tmp_path, override,
                                                                                               message):
    # each was a TypeError from Path() after the site placement (out_dir=null: after the model was built); ema 1
    # froze the exported average at update 100 under a card that said the whole run
    with pytest.raises(FinetuneError, match=message):
        prepare(_cfg(tmp_path / "absent", tmp_path / "none.safetensors", override))


def test_an_error_a_placement_worker_raised_is_told_by_its_own_message():
    # with leak.placement_workers >= 1 the one error line was "Caught PreparedDatasetError in DataLoader worker
    # process 0.": no file, no reason
    from integrations.f5_dataset import PreparedDatasetError
    from integrations.finetune_f5 import error_line

    wrapped = PreparedDatasetError("Caught PreparedDatasetError in DataLoader worker process 0.\nOriginal Traceback "
                                   "(most recent call last):\n  File \"x.py\", line 1, in f\n"
                                   "integrations.f5_dataset.PreparedDatasetError: /d/a.wav: holds NaN/Inf samples\n")
    assert error_line(wrapped) == "/d/a.wav: holds NaN/Inf samples"
    assert error_line(FinetuneError("first\nfull_key: x")) == "first"
    assert error_line(FinetuneError("")) == "FinetuneError"
