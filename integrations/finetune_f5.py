"""``leakloss finetune-f5``: an F5 fine-tune on an F5-prepared folder with the leak penalty, F5's own ``Trainer``.

Run: ``leakloss finetune-f5 f5=embedded data.dir=DATA leak.weight=0.1 steps=50`` (Hydra overrides; config
``leakloss/conf/finetune_f5.yaml``, presets in ``leakloss/conf/f5/``), or on several GPUs
``accelerate launch -m integrations.finetune_f5 f5=indicf5 f5.checkpoint=... f5.vocoder=... data.dir=...``.

Order: open the folder (``raw.arrow`` + ``duration.json``), read the vocab, check it against the checkpoint's
text embedding, check the texts (Devanagari, vocab), place the sites (cached next to the data, resumable;
rank 0 only under ``accelerate``, the others wait; a read-only data folder is used as is when its cache holds every
item), refuse a dataset with no testable site, then train. Every refusal is a :class:`FinetuneError` (``error: ...``
and exit 2 from the CLI) raised before any training step. A loss or weights that turn NaN/Inf stop the run there,
unsaved (:class:`~integrations.f5_tts.TrainingDivergedError`: ``error: ...``, exit 1).

Output in ``out_dir``: F5's ``ckpts/model_last.pt`` (its Trainer's own file; F5 resumes from it), and what
ships: ``model_last.safetensors`` (EMA weights, F5 key names: F5's ``load_model`` / ``load_checkpoint`` /
``f5-tts_infer-cli --ckpt_file`` read it unchanged) with ``vocab.txt`` and a JSON card ``model_last.json``;
``leak_curves.csv`` and the W&B run (offline unless ``WANDB_API_KEY`` is set).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from leakloss.config import config_dir

TEXT_EMBED_KEY = "transformer.text_embed.text_embed.weight"


class FinetuneError(ValueError):
    """A bad input of the fine-tune, found before training."""


def _is_main_process() -> bool:
    return int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0"))) == 0


def resolve_vocab(cfg: DictConfig) -> tuple[dict[str, int], str]:
    """``(vocab, where it came from)``: ``f5.vocab`` = ``devanagari`` | a path | null (``data.dir/vocab.txt``)."""
    from integrations.f5_dataset import PreparedDatasetError, read_vocab
    from integrations.f5_tts import devanagari_chars

    spec = cfg.f5.vocab
    if spec == "devanagari":
        return {c: i for i, c in enumerate(devanagari_chars())}, "devanagari"
    path = Path(spec) if spec else Path(cfg.data.dir) / "vocab.txt"
    try:
        return read_vocab(path), str(path)
    except PreparedDatasetError as err:
        raise FinetuneError(str(err)) from err


def check_checkpoint(path: str | os.PathLike, vocab: dict[str, int], source: str) -> dict[str, torch.Tensor]:
    """The checkpoint's weights; refuses a missing file and a vocab whose size differs from its text embedding."""
    from integrations.f5_tts import CheckpointReadError, load_state

    path = Path(path)
    if not path.is_file():
        hint = " (train the embedded Hindi base: python -m train_f5)" if "f5_hindi_base" in str(path) else ""
        raise FinetuneError(f"no checkpoint at {path}{hint}")
    try:
        state = load_state(path)
    except CheckpointReadError as err:
        raise FinetuneError(str(err)) from err
    embed = state.get(TEXT_EMBED_KEY)
    if embed is None:
        raise FinetuneError(f"{path} has no {TEXT_EMBED_KEY}: not an F5 (CFM + DiT) checkpoint")
    if embed.shape[0] != len(vocab) + 1:  # F5's DiT keeps one extra row (the filler token)
        raise FinetuneError(
            f"the vocab ({source}, {len(vocab)} tokens) does not match the checkpoint's text embedding "
            f"({embed.shape[0] - 1} tokens + filler): use the vocab.txt the checkpoint was trained with (f5.vocab=...)")
    return state


def load_vocoder(spec: str):
    """``embedded`` (leakloss' tiny Vocos) or a local Vocos folder (``config.yaml`` + ``pytorch_model.bin`` /
    ``model.safetensors``, e.g. charactr/vocos-mel-24khz) -> a frozen :class:`leakloss.vocoder.MelToWave`. The
    folder's config is read as data and only Vocos' own classes are built (:func:`leakloss.vocoder.read_vocos_config`:
    ``Vocos.from_hparams`` ran whatever callable it named)."""
    from leakloss.vocoder import MelToWave, VocoderLoadError, load_vocos_folder

    if spec == "embedded":
        return MelToWave.embedded()
    folder = Path(spec)
    if not (folder / "config.yaml").is_file():
        raise FinetuneError(f"f5.vocoder={spec!r}: not 'embedded' and no Vocos folder with config.yaml")
    try:
        return load_vocos_folder(folder)
    except VocoderLoadError as err:
        raise FinetuneError(f"f5.vocoder={spec!r}: not a loadable Vocos ({err})") from None


#: What a resume must share with the run that wrote ``out_dir``'s checkpoint (``out_dir/run.json``): everything
#: that changes the weights or the schedule. Logging, probes, workers, threads and the save/time budget may differ.
RUN_FILE = "run.json"
#: what a run writes into out_dir (True: a folder); a folder holding only these is a run's, with or without run.json
RUN_OUTPUTS = {"ckpts": True, "leak_curves.csv": False, RUN_FILE: False, "model_last.json": False,
               "model_last.safetensors": False, "vocab.txt": False, "wandb": True}
RUN_KEYS = ("f5", "data.dir", "leak", "steps", "batch_size_per_gpu", "batch_size_type", "max_samples", "learning_rate",
            "num_warmup_updates", "grad_accumulation_steps", "max_grad_norm", "ema_decay", "mixed_precision", "seed")
_NOT_RUN_KEYS = ("leak.placement_batch_size", "leak.placement_workers")
#: settings added after runs were recorded, and the value such a run had (absent from its run.json)
ADDED_RUN_SETTINGS = {"leak.paired_weight": 0.0, "leak.item_fraction": 1.0, "leak.margin_weight": 0.0}
#: the terms loaded by name besides the reference-free penalty: ``leak.<term>_weight`` on ``leak.<term>_recognizer``
TEXT_TERMS = {"paired": ("leakloss.paired_penalty", "PairedPosteriorPenalty"),
              "margin": ("leakloss.margin_penalty", "PathMarginPenalty")}


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out |= _flat(v, f"{prefix}{k}.")
        return out
    return {prefix[:-1]: value}


#: the corpus a run trains on, by content (a resume at the same data.dir with other clips or texts is another run)
DATA_FINGERPRINT = "data.fingerprint"
DATA_FILES = ("raw.arrow", "duration.json")
#: the form of :func:`data_fingerprint`'s value: ``"2:<hex>"`` hashes the audio files' bytes too. A bare ``<hex>``
#: (recorded before) hashed raw.arrow and duration.json only, and a resume of such a run is checked against that
#: older hash (its audio cannot be compared: nothing of it was recorded); the resumed run records the new form.
FINGERPRINT_FORM = "2"
_HASH_THREADS = 8  # hashlib releases the GIL on large reads: files are hashed side by side (disk and cores)


def _audio_paths(arrow: Path) -> list | None:
    """The ``audio_path`` column of F5's ``raw.arrow``, or None where it cannot be read (refused later, by name)."""
    try:
        from datasets import Dataset as HFDataset

        return list(HFDataset.from_file(str(arrow))["audio_path"])
    except (OSError, ValueError, KeyError, TypeError):  # pyarrow's ArrowInvalid is a ValueError
        return None


def _file_digest(path: object) -> bytes:
    """sha256 of one audio file's bytes, streamed; a marker for a missing or unreadable one (the run is refused for
    it later, by name: :func:`integrations.f5_dataset.check_audio_files`)."""
    import hashlib

    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:  # type: ignore[arg-type]  (hashlib.file_digest: Python 3.11+)
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.digest()
    except (OSError, TypeError):
        return b"unreadable:" + repr(path).encode("utf-8", "replace")


def data_fingerprint(data_dir: Path, audio: bool = True) -> str | None:
    """The corpus of ``data_dir``, by content: sha256 of F5's ``raw.arrow`` (audio paths, texts), ``duration.json``
    and (``audio``) the bytes of every audio file it names, in its row order; None where raw.arrow or duration.json
    is missing (the run is refused for that later, by name). ``audio=False``: the older form (no audio hashed), that
    of a bare-hex value recorded before :data:`FINGERPRINT_FORM`.

    Every audio byte is hashed, each time (no size/mtime shortcut, no cache): a clip replaced by one of the same
    name, size and mtime (``cp -p``, ``rsync -t``, a restored backup) is another corpus, and a cache keyed by
    size/mtime would miss exactly that. It stays cheap next to the run: sha256 streams at about 1 GB/s a core and
    :data:`_HASH_THREADS` files are hashed at once (some thousands of clips: a few GB, seconds), while the site
    placement and its summary decode and resample every clip anyway. It runs once per run (twice on a resume)."""
    import hashlib
    from concurrent.futures import ThreadPoolExecutor

    h = hashlib.sha256()
    for name in DATA_FILES:
        path = data_dir / name
        if not path.is_file():
            return None
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    if not audio:
        return h.hexdigest()[:16]
    paths = _audio_paths(data_dir / "raw.arrow")
    if paths is None:  # not an Arrow table F5 wrote: its bytes are hashed above; open_prepared refuses it
        h.update(b"no audio paths\0")
    else:
        with ThreadPoolExecutor(max_workers=max(1, min(_HASH_THREADS, len(paths)))) as pool:
            for digest in pool.map(_file_digest, paths):  # in row order
                h.update(digest)
    return f"{FINGERPRINT_FORM}:{h.hexdigest()[:16]}"


#: settings that may name a file or folder (else a built-in name: ``embedded``, ``wb``, ``devanagari``, null)
PATH_SETTINGS = ("f5.checkpoint", "f5.vocab", "f5.vocoder", "leak.head", "leak.paired_recognizer",
                 "leak.margin_recognizer")


def _absolute_if_path(value: Any) -> Any:
    """``value`` as an absolute path when it names an existing file or folder, else as given (a resume that gives
    ``f5.checkpoint`` relative where the run gave it absolute, or from another folder, is the same run). A built-in
    name (``wb``, ``embedded``, ``devanagari``, a named head) stays a name: it is loaded by name, whatever folder of
    that name lies in the working directory."""
    from leakloss.acoustic.recognizer import EMBEDDED
    from leakloss.penalty import NAMED_HEADS

    if not isinstance(value, str) or not value or value in (*EMBEDDED, *NAMED_HEADS, "embedded", "devanagari"):
        return value
    path = Path(value).expanduser()
    return str(path.resolve()) if path.exists() else value


def run_identity(cfg: DictConfig) -> dict[str, Any]:
    """The settings of :data:`RUN_KEYS`, flat (``leak.weight``: 0.1, ...), paths absolute."""
    out: dict[str, Any] = {}
    for key in RUN_KEYS:
        value = OmegaConf.select(cfg, key)
        out |= _flat(OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value, f"{key}.")
    out["data.dir"] = str(Path(str(cfg.data.dir)).expanduser().resolve())
    for key in PATH_SETTINGS:
        if key in out:
            out[key] = _absolute_if_path(out[key])
    out[DATA_FINGERPRINT] = data_fingerprint(Path(out["data.dir"]))
    for key in _NOT_RUN_KEYS:
        out.pop(key, None)
    for term in TEXT_TERMS:  # a term that is off: its recognizer changes nothing
        if not out.get(f"leak.{term}_weight"):
            out.pop(f"leak.{term}_recognizer", None)
    return out


def check_resume(cfg: DictConfig) -> int:
    """The update ``out_dir``'s F5 checkpoint holds (0: none, a fresh run); :class:`FinetuneError` when the
    checkpoint cannot be read or was written by a run with other settings (F5 would resume from it silently:
    a rerun with another ``leak.weight`` trained nothing and relabelled the old weights in the card)."""
    from integrations.f5_tts import CheckpointReadError, checkpoint_update

    out = Path(str(cfg.out_dir))
    for name, folder in RUN_OUTPUTS.items():
        path = out / name  # one of the wrong kind was a NotADirectoryError / IsADirectoryError after the placement
        if path.exists() and path.is_dir() != folder:
            raise FinetuneError(f"out_dir: {path} is {'a file' if folder else 'a folder'}, where the run writes "
                                f"{'its checkpoints' if folder else 'a file'}: give another out_dir")
    try:
        update = checkpoint_update(out / "ckpts")
    except CheckpointReadError as err:
        raise FinetuneError(f"out_dir: {err}") from None
    if not (out / "ckpts" / "model_last.pt").is_file():
        # without model_last.pt, F5's Trainer resumes from any model_N.pt or pretrained_*.safetensors it finds there,
        # in place of f5.checkpoint and unchecked (the card then said the run started afresh)
        others = sorted(p.name for p in (out / "ckpts").iterdir() if p.suffix in (".pt", ".safetensors")) \
            if (out / "ckpts").is_dir() else []
        if others:
            raise FinetuneError(f"out_dir={out}: ckpts/ holds {', '.join(map(repr, others[:3]))}"
                                f"{' ...' if len(others) > 3 else ''} but no model_last.pt: F5 would resume from it "
                                "in place of f5.checkpoint; remove it (or give f5.checkpoint=THAT_FILE and another "
                                "out_dir)")
        held = sorted(p.name for p in out.iterdir() if p.name not in RUN_OUTPUTS) if out.is_dir() else []
        if held and not (out / RUN_FILE).is_file():  # its leak_curves.csv, vocab.txt... were replaced silently
            raise FinetuneError(f"out_dir={out}: holds {', '.join(map(repr, held[:4]))}{' ...' if len(held) > 4 else ''}"
                                f", which a finetune-f5 run does not write, and no {RUN_FILE}: not a run's folder; "
                                "give an empty or new out_dir")
        return 0
    try:
        recorded = json.loads((out / RUN_FILE).read_text(encoding="utf-8"))["settings"]
    except (OSError, ValueError, KeyError, TypeError):
        raise FinetuneError(f"out_dir={out}: holds an F5 checkpoint (ckpts/model_last.pt) without the {RUN_FILE} that "
                            f"says which run wrote it: give another out_dir, or empty {out} to start afresh"
                            ) from None
    now = run_identity(cfg)
    if DATA_FINGERPRINT not in recorded or now[DATA_FINGERPRINT] is None:
        # recorded before 2026-12-07 (its corpus is known by its folder), or a file is missing (said by name later)
        now.pop(DATA_FINGERPRINT)
        recorded.pop(DATA_FINGERPRINT, None)
    elif isinstance(recorded[DATA_FINGERPRINT], str) and ":" not in recorded[DATA_FINGERPRINT]:
        # recorded before the audio was hashed (FINGERPRINT_FORM): compared with the hash of its own form
        now[DATA_FINGERPRINT] = data_fingerprint(Path(now["data.dir"]), audio=False)
    recorded = ADDED_RUN_SETTINGS | recorded  # a run recorded before a setting existed ran as its default
    for key in PATH_SETTINGS:  # recorded before paths were made absolute: relative to this folder, as given then
        if key in recorded:
            recorded[key] = _absolute_if_path(recorded[key])
    changed = sorted(k for k in set(now) | set(recorded) if now.get(k, "<unset>") != recorded.get(k, "<unset>"))
    if changed:
        shown = ", ".join(f"{k} ({recorded.get(k, '<unset>')!r} -> {now.get(k, '<unset>')!r})" for k in changed[:4])
        raise FinetuneError(f"out_dir={out}: its checkpoint (update {update}) is of a run with other settings: {shown}"
                            f"{' ...' if len(changed) > 4 else ''}; resume with the same settings, or give another "
                            f"out_dir (f5.checkpoint={out / 'model_last.safetensors'} starts from its weights)")
    return update


def record_run(cfg: DictConfig) -> None:
    """``out_dir/run.json``: the settings a later resume is checked against (written before training)."""
    from leakloss.atomic import write_text_atomic

    out = Path(str(cfg.out_dir))
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / RUN_FILE, json.dumps({"settings": run_identity(cfg)}, ensure_ascii=False, indent=1))


def build_model(cfg: DictConfig, vocab: dict[str, int], **leak: Any):
    """A ``LeakAwareCFM`` with the preset's backbone (``f5.backbone._target_``, F5's ``DiT`` in every shipped
    preset) of ``f5.arch`` and F5's mel settings (``leak``: LeakAwareCFM's leak kwargs)."""
    from hydra.utils import instantiate

    from integrations.f5_tts import MEL_SPEC_KWARGS, LeakAwareCFM
    from leakloss.constants import MEL_BINS

    arch = OmegaConf.to_container(cfg.f5.arch, resolve=True)
    transformer = instantiate(cfg.f5.backbone, **arch, mel_dim=MEL_BINS, text_num_embeds=len(vocab))
    return LeakAwareCFM(transformer, mel_spec_kwargs=MEL_SPEC_KWARGS, vocab_char_map=vocab, **leak)


def check_probe_texts(cfg: DictConfig) -> None:
    """``probe.texts``: null or a list of Nepali texts each with a testable contrast site (:class:`FinetuneError`
    otherwise: a number was a traceback after the placement, one string became one probe per character, and a
    text with no site logged "0% flagged" for ever)."""
    texts = cfg.probe.texts
    if texts is None:
        return
    if not OmegaConf.is_list(texts) or not all(isinstance(t, str) for t in texts):
        raise FinetuneError(f"probe.texts must be null or a list of texts (probe.texts='[नेकपा र अरू]'), got {texts!r}")
    from leakloss.text.normalize import TextError
    from leakloss.text.sites import SiteFinder

    finder = SiteFinder()
    for i, text in enumerate(texts):
        try:
            sites = [s for w in finder(text) for s in w.testable_sites]
        except TextError as err:
            raise FinetuneError(f"probe.texts[{i}] {text!r}: {err}") from None
        if not sites:
            raise FinetuneError(f"probe.texts[{i}] {text!r} has no testable contrast site: its probe could never "
                                "flag anything")


def _probe_texts(cfg: DictConfig, prepared) -> list[str]:
    if cfg.probe.texts is not None:
        return list(cfg.probe.texts)
    from leakloss.speech.corpus import builtin_sentences

    seen = {prepared.text(i) for i in range(len(prepared))}
    return [s for s in builtin_sentences() if s not in seen][:3]


def _placement_trainer(cfg: DictConfig):
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    trainer_cfg = OmegaConf.to_container(cfg.trainer, resolve=True)
    trainer_cfg.update(logger=False, enable_checkpointing=False, enable_model_summary=False)
    trainer_cfg.pop("log_every_n_steps", None)
    try:
        return instantiate(trainer_cfg)
    except InstantiationException as err:  # e.g. trainer.devices=0: Lightning's MisconfigurationException
        cause = err.__cause__ or err
        raise FinetuneError(f"trainer: {type(cause).__name__}: {cause}") from err


#: whole-number settings and their least value (F5's Trainer keeps persistent workers: at least 1)
# (steps >= 2 and a warm-up of >= 1 update: F5's schedule with a warm-up of 0 starts at lr x 1e-8 and its decay
# scales that value, so the whole run trained at ~1e-8 of the rate and exported the base's weights as a fine-tune)
WHOLE_NUMBER_SETTINGS = {"steps": 2, "data.num_workers": 1, "leak.every": 1, "leak.start_step": 0,
                         "leak.placement_batch_size": 1, "leak.placement_workers": 0, "batch_size_per_gpu": 1,
                         "max_samples": 1, "grad_accumulation_steps": 1, "log_every": 1, "probe.every": 0,
                         "probe.nfe": 1, "num_warmup_updates": 1, "num_threads": 1, "seed": 0, "save_every": 1}
#: settings that must be finite numbers >= 0 (a NaN weight trained a NaN model and exported it as a success)
NUMBER_SETTINGS = {"leak.weight": math.inf, "leak.paired_weight": math.inf, "leak.margin_weight": math.inf,
                   "learning_rate": math.inf, "max_grad_norm": math.inf, "ema_decay": 1.0}
#: settings F5's Trainer / accelerate take from a fixed set (anything else failed after the site placement)
CHOICE_SETTINGS = {"batch_size_type": ("frame", "sample"), "mixed_precision": ("no", "bf16", "fp16")}
#: true/false settings (``leak.crop`` may also be null); a missing one reads as its default (a run resumed from a card
#: written before it existed). A string such as ``no`` would have been truthy: refused.
FLAG_SETTINGS = {"leak.mel_bridge": False, "leak.bf16": False, "leak.sites_in_span_only": True, "leak.crop": None}
#: settings that name a file or folder, and whether null is allowed (the data's vocab.txt; the shipped head)
PATH_VALUE_SETTINGS = {"data.dir": False, "out_dir": False, "f5.checkpoint": False, "f5.vocoder": False,
                       "f5.vocab": True, "leak.head": True}
OPTIONAL_SETTINGS = frozenset({"num_warmup_updates", "num_threads", "save_every"})  # null: a tenth of the
# updates; torch's; at the end only


def check_settings(cfg: DictConfig) -> None:
    """:class:`FinetuneError` for a setting that could not work, before any data or model is read."""
    import importlib

    from leakloss.atomic import output_folder_problem
    from leakloss.checks import check_number

    for key, nullable in PATH_VALUE_SETTINGS.items():  # data.dir=null or f5.vocab=5: a TypeError after the placement
        parent_key, _, leaf = key.rpartition(".")
        parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
        if parent is None or leaf not in parent or OmegaConf.is_missing(parent, leaf):
            continue  # ??? is said by OmegaConf's own error where the value is read
        value = parent[leaf]
        if not ((isinstance(value, str) and value.strip()) or (value is None and nullable)):
            raise FinetuneError(f"{key} must be a path{' or null' if nullable else ''}, got {value!r:.60}")
    for key, low in WHOLE_NUMBER_SETTINGS.items():
        value = OmegaConf.select(cfg, key)
        if value is None and key in OPTIONAL_SETTINGS:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise FinetuneError(f"{key} must be a whole number >= {low}, got {value!r}")
    from leakloss.constants import SEED_MAX

    if cfg.seed > SEED_MAX:  # numpy's seed bound: failed inside F5's Trainer after the site placement
        raise FinetuneError(f"seed must be a whole number in [0, {SEED_MAX}], got {cfg.seed!r}")
    for key, high in NUMBER_SETTINGS.items():
        value = OmegaConf.select(cfg, key)
        bound = f" and <= {high:g}" if high < math.inf else ""
        try:
            check_number(value, f"{key} must be a finite number >= 0{bound}", low=0.0, high=high)
        except ValueError as err:
            raise FinetuneError(str(err)) from err
    if cfg.learning_rate == 0:  # trained nothing and exported the base's weights with a fine-tune's card
        raise FinetuneError("learning_rate must be > 0, got 0: the run would change no weight")
    if cfg.ema_decay == 1:  # ema_pytorch freezes the average at update 100: the export would be that, not the run
        raise FinetuneError("ema_decay must be < 1, got 1: the exported average would stop moving after update 100")
    for key, choices in CHOICE_SETTINGS.items():
        value = OmegaConf.select(cfg, key)
        if value not in choices:
            raise FinetuneError(f"{key} must be one of {', '.join(choices)}, got {value!r}")
    for key, default in FLAG_SETTINGS.items():
        value = OmegaConf.select(cfg, key, default=default)
        if not isinstance(value, bool) and not (value is None and default is None):
            raise FinetuneError(f"{key} must be true or false{' or null' if default is None else ''}, got {value!r}")
    if cfg.mixed_precision == "fp16" and not torch.cuda.is_available():  # ran fp32, the card said fp16
        raise FinetuneError("mixed_precision=fp16 needs a CUDA GPU (accelerate's fp16 autocast does nothing on the "
                            "CPU): use no or bf16")
    from integrations.f5_tts import check_item_fraction

    try:
        check_item_fraction(cfg.leak.item_fraction, "leak.item_fraction")
    except ValueError as err:
        raise FinetuneError(str(err)) from None
    for term in TEXT_TERMS:
        recognizer = OmegaConf.select(cfg, f"leak.{term}_recognizer")
        if not isinstance(recognizer, str) or not recognizer.strip():
            raise FinetuneError(f"leak.{term}_recognizer must be a recognizer name (w, wb, a) or folder, got "
                                f"{recognizer!r}")
        default = getattr(importlib.import_module(TEXT_TERMS[term][0]), f"DEFAULT_{term.upper()}_RECOGNIZER")
        if not OmegaConf.select(cfg, f"leak.{term}_weight") and recognizer != default:
            # the term is off: the override changed nothing, and the card's settings said it had
            raise FinetuneError(f"leak.{term}_recognizer={recognizer} has no effect while leak.{term}_weight is 0: "
                                f"set leak.{term}_weight too, or leave the recognizer ({default})")
    devices = OmegaConf.select(cfg, "trainer.devices")
    # one device: 1 (0 is Lightning's own error); "auto" takes every GPU, "0,1", [0, 1] or -1 several
    several = not (devices in (0, 1, "0", "1") or (OmegaConf.is_list(devices) and len(devices) == 1))
    if several:  # Lightning relaunched this whole script as its rank 1: a traceback, no site placed
        raise FinetuneError(f"trainer.devices={devices}: finetune-f5 places the sites on one device (rank 0); "
                            "several GPUs train through `accelerate launch -m integrations.finetune_f5 ...`")
    if cfg.num_warmup_updates is not None and cfg.num_warmup_updates >= cfg.steps:  # was cut to steps - 1, silently
        raise FinetuneError(f"num_warmup_updates={cfg.num_warmup_updates} is not below steps={cfg.steps}: the "
                            "learning rate would never reach its peak (null: a tenth of the updates)")
    weights = [cfg.leak.weight] + [OmegaConf.select(cfg, f"leak.{term}_weight") for term in TEXT_TERMS]
    if max(weights) > 0 and cfg.leak.start_step >= cfg.steps:
        # it trained without a word, the card said 0.5
        raise FinetuneError(f"leak.start_step={cfg.leak.start_step} is not before the run's last update "
                            f"(steps={cfg.steps}): the penalty would never act")
    first = math.ceil((cfg.leak.start_step + 1) / cfg.leak.every) * cfg.leak.every  # the first update it runs on
    if max(weights) > 0 and first > cfg.steps:
        raise FinetuneError(f"leak.every={cfg.leak.every} with leak.start_step={cfg.leak.start_step}: the penalty "
                            f"first runs on update {first}, after the run's last (steps={cfg.steps})")
    if cfg.log_every > cfg.steps:
        raise FinetuneError(f"log_every={cfg.log_every} is more than steps={cfg.steps}: no leak curve would be logged")
    if max(weights) > 0 and cfg.log_every % cfg.leak.every:  # the curves showed leak/weight 0.0 ("off") and the
        # card's final_leak_penalty was null: the penalty was never logged on the updates it ran
        raise FinetuneError(f"log_every={cfg.log_every} is not a multiple of leak.every={cfg.leak.every}: the penalty "
                            "runs on multiples of leak.every and is logged on multiples of log_every, so most logged "
                            "updates would show it off")
    check_probe_texts(cfg)
    if cfg.max_minutes is not None:
        try:
            check_number(cfg.max_minutes, "max_minutes must be a finite number > 0 or null", low=0.0, low_inclusive=False)
        except ValueError as err:
            raise FinetuneError(str(err)) from err
    problem = output_folder_problem(str(cfg.out_dir))
    if problem is not None:
        raise FinetuneError(f"out_dir: {problem}")
    out, data = (Path(str(p)).expanduser().resolve() for p in (cfg.out_dir, cfg.data.dir))
    if out == data or data in out.parents or out in data.parents:  # the export replaced the data's vocab.txt
        raise FinetuneError(f"out_dir ({out}) and data.dir ({data}) must be separate folders, not one inside the "
                            "other: the run writes vocab.txt, ckpts/ and its curves into out_dir")


def _frame_budget(cfg: DictConfig) -> float | None:
    """Mel frames a batch may hold (``batch_size_type=frame``), None for sample batches."""
    return float(cfg.batch_size_per_gpu) if cfg.batch_size_type == "frame" else None


def prepare(cfg: DictConfig) -> dict[str, Any]:
    """Every check and the site placement; returns what :func:`run` trains with. Raises :class:`FinetuneError`."""
    from integrations.f5_dataset import (F5_MAX_S, F5_MIN_S, SITES_FILE, PreparedDatasetError, check_audio_files,
                                         check_texts, open_prepared, place_prepared_sites, summarize,
                                         trainable_count)
    from leakloss.penalty import LeakPenalty
    from leakloss.site_placement import placement_id
    from leakloss.text.sites import SiteFinder

    check_settings(cfg)
    start_update = check_resume(cfg)
    if cfg.batch_size_type == "sample" and start_update >= cfg.steps:  # its updates are the steps: said now, not
        # after the placement, the audio hashing and an F5 Trainer (frame batches count theirs by epoch, in train_f5)
        raise FinetuneError(f"{Path(str(cfg.out_dir)) / 'ckpts' / 'model_last.pt'} already holds update "
                            f"{start_update} of this run's {cfg.steps}: nothing to train (another out_dir starts a "
                            "new run)")
    try:
        prepared = open_prepared(cfg.data.dir)
    except PreparedDatasetError as err:
        raise FinetuneError(str(err)) from err
    writable = check_site_cache_place(prepared.dir / SITES_FILE)
    vocab, vocab_source = resolve_vocab(cfg)
    check_architecture(cfg, vocab, check_checkpoint(cfg.f5.checkpoint, vocab, vocab_source))
    try:
        check_texts(prepared, vocab)
        check_audio_files(prepared)
    except PreparedDatasetError as err:
        raise FinetuneError(f"{cfg.data.dir}: {err}") from err
    in_span = trainable_count(prepared)
    if in_span == 0:  # every clip would be skipped (F5 trains on none)
        raise FinetuneError(f"{cfg.data.dir}: none of its {len(prepared)} clips lasts {F5_MIN_S}-{F5_MAX_S} s "
                            "(duration.json), the only clips F5 trains on")
    if in_span < len(prepared):  # F5 skips them without a word: seen only as items_trainable
        outside = [i for i, d in enumerate(prepared.durations) if not F5_MIN_S <= d <= F5_MAX_S]
        shown = ", ".join(f"{Path(prepared.audio_path(i)).name} ({prepared.durations[i]:.2f} s)" for i in outside[:3])
        print(f"warning: {len(outside)} of {len(prepared)} clips last outside F5's {F5_MIN_S}-{F5_MAX_S} s and are "
              f"left out of training: {shown}{' ...' if len(outside) > 3 else ''}", file=sys.stderr)
    fitting = trainable_count(prepared, max_frames=_frame_budget(cfg))
    if fitting == 0:  # F5's sampler made no batch: a ZeroDivisionError inside its trainer
        raise FinetuneError(f"batch_size_per_gpu={cfg.batch_size_per_gpu} mel frames holds none of the clips of "
                            f"{cfg.data.dir} (a batch of frames holds whole clips): raise it, or batch_size_type=sample")
    if fitting < in_span:
        print(f"warning: {in_span - fitting} of {in_span} clips are longer than batch_size_per_gpu="
              f"{cfg.batch_size_per_gpu} mel frames: F5 leaves them out of training", file=sys.stderr)
    try:
        penalty = LeakPenalty.load(head_path=cfg.leak.head, mel_bridge=cfg.leak.get("mel_bridge", False) or None)
    except (FileNotFoundError, OSError, ValueError) as err:
        raise FinetuneError(f"cannot load the leak penalty: {err}") from err
    text_terms = {term: load_text_term(cfg, term) for term in TEXT_TERMS}
    vocoder = load_vocoder(cfg.f5.vocoder)  # before the (possibly long) site placement
    cache_path = prepared.dir / SITES_FILE
    placement = placement_id(penalty.recognizer, SiteFinder())  # the finder place_prepared_sites uses by default
    if not writable:  # every rank reads the complete cache (or every rank refuses): nothing is written
        summary = read_only_site_summary(prepared, cache_path, placement)
    elif _is_main_process():  # one rank places, on one device (check_settings)
        with _single_process_env():
            summary = place_prepared_sites(prepared.dir, penalty.recognizer,
                                           batch_size=cfg.leak.placement_batch_size, trainer=_placement_trainer(cfg),
                                           num_workers=cfg.leak.placement_workers)
    else:
        summary = None
    _barrier()
    if summary is None:
        summary = summarize(prepared, cache_path, placement)
    if summary.sites == 0:
        raise FinetuneError(
            f"{cfg.data.dir}: no testable contrast site in any of its {summary.items} texts (or none could be "
            "aligned on its audio): the leak penalty would never act. Check the texts are Nepali and the audio "
            "matches them")
    trainable = trainable_sites(summary, prepared, _frame_budget(cfg))
    if trainable == 0:  # the run trained on, exit 0, with a penalty that never acted and a card that said sites=N
        raise FinetuneError(
            f"{cfg.data.dir}: its {summary.sites} testable sites all lie in clips F5 does not train on (outside "
            f"{F5_MIN_S:g}-{F5_MAX_S:g} s, or longer than batch_size_per_gpu={cfg.batch_size_per_gpu} mel frames): "
            "the leak penalty would never act")
    if trainable < summary.sites:
        print(f"warning: {summary.sites - trainable} of {summary.sites} testable sites lie in clips F5 does not "
              "train on; the penalty acts on the other", file=sys.stderr)
    return dict(prepared=prepared, vocab=vocab, vocab_source=vocab_source, penalty=penalty, vocoder=vocoder,
                summary=summary, cache_path=cache_path, placement=placement, start_update=start_update,
                **{f"{term}_penalty": term_penalty for term, term_penalty in text_terms.items()})


#: the probe's voice prompt: the first clip of this many seconds (a prompt of a few seconds, as F5 is prompted)
PROBE_PROMPT_S = (2.0, 15.0)


def probe_prompt_row(durations) -> int:
    """The row whose clip prompts the probe's syntheses: the first of :data:`PROBE_PROMPT_S` seconds, else the first
    F5 trains on, else row 0. Row 0 always was: a 0.05 s clip gave syntheses of 0.3 s that never aligned (the probe's
    curves NaN all run), a 36 s one a prompt beyond F5's 30 s."""
    from integrations.f5_dataset import is_trainable

    lo, hi = PROBE_PROMPT_S
    for fits in (lambda d: lo <= d <= hi, is_trainable):
        row = next((i for i, d in enumerate(durations) if fits(d)), None)
        if row is not None:
            return row
    return 0


def check_site_cache_place(cache_path: Path) -> bool:
    """Whether the site cache can be written where it goes (``data.dir``), checked before the placement: a folder
    at its name, or a read-only dataset folder, were tracebacks after it (a part file left behind).

    Returns True when ``data.dir`` is writable. A read-only one (a shared or mounted corpus) is allowed, returning
    False, when its site cache is there to be read: nothing needs writing there if that cache already holds every
    item for this recognizer (checked once the penalty is loaded: :func:`read_only_site_summary`). Without a cache
    it is refused here."""
    if cache_path.exists() and not cache_path.is_file():
        raise FinetuneError(f"{cache_path} is not a file, where the site cache is written: remove it")
    if os.access(cache_path.parent, os.W_OK):
        return True
    if not cache_path.is_file():
        raise FinetuneError(f"data.dir={cache_path.parent} is not writable and holds no site cache "
                            f"({cache_path.name}): the sites are placed and written there; copy the prepared folder "
                            "somewhere writable")
    return False


def read_only_site_summary(prepared, cache_path: Path, placement: str):
    """The :class:`~integrations.f5_dataset.PlacementSummary` of a read-only ``data.dir`` whose site cache already
    holds every item of the folder for ``placement`` (keys recomputed from the audio: a cache of other clips, texts or
    recognizer does not count); nothing is placed or written. :class:`FinetuneError` when any item is missing (it
    would have to be placed and written there)."""
    from integrations.f5_dataset import summarize

    summary = summarize(prepared, cache_path, placement)  # placed=0: reused is every item found in the cache
    missing = summary.items - summary.reused
    if missing:
        raise FinetuneError(f"data.dir={cache_path.parent} is not writable and its site cache ({cache_path.name}) "
                            f"lacks {missing} of {summary.items} items for this recognizer and these clips: they "
                            "would be placed and written there; copy the prepared folder somewhere writable (its "
                            "cache is reused there)")
    return summary


def trainable_sites(summary, prepared, max_frames: float | None) -> int:
    """The placed sites in the clips F5 trains on (:func:`integrations.f5_dataset.is_trainable`): what the penalty
    can act on, of ``summary.sites``."""
    from integrations.f5_dataset import is_trainable

    return sum(n for n, d in zip(summary.item_sites, prepared.durations) if is_trainable(d, max_frames))


def load_text_term(cfg: DictConfig, term: str):
    """The ``term`` of :data:`TEXT_TERMS` (``paired``: the reference-paired term; ``margin``: the text-paired
    path-margin term) on ``leak.<term>_recognizer`` when ``leak.<term>_weight`` > 0, else None (not loaded: a
    Whisper recognizer costs an encoder pass per item and step). :class:`FinetuneError` when the recognizer cannot
    be loaded."""
    import importlib

    from leakloss.checks import first_line

    if not OmegaConf.select(cfg, f"leak.{term}_weight") > 0:
        return None
    module, name = TEXT_TERMS[term]
    recognizer = OmegaConf.select(cfg, f"leak.{term}_recognizer")
    try:
        return getattr(importlib.import_module(module), name).load(str(recognizer))
    except (FileNotFoundError, OSError, ValueError) as err:
        raise FinetuneError(f"leak.{term}_recognizer={recognizer!r}: cannot load the {term} term's "
                            f"recognizer: {first_line(err)}") from None


def resolve_leak_crop(setting: bool | None, penalty: Any) -> bool:
    """``leak.crop``: true or false as given (with ``leak.mel_bridge``: whole items bridged, the encoder on crops);
    null (the default) crops where a crop is exact given its context (a recognizer with a finite receptive field:
    wav2vec2 A/B) and not on Whisper states, whose global attention made the cropped gradient point elsewhere than
    the whole computation's (docs/penalty.md, 2026-12-04)."""
    if setting is not None:
        return bool(setting)
    recognizer = getattr(penalty, "recognizer", None)
    return recognizer is not None and getattr(recognizer, "crop_margin_s", None) is None


def leak_model_kwargs(cfg: DictConfig, plan: dict[str, Any]) -> dict[str, Any]:
    """``LeakAwareCFM``'s leak keyword arguments from the ``leak.*`` settings and :func:`prepare`'s plan: the
    reference-free penalty (``leak.weight``), the reference-paired term (``leak.paired_weight`` on
    ``leak.paired_recognizer``; it compares the model's estimate with the ground-truth audio of the same item) and
    the path-margin term (``leak.margin_weight`` on ``leak.margin_recognizer``; it reads the item's text and plans
    on its ground truth)."""
    from integrations.f5_dataset import SiteCache, cache_lookup

    return dict(leak_penalty=plan["penalty"], leak_weight=float(cfg.leak.weight),
                site_lookup=cache_lookup(SiteCache(plan["cache_path"])), mel_to_wave=plan["vocoder"],
                sites_in_span_only=bool(cfg.leak.sites_in_span_only), leak_start_step=int(cfg.leak.start_step),
                leak_every=int(cfg.leak.every), leak_crop=resolve_leak_crop(cfg.leak.crop, plan["penalty"]),
                leak_bf16=bool(cfg.leak.bf16), leak_item_fraction=float(cfg.leak.item_fraction),
                paired_penalty=plan.get("paired_penalty"), paired_weight=float(cfg.leak.paired_weight),
                margin_penalty=plan.get("margin_penalty"),
                margin_weight=float(cfg.leak.margin_weight))


_LAUNCH_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "NODE_RANK",
                "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT")


@contextlib.contextmanager
def _single_process_env() -> Iterator[None]:
    """Hide ``accelerate launch``'s variables from Lightning while rank 0 places sites with its own trainer
    (Lightning would otherwise join the launch's process group with devices=1 and wait for the others)."""
    saved = {k: os.environ.pop(k) for k in _LAUNCH_VARS if k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def _barrier() -> None:
    """Wait for the other ``accelerate launch`` processes: accelerate's ``wait_for_everyone``, which starts the
    process group with torch's default timeout (10 min for NCCL). Not shown on several GPUs here (none was lent);
    a placement longer than that stops the launch, so the README places a large corpus's sites single-process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return
    from accelerate import PartialState

    PartialState().wait_for_everyone()


def export(out_dir: Path, vocab: dict[str, int], card: dict) -> Path:
    """F5's ``ckpts/model_last.pt`` -> ``model_last.safetensors`` (EMA, F5 key names) + ``vocab.txt`` + card,
    written as one unit (:func:`leakloss.atomic.write_files_atomic`); weights holding NaN/Inf are never written
    (:class:`~integrations.f5_tts.TrainingDivergedError`)."""
    from safetensors.torch import save

    from integrations.f5_tts import TrainingDivergedError
    from leakloss.atomic import write_files_atomic
    from leakloss.checks import nonfinite_tensors

    ckpt = torch.load(out_dir / "ckpts" / "model_last.pt", map_location="cpu", weights_only=True)
    ema = {k: v.contiguous() for k, v in ckpt["ema_model_state_dict"].items() if k not in ("initted", "step")}
    update = int(ckpt.get("update", 0))
    bad = nonfinite_tensors(ema)
    if bad:
        raise TrainingDivergedError(update, f"the EMA weights of {out_dir / 'ckpts' / 'model_last.pt'} hold NaN/Inf "
                                            f"({', '.join(bad[:3])}): not exported")
    path = out_dir / "model_last.safetensors"
    inverse = sorted(vocab.items(), key=lambda kv: kv[1])
    write_files_atomic({path: save(ema),
                        out_dir / "vocab.txt": "".join(f"{c}\n" for c, _ in inverse).encode("utf-8"),
                        out_dir / "model_last.json": json.dumps(card | {"update": update}, ensure_ascii=False,
                                                                indent=1).encode("utf-8")})
    return path


def check_architecture(cfg: DictConfig, vocab: dict[str, int], state: dict[str, torch.Tensor]) -> None:
    """:class:`FinetuneError` when the preset's model cannot be built (a bad ``f5.backbone``/``f5.arch`` argument)
    or the checkpoint does not fit it (its card names another architecture, or weights have no place), before
    the site placement (both were found after it). ``state``: the checkpoint's weights, already read."""
    from hydra.errors import InstantiationException

    from integrations.f5_tts import card_architecture_problem, load_indicf5_checkpoint
    from leakloss.checks import first_line

    problem = card_architecture_problem(cfg.f5.checkpoint, OmegaConf.to_container(cfg.f5.arch, resolve=True))
    if problem is None:
        try:
            model = build_model(cfg, vocab)
        except InstantiationException as err:  # +f5.backbone.bogus=1: Hydra's traceback after the placement
            cause = err.__cause__ or err
            raise FinetuneError(f"f5.backbone / f5.arch: {type(cause).__name__}: {first_line(cause)}") from err
        problem = checkpoint_fit_problem(load_indicf5_checkpoint(model, cfg.f5.checkpoint, state=state))
        del model
    if problem is not None:
        raise FinetuneError(f"{cfg.f5.checkpoint} does not fit the f5={cfg.f5.name} architecture: {problem}")


def checkpoint_fit_problem(report) -> str | None:
    """Why a checkpoint's :class:`~integrations.f5_tts.LoadReport` does not fit the model, or None: missing or
    mis-shaped weights, or network weights with no place in it (``f5.arch.depth=2`` on a depth-4 base kept half
    of the base, silently). F5's own extras (EMA counters such as ``step``, ``initted``) are not the network's."""
    unexpected = [k for k in report.unexpected if k.startswith("transformer.")]
    if not (report.missing or report.mismatched or unexpected):
        return None
    return (f"{len(report.missing)} missing, {len(report.mismatched)} shape-mismatched, {len(unexpected)} "
            f"unexpected weights (e.g. {(report.missing + report.mismatched + unexpected)[:3]})")


def run(cfg: DictConfig) -> dict[str, Any]:
    """Check, place sites, fine-tune; returns a summary (paths, sites, updates, last leak penalty)."""
    from integrations.f5_dataset import PreparedF5Dataset, load_audio, trainable_count
    from integrations.f5_tts import (
        MEL_SPEC_KWARGS,
        NothingToTrainError,
        card_architecture_problem,
        f5_probe,
        final_leak,
        load_indicf5_checkpoint,
    )
    from integrations.leak_curves import ProbeSet
    from leakloss.constants import MEL_DESCRIPTION

    if cfg.num_threads:
        torch.set_num_threads(int(cfg.num_threads))
    plan = prepare(cfg)
    prepared, vocab, penalty = plan["prepared"], plan["vocab"], plan["penalty"]
    vocoder = plan["vocoder"]
    model = build_model(cfg, vocab, **leak_model_kwargs(cfg, plan))
    problem = card_architecture_problem(cfg.f5.checkpoint, OmegaConf.to_container(cfg.f5.arch, resolve=True)) \
        or checkpoint_fit_problem(load_indicf5_checkpoint(model, cfg.f5.checkpoint))
    if problem is not None:
        raise FinetuneError(f"{cfg.f5.checkpoint} does not fit the f5={cfg.f5.name} architecture: {problem}")
    dataset = PreparedF5Dataset(prepared, plan["placement"], MEL_SPEC_KWARGS)
    probe = None
    texts = _probe_texts(cfg, prepared)
    if texts and cfg.probe.every > 0:
        row = probe_prompt_row(prepared.durations)
        wave, rate = load_audio(prepared.audio_path(row))
        # the prompt at its own rate: through 16 kHz it lost everything above 8 kHz that F5's prompts have
        probe = f5_probe(ProbeSet(texts, penalty), wave, prepared.text(row), vocoder, ref_rate=rate,
                         nfe=cfg.probe.nfe, seed=int(cfg.seed))
    out_dir = Path(cfg.out_dir)
    trainer_kwargs = dict(max_grad_norm=float(cfg.max_grad_norm), ema_kwargs=dict(beta=float(cfg.ema_decay)),
                          accelerate_kwargs=dict(mixed_precision=str(cfg.mixed_precision)))
    if _is_main_process():
        record_run(cfg)  # what a resume of this out_dir is checked against
    _barrier()
    try:
        f5_run = _train(cfg, model, dataset, out_dir, trainer_kwargs, probe)
    except NothingToTrainError as err:
        raise FinetuneError(str(err)) from None
    summary = plan["summary"]
    result: dict[str, Any] = dict(out_dir=str(out_dir), updates=f5_run.done_updates, planned_updates=f5_run.updates,
                                  resumed_from_update=f5_run.start_update, budget_reached=f5_run.budget_reached,
                                  items=summary.items,
                                  items_trainable=trainable_count(prepared, max_frames=_frame_budget(cfg)),
                                  items_with_sites=summary.with_sites, items_not_placed=summary.not_placed,
                                  sites=summary.sites,
                                  sites_trainable=trainable_sites(summary, prepared, _frame_budget(cfg)),
                                  sites_per_kind=summary.per_kind, leak_curves=str(f5_run.leak_csv),
                                  mixed_precision=f5_run.mixed_precision,
                                  wandb_run=str(f5_run.wandb_run_dir) if f5_run.wandb_run_dir else None)
    if _is_main_process():
        card = dict(base=cfg.f5.name, arch=OmegaConf.to_container(cfg.f5.arch, resolve=True),
                    base_checkpoint=str(cfg.f5.checkpoint), vocab=plan["vocab_source"], dataset=str(cfg.data.dir),
                    leak=OmegaConf.to_container(cfg.leak, resolve=True)  # crop as it ran, not null ("auto")
                    | {"crop": resolve_leak_crop(cfg.leak.crop, penalty)}, steps=int(cfg.steps),
                    recognizer=penalty.recognizer.name, sites=summary.sites,
                    sites_trainable=result["sites_trainable"], weights="EMA",
                    **{f"{term}_recognizer": (plan[f"{term}_penalty"].recognizer.name
                                              if plan.get(f"{term}_penalty") is not None else None)
                       for term in TEXT_TERMS},
                    mel=MEL_DESCRIPTION, planned_updates=f5_run.updates, resumed_from_update=f5_run.start_update,
                    budget_reached=f5_run.budget_reached, mixed_precision=f5_run.mixed_precision,
                    warmup_updates=f5_run.warmup_updates)
        try:
            card["final_leak_penalty"] = final_leak(f5_run.leak_csv)
        except ValueError:  # no penalty step logged (e.g. leak.start_step beyond the run)
            card["final_leak_penalty"] = None
        result["safetensors"] = str(export(out_dir, vocab, card))
        result["final_leak_penalty"] = card["final_leak_penalty"]
        result["checkpoint"] = str(f5_run.checkpoint_dir / "model_last.pt")
    return result


def _train(cfg: DictConfig, model, dataset, out_dir: Path, trainer_kwargs: dict, probe):
    from integrations.f5_tts import train_f5

    return train_f5(model, dataset, out_dir, steps=int(cfg.steps), batch_size=int(cfg.batch_size_per_gpu),
                    batch_size_type=str(cfg.batch_size_type), max_samples=int(cfg.max_samples),
                    learning_rate=float(cfg.learning_rate), num_warmup_updates=cfg.num_warmup_updates,
                    log_every=int(cfg.log_every), grad_accumulation_steps=int(cfg.grad_accumulation_steps),
                    wandb_project=str(cfg.wandb_project), run_name=str(cfg.exp_name),
                    num_workers=int(cfg.data.num_workers), seed=int(cfg.seed), trainer_kwargs=trainer_kwargs,
                    probe=probe, probe_every=int(cfg.probe.every), save_every=cfg.save_every,
                    max_minutes=None if cfg.max_minutes is None else float(cfg.max_minutes))


def interrupted_message(cfg: DictConfig) -> str:
    """What an interrupted run tells its user: the checkpoint a rerun of the same command resumes from, or that
    none was saved yet (a rerun starts afresh; "update 0" named a checkpoint that did not exist)."""
    from integrations.f5_tts import CheckpointReadError, checkpoint_update

    ckpts = Path(str(cfg.out_dir)) / "ckpts"
    if not (ckpts / "model_last.pt").is_file():
        return (f"interrupted before the first checkpoint (saved every save_every={cfg.save_every} updates): "
                f"nothing was saved in {ckpts}; rerunning the same command starts afresh")
    try:
        kept = f"update {checkpoint_update(ckpts)}"
    except CheckpointReadError:
        kept = "none readable"
    return (f"interrupted: the last checkpoint in {ckpts} ({kept}; saved every save_every={cfg.save_every} "
            "updates) is what rerunning the same command resumes from")


def error_line(err: BaseException) -> str:
    """The one line that says what went wrong: the first of the message (OmegaConf adds full_key/object_type lines),
    or for an error a DataLoader worker raised (``Caught X in DataLoader worker process 0.`` and its traceback)
    the worker's own message, which names the file."""
    lines = [ln for ln in str(err).splitlines() if ln.strip()]
    if not lines:
        return type(err).__name__
    if lines[0].startswith("Caught ") and "DataLoader worker" in lines[0]:
        last = lines[-1]
        prefix = f"{type(err).__module__}.{type(err).__name__}: "
        for shown in (prefix, f"{type(err).__name__}: "):
            if last.startswith(shown):
                return last[len(shown):]
        return last
    return lines[0]


def main() -> None:
    import hydra

    @hydra.main(version_base="1.3", config_path=config_dir(), config_name="finetune_f5")
    def _main(cfg: DictConfig) -> None:
        from integrations.f5_dataset import PreparedDatasetError
        from integrations.f5_tts import TrainingDivergedError
        from omegaconf.errors import MissingMandatoryValue

        try:
            result = run(cfg)
        except (FinetuneError, PreparedDatasetError, MissingMandatoryValue) as err:
            print(f"error: {error_line(err)}", file=sys.stderr)
            sys.exit(2)
        except TrainingDivergedError as err:  # nothing of the diverged run was saved
            print(f"\nerror: {err}", file=sys.stderr)  # on a line of its own, after F5's progress bar
            sys.exit(1)
        except KeyboardInterrupt:  # a traceback reached the user; say what a rerun resumes from
            print(f"\n{interrupted_message(cfg)}", file=sys.stderr)
            sys.exit(130)
        if _is_main_process():
            print(json.dumps(result, ensure_ascii=False))

    _main()


if __name__ == "__main__":
    from leakloss.config import exit_on_bad_overrides

    exit_on_bad_overrides("finetune_f5")  # a mistyped override is one error line, not Hydra's report
    main()
