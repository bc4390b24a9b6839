"""What differs between the head types, as objects the config picks (``heads.NAME.recipe._target_``).

The pipeline (:func:`train_heads.pipeline.run`) is the same for every head: build the training data,
build the head and fit its input normalisation, train, evaluate on the held-out rows, describe the
features in the card. A recipe supplies those steps for one kind of head:

- :class:`SiteFeatureRecipe`: the MLP heads on the 57 reference-paired site features of one recognizer;
- :class:`ConvFrameRecipe`: the reference-free frame head on the recognizer's frame features (wav2vec2 conv
  layer 4, or a Whisper encoder's states: ``frame_features``), with short retained vowels read fast as extra
  negatives, optionally the real recordings of the training speakers as negatives (``real_speech``), and a
  short-vowel false-flag row in the held-out table.
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from leakloss.acoustic.features import FEATURE_NAMES
from leakloss.pairs.features import ConvTable, conv_feature_table, real_speech_conv_table, short_vowel_conv_table
from train_heads.callbacks import RatesCallback
from train_heads.data import ConvDataModule, FeatureDataModule, collate_crops
from train_heads.evaluate import mlp_heldout_rows, rawconv_heldout_rows


@dataclass
class Context:
    """What every recipe may read: the composed config, the pair manifest, the recognizers and their
    site-feature tables (``tables["a"]``, ``tables["b"]``)."""

    cfg: DictConfig
    manifest: Path
    recognizers: dict
    tables: dict

    @property
    def feature_cache(self) -> Path:
        return Path(self.cfg.cache_dir) / "features"


def short_vowel_negatives(cfg: DictConfig, recognizer, layer: int | None = None) -> ConvTable:
    """Correct Nepali vowels read fast by every training teacher voice (its own share of the training
    sentences): a deleted vowel and a 40-60 ms retained one are what the reference-free head must tell
    apart. ``data.short_vowel_teacher_voices`` caps the voices (the first ones; null: all).
    ``data.short_vowel_kinds`` adds quality sites' vowels; ``data.short_vowel_nasalised`` adds the
    deletion sites read with a nasalised vowel (anusvara schwas such as स्वयंसेविका's are a contrast the
    pairs almost never contain; without them the head flags short nasal vowels)."""
    from leakloss.speech.corpus import builtin_sentences, split_sentences
    from leakloss.speech.synth import TRAIN_TEACHER_VOICES

    train_sentences, _ = split_sentences(builtin_sentences())
    kinds = tuple(cfg.data.get("short_vowel_kinds", ["deletion"]))
    passes = [(False, kinds)] + ([(True, ("deletion",))] if cfg.data.get("short_vowel_nasalised", False) else [])
    tables = []
    for k, voice in enumerate(TRAIN_TEACHER_VOICES[: cfg.data.get("short_vowel_teacher_voices")]):
        chunk = train_sentences[k::len(TRAIN_TEACHER_VOICES)][: cfg.data.get("short_vowel_train_sentences")]
        for nasalise, pass_kinds in passes:
            tables.append(short_vowel_conv_table(recognizer, chunk, voice=voice, split="train", nasalise=nasalise,
                                                 kinds=pass_kinds, cache_dir=Path(cfg.cache_dir) / "features",
                                                 progress=cfg.progress, layer=layer,
                                                 exclude_words=list(cfg.data.get("heldout_words") or [])))
    out = ConvTable.concat(tables)
    for m in out.meta:  # one sentence in seven (by a stable hash) is dev: model selection sees short vowels too
        if int(hashlib.sha1(m["sentence_id"].encode()).hexdigest(), 16) % 7 == 0:
            m["split"] = "dev"
    return out


class SiteFeatureRecipe:
    """An :class:`leakloss.heads.MLPHead` on the site features of ``hcfg.recognizer`` for ``hcfg.kind``."""

    def datamodule(self, ctx: Context, hcfg: DictConfig) -> FeatureDataModule:
        return FeatureDataModule(ctx.tables[hcfg.recognizer], hcfg.kind, batch_size=hcfg.batch_size, seed=ctx.cfg.seed)

    def build_head(self, hcfg: DictConfig, dm: FeatureDataModule) -> torch.nn.Module:
        head = instantiate(hcfg.model)
        head.fit_normalisation(dm.train.x)
        return head

    def callbacks(self, dm: FeatureDataModule) -> list[L.Callback]:
        return [RatesCallback(dm.dev)]

    def heldout_rows(self, ctx: Context, hcfg: DictConfig, head, dm, name: str) -> list[dict]:
        return mlp_heldout_rows(head, name, ctx.tables[hcfg.recognizer], ctx.tables["a"], ctx.tables["b"])

    def feature_names(self, head) -> list[str]:
        return list(FEATURE_NAMES)


def with_real_rows(table: ConvTable, real: ConvTable, repeat: int) -> ConvTable:
    """``table`` plus the real-speech rows: each training row ``repeat`` times, every other split's once."""
    return ConvTable.concat([table, real] + [real.select(split="train")] * (repeat - 1))


class ConvFrameRecipe:
    """A :class:`leakloss.heads.RawConvHead` on the frame features of ``hcfg.recognizer`` (its
    ``frame_features``, layer ``hcfg.frame_layer``; absent: the recognizer's default — wav2vec2 conv layer 4,
    a Whisper encoder's output).

    :func:`short_vowel_negatives` adds correct vowels read fast by the training teacher voices when
    ``data.short_vowel_sentences`` is set; ``real_speech`` adds every testable site of the real recordings of the
    *training* speakers (:func:`leakloss.speech.real.real_clips` split ``train``; ``data.real_speech_clips`` caps
    them) as negatives: their vowels are correct Nepali; ``real_schwa_cuts`` adds physical pairs cut at every spoken
    schwa of those recordings (:func:`leakloss.pairs.features.real_speech_conv_table`); ``real_repeat`` draws their
    training rows that many times per epoch (a few hundred rows among ten thousand synthetic ones otherwise barely
    move the head; dev rows count once) and ``real_augment_copies`` adds augmented copies of every clip (speed, reverb,
    noise, gain), each aligned afresh; ``site_segments`` marks the pairs' site frames on the phone's segment, not its
    CTC spike (:func:`leakloss.pairs.features.conv_feature_table`). ``adversarial_pairs`` adds that many training
    deletion queries whose band gains were descended ``adversarial_steps`` steps against the frame head at
    ``adversarial_head`` (None: the shipped one) as positives (:func:`train_heads.adversarial.adversarial_conv_table`).
    """

    def __init__(self, real_speech: bool = False, real_schwa_cuts: bool = False, real_repeat: int = 1,
                 real_augment_copies: int = 0, site_segments: bool = False, adversarial_pairs: int = 0,
                 adversarial_steps: int = 40, adversarial_head: str | None = None) -> None:
        if int(real_repeat) < 1:
            raise ValueError(f"real_repeat must be >= 1, got {real_repeat}")
        if int(real_augment_copies) < 0:
            raise ValueError(f"real_augment_copies must be >= 0, got {real_augment_copies}")
        if int(adversarial_pairs) < 0 or int(adversarial_steps) < 1:
            raise ValueError(f"adversarial_pairs must be >= 0 and adversarial_steps >= 1, got {adversarial_pairs} "
                             f"and {adversarial_steps}")
        self.real_speech, self.real_schwa_cuts, self.real_repeat = real_speech, real_schwa_cuts, int(real_repeat)
        self.real_augment_copies = int(real_augment_copies)
        self.site_segments = bool(site_segments)
        self.adversarial_pairs, self.adversarial_steps = int(adversarial_pairs), int(adversarial_steps)
        self.adversarial_head = adversarial_head

    def datamodule(self, ctx: Context, hcfg: DictConfig) -> ConvDataModule:
        rec, layer = ctx.recognizers[hcfg.recognizer], hcfg.get("frame_layer")
        kinds = tuple(hcfg.get("kinds", ["deletion"]))
        conv, _ = conv_feature_table(ctx.manifest, rec, kinds=kinds, cache_dir=ctx.feature_cache,
                                     progress=ctx.cfg.progress, layer=layer, segments=self.site_segments)
        if self.adversarial_pairs:
            from leakloss.heads import SHIPPED_HEADS
            from train_heads.adversarial import adversarial_conv_table

            attacked = self.adversarial_head or SHIPPED_HEADS / "rawconv.safetensors"
            adv, stats = adversarial_conv_table(ctx.manifest, rec, attacked, pairs=self.adversarial_pairs,
                                                steps=self.adversarial_steps, layer=layer, segments=self.site_segments,
                                                seed=ctx.cfg.seed, cache_dir=ctx.feature_cache,
                                                progress=ctx.cfg.progress)
            conv = ConvTable.concat([conv, adv])
            print(f"{hcfg.name}: {len(adv)} adversarial deletion positives added (band gains descended against "
                  f"{attacked}: loss {stats['loss_first_step_mean']:.3f} at the first step -> "
                  f"{stats['loss_last_step_mean']:.3f} at the last, on average; skipped {stats['skipped']})")
        if ctx.cfg.data.short_vowel_sentences:
            extra = short_vowel_negatives(ctx.cfg, rec, layer)
            conv = ConvTable.concat([conv, extra])
            print(f"{hcfg.name}: {len(extra)} short retained vowels added as training negatives")
        if self.real_speech:
            from leakloss.speech.real import real_clips

            clips = real_clips(split="train")[: ctx.cfg.data.get("real_speech_clips")]
            if not clips:  # asked for and absent: say so, never train without them unnoticed
                print(f"warning: {hcfg.name}: no real recordings of training speakers found "
                      "(leakloss.speech.real.default_dir()); trained without real-speech negatives", file=sys.stderr)
            else:
                real = real_speech_conv_table(rec, clips, kinds=kinds, cache_dir=ctx.feature_cache,
                                              progress=ctx.cfg.progress, layer=layer,
                                              schwa_cuts=self.real_schwa_cuts,
                                              augment_copies=self.real_augment_copies,
                                              exclude_words=list(ctx.cfg.data.get("heldout_words") or []))
                conv = with_real_rows(conv, real, self.real_repeat)
                cut = int(real.y.sum())
                print(f"{hcfg.name}: {len(real) - cut} negative and {cut} cut-schwa sites of {len(clips)} real "
                      f"training-speaker clips added ({self.real_augment_copies} augmented copies each; training "
                      f"rows drawn {self.real_repeat}x)")
        return ConvDataModule(conv, batch_size=hcfg.batch_size, seed=ctx.cfg.seed)

    def build_head(self, hcfg: DictConfig, dm: ConvDataModule) -> torch.nn.Module:
        in_channels = dm.table.feats[0].shape[0]
        head = instantiate(hcfg.model, in_channels=in_channels)
        batch = collate_crops(list(zip(dm.train.feats, dm.train.masks, dm.train.y)))
        head.fit_normalisation(batch["feats"], batch["valid"])
        return head

    def callbacks(self, dm: ConvDataModule) -> list[L.Callback]:
        return []

    def heldout_rows(self, ctx: Context, hcfg: DictConfig, head, dm: ConvDataModule, name: str) -> list[dict]:
        short = None
        if ctx.cfg.data.short_vowel_sentences:
            from leakloss.speech.corpus import builtin_sentences, split_sentences

            _, held = split_sentences(builtin_sentences())
            short = short_vowel_conv_table(ctx.recognizers[hcfg.recognizer], held[: ctx.cfg.data.short_vowel_sentences],
                                           cache_dir=ctx.feature_cache, progress=ctx.cfg.progress,
                                           layer=hcfg.get("frame_layer"))
        return rawconv_heldout_rows(head, dm.table, short)

    def card_features(self, ctx: Context, hcfg: DictConfig) -> dict:
        """The card's ``features``: what the head's frames are, so the penalty loads a recognizer that has them."""
        rec = ctx.recognizers[hcfg.recognizer]
        layer = rec.default_frame_layer if hcfg.get("frame_layer") is None else int(hcfg.frame_layer)
        return {"source": rec.frame_source, "layer": layer, "hop_s": rec.frame_hop_s(layer),
                "channels": rec.frame_channels(layer)}

    def feature_names(self, head) -> list[str]:
        return [f"frame_channel_{i}" for i in range(head.in_channels)]


Recipe = Any  # SiteFeatureRecipe | ConvFrameRecipe | anything with the same five methods
