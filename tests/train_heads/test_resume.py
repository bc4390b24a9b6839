"""A head's resume (``heads.NAME.resume``) continues the same run or is refused; its best epoch and time budget
carry over: the resumed run exports what one uninterrupted run would have. Fake recognizers and feature tables:
a few seconds."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
import torch

import train_heads.pipeline as pipeline
from leakloss.checks import ResumeError
from leakloss.config import compose_config
from leakloss.heads import load_head
from leakloss.pairs.features import FeatureTable


def _table(n: int = 200) -> FeatureTable:
    # labels unrelated to the features: the dev loss is lowest early and rises as the head overfits
    g = torch.Generator().manual_seed(0)
    y = (torch.arange(n) % 2).float()
    x = torch.randn(n, 57, generator=g)
    nh = n // 5
    splits = ["train"] * (n - 2 * nh) + ["dev"] * nh + ["heldout"] * nh
    meta = [{"pair_id": f"p{i // 2}", "pair_kind": "physical", "kind": "deletion", "contrast": "ʌ->∅",
             "split": splits[i], "word": "w", "role": "query" if y[i] else "control", "sentence_id": f"s{i // 6}"}
            for i in range(n)]
    return FeatureTable(x, y, meta)


class _Recognizer:
    def __init__(self, name) -> None:
        self.name = f"{name}@fake"


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """Recognizers, pairs and site features faked: run() trains the deletion head on :func:`_table`."""
    import leakloss.acoustic.recognizer as recognizer

    manifest = tmp_path / "pairs.jsonl"
    manifest.write_text("{}\n")
    monkeypatch.setattr(recognizer.Recognizer, "load", staticmethod(lambda name: _Recognizer(name)))
    monkeypatch.setattr(pipeline, "build_pairs", lambda cfg, recognizers: manifest)
    monkeypatch.setattr(pipeline, "site_feature_table", lambda *a, **k: (_table(), None))


def _run(folder: Path, *overrides: str) -> dict:
    # logger=csv: the best checkpoint went into its per-run version folder
    cfg = compose_config("train_heads", [
        "logger=csv", "~heads.quality", "~heads.rawconv", f"out_dir={folder / 'out'}",
        f"export_dir={folder / 'export'}", f"cache_dir={folder / 'cache'}", "progress=false",
        "heads.deletion.resume=true", "heads.deletion.select_best=true", "heads.deletion.batch_size=15",
        "heads.deletion.module.lr=0.03", *overrides])
    pipeline.run(cfg)
    head, card = load_head(folder / "export" / "deletion")
    return {"weights": head.state_dict(), "training": card.training}


def _same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_a_rerun_of_a_finished_run_reuses_its_best_epoch(fake, tmp_path):
    # the best checkpoint sat in the logger's version folder: the rerun could not restore its score (TypeError)
    first = _run(tmp_path, "heads.deletion.max_epochs=3")
    again = _run(tmp_path, "heads.deletion.max_epochs=3")
    assert again["training"]["resumed_from"] == "last.ckpt"
    assert again["training"]["kept"] == first["training"]["kept"]
    assert again["training"]["steps"] == first["training"]["steps"]
    assert _same_weights(again["weights"], first["weights"])


def test_a_resumed_run_keeps_the_best_epoch_of_the_whole_run(fake, tmp_path):
    # resumed with a longer budget, it compared only its own epochs: it kept a worse one than the first run's best
    whole = _run(tmp_path / "whole", "heads.deletion.max_epochs=6")
    _run(tmp_path / "parts", "heads.deletion.max_epochs=2")
    resumed = _run(tmp_path / "parts", "heads.deletion.max_epochs=6")
    assert resumed["training"]["resumed_from"] == "last.ckpt"
    assert resumed["training"]["kept"] == whole["training"]["kept"]
    assert resumed["training"]["steps"] == whole["training"]["steps"]
    assert _same_weights(resumed["weights"], whole["weights"])


def test_a_resume_of_another_run_is_refused(fake, tmp_path):
    # a changed lr was silently ignored (the card said the new one), a changed seed accepted, another
    # architecture a RuntimeError traceback from load_state_dict
    _run(tmp_path, "heads.deletion.max_epochs=1")
    for override, changed in [("heads.deletion.module.lr=0.01", r"heads.deletion.module.lr \(0.03 -> 0.01\)"),
                              ("seed=5", r"seed \(0 -> 5\)"), ("head_seed=5", r"head_seed \(0 -> 5\)"),
                              ("heads.deletion.model.hidden=8", r"heads.deletion.model.hidden \(16 -> 8\)"),
                              ("heads.deletion.batch_size=16", r"heads.deletion.batch_size"),
                              ("recognizer.b=other", r"recognizer.b")]:
        with pytest.raises(ResumeError, match=rf"heads.deletion.resume: .*last.ckpt was written by a run with other "
                                              rf"(.*, )?{changed}"):
            _run(tmp_path, "heads.deletion.max_epochs=2", override)
    record = tmp_path / "out" / "deletion" / "resume" / "run.json"
    saved = json.loads(record.read_text())["run"]
    saved["training_data_sha256"] = "0" * 64  # other training pairs
    record.write_text(json.dumps({"run": saved}))
    with pytest.raises(ResumeError, match="other training_data_sha256"):
        _run(tmp_path, "heads.deletion.max_epochs=2")
    record.unlink()  # a checkpoint of a run that recorded nothing (written before the record existed)
    with pytest.raises(ResumeError, match="has no run record"):
        _run(tmp_path, "heads.deletion.max_epochs=2")


def test_the_entry_point_prints_a_refused_resume_as_one_error_line(tmp_path, monkeypatch, capsys):
    import train_heads.__main__ as entry

    def refuse(cfg):
        raise ResumeError("heads.deletion.resume: written by a run with other seed\nsecond line")

    monkeypatch.setattr(pipeline, "run", refuse)
    monkeypatch.setattr(sys, "argv", ["train_heads", f"hydra.run.dir={tmp_path / 'h'}", "hydra.output_subdir=null",
                                      "logger=none"])
    with pytest.raises(SystemExit) as exit_:
        entry.main()
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: heads.deletion.resume: written by a run with other seed")


class _Clock:
    """time.monotonic for train_heads.callbacks: every training batch takes a minute."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def test_a_time_budget_spent_mid_epoch_resumes_that_epoch(fake, tmp_path, monkeypatch):
    # Lightning's max_time counted the cut epoch as done: the resume skipped the rest of it
    import lightning.pytorch.callbacks.timer as lightning_timer

    import train_heads.callbacks as callbacks
    from train_heads.modules import MLPHeadModule

    step = MLPHeadModule.training_step

    def run(folder, minutes):
        clock = _Clock()
        for module in (callbacks, lightning_timer):  # whichever keeps the budget
            monkeypatch.setattr(module, "time", types.SimpleNamespace(monotonic=clock.monotonic), raising=False)

        def timed_step(self, batch, i):
            clock.now += 60.0
            return step(self, batch, i)

        monkeypatch.setattr(MLPHeadModule, "training_step", timed_step)
        return _run(folder, "heads.deletion.max_epochs=3", f"heads.deletion.max_minutes={minutes}",
                    "heads.deletion.select_best=false")  # the last weights: what each run trained

    whole = run(tmp_path / "whole", 1000)
    cut = run(tmp_path / "parts", 10)  # 8 batches an epoch: spent after the 2nd batch of the 2nd epoch
    again = run(tmp_path / "parts", 10)  # the same budget: nothing more to train, the same head
    resumed = run(tmp_path / "parts", 1000)  # a longer budget finishes the cut epoch, then the rest
    assert resumed["training"]["steps"] == whole["training"]["steps"] == 24
    assert _same_weights(resumed["weights"], whole["weights"])
    assert again["training"]["steps"] == cut["training"]["steps"] == 10
    assert _same_weights(again["weights"], cut["weights"])
    # the cards say what was trained
    assert cut["training"]["time_budget_spent"] is True
    assert cut["training"]["epochs"] == 1 and cut["training"]["unfinished_epoch_batches"] == 2
    assert resumed["training"]["time_budget_spent"] is False and "unfinished_epoch_batches" not in resumed["training"]
    # the resume's own checkpoints replace last.ckpt (they went to last-v1.ckpt...: every later rerun resumed from
    # the cut, retraining what came after it)
    resume_dir = tmp_path / "parts" / "out" / "deletion" / "resume"
    assert sorted(p.name for p in resume_dir.glob("last*.ckpt")) == ["last.ckpt"]
    assert torch.load(resume_dir / "last.ckpt", map_location="cpu", weights_only=True)["global_step"] == 24


def test_a_fresh_start_leaves_no_best_checkpoint_of_an_earlier_run(fake, tmp_path):
    best = tmp_path / "out" / "deletion" / "best"
    best.mkdir(parents=True)
    (best / "best-epoch=7.ckpt").write_bytes(b"earlier run")
    first = _run(tmp_path, "heads.deletion.max_epochs=2", "heads.deletion.resume=false")
    assert [p.name for p in best.iterdir()] == [first["training"]["kept"]]


def test_check_head_resume_without_a_checkpoint_starts_afresh_and_continues_its_own_run(tmp_path):
    identity = {"seed": 0, "heads.deletion.module.lr": 0.03}
    resume_dir = tmp_path / "resume"
    assert pipeline.check_head_resume(resume_dir, identity, "deletion") is False  # nothing there: a fresh start
    pipeline.write_run_record(resume_dir, identity)
    assert pipeline.check_head_resume(resume_dir, identity, "deletion") is False  # a record, no last.ckpt yet
    (resume_dir / "last.ckpt").write_bytes(b"")
    assert pipeline.check_head_resume(resume_dir, identity, "deletion") is True
    with pytest.raises(ResumeError, match=rf"^heads.deletion.resume: {resume_dir / 'last.ckpt'} was written by a run "
                                          r"with other seed \(0 -> 1\); a resume continues the same run \(only "
                                          rf"heads.deletion.max_epochs and max_minutes may change\): give the same "
                                          rf"settings, or delete {resume_dir} to start afresh$"):
        pipeline.check_head_resume(resume_dir, {**identity, "seed": 1}, "deletion")
    (resume_dir / "run.json").write_text('{"run": "x"}')
    with pytest.raises(ResumeError, match=r"unreadable checkpoint record .*run.json \('run' is a str"):
        pipeline.check_head_resume(resume_dir, identity, "deletion")
