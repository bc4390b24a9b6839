"""Adversarial positives for the frame head: Hindi-ward readings edited until a head stops flagging them.

A band-gain edit (:class:`leakloss.eval.edits.BandGain`) re-weights the frames a reading has. At a deletion site
the vowel's frames are gone, so however far the edit lowers a head's score, the reading still drops the vowel: its
row keeps label 1. Descending the shipped head this way takes its leak probability to ~0 at 10-25 dB SNR while the
reference-paired scorer on the same encoder still hears most of the deletions (docs/penalty.md, "An edit that can
put a vowel back"): such rows show the next head what the last one could be talked out of. Quality sites are left
out: band gains can move a vowel's formants, so an edited quality site may really be Nepali.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import torch
from tqdm import tqdm

from leakloss.constants import SAMPLE_RATE
from leakloss.heads import head_files
from leakloss.pairs.features import (
    ConvTable,
    load_pair_clip,
    _load_conv_table,
    _meta,
    _save_conv_table,
    _Sentences,
    site_frame_mask,
    word_frames,
)
from leakloss.pairs.schema import read_manifest, resolve

#: the edit's settings (direction.py's mel domain: lr 0.05, two noisy copies per step)
EDIT_LR = 0.05
EDIT_COPIES = 2
#: the band-gain edit's window padding, bands and gain limit (nepers): BandGain's defaults, named for the cache key
BAND_GAIN = {"pad_s": 0.03, "bands": 32, "limit": 3.0}
#: shortest site span descended (s), as site placement widens a degenerate phone segment
MIN_SITE_S = 0.01


def adversarial_key(manifest: Path, recognizer_name: str, head_path: Path, **settings) -> str:
    """Cache key: the manifest's bytes, the attacked head's weights and card (``NAME``, ``NAME.safetensors`` or
    ``NAME.json`` name the same two files, as :func:`leakloss.heads.load_head` reads them), the recognizer, the
    feature schema and every setting."""
    from leakloss.acoustic.features import FEATURE_SCHEMA_VERSION
    from leakloss.pairs.features import SITE_MASK_VERSION

    h = hashlib.sha256(Path(manifest).read_bytes())
    for path in head_files(head_path):  # the files load_head reads (a dotted name kept whole)
        h.update(path.read_bytes())
    h.update(json.dumps({"recognizer": recognizer_name, "features": FEATURE_SCHEMA_VERSION, **settings, "v": 1,
                         "masks": SITE_MASK_VERSION},
                        sort_keys=True).encode())
    return h.hexdigest()[:16]


def adversarial_conv_table(manifest: str | Path, recognizer, head_path: str | Path, *, pairs: int, steps: int = 40,
                           layer: int | None = None, segments: bool = True, seed: int = 0,
                           cache_dir: str | Path | None = None, progress: bool = True) -> tuple[ConvTable, dict]:
    """Rows (label 1, role ``adversarial``) of ``pairs`` training-split deletion pairs drawn with ``seed``: each
    query reading's band gains descended ``steps`` steps against the frame head at ``head_path`` on
    ``recognizer`` (at the pair's site), then its frame features (``layer``) cropped as
    :func:`leakloss.pairs.features.conv_feature_table` crops them. Cached under ``cache_dir``.

    Raises:
        ValueError: ``pairs`` or ``steps`` below 1, or a head that is not a frame head for this recognizer and layer.
    """
    from leakloss.acoustic.extract import extract_evidence
    from leakloss.eval.edits import BandGain, descend
    from leakloss.heads import HeadLoadError, RawConvHead, check_recognizer, load_head
    from leakloss.penalty import LeakPenalty, card_frame_features
    from leakloss.timing import TimedSite

    if int(pairs) < 1 or int(steps) < 1:
        raise ValueError(f"adversarial pairs and steps must be >= 1, got {pairs} and {steps}")
    manifest, head_path = Path(manifest), Path(head_path)
    head, card = load_head(head_path)
    if not isinstance(head, RawConvHead):
        raise HeadLoadError(f"{head_path}: a {card.head} head; adversarial rows descend a frame (raw-conv) head")
    check_recognizer(card, recognizer.name)
    layer = recognizer.default_frame_layer if layer is None else int(layer)
    if card_frame_features(card).get("layer", layer) != layer:
        raise ValueError(f"{head_path} reads layer {card_frame_features(card).get('layer')}, the rows layer {layer}")
    settings = {"pairs": int(pairs), "steps": int(steps), "layer": layer, "segments": bool(segments), "seed": seed,
                "lr": EDIT_LR, "copies": EDIT_COPIES, "edit": BAND_GAIN}
    cache = None
    if cache_dir is not None:
        cache = Path(cache_dir) / f"adversarial-{adversarial_key(manifest, recognizer.name, head_path, **settings)}.pt"
        if cache.exists():
            return _load_conv_table(cache)
    records = [r for r in read_manifest(manifest) if r.kind == "deletion" and r.split == "train"]
    random.Random(seed).shuffle(records)
    records = records[: int(pairs)]
    evidence = extract_evidence([(str(resolve(manifest, r.query)), r.text) for r in records], recognizer.name,
                                Path(cache_dir or manifest.parent) / "evidence", recognizer=recognizer,
                                progress=progress)
    frozen = [(p, p.requires_grad) for p in recognizer.parameters()]  # LeakPenalty freezes the recognizer
    penalty = LeakPenalty(recognizer, head, conv_layer=layer, flag_threshold=card.thresholds["flag"])
    hop_s = recognizer.frame_hop_s(layer)
    sentences, generator = _Sentences(), torch.Generator().manual_seed(seed)
    feats, masks, meta, before, after = [], [], [], [], []
    stats: dict = {"pairs": len(records), "skipped": {}}
    try:
        for r in tqdm(records, desc=f"adversarial rows ({recognizer.name})", disable=not progress):
            e = evidence[(str(resolve(manifest, r.query)), r.text)]
            if e.alignment is None or not e.alignment.ok:
                stats["skipped"][e.status] = stats["skipped"].get(e.status, 0) + 1
                continue
            words = sentences(r.text)
            k = next(i for i, w in enumerate(words) if w.index == r.word_index)
            wave = load_pair_clip(resolve(manifest, r.query))
            # the span the row's mask marks: the phone's segment, or its CTC spike
            if segments:
                a, b = e.alignment.phone_segments(k)[r.site_position]
            else:
                a, b = e.alignment.word(k).phone_spans[r.site_position]
            site = TimedSite(start=float(a), end=max(float(b), float(a) + MIN_SITE_S), kind="deletion",
                             contrast=r.contrast, word=r.word)
            edit = BandGain(wave, [site], **BAND_GAIN)
            curve = descend(penalty, edit, [site], int(steps), EDIT_LR, EDIT_COPIES, generator)
            with torch.no_grad():
                f, n = recognizer.frame_features(edit()[None], layer=layer)
            f = f[0, :, : int(n[0])]
            g0, g1 = word_frames(e.alignment.word(k), wave.numel() / SAMPLE_RATE, hop_s, f.shape[-1])
            feats.append(f[:, g0:g1].contiguous())
            masks.append(site_frame_mask(e.alignment, k, r.site_position, g0 * hop_s, g1 - g0, hop_s, segments))
            meta.append(_meta(r, "adversarial"))
            before.append(curve[0])
            after.append(curve[-1])
    finally:  # give the caller's recognizer back as it came
        for p, wanted in frozen:
            p.requires_grad_(wanted)
    table = ConvTable(feats, masks, torch.ones(len(feats)), meta)
    # the descent's loss on its noisy copies at the first and the last step, averaged over the rows
    stats |= {"rows": len(table), "loss_first_step_mean": sum(before) / max(len(before), 1),
              "loss_last_step_mean": sum(after) / max(len(after), 1)}
    if cache is not None:
        _save_conv_table(cache, table, stats)
    return table, stats
