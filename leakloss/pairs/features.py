"""Pair manifests -> cached training tables for the heads.

- :func:`site_feature_table`: per pair two rows of the 57 features (query with the reference:
  label 1; control with the reference: label 0), for one recognizer.
- :func:`conv_feature_table`: per pair two reference-free examples for the raw-conv head: conv
  layer-4 features of the word (±60 ms) and a mask of the site's 5 ms frames.

One recognizer pass per distinct clip (references and controls are shared between pairs). Tables
are cached on disk keyed by the manifest's content, the recognizer id and the feature schema.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import soundfile as sf
import torch
from tqdm.auto import tqdm

from leakloss.acoustic.features import FEATURE_SCHEMA_VERSION, EvidenceExtractor, site_feature_vector
from leakloss.constants import RECOGNIZER_HEARING_PEAK, SAMPLE_RATE
from leakloss.functional.leak import frame_centres, span_frames
from leakloss.pairs.schema import PairRecord, read_manifest, resolve
from leakloss.schema import KINDS, SHORT_VOWEL

from leakloss.acoustic.recognizer import DEFAULT_CONV_LAYER as CONV_LAYER  # noqa: F401, I001  (one home; importable here)
CONV_PAD_S = 0.06
SITE_PAD_S = 0.02
#: the rule of a frame row's site mask (:func:`site_frame_mask`), in every frame-row table's cache key: 2 since
#: 2026-12-07 (float64 centres, both edges, as the penalty marks them; 1: float32, a quarter of first frames out)
SITE_MASK_VERSION = 2


@dataclass
class FeatureTable:
    x: torch.Tensor  # [n, 57]
    y: torch.Tensor  # [n] 1 = changed, 0 = control
    #: pair_id, pair_kind (a :data:`leakloss.schema.HeldoutKind`), kind, contrast, split, word, role
    meta: list[dict] = field(default_factory=list)

    def select(self, **conditions) -> "FeatureTable":
        keep = [i for i, m in enumerate(self.meta) if all(m[k] == v for k, v in conditions.items())]
        return FeatureTable(self.x[keep], self.y[keep], [self.meta[i] for i in keep])

    def __len__(self) -> int:
        return len(self.meta)


@dataclass
class ConvTable:
    feats: list[torch.Tensor]  # each [c, g]
    masks: list[torch.Tensor]  # each [g] bool: the site's frames
    y: torch.Tensor  # [n]
    meta: list[dict] = field(default_factory=list)

    def select(self, **conditions) -> "ConvTable":
        keep = [i for i, m in enumerate(self.meta) if all(m[k] == v for k, v in conditions.items())]
        return ConvTable([self.feats[i] for i in keep], [self.masks[i] for i in keep], self.y[keep],
                         [self.meta[i] for i in keep])

    def __len__(self) -> int:
        return len(self.meta)

    @staticmethod
    def concat(tables: "list[ConvTable]") -> "ConvTable":
        return ConvTable([f for t in tables for f in t.feats], [m for t in tables for m in t.masks],
                         torch.cat([t.y for t in tables]) if tables else torch.zeros(0),
                         [m for t in tables for m in t.meta])


def _key(manifest: Path, recognizer_name: str, what: str) -> str:
    h = hashlib.sha256(manifest.read_bytes())
    # the evidence under a table is heard at one level (acoustic.extract.clip_key)
    h.update(f"{recognizer_name}|{FEATURE_SCHEMA_VERSION}|{what}|v1|peak{RECOGNIZER_HEARING_PEAK}".encode())
    return h.hexdigest()[:16]


def _load_conv_table(cache: Path) -> tuple[ConvTable, dict]:
    from safetensors.torch import load_file

    flat = load_file(str(cache))
    side = json.loads(cache.with_suffix(".json").read_text())
    n = len(side["meta"])
    return ConvTable([flat[f"f{i}"] for i in range(n)], [flat[f"m{i}"] for i in range(n)], flat["y"],
                     side["meta"]), side["stats"]


def _save_conv_table(cache: Path, table: ConvTable, stats: dict) -> None:
    """Tensors as safetensors, meta as JSON; the tensor file lands last: it marks completeness."""
    from safetensors.torch import save

    from leakloss.atomic import write_bytes_atomic, write_text_atomic

    cache.parent.mkdir(parents=True, exist_ok=True)
    flat = {f"f{i}": t.contiguous() for i, t in enumerate(table.feats)} | {f"m{i}": m for i, m in enumerate(table.masks)}
    flat["y"] = table.y
    write_text_atomic(cache.with_suffix(".json"), json.dumps({"meta": table.meta, "stats": stats}, ensure_ascii=False))
    write_bytes_atomic(cache, save(flat))


def manifest_sha256(manifest: str | Path) -> str:
    return hashlib.sha256(Path(manifest).read_bytes()).hexdigest()


class _Sentences:
    """Words with Nepali phones and sites per text, computed once per text."""

    def __init__(self) -> None:
        from leakloss.text.sites import SiteFinder

        self.finder = SiteFinder()
        self.cache: dict[str, list] = {}

    def __call__(self, text: str):
        if text not in self.cache:
            self.cache[text] = [w for w in self.finder(text) if w.skipped is None]
        return self.cache[text]


def load_pair_clip(path: Path) -> torch.Tensor:
    """A pair's clip as the recognizers hear it: 16 kHz mono float32 (a 16 kHz mono file as it is, bit for bit;
    any other rate or channel count through :func:`leakloss.audio.prepare_waveform`: a stereo clip the evidence
    had read failed the frame table with a size error)."""
    wave, rate = sf.read(path, dtype="float32", always_2d=True)  # [t, channels]
    wave = torch.from_numpy(wave).T.contiguous()
    if rate != SAMPLE_RATE or wave.shape[0] != 1:
        from leakloss.audio import prepare_waveform

        return prepare_waveform(wave, rate, path=path)[0]
    return wave[0]


def _meta(r: PairRecord, role: str) -> dict:
    return {"pair_id": r.id, "pair_kind": r.pair_kind, "kind": r.kind, "contrast": r.contrast, "split": r.split,
            "word": r.word, "role": role, "sentence_id": r.sentence_id, "voice": r.voice}


def check_pairs(manifest: str | Path, records: list[PairRecord] | None = None) -> list[PairRecord]:
    """The records of ``manifest`` after checking what the schema cannot: every audio file exists and each
    ``word_index``/``site_position`` names a word of its text the frontend reads and a phone of that word.

    Raises:
        ManifestError: the first pair that fails, named by its id (a missing clip was a traceback after the
            first heads had trained)."""
    from leakloss.pairs.schema import ManifestError
    from leakloss.text.normalize import TextError

    manifest = Path(manifest)
    records = read_manifest(manifest) if records is None else records
    sentences = _Sentences()
    for r in records:
        where = f"{manifest}: pair {r.id!r}"
        for field_name in ("query", "control", "reference"):
            audio = resolve(manifest, getattr(r, field_name))
            if not audio.is_file():
                raise ManifestError(f"{where}: {field_name} audio {audio} is not a file")
        try:
            words = {w.index: w for w in sentences(r.text)}
        except TextError as err:  # e.g. a word too long for the frontend
            raise ManifestError(f"{where}: its text cannot be read: {err}") from None
        if r.word_index not in words:
            raise ManifestError(f"{where}: word_index {r.word_index} is not a word the frontend reads in its text "
                                f"(readable words: {sorted(words)})")
        phones = words[r.word_index].nepali
        if r.site_position >= len(phones):
            raise ManifestError(f"{where}: site_position {r.site_position} is past the word's {len(phones)} phones")
    return records


def site_feature_table(manifest: str | Path, recognizer, *, cache_dir: str | Path | None = None,
                       progress: bool = True) -> tuple[FeatureTable, dict]:
    """57-feature rows for every pair of ``manifest`` with ``recognizer``; returns (table, stats)."""
    manifest = Path(manifest)
    cache = Path(cache_dir) / f"sites-{_key(manifest, recognizer.name, 'sites')}" if cache_dir else None
    if cache is not None and (cache / "table.json").exists():
        return _load_table(cache)
    records = read_manifest(manifest)
    from leakloss.acoustic.extract import extract_evidence

    clips = [(str(resolve(manifest, a)), r.text) for r in records for a in (r.reference, r.query, r.control)]
    evidence = extract_evidence(clips, recognizer.name, Path(cache_dir or manifest.parent) / "evidence",
                                recognizer=recognizer, progress=progress)

    def ev(audio: str, text: str):
        return evidence[(str(resolve(manifest, audio)), text)]

    rows, labels, meta = [], [], []
    stats = {"pairs": len(records), "rows": 0, "skipped": {}}
    for r in tqdm(records, desc=f"features ({recognizer.name})", disable=not progress):
        key = (r.word_index, r.site_position)
        ref = ev(r.reference, r.text)
        for role, audio, label in (("query", r.query, 1.0), ("control", r.control, 0.0)):
            q = ev(audio, r.text)
            if not (q.ok and ref.ok and key in q.sites and key in ref.sites):
                why = q.status if not q.ok else (ref.status if not ref.ok else "site not scored")
                stats["skipped"][why] = stats["skipped"].get(why, 0) + 1
                continue
            rows.append(site_feature_vector(q.sites[key], ref.sites[key], r.kind))
            labels.append(label)
            meta.append(_meta(r, role))
    table = FeatureTable(torch.stack(rows).float() if rows else torch.zeros(0, 57), torch.tensor(labels), meta)
    stats["rows"] = len(table)
    if cache is not None:
        _save_table(cache, table, stats)
    return table, stats


def _save_table(cache: Path, table: FeatureTable, stats: dict) -> None:
    from safetensors.torch import save_file

    from leakloss.atomic import atomic_directory

    with atomic_directory(cache) as tmp:
        save_file({"x": table.x.contiguous(), "y": table.y.contiguous()}, str(tmp / "table.safetensors"))
        (tmp / "table.json").write_text(json.dumps({"meta": table.meta, "stats": stats}, ensure_ascii=False))


def _load_table(cache: Path) -> tuple[FeatureTable, dict]:
    from safetensors.torch import load_file

    t = load_file(str(cache / "table.safetensors"))
    d = json.loads((cache / "table.json").read_text())
    return FeatureTable(t["x"], t["y"], d["meta"]), d["stats"]


def site_frame_mask(alignment, word_index_in_list: int, site_position: int, start_s: float, n_frames: int,
                    hop_s: float, segments: bool = False) -> torch.Tensor:
    """Frames (of a crop starting at ``start_s``) inside the site phone's aligned span ± 20 ms (``segments``: its
    segment, :meth:`leakloss.acoustic.align.AlignmentResult.phone_segments`, not its CTC spike), edges included
    as the penalty includes them (:func:`leakloss.functional.leak.span_frames`; until 2026-12-07 float32 centres
    and no tolerance, which left out about a quarter of first frames)."""
    if segments:
        a, b = alignment.phone_segments(word_index_in_list)[site_position]
    else:
        a, b = alignment.word(word_index_in_list).phone_spans[site_position]
    return span_frames(frame_centres(n_frames, hop_s, start_s), a, b, SITE_PAD_S)


def word_frames(word, duration_s: float, hop_s: float, n_frames: int) -> tuple[int, int]:
    """Frames ``[g0, g1)`` of an aligned word ±60 ms (:data:`CONV_PAD_S`) inside ``duration_s`` seconds of audio
    and the ``n_frames`` frames computed for it: the window a frame-head row keeps."""
    g0 = int(max(word.start - CONV_PAD_S, 0.0) / hop_s)
    return g0, min(int(min(word.end + CONV_PAD_S, duration_s) / hop_s) + 1, n_frames)


def conv_feature_table(manifest: str | Path, recognizer, *, kinds: tuple[str, ...] = ("deletion",),
                       cache_dir: str | Path | None = None, progress: bool = True,
                       layer: int | None = None, segments: bool = False) -> tuple[ConvTable, dict]:
    """Frame-head examples: the recognizer's frame features (``frame_features``: wav2vec2 conv layer 4, or a
    Whisper encoder state; ``layer`` None: its default) of the word ±60 ms and the site's frames (its CTC spike
    ±20 ms; ``segments``: its phone segment ±20 ms, as site placement now gives them)."""
    manifest = Path(manifest)
    what = "conv" + ",".join(kinds) + ("" if layer is None else f"|layer{layer}")  # None: the key it always had
    what += "|segments" if segments else ""
    what += f"|masks-v{SITE_MASK_VERSION}"
    cache = Path(cache_dir) / f"conv-{_key(manifest, recognizer.name, what)}.pt" if cache_dir else None
    if cache is not None and cache.exists():
        return _load_conv_table(cache)
    records = [r for r in read_manifest(manifest) if r.kind in kinds]
    from leakloss.acoustic.extract import extract_evidence

    sentences = _Sentences()
    evidence = extract_evidence([(str(resolve(manifest, a)), r.text) for r in records for a in (r.query, r.control)],
                                recognizer.name, Path(cache_dir or manifest.parent) / "evidence", recognizer=recognizer,
                                progress=progress)
    clips: dict[tuple[str, str], tuple] = {}
    hop_s = recognizer.frame_hop_s(layer)

    def clip(audio: str, text: str):
        k = (str(resolve(manifest, audio)), text)
        if k not in clips:
            wave = load_pair_clip(resolve(manifest, audio))
            with torch.no_grad():  # the frame features only: alignment comes from the cached evidence
                feats, n = recognizer.frame_features(wave[None], layer=layer)
            clips[k] = (evidence[k], feats[0, :, : int(n[0])], sentences(text), wave.numel() / SAMPLE_RATE)
        return clips[k]

    feats, masks, labels, meta = [], [], [], []
    stats = {"pairs": len(records), "skipped": {}}
    for r in tqdm(records, desc=f"conv features ({recognizer.name})", disable=not progress):
        for role, audio, label in (("query", r.query, 1.0), ("control", r.control, 0.0)):
            e, f, words, duration = clip(audio, r.text)
            if e.alignment is None or not e.alignment.ok:
                stats["skipped"][e.status] = stats["skipped"].get(e.status, 0) + 1
                continue
            k = [i for i, w in enumerate(words) if w.index == r.word_index][0]
            g0, g1 = word_frames(e.alignment.word(k), duration, hop_s, f.shape[-1])
            mask = site_frame_mask(e.alignment, k, r.site_position, g0 * hop_s, g1 - g0, hop_s, segments)
            feats.append(f[:, g0:g1].contiguous())
            masks.append(mask)
            labels.append(label)
            meta.append(_meta(r, role))
    table = ConvTable(feats, masks, torch.tensor(labels), meta)
    stats["rows"] = len(table)
    if cache is not None:
        _save_conv_table(cache, table, stats)
    return table, stats


def _nasalised_sites(words) -> list:
    """The words with every testable deletion site's vowel nasalised (ʌ -> ʌ̃): the same contrast class
    as anusvara schwas, which the sentences alone almost never contain."""
    from dataclasses import replace

    from leakloss.text.phones import NASAL, is_nasal

    out = []
    for w in words:
        phones = list(w.nepali)
        for site in w.testable_sites:
            if site.kind == "deletion" and not is_nasal(phones[site.position]):
                phones[site.position] = unicodedata.normalize("NFC", phones[site.position] + NASAL)
        out.append(replace(w, nepali=phones))
    return out


def short_vowel_conv_table(recognizer, sentences, *, min_s: float = 0.04, max_s: float = 0.06,
                           rates: tuple[int, ...] = (220, 240, 260, 280, 300, 320, 340), voice=None,
                           split: str = "heldout", nasalise: bool = False, kinds: tuple[str, ...] = ("deletion",),
                           cache_dir: str | Path | None = None, progress: bool = True,
                           layer: int | None = None, exclude_words: Sequence[str] = ()) -> ConvTable:
    """Retained Nepali schwas that last 40-60 ms (fast teacher voices): correct readings the raw-conv
    head must not flag. Durations come from espeak's phoneme events; a row marks the vowel's aligned segment (as
    sites are placed at inference; its CTC spike until 2026-12-07). ``nasalise`` reads every deletion
    site's vowel nasalised instead (training negatives for the rare anusvara sites). With ``"quality"`` in
    ``kinds`` the Nepali vowels of quality sites read fast are kept too (any duration). The sites of
    ``exclude_words`` give no row (training rows: the held-out words, :data:`leakloss.pairs.build.DEFAULT_HELDOUT_WORDS`,
    are never trained on, negatives included)."""
    from leakloss.speech.synth import HELDOUT_TEACHER_VOICE, Voice, speak_phones
    from leakloss.speech.versions import espeak_version

    base = voice or HELDOUT_TEACHER_VOICE
    excluded = _normal_words(exclude_words)
    cache = None
    if cache_dir is not None:
        h = hashlib.sha256("\n".join(sentences).encode())
        h.update(f"{recognizer.name}|{FEATURE_SCHEMA_VERSION}|{base}|{rates}|{min_s}|{max_s}|{split}|{nasalise}|{sorted(kinds)}|v2".encode())
        if layer is not None:  # None: the key it always had (the recognizer's default frames)
            h.update(f"|layer{layer}".encode())
        h.update(_excluded_key(excluded))
        h.update(f"|{espeak_version()}".encode())  # the readings are espeak's: an upgraded one reads them anew
        cache = Path(cache_dir) / f"short-{h.hexdigest()[:16]}.pt"
        if cache.exists():
            return _load_conv_table(cache)[0]
    finder = _Sentences()
    extractor = EvidenceExtractor(recognizer)
    hop_s = recognizer.frame_hop_s(layer)
    feats, masks, meta = [], [], []
    for text in tqdm(sentences, desc="short vowels", disable=not progress):
        words = finder(text)
        if nasalise:
            words = _nasalised_sites(words)
        for rate in rates:
            voice = Voice(f"{base.name}-r{rate}", base.language, base.variant, rate, base.pitch, base.pitch_range,
                          base.noise_draw)
            reading = speak_phones([w.nepali for w in words], voice)
            e = extractor.extract(reading.waveform, [w.nepali for w in words], words)
            if e.alignment is None or not e.alignment.ok:
                continue
            with torch.no_grad():
                f, n = recognizer.frame_features(reading.waveform[None], layer=layer)
            f = f[0, :, : int(n[0])]
            for k, w in enumerate(words):
                idx = [i for i, wi in enumerate(reading.phone_words) if wi == k]
                if len(idx) != len(w.nepali):
                    continue
                for site in w.testable_sites:
                    if site.kind not in kinds or w.word in excluded:
                        continue
                    i = idx[site.position]
                    end = reading.phone_starts[i + 1] if i + 1 < len(reading.phones) else reading.duration
                    if site.kind == "deletion" and not min_s <= end - reading.phone_starts[i] <= max_s:
                        continue
                    g0, g1 = word_frames(e.alignment.word(k), reading.duration, hop_s, f.shape[-1])
                    feats.append(f[:, g0:g1].contiguous())
                    # the vowel's segment, as sites are placed at inference (v1 marked its CTC spike)
                    masks.append(site_frame_mask(e.alignment, k, site.position, g0 * hop_s, g1 - g0, hop_s,
                                                 segments=True))
                    meta.append({"pair_id": f"short-{rate}{'-nasal' if nasalise else ''}-{w.word}",
                                 "pair_kind": SHORT_VOWEL, "kind": site.kind, "contrast": site.contrast,
                                 "split": split, "word": w.word, "role": "control", "sentence_id": text[:20]})
    table = ConvTable(feats, masks, torch.zeros(len(feats)), meta)
    if cache is not None:
        _save_conv_table(cache, table, {"rows": len(table)})
    return table


#: ``pair_kind`` of the frame-head training rows cut from real recordings (training negatives only: no pair, and
#: never a held-out row, so not a :data:`leakloss.schema.HeldoutKind`)
REAL_SPEECH = "real_speech"


def real_speech_conv_table(recognizer, clips, *, kinds: tuple[str, ...] = KINDS,
                           cache_dir: str | Path | None = None, progress: bool = True,
                           layer: int | None = None, dev_every: int = 7, schwa_cuts: bool = False,
                           augment_copies: int = 0, exclude_words: Sequence[str] = ()) -> ConvTable:
    """Negatives from real recordings (:class:`leakloss.speech.real.RealClip`, the *training* speakers'): every
    testable site of ``kinds`` in a clip whose words align, as a control row (label 0) — a native speaker's vowels
    are correct Nepali. Frame features of the word ±60 ms and the site's frames, as :func:`conv_feature_table`.
    One clip in ``dev_every`` (by a stable hash of its id) is dev, the rest train; a clip whose words do not align
    gives no row.

    ``schwa_cuts`` (with ``deletion`` in ``kinds``) adds physical pairs in the speakers' own voices at every schwa
    the frontend says is spoken (testable site or not): the aligned vowel cut out with fades
    (:func:`leakloss.pairs.splice.delete_span`, label 1) against its sham (cut and put back, label 0), both read in
    the intact reading's timing, and the intact schwa itself as a further negative.

    ``augment_copies`` adds that many copies of every clip through the recognizers' training augmentation
    (:func:`leakloss.speech.augment.random_augment`: speed, reverb, noise, gain; seeded by clip and copy), each
    aligned afresh and in its clip's split: more varied real rows than drawing the same ones again.

    The words of ``exclude_words`` (the held-out words) give no row, control or cut."""
    clips = list(clips)
    excluded = _normal_words(exclude_words)
    cache = None
    if cache_dir is not None:
        h = hashlib.sha256("\n".join(f"{c.id}|{c.text}" for c in clips).encode())
        h.update(f"{recognizer.name}|{sorted(kinds)}|{layer}|{dev_every}|v3".encode())  # v2: phone segments; v3: masks with their edges
        if schwa_cuts:
            h.update(b"|schwa_cuts-v2")
        if augment_copies:
            h.update(f"|augment{augment_copies}-v1".encode())
        h.update(_excluded_key(excluded))
        cache = Path(cache_dir) / f"real-{h.hexdigest()[:16]}.pt"
        if cache.exists():
            return _load_conv_table(cache)[0]
    finder = _Sentences()
    extractor = EvidenceExtractor(recognizer)
    hop_s = recognizer.frame_hop_s(layer)
    feats, masks, meta, labels = [], [], [], []
    for clip in tqdm(clips, desc="real speech", disable=not progress):
        words = finder(clip.text)
        if not words:
            continue
        split = "dev" if int(hashlib.sha1(clip.id.encode()).hexdigest(), 16) % dev_every == 0 else "train"
        for copy, wave in enumerate(_clip_versions(clip, augment_copies)):
            tag = clip.id if copy == 0 else f"{clip.id}~{copy}"
            for f, mask, label, row_meta in _real_rows(recognizer, extractor, wave, words, kinds, layer, hop_s,
                                                       schwa_cuts, tag):
                if row_meta["word"] in excluded:
                    continue
                feats.append(f)
                masks.append(mask)
                labels.append(label)
                meta.append({**row_meta, "pair_kind": REAL_SPEECH, "split": split, "sentence_id": clip.id,
                             "speaker": clip.speaker})
    table = ConvTable(feats, masks, torch.tensor(labels, dtype=torch.float32), meta)
    if cache is not None:
        _save_conv_table(cache, table, {"rows": len(table)})
    return table


def _normal_words(words: Sequence[str]) -> frozenset[str]:
    """Words as the site finder writes them (NFC, invisibles dropped), to compare with a row's ``word``."""
    from leakloss.text.normalize import normalize_devanagari

    return frozenset(normalize_devanagari(w) for w in words)


def _excluded_key(excluded: frozenset[str]) -> bytes:
    """The cache key's part for the excluded words: nothing when there are none (the key such tables always had)."""
    return f"|exclude:{'|'.join(sorted(excluded))}".encode() if excluded else b""


def _clip_versions(clip, copies: int):
    """The clip's wave, then ``copies`` augmented copies (seeded by the clip's id and the copy's number)."""
    from leakloss.speech.augment import random_augment

    wave = clip.load()
    yield wave
    for copy in range(1, copies + 1):
        seed = int(hashlib.sha1(f"{clip.id}|{copy}".encode()).hexdigest()[:15], 16)
        yield random_augment(wave, torch.Generator().manual_seed(seed))


def _real_rows(recognizer, extractor, wave: torch.Tensor, words, kinds, layer, hop_s: float,
               schwa_cuts: bool, tag: str) -> list[tuple]:
    """(feats, mask, label, meta) rows of one real recording (none when its words do not align): every testable
    site of ``kinds`` as a control, and with ``schwa_cuts`` :func:`_schwa_cut_rows`."""
    e = extractor.extract(wave, [w.nepali for w in words], words)
    if e.alignment is None or not e.alignment.ok:
        return []
    with torch.no_grad():
        f, n = recognizer.frame_features(wave[None], layer=layer)
    f = f[0, :, : int(n[0])]
    duration = wave.numel() / SAMPLE_RATE
    rows = []
    for k, w in enumerate(words):
        for site in w.testable_sites:
            if site.kind not in kinds:
                continue
            g0, g1 = word_frames(e.alignment.word(k), duration, hop_s, f.shape[-1])
            if g1 <= g0:
                continue
            rows.append((f[:, g0:g1].contiguous(),
                         site_frame_mask(e.alignment, k, site.position, g0 * hop_s, g1 - g0, hop_s, segments=True),
                         0.0, {"pair_id": f"real-{tag}-{k}-{site.position}", "kind": site.kind,
                               "contrast": site.contrast, "word": w.word, "role": "control"}))
    if schwa_cuts and "deletion" in kinds:
        rows += [(f_, m, y, {**meta, "pair_id": f"real-cut-{tag}-{meta['pair_id']}"})
                 for f_, m, y, meta in _schwa_cut_rows(recognizer, wave, f, words, e.alignment, layer, hop_s)]
    return rows


def _schwa_cut_rows(recognizer, wave: torch.Tensor, intact_feats: torch.Tensor, words, alignment,
                    layer: int | None, hop_s: float) -> list[tuple]:
    """(feats, mask, label, meta) rows of :func:`real_speech_conv_table`'s ``schwa_cuts``: per spoken schwa, the
    cut (1), its sham (0) and the intact reading (0); the word ±60 ms and the vowel's frames ±20 ms (its aligned
    segment, :meth:`leakloss.acoustic.align.AlignmentResult.phone_segments`), in the intact reading's timing (as
    the penalty scores sites placed on the ground truth)."""
    from leakloss.pairs.splice import delete_span, sham_span
    from leakloss.text.phones import strip_nasal
    from leakloss.text.sites import OPEN_CENTRAL

    duration = wave.numel() / SAMPLE_RATE
    rows = []
    for k, w in enumerate(words):
        wa = alignment.word(k)
        if wa is None:
            continue
        segments = alignment.phone_segments(k)
        for i, phone in enumerate(w.nepali):
            if strip_nasal(phone) not in OPEN_CENTRAL:
                continue
            a, b = segments[i]  # the vowel, not its CTC spike (20 ms of a 70 ms schwa: the cut would leave it)
            b = min(b, duration)  # a clip's last phone reaches past its end (+60 ms): the whole table failed
            if b - a < 0.02:  # under a frame: nothing to cut
                continue
            versions = (("query", 1.0, delete_span(wave, a, b)), ("control", 0.0, sham_span(wave, a, b)),
                        ("intact", 0.0, None))
            for role, label, edited in versions:
                if edited is None:
                    f = intact_feats
                else:
                    with torch.no_grad():
                        f, n = recognizer.frame_features(edited[None], layer=layer)
                    f = f[0, :, : int(n[0])]
                g0, g1 = word_frames(wa, duration, hop_s, f.shape[-1])
                if g1 <= g0:
                    continue
                mask = site_frame_mask(alignment, k, i, g0 * hop_s, g1 - g0, hop_s, segments=True)
                rows.append((f[:, g0:g1].contiguous(), mask, label,
                             {"pair_id": f"{k}-{i}", "kind": "deletion", "contrast": f"{phone}->∅", "word": w.word,
                              "role": "control" if role == "intact" else role}))
    return rows
