"""The head-training pipeline behind ``python -m train_heads`` (takes the composed Hydra config)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import warnings
from pathlib import Path

import lightning as L
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from leakloss.acoustic.features import FEATURE_SCHEMA_VERSION
from leakloss.checks import UntrainedError, check_trained
from leakloss.heads import HeadCard, save_head
from leakloss.pairs.features import check_pairs, manifest_sha256, site_feature_table
from train_heads.callbacks import BudgetSpent, TimeBudget
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
    if recorded or heldout_recorded:
        # v2: the voices' phone-input tables say the Hindi vowels, so quality pairs exist in recorded voices
        key += f"-rec2-{'-'.join(recorded)}-held-{'-'.join(heldout_recorded)}"
    key += f"-synth-{json.dumps(pair_synthesizer_versions(recorded + heldout_recorded), ensure_ascii=False)}"
    out = Path(cfg.cache_dir) / "pairs" / hashlib.sha256(key.encode()).hexdigest()[:16]
    manifest = out / "pairs.jsonl"
    if not manifest.exists():
        manifest, stats = build_embedded_pairs(out, max_sentences=cfg.data.max_sentences, seed=cfg.seed,
                                               progress=cfg.progress, heldout_words=list(cfg.data.heldout_words),
                                               recorded_voices=recorded, heldout_recorded_voices=heldout_recorded)
        print("pairs:", stats.as_dict())
    return manifest


def pair_synthesizer_versions(recorded_voices: list[str]) -> list[str]:
    """The versions of the synthesizers that speak the embedded pairs (espeak-ng, the recorded voices named), for
    the pairs' cache key: an upgraded synthesizer builds the pairs anew, never reuses the old one's audio. A name
    no voice has counts as itself (the build refuses it)."""
    from leakloss.speech import festival
    from leakloss.speech.versions import espeak_version

    return [espeak_version(), *(festival.voice_version(festival.VOICES_BY_NAME[name])
                                if name in festival.VOICES_BY_NAME else name
                                for name in dict.fromkeys(recorded_voices))]


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
            a head's ``max_minutes`` (its time budget), when given, not a finite number > 0,
            ``data.short_vowel_sentences`` (and, when not null, ``data.short_vowel_train_sentences`` and
            ``data.real_speech_clips``) not a whole number >= 0, ``data.short_vowel_teacher_voices``, when not
            null, not a whole number >= 1 (-1 was a slice that dropped sentences, 2.5 failed
            after the training), ``cache_dir`` equal to ``export_dir`` or inside it (the export deleted the cache),
            or a recorded voice that is not one (:func:`check_recorded_voices`)."""
    from leakloss.checks import SettingsError, check_config

    for name, hcfg in (cfg.get("heads") or {}).items():
        missing = [key for key in ("recipe", "model", "module") if key not in (hcfg or {})]
        if missing:  # '~head@heads.rawconv' with experiment=smoke left {max_epochs: 2}: "batch_size ... got None"
            raise SettingsError(f"heads.{name} is not a whole head config (no {', '.join(missing)}): an "
                                f"experiment's settings for it remain; drop the head with '~heads.{name}'")
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
    # counts of sentences and clips: -1 was a slice that dropped the last one, 2.5 a TypeError after the training
    whole |= {"data.short_vowel_sentences": 0, "data.short_vowel_train_sentences": 0, "data.real_speech_clips": 0,
              "data.short_vowel_teacher_voices": 1}
    check_config(cfg, whole=whole, numbers=numbers, folders=("cache_dir", "out_dir", "export_dir"),
                 seeds=("seed", "head_seed"), optional=frozenset({"head_seed", "data.short_vowel_train_sentences",
                                                                  "data.real_speech_clips",
                                                                  "data.short_vowel_teacher_voices"}))  # null: all
    check_recorded_voices(cfg)
    from leakloss.config import instantiate_setting
    from leakloss.schema import KINDS

    roles = sorted(k for k in (cfg.get("recognizer") or {}))
    for key in (f"heads.{name}.{flag}" for name in (cfg.get("heads") or {}) for flag in ("resume", "select_best")):
        check_flag(cfg, key)  # resume=no was the string "no": true, and the run resumed
    for key in ("progress", "data.short_vowel_nasalised"):
        check_flag(cfg, key)
    for key in TRAINER_KEYS_SET_PER_HEAD:  # accepted, then replaced by the pipeline's own value, unsaid
        if key in (cfg.get("trainer") or {}):
            raise SettingsError(f"trainer.{key} is set for each head by the pipeline; use heads.NAME.max_epochs / "
                                "heads.NAME.max_minutes / logger= instead")
    for name, hcfg in (cfg.get("heads") or {}).items():
        if hcfg.get("kind") not in KINDS:  # kind=vowel exported no head for it, without a word
            raise SettingsError(f"heads.{name}.kind must be one of {', '.join(KINDS)}, got {hcfg.get('kind')!r}")
        kinds = hcfg.get("kinds")
        if kinds is not None and not (OmegaConf.is_list(kinds) and len(kinds) and set(kinds) <= set(KINDS)):
            # kinds=[vowel] trained a frame head on short-vowel negatives only and exported it with exit 0
            raise SettingsError(f"heads.{name}.kinds must be a non-empty list of {', '.join(KINDS)}, got {kinds!r}")
        instantiate_setting(hcfg.recipe, f"heads.{name}.recipe")  # real_repeat=0 failed after the other heads
        if hcfg.get("recognizer") not in roles:  # was a KeyError after the recognizers loaded
            raise SettingsError(f"heads.{name}.recognizer must be one of {', '.join(roles)}, "
                                f"got {hcfg.get('recognizer')!r}")
        # the head's own sizes (hidden=0 trained and exported a constant head); in_channels comes at run time
        extra = {"in_channels": 1} if OmegaConf.is_missing(hcfg.model, "in_channels") else {}
        instantiate_setting(hcfg.model, f"heads.{name}.model", **extra)
    problem = export_folder_problem(cfg.export_dir)
    if problem is not None:
        raise SettingsError(f"export_dir: {problem}")
    export, out, cache = (Path(str(p)).expanduser().resolve() for p in (cfg.export_dir, cfg.out_dir, cfg.cache_dir))
    if export == out or export in out.parents:  # the export replaces export_dir: the run's logs went with it
        raise SettingsError(f"out_dir ({out}) must not be export_dir or inside it: the export replaces export_dir, "
                            "and the run's logs and checkpoints in out_dir would be deleted with it")
    if export == cache or export in cache.parents:  # the cached pairs and features went with the export, unsaid
        raise SettingsError(f"cache_dir ({cache}) must not be export_dir or inside it: the export replaces "
                            "export_dir, and the cached pairs and features in cache_dir would be deleted with it")
    for name in cfg.get("heads") or {}:  # Lightning's out_dir/NAME/checkpoints failed after the features
        if (out / name).exists() and not (out / name).is_dir():
            raise SettingsError(f"out_dir: {out / name} is a file; head {name} logs and checkpoints into that folder")
    from leakloss.config import check_trainer

    check_trainer(cfg.trainer)  # trainer=gpu without a GPU failed after the recognizers and features
    check_heldout_words(cfg)


#: Lightning settings the pipeline gives each head's trainer itself (a trainer.KEY override was replaced)
TRAINER_KEYS_SET_PER_HEAD = ("max_epochs", "max_time", "logger", "callbacks", "default_root_dir",
                             "enable_checkpointing")


def check_frame_layers(cfg: DictConfig, recognizers: dict) -> None:
    """Each head's ``frame_layer`` (null: the recognizer's default) a layer its recognizer has, else
    :class:`~leakloss.checks.SettingsError`."""
    from leakloss.checks import SettingsError, is_whole

    for name, hcfg in (cfg.get("heads") or {}).items():
        layer = hcfg.get("frame_layer")
        if layer is None:
            continue
        try:
            if not is_whole(layer, 0):
                raise ValueError(f"got {layer!r}")
            recognizers[hcfg.recognizer].frame_channels(layer)
        except ValueError as err:
            raise SettingsError(f"heads.{name}.frame_layer must be a layer of recognizer "
                                f"{recognizers[hcfg.recognizer].name}: {err}") from None


def check_flag(cfg: DictConfig, key: str) -> None:
    """``key`` (dotted; missing or null: not given) must be true or false (a string such as ``no`` read as true)."""
    from leakloss.checks import SettingsError

    value = OmegaConf.select(cfg, key, default=None)
    if value is not None and not isinstance(value, bool):
        raise SettingsError(f"{key} must be true or false, got {value!r}")


def check_recorded_voices(cfg: DictConfig) -> None:
    """``data.recorded_voices`` and ``data.heldout_recorded_voices`` (null: none) must be lists of registered
    Festival/flite voice names (:func:`leakloss.speech.festival.get_voice`; a voice of its exclusion list is refused), and every
    recorded voice of the training and dev pairs a training voice
    (:func:`leakloss.speech.festival.check_training_voice`: never the unseen family or its speaker twin); the
    held-out voices may be any registered voice (the unseen family is what they are for). Both were a traceback
    after the recognizers loaded.

    Raises:
        SettingsError: naming the key and the voice."""
    from leakloss.checks import SettingsError
    from leakloss.speech.festival import check_training_voice, get_voice

    for key in ("data.recorded_voices", "data.heldout_recorded_voices"):
        names = OmegaConf.select(cfg, key, default=None)
        if names is None:
            continue
        if not isinstance(names, (list, tuple)) and not OmegaConf.is_list(names):
            raise SettingsError(f"{key} must be a list of recorded voice names, got {names!r}")
        for name in names:
            if not isinstance(name, str):
                raise SettingsError(f"{key} must be a list of recorded voice names, got {name!r} in it")
            try:
                voice = get_voice(name)  # KeyError: unknown; ExcludedVoiceError (a ValueError): an excluded voice
                if key == "data.recorded_voices":  # training and dev pairs: never the unseen family
                    check_training_voice(voice)
            except (KeyError, ValueError) as err:
                raise SettingsError(f"{key}: {err.args[0] if err.args else err}") from None


def check_heldout_words(cfg: DictConfig) -> None:
    """A warning line for each of ``data.heldout_words`` that is a word of none of the built-in sentences the
    embedded pairs are built from: it holds nothing out (it was said nowhere, after a 570-sentence build). Not an
    error: the shipped list keeps the seed's किनकि, which no built-in sentence has.

    Raises:
        SettingsError: the setting is not a list of words (a string was split into its letters, each held out)."""
    from leakloss.checks import SettingsError

    value = OmegaConf.select(cfg, "data.heldout_words", default=None)
    if value is not None and not (isinstance(value, (list, tuple)) or OmegaConf.is_list(value)):
        raise SettingsError(f"data.heldout_words must be a list of words, e.g. '[नेकपा, हैन]', got {value!r}")
    words = list(value or [])
    not_words = [w for w in words if not isinstance(w, str) or not w.strip()]
    if not_words:
        raise SettingsError(f"data.heldout_words must be a list of words, got {not_words[0]!r} in it")
    if not words or OmegaConf.select(cfg, "data.manifest") is not None:  # a user manifest names its own splits
        return
    from leakloss.speech.corpus import builtin_sentences
    from leakloss.text.normalize import normalize_devanagari, split_words

    known = {t.text for s in builtin_sentences() for t in split_words(s) if t.skipped is None}
    missing = [w for w in words if normalize_devanagari(w) not in known]
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


#: A head's settings a resume may change: its budget (a longer one continues the run where it stopped).
BUDGET_KEYS = frozenset({"max_epochs", "max_minutes", "resume"})
#: Trainer settings that do not change what a head learns (where it runs, what it shows).
TRAINER_DISPLAY_KEYS = frozenset({"_target_", "accelerator", "devices", "deterministic", "enable_progress_bar",
                                  "log_every_n_steps"})
RUN_RECORD = "run.json"  #: beside ``resume/last.ckpt``: the run that wrote it (:func:`head_run_identity`)


def _flat(prefix: str, value) -> dict:
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _flat(f"{prefix}.{key}", item).items()}
    return {prefix: value}


def head_run_identity(cfg: DictConfig, name: str, training_data_sha256: str, recognizers: dict) -> dict:
    """What head ``name``'s resume checkpoint must have been trained on to be continued, as ``{dotted key:
    value}``: the head's settings but its budget (:data:`BUDGET_KEYS`), the data settings and the training data's
    sha256 (the manifest), the seeds, the recognizers (by name), the feature schema and the trainer settings that
    change the training (the logger, progress and threads may change between runs)."""
    head = {k: v for k, v in OmegaConf.to_container(cfg.heads[name], resolve=True).items() if k not in BUDGET_KEYS
            and not (k == "select_best" and v is False)}  # its default since 2026-12-07: absent in older records
    data = {k: v for k, v in OmegaConf.to_container(cfg.data, resolve=True).items() if k != "manifest"}
    trainer = {k: v for k, v in OmegaConf.to_container(cfg.trainer, resolve=True).items()
               if k not in TRAINER_DISPLAY_KEYS}
    identity = {"training_data_sha256": training_data_sha256, "feature_schema_version": FEATURE_SCHEMA_VERSION,
                "seed": cfg.seed, "head_seed": cfg.head_seed,
                **{f"recognizer.{role}": rec.name for role, rec in sorted(recognizers.items())},
                **_flat(f"heads.{name}", head), **_flat("data", data), **_flat("trainer", trainer)}
    return json.loads(json.dumps(identity))  # as read back from the record


def check_head_resume(resume_dir: Path, identity: dict, name: str) -> bool:
    """True when ``resume_dir`` holds a ``last.ckpt`` of this run of head ``name`` (continued), False when it holds
    none (a fresh start); the run beside it (:data:`RUN_RECORD`) is compared by
    :func:`leakloss.checks.check_same_run`.

    Raises:
        ResumeError: the checkpoint has no readable run record, or another run wrote it (other settings, data,
            seeds or recognizers: the resume restored its weights and optimizer under this run's card, ignored a
            changed learning rate, or failed as a traceback on another architecture)."""
    from leakloss.checks import check_same_run

    ckpt = resume_dir / "last.ckpt"
    if not ckpt.is_file():
        return False
    check_same_run(resume_dir / RUN_RECORD, identity, where=f"heads.{name}.resume", checkpoint=str(ckpt),
                   remedy=f"delete {resume_dir} to start afresh",
                   hint=f"a resume continues the same run (only heads.{name}.max_epochs and max_minutes may change): "
                        "give the same settings, or ")
    return True


def write_run_record(resume_dir: Path, identity: dict) -> None:
    """The run of a fresh start, beside the ``last.ckpt`` it will write (:func:`check_head_resume` reads it)."""
    resume_dir.mkdir(parents=True, exist_ok=True)
    tmp = resume_dir / f"{RUN_RECORD}.tmp"
    tmp.write_text(json.dumps({"run": identity}, indent=1, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, resume_dir / RUN_RECORD)


def _logger(cfg: DictConfig, name: str):
    if not cfg.logger or "_target_" not in cfg.logger:
        return False
    kwargs = {"name": name} if "wandb" in cfg.logger._target_.lower() else {}
    return instantiate(cfg.logger, **kwargs)


def clear_best_checkpoints(best_dir: Path, name: str) -> None:
    """A fresh start's best-epoch folder holds none of an earlier run's checkpoints (Lightning named this run's
    ``best-epoch=N-v1.ckpt`` beside them)."""
    stale = sorted(best_dir.glob("best-*.ckpt")) if best_dir.is_dir() else []
    for path in stale:
        path.unlink()
    if stale:
        print(f"head {name}: starting afresh: removed {len(stale)} best-epoch checkpoint(s) of an earlier run "
              f"from {best_dir}")


def keep_best_epoch(module, best, name: str, resume_dir: Path, training: dict) -> None:
    """Load the best dev-loss epoch's weights into ``module`` and say so in ``training`` (the card); a rerun of a
    finished run reuses the best its checkpoint recorded.

    Raises:
        ResumeError: the recorded best checkpoint is gone (deleted since the run that recorded it)."""
    from leakloss.checks import ResumeError

    if not best.best_model_path:  # no epoch ended (a time budget spent inside the first): nothing was compared
        print(f"warning: head {name}: select_best: no epoch ended, so none was compared on the dev rows; the last "
              "weights are exported", file=sys.stderr)
        return
    path = Path(best.best_model_path)
    if not path.is_file():
        raise ResumeError(f"heads.{name}.resume: the best epoch's checkpoint {path}, recorded by the checkpoint "
                          f"resumed, is gone; delete {resume_dir} to start afresh")
    training["kept"] = path.name
    module.load_state_dict(torch.load(path, map_location="cpu", weights_only=True)["state_dict"])
    score = "" if best.best_model_score is None else f" (dev loss {float(best.best_model_score):.4f})"
    print(f"head {name}: kept {path.name}{score}")


def run(cfg: DictConfig) -> dict:
    """Pairs -> features -> every head of ``cfg.heads`` trained, evaluated and exported with its card.

    What differs between heads comes from each head's ``recipe`` (:mod:`train_heads.recipes`)."""
    from leakloss.acoustic.recognizer import Recognizer

    check_settings(cfg)  # before any model loads
    check_manifest(cfg)
    L.seed_everything(cfg.seed, workers=True)
    torch.set_num_threads(cfg.num_threads)
    recognizers = {role: Recognizer.load(cfg.recognizer[role]) for role in ("a", "b")}
    check_frame_layers(cfg, recognizers)  # before the pairs: 99 failed after them and the other heads
    manifest = build_pairs(cfg, recognizers)
    # site-feature tables on first use: a run of frame heads only (experiment=whisper_frame) never needs them
    tables = SiteTables(lambda role: site_feature_table(manifest, recognizers[role],
                                                        cache_dir=Path(cfg.cache_dir) / "features",
                                                        progress=cfg.progress)[0])
    ctx = Context(cfg, manifest, recognizers, tables)
    data_hash = manifest_sha256(manifest)
    resumes = {}  # every head's resume checked before any head trains: a refusal costs no other head's training
    for name, hcfg in cfg.heads.items():
        if hcfg.get("resume", False):
            identity = head_run_identity(cfg, name, data_hash, recognizers)
            resumes[name] = (identity, check_head_resume(Path(cfg.out_dir) / name / "resume", identity, name))
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
        head_dir = Path(cfg.out_dir) / name
        callbacks = recipe.callbacks(dm)
        resume_dir, resume_from = head_dir / "resume", None
        if hcfg.get("select_best", False) and len(dm.dev):  # keep the epoch with the lowest dev loss
            from lightning.pytorch.callbacks import ModelCheckpoint

            # a fixed folder (not the logger's per-run version folder): a resume restores its best score and file,
            # and compares the epochs it trains with those before (it kept a worse one, or failed on a None score)
            best_dir = head_dir / "best"
            if not (hcfg.get("resume", False) and resumes[name][1]):
                clear_best_checkpoints(best_dir, name)
            best = ModelCheckpoint(dirpath=str(best_dir), monitor="val/loss", mode="min", save_top_k=1,
                                   filename="best-{epoch}")
            callbacks = callbacks + [best]  # before the resume checkpoint: last.ckpt records this epoch's best
        else:
            best = None
        if hcfg.get("resume", False):  # resumable: last.ckpt after every epoch, picked up by a rerun
            from lightning.pytorch.callbacks import ModelCheckpoint

            identity, resuming = resumes[name]
            # no version counter: after a resume from a budget's mid-epoch last.ckpt (written by TimeBudget, not by
            # this callback) its saves went to last-v1.ckpt..., and every later rerun resumed from the cut again
            callbacks = callbacks + [ModelCheckpoint(dirpath=str(resume_dir), save_last=True, save_top_k=0,
                                                     enable_version_counter=False)]
            if resuming:
                resume_from = str(resume_dir / "last.ckpt")
                print(f"head {name}: resuming from {resume_from}")
            else:
                write_run_record(resume_dir, identity)
        # the time budget stops between two batches; a resume finishes that epoch (Lightning's max_time skipped it)
        budget = TimeBudget(hcfg.get("max_minutes"),
                            save_to=resume_dir / "last.ckpt" if hcfg.get("resume", False) else None)
        # checkpoints only where a callback above reads them (best epoch, resume): Lightning's default wrote a
        # pickle per run that nothing read
        checkpointing = any(type(c).__name__ == "ModelCheckpoint" for c in callbacks)
        trainer = instantiate(cfg.trainer, max_epochs=hcfg.max_epochs, logger=_logger(cfg, name),
                              callbacks=callbacks + [budget], default_root_dir=str(head_dir),
                              enable_checkpointing=checkpointing)
        try:
            with warnings.catch_warnings():
                if resume_from:  # the loader does resume mid-epoch (TimeBudget skips the trained batches), and the
                    # best-epoch folder holds the best checkpoint of the run resumed
                    warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that ended before")
                    warnings.filterwarnings("ignore", message="Checkpoint directory .* exists and is not empty")
                trainer.fit(module, datamodule=dm, ckpt_path=resume_from)
        except BudgetSpent as stop:
            kept = (f"; a rerun with a larger heads.{name}.max_minutes resumes from {resume_dir / 'last.ckpt'}"
                    if hcfg.get("resume", False) else "")
            print(f"head {name}: {stop}{kept}")
        else:
            if budget.spent:
                print(f"head {name}: the time budget of {float(hcfg.max_minutes):g} min ran out at the end of epoch "
                      f"{trainer.current_epoch - 1}")
        training = {"epochs": int(trainer.current_epoch), "steps": int(trainer.global_step),
                    "max_epochs": int(hcfg.max_epochs), "fast_dev_run": bool(trainer.fast_dev_run)}
        if hcfg.get("max_minutes") is not None:
            training |= {"max_minutes": float(hcfg.max_minutes), "minutes": round(budget.minutes(), 3),
                         "time_budget_spent": budget.spent}
        if budget.batches:  # stopped inside an epoch: these batches of epoch `epochs` trained, the rest not
            training["unfinished_epoch_batches"] = int(budget.batches)
        if resume_from:
            training["resumed_from"] = Path(resume_from).name
        if trainer.fast_dev_run:
            print(f"warning: head {name}: trainer.fast_dev_run ran {trainer.global_step} step(s) only; its card says so",
                  file=sys.stderr)
        if best is not None:
            keep_best_epoch(module, best, name, resume_dir, training)
        # a diverged head is found now, not after every other head trained and the export failed on it
        if getattr(module, "diverged_at", None) is not None:
            if best is None or "kept" not in training:  # no finite epoch kept to fall back on
                raise UntrainedError(f"head {name}: the training loss was not finite at step {module.diverged_at} "
                                     f"(heads.{name}.module.lr too high?): nothing exported")
            training["diverged_at_step"] = int(module.diverged_at)  # the best epoch before it is what is exported
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
