"""The head-training pipeline behind ``python -m train_heads`` (takes the composed Hydra config)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import lightning as L
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from leakloss.acoustic.features import FEATURE_NAMES, FEATURE_SCHEMA_VERSION
from leakloss.heads import HeadCard, save_head
from leakloss.pairs.features import (
    ConvTable, conv_feature_table, manifest_sha256, short_vowel_conv_table, site_feature_table,
)
from train_heads.callbacks import RatesCallback
from train_heads.data import ConvDataModule, FeatureDataModule, collate_crops
from train_heads.evaluate import heldout_markdown, mlp_heldout_rows, rawconv_heldout_rows, write_heldout


def build_pairs(cfg: DictConfig, recognizers: dict) -> Path:
    """The embedded pairs (synthesis cached), natural pairs confirmed by recognizer B."""
    if cfg.data.manifest is not None:
        return Path(cfg.data.manifest)
    import hashlib

    from leakloss.pairs.build import build_embedded_pairs, ctc_confirmer, filter_natural_pairs

    key = f"pairs-v1-{cfg.seed}-{cfg.data.max_sentences}-{'-'.join(cfg.data.heldout_words)}"
    out = Path(cfg.cache_dir) / "pairs" / hashlib.sha256(key.encode()).hexdigest()[:16]
    manifest = out / "pairs.jsonl"
    if not manifest.exists():
        manifest, stats = build_embedded_pairs(out, max_sentences=cfg.data.max_sentences, seed=cfg.seed,
                                               progress=cfg.progress, heldout_words=list(cfg.data.heldout_words))
        print("pairs:", stats.as_dict())
    confirmed = out / f"pairs.confirmed-{recognizers['b'].name.replace('/', '_')}.jsonl"
    if not confirmed.exists():
        confirmed, rejected = filter_natural_pairs(manifest, ctc_confirmer(recognizers["b"]), confirmed.name)
        print(f"natural pairs not confirmed by recognizer B: {rejected}")
    return confirmed


def short_vowel_negatives(cfg: DictConfig, recognizer) -> ConvTable:
    """Correct Nepali vowels read fast by every training teacher voice (its own share of the training
    sentences): a deleted vowel and a 40-60 ms retained one are what the reference-free head must tell
    apart. ``data.short_vowel_kinds`` adds quality sites' vowels; ``data.short_vowel_nasalised`` adds the
    deletion sites read with a nasalised vowel (anusvara schwas such as स्वयंसेविका's are a contrast the
    pairs almost never contain; without them the head flags short nasal vowels)."""
    from leakloss.speech.corpus import builtin_sentences, split_sentences
    from leakloss.speech.synth import TRAIN_TEACHER_VOICES

    train_sentences, _ = split_sentences(builtin_sentences())
    kinds = tuple(cfg.data.get("short_vowel_kinds", ["deletion"]))
    passes = [(False, kinds)] + ([(True, ("deletion",))] if cfg.data.get("short_vowel_nasalised", False) else [])
    tables = []
    for k, voice in enumerate(TRAIN_TEACHER_VOICES):
        chunk = train_sentences[k::len(TRAIN_TEACHER_VOICES)][: cfg.data.get("short_vowel_train_sentences")]
        for nasalise, pass_kinds in passes:
            tables.append(short_vowel_conv_table(recognizer, chunk, voice=voice, split="train", nasalise=nasalise,
                                                 kinds=pass_kinds, cache_dir=Path(cfg.cache_dir) / "features",
                                                 progress=cfg.progress))
    out = ConvTable.concat(tables)
    for m in out.meta:  # one sentence in seven (by a stable hash) is dev: model selection sees short vowels too
        if int(hashlib.sha1(m["sentence_id"].encode()).hexdigest(), 16) % 7 == 0:
            m["split"] = "dev"
    return out


def _logger(cfg: DictConfig, name: str):
    if not cfg.logger or "_target_" not in cfg.logger:
        return False
    kwargs = {"name": name} if "wandb" in cfg.logger._target_.lower() else {}
    return instantiate(cfg.logger, **kwargs)


def run(cfg: DictConfig) -> dict:
    from leakloss.acoustic.recognizer import Recognizer

    L.seed_everything(cfg.seed, workers=True)
    torch.set_num_threads(2)
    recognizers = {role: Recognizer.load(cfg.recognizer[role]) for role in ("a", "b")}
    manifest = build_pairs(cfg, recognizers)
    tables = {role: site_feature_table(manifest, rec, cache_dir=Path(cfg.cache_dir) / "features",
                                       progress=cfg.progress)[0] for role, rec in recognizers.items()}
    data_hash = manifest_sha256(manifest)
    export_dir = Path(cfg.export_dir)
    rows: list[dict] = []
    cards: dict[str, HeadCard] = {}
    heads: dict[str, torch.nn.Module] = {}
    for name, hcfg in cfg.heads.items():
        rec = recognizers[hcfg.recognizer]
        if name == "rawconv":
            conv, _ = conv_feature_table(manifest, rec, kinds=tuple(hcfg.get("kinds", ["deletion"])),
                                         cache_dir=Path(cfg.cache_dir) / "features", progress=cfg.progress)
            if cfg.data.short_vowel_sentences:
                extra = short_vowel_negatives(cfg, rec)
                conv = ConvTable.concat([conv, extra])
                print(f"rawconv: {len(extra)} short retained vowels added as training negatives")
            in_channels = conv.feats[0].shape[0] if len(conv) else 1
            L.seed_everything(cfg.head_seed, workers=True)  # each head's init independent of the heads before it
            head = instantiate(hcfg.model, in_channels=in_channels)
            dm = ConvDataModule(conv, batch_size=hcfg.batch_size, seed=cfg.seed)
            if len(dm.train):
                batch = collate_crops(list(zip(dm.train.feats, dm.train.masks, dm.train.y)))
                head.fit_normalisation(batch["feats"], batch["valid"])
            module = instantiate(hcfg.module)(head=head)
            callbacks = []
        else:
            table = tables[hcfg.recognizer]
            L.seed_everything(cfg.head_seed, workers=True)
            head = instantiate(hcfg.model)
            dm = FeatureDataModule(table, hcfg.kind, batch_size=hcfg.batch_size, seed=cfg.seed)
            if len(dm.train):
                head.fit_normalisation(dm.train.x)
            module = instantiate(hcfg.module)(head=head)
            callbacks = [RatesCallback(dm.dev)]
        if not len(dm.train):
            print(f"head {name}: no training rows; skipped")
            continue
        best = None
        if hcfg.get("select_best", False) and len(dm.dev):  # keep the epoch with the lowest dev loss
            from lightning.pytorch.callbacks import ModelCheckpoint

            best = ModelCheckpoint(monitor="val/loss", mode="min", save_top_k=1, filename="best-{epoch}")
            callbacks = callbacks + [best]
        trainer = instantiate(cfg.trainer, max_epochs=hcfg.max_epochs, logger=_logger(cfg, name), callbacks=callbacks,
                              default_root_dir=str(Path(cfg.out_dir) / name), enable_checkpointing=True)
        trainer.fit(module, datamodule=dm)
        if best is not None and best.best_model_path:
            state = torch.load(best.best_model_path, map_location="cpu", weights_only=True)["state_dict"]
            module.load_state_dict(state)
            print(f"head {name}: kept {Path(best.best_model_path).name} (dev loss {float(best.best_model_score):.4f})")
        if trainer.logger and type(trainer.logger).__name__ == "WandbLogger":
            trainer.logger.experiment.finish()  # one W&B run per head
        head = module.head.eval()
        heads[name] = head
        if name == "rawconv":
            short = None
            if cfg.data.short_vowel_sentences:
                from leakloss.speech.corpus import builtin_sentences, split_sentences

                _, held = split_sentences(builtin_sentences())
                short = short_vowel_conv_table(rec, held[: cfg.data.short_vowel_sentences],
                                               cache_dir=Path(cfg.cache_dir) / "features", progress=cfg.progress)
            head_rows = rawconv_heldout_rows(head, conv, short)
        else:
            head_rows = mlp_heldout_rows(head, name, tables[hcfg.recognizer], tables["a"], tables["b"])
        rows += head_rows
        cards[name] = HeadCard(
            head=name, architecture={}, recognizer=rec.name, feature_schema_version=FEATURE_SCHEMA_VERSION,
            feature_names=list(FEATURE_NAMES) if name != "rawconv" else [f"conv_layer_4_channel_{i}" for i in range(head.in_channels)],
            training_data_sha256=data_hash, heldout=head_rows,
            notes=f"recognizers a={recognizers['a'].name} b={recognizers['b'].name}; config: "
                  + OmegaConf.to_yaml(hcfg).replace("\n", "; "),
        )
    for name, head in heads.items():
        cards[name].heldout = rows  # every card carries the whole held-out table
        save_head(export_dir / name, head, cards[name])
    write_heldout(export_dir, rows)
    return {"export_dir": export_dir, "heldout": rows, "heldout_markdown": heldout_markdown(rows)}
