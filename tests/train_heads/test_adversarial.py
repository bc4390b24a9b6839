"""train_heads.adversarial: band-gain edits descended against a frame head, kept as positives."""

from __future__ import annotations

import pytest
import torch

from leakloss.config import compose_config
from train_heads.recipes import ConvFrameRecipe


def test_the_shipped_recipe_adds_no_adversarial_rows_by_default():
    recipe = compose_config("train_heads", ["experiment=whisper_frame"]).heads.rawconv.recipe
    assert recipe.adversarial_pairs == 0 and recipe.adversarial_head is None and recipe.adversarial_steps >= 1


@pytest.mark.parametrize("kwargs", [{"adversarial_pairs": -1}, {"adversarial_steps": 0}])
def test_bad_adversarial_settings_are_refused(kwargs):
    with pytest.raises(ValueError, match="adversarial"):
        ConvFrameRecipe(**kwargs)


@pytest.fixture(scope="module")
def wb_and_manifest(tmp_path_factory):
    from leakloss.acoustic.recognizer import Recognizer, RecognizerLoadError
    from leakloss.pairs.build import build_embedded_pairs

    try:
        rec = Recognizer.load("wb")
    except (RecognizerLoadError, FileNotFoundError) as err:
        pytest.skip(f"recognizer wb not loadable here: {err}")
    path, _ = build_embedded_pairs(tmp_path_factory.mktemp("pairs"), max_sentences=6, progress=False)
    return rec, path


@pytest.mark.slow
def test_adversarial_rows_are_edited_deletion_positives_and_cached(wb_and_manifest, tmp_path):
    from leakloss.heads import SHIPPED_HEADS
    from leakloss.pairs.schema import read_manifest
    from train_heads.adversarial import adversarial_conv_table

    rec, manifest = wb_and_manifest
    head = SHIPPED_HEADS / "rawconv.safetensors"
    rec.requires_grad_(True)  # a caller's trainable recognizer comes back trainable
    table, stats = adversarial_conv_table(manifest, rec, head, pairs=2, steps=8, layer=4, cache_dir=tmp_path,
                                          progress=False)
    train_deletions = {r.id for r in read_manifest(manifest) if r.kind == "deletion" and r.split == "train"}
    assert stats["pairs"] == min(2, len(train_deletions))
    assert len(table) + sum(stats["skipped"].values()) == stats["pairs"] and len(table) >= 1
    assert torch.equal(table.y, torch.ones(len(table)))
    assert {m["role"] for m in table.meta} == {"adversarial"} and {m["pair_id"] for m in table.meta} <= train_deletions
    assert all(f.shape[0] == 512 and m.shape == f.shape[-1:] and m.any() for f, m in zip(table.feats, table.masks))
    assert stats["loss_last_step_mean"] < stats["loss_first_step_mean"]  # the edit descended the head
    assert all(p.requires_grad for p in rec.parameters())
    rec.requires_grad_(False)
    again, _ = adversarial_conv_table(manifest, rec, head, pairs=2, steps=8, layer=4, cache_dir=tmp_path,
                                      progress=False)
    assert all(torch.equal(a, b) for a, b in zip(again.feats, table.feats))  # from the cache


@pytest.mark.slow
def test_adversarial_rows_refuse_a_head_that_is_not_a_frame_head_or_reads_another_layer(wb_and_manifest, tmp_path):
    from leakloss.heads import SHIPPED_HEADS, HeadLoadError
    from train_heads.adversarial import adversarial_conv_table

    rec, manifest = wb_and_manifest
    with pytest.raises(HeadLoadError, match="frame"):
        adversarial_conv_table(manifest, rec, SHIPPED_HEADS / "deletion.safetensors", pairs=1, layer=4)
    with pytest.raises(ValueError, match="layer"):
        adversarial_conv_table(manifest, rec, SHIPPED_HEADS / "rawconv.safetensors", pairs=1, layer=2)
    with pytest.raises(ValueError, match=">= 1"):
        adversarial_conv_table(manifest, rec, SHIPPED_HEADS / "rawconv.safetensors", pairs=0, layer=4)


def test_the_cache_key_follows_the_head_files_whatever_name_is_given(tmp_path):
    from leakloss.heads import SHIPPED_HEADS
    from train_heads.adversarial import adversarial_key

    manifest = tmp_path / "pairs.jsonl"
    manifest.write_text("{}\n")
    for suffix in (".safetensors", ".json"):
        (tmp_path / f"h{suffix}").write_bytes((SHIPPED_HEADS / f"rawconv{suffix}").read_bytes())
    keys = {adversarial_key(manifest, "wb@1", tmp_path / name, pairs=1) for name in ("h", "h.json", "h.safetensors")}
    assert len(keys) == 1
    key = keys.pop()
    weights = bytearray((tmp_path / "h.safetensors").read_bytes())
    weights[-1] ^= 1  # new weights under the same card: another key
    (tmp_path / "h.safetensors").write_bytes(bytes(weights))
    assert adversarial_key(manifest, "wb@1", tmp_path / "h.json", pairs=1) != key
    assert len({adversarial_key(manifest, "wb@1", tmp_path / "h", pairs=p, steps=s) for p, s in ((1, 1), (2, 1), (1, 2))}) == 3


def test_the_recipe_adds_the_adversarial_rows_to_training(monkeypatch, tmp_path):
    """The wiring (a renamed stat once stopped a run at the print after the rows were made)."""
    from omegaconf import OmegaConf

    from leakloss.heads import SHIPPED_HEADS
    from leakloss.pairs.features import ConvTable
    from train_heads import adversarial, recipes

    def rows(n, label, split="train"):
        return ConvTable([torch.randn(4, 6) for _ in range(n)], [torch.ones(6, dtype=torch.bool)] * n,
                         torch.full((n,), label), [{"split": split, "role": "query"} for _ in range(n)])

    calls = {}

    def fake_adversarial(manifest, rec, head, **kwargs):
        calls.update(manifest=manifest, rec=rec, head=head, **kwargs)
        return rows(3, 1.0), {"pairs": 3, "rows": 3, "skipped": {}, "loss_first_step_mean": 4.0,
                               "loss_last_step_mean": 0.4}

    monkeypatch.setattr(recipes, "conv_feature_table", lambda *a, **k: (rows(5, 0.0), {}))
    monkeypatch.setattr(adversarial, "adversarial_conv_table", fake_adversarial)
    cfg = OmegaConf.create({"cache_dir": str(tmp_path), "progress": False, "seed": 7,
                            "data": {"short_vowel_sentences": 0}})
    ctx = recipes.Context(cfg=cfg, manifest=tmp_path / "pairs.jsonl", recognizers={"a": "REC"}, tables={})
    hcfg = OmegaConf.create({"name": "rawconv", "recognizer": "a", "frame_layer": 4, "kinds": ["deletion"],
                             "batch_size": 2})
    dm = ConvFrameRecipe(adversarial_pairs=3, adversarial_steps=5).datamodule(ctx, hcfg)
    assert len(dm.train) == 8 and float(dm.train.y.sum()) == 3.0
    assert calls["head"] == SHIPPED_HEADS / "rawconv.safetensors" and calls["rec"] == "REC"
    assert (calls["pairs"], calls["steps"], calls["layer"], calls["seed"]) == (3, 5, 4, 7)
    assert calls["cache_dir"] == ctx.feature_cache
