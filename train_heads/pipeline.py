"""The head-training pipeline behind ``python -m train_heads`` (takes the composed Hydra config)."""

from __future__ import annotations

import hashlib
import math
import sys
from pathlib import Path

import lightning as L
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from leakloss.acoustic.features import FEATURE_SCHEMA_VERSION
from leakloss.checks import UntrainedError, check_trained
from leakloss.heads import HeadCard, save_head
from leakloss.pairs.features import check_pairs, manifest_sha256, site_feature_table
from train_heads.evaluate import heldout_markdown, write_heldout
from train_heads.recipes import Context


def embedded_manifest(cfg: DictConfig) -> Path:
    """The embedded pairs' manifest (synthesis cached under ``cache_dir/pairs``), before any confirmation."""
    from leakloss.pairs.build import build_embedded_pairs

    recorded = list(cfg.data.get("recorded_voices") or [])
    heldout_recorded = list(cfg.data.get("heldout_recorded_voices") or [])
    # v2 for a capped build: it takes a quarter held-out sentences, not the first N (all held out, nothing to train)
    version = "v1" if cfg.data.max_sentences is None else "v2"
    key = f"pairs-{version}-{cfg.seed}-{cfg.data.max_sentences}-{'-'.join(cfg.data.heldout_words)}"
    if recorded or heldout_recorded:  # espeak-only keys unchanged, so their caches stay valid
        # v2: the voices' phone-input tables say the Hindi vowels, so quality pairs exist in recorded voices
        key += f"-rec2-{'-'.join(recorded)}-held-{'-'.join(heldout_recorded)}"
    out = Path(cfg.cache_dir) / "pairs" / hashlib.sha256(key.encode()).hexdigest()[:16]
    manifest = out / "pairs.jsonl"
    if not manifest.exists():
        manifest, stats = build_embedded_pairs(out, max_sentences=cfg.data.max_sentences, seed=cfg.seed,
                                               progress=cfg.progress, heldout_words=list(cfg.data.heldout_words),
                                               recorded_voices=recorded, heldout_recorded_voices=heldout_recorded)
        print("pairs:", stats.as_dict())
    return manifest


def export_folder_problem(path: str | Path) -> str | None:
    """Why ``path`` cannot take a head export (None: absent, empty, or a previous export). The export replaces
    the whole folder, so that no head of an earlier run stays beside this run's; a folder holding anything but
    ``NAME.safetensors`` + ``NAME.json`` pairs and ``heldout.json``/``heldout.md`` is refused, never emptied."""
    path = Path(path)
    if not path.is_dir():
        return None
    entries = list(path.iterdir())
    names = {e.name for e in entries}
    for entry in entries:
        stem, suffix = entry.stem, entry.suffix
        paired = (suffix == ".safetensors" and f"{stem}.json" in names) or (
            suffix == ".json" and (f"{stem}.safetensors" in names or entry.name == "heldout.json"))
        if entry.is_dir() or entry.is_symlink() or not (paired or entry.name == "heldout.md"):
            return (f"{path} holds {entry.name!r}, which is not part of a head export; the export replaces the "
                    "whole folder: give an empty or new folder, or a previous export")
    return None


def check_settings(cfg: DictConfig) -> None:
    """The run's settings, checked before any model loads.

    Raises:
        SettingsError: ``seed``/``head_seed`` not whole numbers in ``[0, SEED_MAX]``, ``num_threads`` not a whole number >= 1,
            ``cache_dir``/``out_dir``/``export_dir`` not folders the run can write (e.g. under a regular file),
            ``export_dir`` a folder holding anything but a previous export (:func:`export_folder_problem`),
            or a head's ``batch_size``/``max_epochs`` not whole numbers >= 1, ``module.lr`` not a finite number
            > 0, ``module.weight_decay``/``module.outside_weight`` not finite numbers >= 0 (``max_epochs=-1``
            trained forever, ``lr=nan`` failed after the features, ``outside_weight=nan`` exported NaN weights), or
            a head's ``max_minutes`` (its time budget), when given, not a finite number > 0."""
    from leakloss.checks import SettingsError, check_config

    positive, non_negative = (0.0, math.inf, False), (0.0, math.inf, True)
    whole = {"num_threads": 1}
    numbers = {}
    for name in cfg.get("heads") or {}:
        whole |= {f"heads.{name}.batch_size": 1, f"heads.{name}.max_epochs": 1}
        numbers |= {f"heads.{name}.module.lr": positive, f"heads.{name}.module.weight_decay": non_negative}
        if OmegaConf.select(cfg, f"heads.{name}.module.outside_weight") is not None:
            numbers[f"heads.{name}.module.outside_weight"] = non_negative
        if OmegaConf.select(cfg, f"heads.{name}.max_minutes") is not None:  # the time budget: 0 or nan trains nothing
            numbers[f"heads.{name}.max_minutes"] = positive
    if OmegaConf.select(cfg, "data.max_sentences") is not None:
        whole["data.max_sentences"] = 1  # 0 exported an empty held-out table, -2 was a slice
    check_config(cfg, whole=whole, numbers=numbers, folders=("cache_dir", "out_dir", "export_dir"),
                 seeds=("seed", "head_seed"), optional=frozenset({"head_seed"}))
    from leakloss.config import instantiate_setting
    from leakloss.schema import KINDS

    roles = sorted(k for k in (cfg.get("recognizer") or {}))
    for name, hcfg in (cfg.get("heads") or {}).items():
        if hcfg.get("kind") not in KINDS:  # kind=vowel exported no head for it, without a word
            raise SettingsError(f"heads.{name}.kind must be one of {', '.join(KINDS)}, got {hcfg.get('kind')!r}")
        if hcfg.get("recognizer") not in roles:  # was a KeyError after the recognizers loaded
            raise SettingsError(f"heads.{name}.recognizer must be one of {', '.join(roles)}, "
                                f"got {hcfg.get('recognizer')!r}")
        # the head's own sizes (hidden=0 trained and exported a constant head); in_channels comes at run time
        extra = {"in_channels": 1} if OmegaConf.is_missing(hcfg.model, "in_channels") else {}
        instantiate_setting(hcfg.model, f"heads.{name}.model", **extra)
    problem = export_folder_problem(cfg.export_dir)
    if problem is not None:
        raise SettingsError(f"export_dir: {problem}")
    export, out = (Path(str(p)).expanduser().resolve() for p in (cfg.export_dir, cfg.out_dir))
    if export == out or export in out.parents:  # the export replaces export_dir: the run's logs went with it
        raise SettingsError(f"out_dir ({out}) must not be export_dir or inside it: the export replaces export_dir, "
                            "and the run's logs and checkpoints in out_dir would be deleted with it")
    for name in cfg.get("heads") or {}:  # Lightning's out_dir/NAME/checkpoints failed after the features
        if (out / name).exists() and not (out / name).is_dir():
            raise SettingsError(f"out_dir: {out / name} is a file; head {name} logs and checkpoints into that folder")
    from leakloss.config import check_trainer

    check_trainer(cfg.trainer)  # trainer=gpu without a GPU failed after the recognizers and features
    check_heldout_words(cfg)


def check_heldout_words(cfg: DictConfig) -> None:
    """A warning line for each of ``data.heldout_words`` that is a word of none of the built-in sentences the
    embedded pairs are built from: it holds nothing out (it was said nowhere, after a 570-sentence build). Not an
    error: the shipped list keeps the seed's किनकि, which no built-in sentence has."""
    words = list(OmegaConf.select(cfg, "data.heldout_words") or [])
    if not words or OmegaConf.select(cfg, "data.manifest") is not None:  # a user manifest names its own splits
        return
    from leakloss.speech.corpus import builtin_sentences
    from leakloss.text.normalize import normalize_devanagari, split_words

    known = {t.text for s in builtin_sentences() for t in split_words(s) if t.skipped is None}
    missing = [w for w in words if not isinstance(w, str) or normalize_devanagari(w) not in known]
    if missing:
        print(f"warning: data.heldout_words: {', '.join(map(repr, missing))} {'is' if len(missing) == 1 else 'are'} "
              "in none of the built-in sentences: held out nowhere", file=sys.stderr)


def check_manifest(cfg: DictConfig) -> None:
    """A user manifest (``data.manifest``) must exist, follow the schema, hold at least one pair, and name
    audio files that exist and words/sites of its texts (:func:`leakloss.pairs.features.check_pairs`).

    Raises:
        ManifestError: it does not; the message names the file (and line)."""
    from leakloss.pairs.schema import ManifestError, read_manifest

    if cfg.data.manifest is None:
        return
    path = Path(cfg.data.manifest)
    if not path.is_file():
        raise ManifestError(f"data.manifest={path}: no such file")
    records = read_manifest(path)
    if not records:
        raise ManifestError(f"data.manifest={path}: no pairs in it (one JSON object per line)")
    check_pairs(path, records)  # audio files and word/site indices: before any model loads, not mid-run


def build_pairs(cfg: DictConfig, recognizers: dict) -> Path:
    """The embedded pairs (synthesis cached), natural pairs confirmed by recognizer B."""
    if cfg.data.manifest is not None:
        return Path(cfg.data.manifest)
    from leakloss.pairs.build import ctc_confirmer, filter_natural_pairs

    manifest = embedded_manifest(cfg)
    confirmed = manifest.parent / f"pairs.confirmed-{recognizers['b'].name.replace('/', '_')}.jsonl"
    if not confirmed.exists():
        confirmed, rejected = filter_natural_pairs(manifest, ctc_confirmer(recognizers["b"]), confirmed.name)
        print(f"natural pairs not confirmed by recognizer B: {rejected}")
    return confirmed


class SiteTables(dict):
    """``tables[role]``: the site-feature table of recognizer ``role``, built on first use and kept."""

    def __init__(self, build) -> None:
        super().__init__()
        self._build = build

    def __missing__(self, role: str):
        self[role] = self._build(role)
        return self[role]


def _logger(cfg: DictConfig, name: str):
    if not cfg.logger or "_target_" not in cfg.logger:
        return False
    kwargs = {"name": name} if "wandb" in cfg.logger._target_.lower() else {}
    return instantiate(cfg.logger, **kwargs)


def run(cfg: DictConfig) -> dict:
    """Pairs -> features -> every head of ``cfg.heads`` trained, evaluated and exported with its card.

    What differs between heads comes from each head's ``recipe`` (:mod:`train_heads.recipes`)."""
    from leakloss.acoustic.recognizer import Recognizer

    check_settings(cfg)  # before any model loads
    check_manifest(cfg)
    L.seed_everything(cfg.seed, workers=True)
    torch.set_num_threads(cfg.num_threads)
    recognizers = {role: Recognizer.load(cfg.recognizer[role]) for role in ("a", "b")}
    manifest = build_pairs(cfg, recognizers)
    # site-feature tables on first use: a run of frame heads only (experiment=whisper_frame) never needs them
    tables = SiteTables(lambda role: site_feature_table(manifest, recognizers[role],
                                                        cache_dir=Path(cfg.cache_dir) / "features",
                                                        progress=cfg.progress)[0])
    ctx = Context(cfg, manifest, recognizers, tables)
    data_hash = manifest_sha256(manifest)
    export_dir = Path(cfg.export_dir)
    rows: list[dict] = []
    cards: dict[str, HeadCard] = {}
    heads: dict[str, torch.nn.Module] = {}
    for name, hcfg in cfg.heads.items():
        recipe = instantiate(hcfg.recipe)
        dm = recipe.datamodule(ctx, hcfg)
        if not len(dm.train):
            print(f"head {name}: no training rows; skipped")
            continue
        L.seed_everything(cfg.head_seed, workers=True)  # each head's init independent of the heads before it
        head = recipe.build_head(hcfg, dm)
        module = instantiate(hcfg.module)(head=head)
        callbacks = recipe.callbacks(dm)
        best = None
        if hcfg.get("select_best", False) and len(dm.dev):  # keep the epoch with the lowest dev loss
            from lightning.pytorch.callbacks import ModelCheckpoint

            best = ModelCheckpoint(monitor="val/loss", mode="min", save_top_k=1, filename="best-{epoch}")
            callbacks = callbacks + [best]
        budget, resume_from = {}, None
        if hcfg.get("max_minutes") is not None:  # time-budgeted: Lightning's timer, saved in the checkpoints
            from datetime import timedelta

            budget = {"max_time": timedelta(minutes=float(hcfg.max_minutes))}
        if hcfg.get("resume", False):  # resumable: last.ckpt after every epoch, picked up by a rerun
            from lightning.pytorch.callbacks import ModelCheckpoint

            resume_dir = Path(cfg.out_dir) / name / "resume"
            callbacks = callbacks + [ModelCheckpoint(dirpath=str(resume_dir), save_last=True, save_top_k=0)]
            if (resume_dir / "last.ckpt").is_file():
                resume_from = str(resume_dir / "last.ckpt")
                print(f"head {name}: resuming from {resume_from}")
        trainer = instantiate(cfg.trainer, max_epochs=hcfg.max_epochs, logger=_logger(cfg, name), callbacks=callbacks,
                              default_root_dir=str(Path(cfg.out_dir) / name), enable_checkpointing=True, **budget)
        trainer.fit(module, datamodule=dm, ckpt_path=resume_from)
        training = {"epochs": int(trainer.current_epoch), "steps": int(trainer.global_step),
                    "max_epochs": int(hcfg.max_epochs), "fast_dev_run": bool(trainer.fast_dev_run)}
        if budget:
            training["max_minutes"] = float(hcfg.max_minutes)
        if resume_from:
            training["resumed_from"] = Path(resume_from).name
        if trainer.fast_dev_run:
            print(f"warning: head {name}: trainer.fast_dev_run ran {trainer.global_step} step(s) only; its card says so",
                  file=sys.stderr)
        if best is not None and best.best_model_path:
            training["kept"] = Path(best.best_model_path).name
            state = torch.load(best.best_model_path, map_location="cpu", weights_only=True)["state_dict"]
            module.load_state_dict(state)
            print(f"head {name}: kept {Path(best.best_model_path).name} (dev loss {float(best.best_model_score):.4f})")
        # a diverged head is found now, not after every other head trained and the export failed on it
        check_trained(int(trainer.global_step), module.head.state_dict(), f"head {name}")
        if trainer.logger and type(trainer.logger).__name__ == "WandbLogger":
            trainer.logger.experiment.finish()  # one W&B run per head
        head = module.head.eval()
        heads[name] = head
        head_rows = recipe.heldout_rows(ctx, hcfg, head, dm, name)
        rows += head_rows
        rec = recognizers[hcfg.recognizer]
        cards[name] = HeadCard(
            head=name, architecture={}, recognizer=rec.name, feature_schema_version=FEATURE_SCHEMA_VERSION,
            feature_names=recipe.feature_names(head), training_data_sha256=data_hash, heldout=head_rows,
            notes=f"recognizers a={recognizers['a'].name} b={recognizers['b'].name}; config: "
                  + OmegaConf.to_yaml(hcfg).replace("\n", "; "),
            training=training,
            features=recipe.card_features(ctx, hcfg) if hasattr(recipe, "card_features") else {},
        )
    if not heads:  # an export of no head would replace the previous export's heads with nothing
        raise UntrainedError(f"no head had training rows (skipped: {', '.join(cfg.heads)}): nothing exported")
    from leakloss.atomic import atomic_directory

    earlier = sorted(p.stem for p in export_dir.glob("*.safetensors")) if export_dir.is_dir() else []
    dropped = [name for name in earlier if name not in heads]
    if dropped:  # the export is one run's set: say which heads of the earlier one go
        print(f"warning: {export_dir}: the earlier export's head(s) {', '.join(dropped)} are not in this run "
              "and are removed with it", file=sys.stderr)
    with atomic_directory(export_dir) as folder:  # one export, whole: no head of an earlier run stays beside these
        for name, head in heads.items():
            cards[name].heldout = rows  # every card carries the whole held-out table
            save_head(folder / name, head, cards[name])
        write_heldout(folder, rows)
    return {"export_dir": export_dir, "heldout": rows, "heldout_markdown": heldout_markdown(rows)}
