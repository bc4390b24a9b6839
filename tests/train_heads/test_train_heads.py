import copy
from pathlib import Path

import lightning as L
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

from leakloss.config import config_dir
from leakloss.heads import HeadCard, MLPHead, RawConvHead, load_head, save_head
from leakloss.pairs.features import ConvTable, FeatureTable
from train_heads.data import ConvDataModule, FeatureDataModule
from train_heads.evaluate import heldout_markdown, write_heldout
from train_heads.modules import MLPHeadModule, RawConvHeadModule

CONF = config_dir()
ROOT = Path(__file__).resolve().parents[2]


def random_table(n: int = 120, seed: int = 0) -> FeatureTable:
    g = torch.Generator().manual_seed(seed)
    y = (torch.arange(n) % 2).float()
    x = torch.randn(n, 57, generator=g) + y[:, None] * 0.8
    splits = ["train"] * (n - 40) + ["dev"] * 20 + ["heldout"] * 20
    meta = [{"pair_id": f"p{i // 2}", "pair_kind": ["physical", "natural", "model"][i % 3], "kind": "deletion",
             "contrast": "ʌ->∅", "split": splits[i], "word": "w", "role": "query" if y[i] else "control",
             "sentence_id": f"s{i // 6}"} for i in range(n)]
    return FeatureTable(x, y, meta)


def random_conv_table(n: int = 24, c: int = 8) -> ConvTable:
    g = torch.Generator().manual_seed(0)
    feats = [torch.randn(c, 40 + i % 7, generator=g) for i in range(n)]
    masks = [torch.arange(f.shape[-1]) % 10 < 3 for f in feats]
    meta = [{"pair_id": str(i), "pair_kind": "physical", "kind": "deletion", "contrast": "ʌ->∅",
             "split": "train" if i < 16 else "heldout", "word": "w", "role": "query", "sentence_id": "s"} for i in range(n)]
    return ConvTable(feats, masks, (torch.arange(n) % 2).float(), meta)


@pytest.mark.parametrize("overrides", [
    ["trainer=cpu", "logger=csv"], ["trainer=gpu", "logger=wandb"], ["trainer=fast_dev_run", "logger=none"],
    ["data=manifest", "data.manifest=x.jsonl", "recognizer=hub"], ["experiment=default"], ["experiment=smoke"],
])
def test_every_config_group_composes_and_instantiates(overrides, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose(config_name="train_heads", overrides=overrides + [f"out_dir={tmp_path}"])
    assert set(cfg.heads) == {"deletion", "quality", "rawconv"}
    for name, hcfg in cfg.heads.items():
        head = instantiate(hcfg.model, **({"in_channels": 8} if OmegaConf.is_missing(hcfg.model, "in_channels") else {}))
        module = instantiate(hcfg.module)(head=head)
        assert isinstance(module, L.LightningModule)
        recipe = instantiate(hcfg.recipe)
        assert all(callable(getattr(recipe, m)) for m in ("datamodule", "build_head", "callbacks", "heldout_rows",
                                                            "feature_names"))
    if cfg.logger and "_target_" in cfg.logger:
        assert instantiate(cfg.logger) is not None
    trainer_cfg = dict(cfg.trainer)
    if trainer_cfg.get("accelerator") == "gpu" and not torch.cuda.is_available():
        trainer_cfg["accelerator"] = "cpu"
    trainer = instantiate(trainer_cfg, logger=False, enable_checkpointing=False)
    assert isinstance(trainer, L.Trainer)


def test_fast_dev_run_on_cpu_mlp_and_rawconv(tmp_path):
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose(config_name="train_heads", overrides=["trainer=fast_dev_run", "logger=none"])
    dm = FeatureDataModule(random_table(), "deletion", batch_size=16)
    module = MLPHeadModule(MLPHead())
    # default_root_dir: Lightning's checkpoints go under the cwd (the repo's checkpoints/) otherwise
    instantiate(cfg.trainer, logger=False, default_root_dir=str(tmp_path)).fit(module, datamodule=dm)
    conv = ConvDataModule(random_conv_table(), batch_size=4)
    rmodule = RawConvHeadModule(RawConvHead(in_channels=8, width=8))
    instantiate(cfg.trainer, logger=False, default_root_dir=str(tmp_path)).fit(rmodule, datamodule=conv)
    assert all(torch.isfinite(p).all() for p in rmodule.parameters())


def _trainer(tmp_path, epochs, **kw):
    return L.Trainer(max_epochs=epochs, accelerator="cpu", logger=False, enable_progress_bar=False,
                     default_root_dir=str(tmp_path), deterministic=True, enable_model_summary=False, **kw)


def test_resume_from_checkpoint_matches_uninterrupted_run(tmp_path):
    table = random_table()
    L.seed_everything(0)
    head = MLPHead()
    init = copy.deepcopy(head.state_dict())
    full = MLPHeadModule(head)
    _trainer(tmp_path / "full", 4).fit(full, datamodule=FeatureDataModule(table, "deletion", batch_size=16))

    first = MLPHeadModule(MLPHead())
    first.head.load_state_dict(init)
    t1 = _trainer(tmp_path / "part", 2)
    t1.fit(first, datamodule=FeatureDataModule(table, "deletion", batch_size=16))
    ckpt = tmp_path / "mid.ckpt"
    t1.save_checkpoint(ckpt)
    resumed = MLPHeadModule(MLPHead())
    _trainer(tmp_path / "resume", 4).fit(resumed, datamodule=FeatureDataModule(table, "deletion", batch_size=16),
                                         ckpt_path=str(ckpt))
    for k, v in full.head.state_dict().items():
        assert torch.allclose(v, resumed.head.state_dict()[k], atol=1e-6), k


class _Interrupt(L.Callback):
    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.current_epoch == 1 and batch_idx == 1:
            raise RuntimeError("power cut")


def test_interrupted_training_leaves_no_head_file(tmp_path):
    export = tmp_path / "export"
    module = MLPHeadModule(MLPHead())
    with pytest.raises(RuntimeError, match="power cut"):
        _trainer(tmp_path, 5, callbacks=[_Interrupt()]).fit(
            module, datamodule=FeatureDataModule(random_table(), "deletion", batch_size=16))
        save_head(export / "deletion", module.head, HeadCard("deletion", {}, "b", "1"))  # never reached
    assert not export.exists() or not list(export.iterdir())


def test_heldout_table_written_in_both_forms(tmp_path):
    rows = [{"head": "deletion", "pair_kind": "physical", "caught": 9, "total": 10, "false_flags": 0, "shams": 10},
            {"head": "rawconv", "pair_kind": "short_vowel", "caught": 0, "total": 0, "false_flags": 1, "shams": 50}]
    write_heldout(tmp_path, rows)
    md = (tmp_path / "heldout.md").read_text()
    assert "| deletion | physical | 9 / 10 | 0 / 10 |" in md and "| rawconv | short_vowel | — | 1 / 50 |" in md
    assert heldout_markdown(rows) == md


@pytest.mark.slow
def test_a_diverged_head_stops_the_run_before_the_next_head_trains(tmp_path):
    """lr=1e30 on the first head: every other head trained, then the export died with a traceback naming a
    deleted temp folder."""
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "train_heads", "experiment=smoke", f"cache_dir={tmp_path / 'cache'}",
         f"export_dir={tmp_path / 'export'}", f"out_dir={tmp_path / 'out'}", "progress=false", "~heads.quality",
         "heads.deletion.max_epochs=3", "heads.deletion.module.lr=1e30", "heads.rawconv.max_epochs=1",
         f"hydra.run.dir={tmp_path / 'h'}"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stderr[-2000:]
    # stopped at its first non-finite loss (it had trained on to its last epoch, then its NaN weights were refused)
    assert r.stderr.strip().splitlines()[-1].startswith("error: head deletion: the training loss was not finite at ")
    assert "Traceback" not in r.stderr and not (tmp_path / "out" / "rawconv").exists()  # rawconv never trained
    assert not (tmp_path / "export").exists()


@pytest.mark.slow
def test_smoke_experiment_end_to_end(tmp_path):
    """`python -m train_heads experiment=smoke`: pairs synthesised, features extracted, the raw-conv head trained
    with best-dev-epoch selection, exported with its card, and the held-out table written."""
    import json
    import subprocess
    import sys

    root = ROOT
    stale = tmp_path / "export"  # a previous export with a head this run does not make: it must not stay
    stale.mkdir()
    (stale / "oldhead.safetensors").write_bytes(b"x")
    (stale / "oldhead.json").write_text("{}")
    out = subprocess.run(
        [sys.executable, "-m", "train_heads", "experiment=smoke", f"cache_dir={tmp_path / 'cache'}",
         f"export_dir={tmp_path / 'export'}", f"out_dir={tmp_path / 'out'}", "progress=false"],
        cwd=root, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "head rawconv: kept best-epoch=" in out.stdout
    assert "warning: " in out.stderr and "head(s) oldhead are not in this run and are removed" in out.stderr
    # a capped build holds training sentences too: every head trains (the first 12 were all held out: no MLP head)
    assert "no training rows" not in out.stdout
    assert sorted(p.name for p in stale.iterdir()) == sorted(
        [f"{h}.{ext}" for h in ("deletion", "quality", "rawconv") for ext in ("json", "safetensors")]
        + ["heldout.json", "heldout.md"])
    head, card = load_head(tmp_path / "export" / "rawconv")
    assert isinstance(head, RawConvHead) and card.recognizer.startswith("a@")
    # the card says what the training ran (it named only the configured max_epochs)
    assert card.training["steps"] > 0 and card.training["fast_dev_run"] is False
    assert card.training["kept"].startswith("best-epoch=")
    rows = json.loads((tmp_path / "export" / "heldout.json").read_text())
    assert {r["pair_kind"] for r in rows} == {"physical", "natural", "model", "short_vowel"}
    assert sum(r["total"] for r in rows) > 0
    assert not list((tmp_path / "export").glob("*.tmp"))


@pytest.mark.parametrize("content, needle", [(None, "no such file"), ("", "no pairs in it"), ("{not json\n", "not valid JSON")])
def test_a_bad_user_manifest_stops_before_any_model_loads(tmp_path, monkeypatch, content, needle):
    from leakloss.acoustic.recognizer import Recognizer
    from leakloss.config import compose_config
    from leakloss.pairs.schema import ManifestError
    from train_heads.pipeline import run

    manifest = tmp_path / "pairs.jsonl"
    if content is not None:
        manifest.write_text(content, encoding="utf-8")
    monkeypatch.setattr(Recognizer, "load", lambda *a, **k: pytest.fail("a model loaded before the manifest was checked"))
    cfg = compose_config("train_heads", ["experiment=smoke", "data=manifest", f"data.manifest={manifest}",
                                         f"cache_dir={tmp_path}/cache", f"out_dir={tmp_path}/out"])
    with pytest.raises(ManifestError, match=needle):
        run(cfg)
    assert not (tmp_path / "out").exists()


def _pair(**change) -> dict:
    record = {"id": "p1", "pair_kind": "physical", "kind": "deletion", "contrast": "ʌ->∅", "text": "नेकपा आयो",
              "sentence_id": "s1", "word_index": 0, "word": "नेकपा", "site_position": 3, "nepali": "ʌ", "hindi": None,
              "query": "q.wav", "control": "c.wav", "reference": "r.wav", "voice": "v", "split": "train"}
    return record | change


@pytest.mark.parametrize("change, needle", [
    ({"query": "missing.wav"}, r"pair 'p1': query audio .*missing.wav is not a file"),
    ({"word_index": 7}, r"pair 'p1': word_index 7 is not a word the frontend reads in its text \(readable words: \[0, 1\]\)"),
    ({"site_position": 40}, r"pair 'p1': site_position 40 is past the word's \d+ phones"),
    ({"text": "क" * 120 + " नेपाल"}, r"pair 'p1': its text cannot be read: word 0 has 120 characters"),  # traceback
])
def test_a_manifest_naming_missing_audio_or_words_stops_before_any_model_loads(tmp_path, monkeypatch, change, needle):
    import json

    from leakloss.acoustic.recognizer import Recognizer
    from leakloss.config import compose_config
    from leakloss.pairs.schema import ManifestError
    from tests.tiny_models import write_clip
    from train_heads.pipeline import run

    for name in ("q", "c", "r"):
        write_clip(tmp_path / f"{name}.wav")
    manifest = tmp_path / "pairs.jsonl"
    manifest.write_text(json.dumps(_pair(**change), ensure_ascii=False) + "\n", encoding="utf-8")
    monkeypatch.setattr(Recognizer, "load", lambda *a, **k: pytest.fail("a model loaded before the manifest was checked"))
    cfg = compose_config("train_heads", ["experiment=smoke", "data=manifest", f"data.manifest={manifest}",
                                         f"cache_dir={tmp_path}/cache", f"out_dir={tmp_path}/out"])
    with pytest.raises(ManifestError, match=needle):
        run(cfg)
    from leakloss.pairs.features import check_pairs

    manifest.write_text(json.dumps(_pair(), ensure_ascii=False) + "\n", encoding="utf-8")
    assert [r.id for r in check_pairs(manifest)] == ["p1"]  # the same pair, unchanged, passes


def test_an_export_folder_holding_other_files_is_refused_not_emptied(tmp_path):
    from train_heads.pipeline import export_folder_problem

    assert export_folder_problem(tmp_path / "new") is None and export_folder_problem(tmp_path) is None
    for name in ("deletion.safetensors", "deletion.json", "heldout.json", "heldout.md"):
        (tmp_path / name).write_text("x")
    assert export_folder_problem(tmp_path) is None  # a previous export: replaced whole
    (tmp_path / "notes.txt").write_text("mine")
    assert "holds 'notes.txt', which is not part of a head export" in export_folder_problem(tmp_path)
    (tmp_path / "notes.txt").unlink()
    (tmp_path / "lonely.json").write_text("{}")  # a JSON file with no weights beside it is not a head card
    assert "holds 'lonely.json'" in export_folder_problem(tmp_path)
    (tmp_path / "lonely.json").unlink()
    (tmp_path / "sub").mkdir()
    assert "holds 'sub'" in export_folder_problem(tmp_path)


def test_the_embedded_pairs_are_built_anew_when_a_synthesizer_changes(tmp_path, monkeypatch):
    # an upgraded espeak-ng or recorded voice reused the pairs the old one had spoken
    from leakloss.config import compose_config
    from leakloss.pairs import build
    from leakloss.speech import festival, versions
    from train_heads.pipeline import embedded_manifest

    built = []

    def fake_build(out, **kwargs):
        built.append(out)
        return out / "pairs.jsonl", type("Stats", (), {"as_dict": lambda self: {}})()

    monkeypatch.setattr(build, "build_embedded_pairs", fake_build)

    def folder(*overrides: str) -> Path:
        cfg = compose_config("train_heads", ["experiment=smoke", f"cache_dir={tmp_path}", *overrides])
        return embedded_manifest(cfg).parent

    espeak_only, recorded = folder(), folder("data.recorded_voices=[fest-kal]")
    assert folder() == espeak_only and folder("data.recorded_voices=[fest-kal]") == recorded  # the same across calls
    monkeypatch.setattr(versions, "espeak_version", lambda: "espeak-ng 9.9")
    assert folder() != espeak_only and folder("data.recorded_voices=[fest-kal]") != recorded
    monkeypatch.undo()
    monkeypatch.setattr(build, "build_embedded_pairs", fake_build)
    monkeypatch.setattr(festival, "voice_version", lambda voice: "festival 9.9")
    assert folder() == espeak_only and folder("data.recorded_voices=[fest-kal]") != recorded


def test_a_head_whose_loss_is_not_finite_stops_at_that_step():
    # trained on to its last epoch and refused only at the export (the recognizer trainers stop at once)
    import lightning as L
    import torch
    from torch.utils.data import DataLoader

    from leakloss.heads import MLPHead
    from train_heads.modules import MLPHeadModule

    rows = [{"x": torch.full((57,), float("nan")), "y": torch.tensor(1.0)}] * 8
    module = MLPHeadModule(MLPHead(57, 4))
    before = {k: v.clone() for k, v in module.head.state_dict().items()}
    trainer = L.Trainer(max_epochs=5, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(module, DataLoader(rows, batch_size=4))
    assert module.diverged_at == 1 and trainer.current_epoch <= 1 and trainer.global_step <= 1  # not 5 epochs
    assert all(torch.equal(v, before[k]) for k, v in module.head.state_dict().items())  # no step on NaN
