"""Evidence for many clips as a Lightning ``predict`` loop, cached on disk.

One recognizer pass per clip; each clip's evidence is written to ``CACHE/<key>.json`` where the key
hashes the clip's bytes, its text, the recognizer id, :data:`FEATURE_SCHEMA_VERSION` and the level clips are
heard at (as the scorer hears a reading, at :data:`~leakloss.constants.RECOGNIZER_HEARING_PEAK`: heads trained on
these features score what it hears), so a rerun
(or another process of a ``ddp`` run) reuses it. ``trainer`` options (``accelerator``, ``devices``,
``strategy``) spread the clips over GPUs and nodes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from leakloss.acoustic.align import AlignmentResult, WordAlignment
from leakloss.acoustic.features import FEATURE_SCHEMA_VERSION, EvidenceExtractor, SiteEvidence, UtteranceEvidence
from leakloss.atomic import write_text_atomic
from leakloss.constants import RECOGNIZER_HEARING_PEAK


def clip_key(audio: str | Path, text: str, recognizer_id: str) -> str:
    h = hashlib.sha256(Path(audio).read_bytes())
    h.update(f"|{text}|{recognizer_id}|{FEATURE_SCHEMA_VERSION}|peak{RECOGNIZER_HEARING_PEAK}".encode())
    return h.hexdigest()[:24]


def evidence_to_json(ev: UtteranceEvidence) -> dict:
    al = ev.alignment
    return {
        "status": ev.status, "reason": ev.reason, "duration": ev.duration,
        "alignment": None if al is None else {
            "ok": al.ok, "reason": al.reason, "fit": al.fit,
            "words": [{"index": w.index, "word": w.word, "start": w.start, "end": w.end,
                       "phone_spans": w.phone_spans, "score": w.score} for w in al.words]},
        "sites": [{"key": list(k), "kind": s.kind, "margin": s.margin.tolist(), "fit_nepali": s.fit_nepali.tolist(),
                   "fit_hindi": s.fit_hindi.tolist(), "evidence": s.evidence.tolist(), "feasible": list(s.feasible)}
                  for k, s in ev.sites.items()],
        "skipped": [[list(k), v] for k, v in ev.skipped.items()],
    }


def evidence_from_json(d: dict) -> UtteranceEvidence:
    al = d["alignment"]
    alignment = None if al is None else AlignmentResult(
        ok=al["ok"], reason=al["reason"], fit=al["fit"],
        words=[WordAlignment(w["index"], w["word"], w["start"], w["end"], [tuple(s) for s in w["phone_spans"]], w["score"])
               for w in al["words"]])
    sites = {tuple(s["key"]): SiteEvidence(s["kind"], torch.tensor(s["margin"]), torch.tensor(s["fit_nepali"]),
                                           torch.tensor(s["fit_hindi"]), torch.tensor(s["evidence"]), tuple(s["feasible"]))
             for s in d["sites"]}
    return UtteranceEvidence(d["status"], d["reason"], sites, alignment, None, d["duration"],
                             skipped={tuple(k): v for k, v in d["skipped"]})


class _Clips(Dataset):
    def __init__(self, clips: Sequence[tuple[str, str, str]]) -> None:
        self.clips = list(clips)  # (audio path, text, cache file)

    def __len__(self) -> int:
        return len(self.clips)

    def __getitem__(self, i: int) -> tuple[str, str, str]:
        return self.clips[i]


class EvidenceModule(L.LightningModule):
    """``predict_step``: load the clip, extract its evidence, write the cache file atomically."""

    def __init__(self, recognizer_id: str, recognizer=None) -> None:
        super().__init__()
        self.recognizer_id, self._recognizer, self.extractor = recognizer_id, recognizer, None
        self._sentences: dict[str, list] = {}

    def setup(self, stage: str) -> None:
        from leakloss.acoustic.recognizer import Recognizer
        from leakloss.text.sites import SiteFinder

        rec = self._recognizer if self._recognizer is not None else Recognizer.load(self.recognizer_id)
        self.extractor = EvidenceExtractor(rec)
        self.finder = SiteFinder()

    def _words(self, text: str) -> list:
        if text not in self._sentences:
            self._sentences[text] = [w for w in self.finder(text) if w.skipped is None]
        return self._sentences[text]

    def predict_step(self, batch, batch_idx: int) -> int:
        from leakloss.audio import AudioError, load_audio
        from leakloss.functional.leak import at_hearing_level

        for audio, text, out in batch:
            try:
                wave = at_hearing_level(load_audio(audio)[0])  # as the scorer hears a reading (scorer._read)
                words = self._words(text)
                ev = self.extractor.extract(wave, [w.nepali for w in words], words)
            except AudioError as err:
                ev = UtteranceEvidence("bad_input", str(err))
            write_text_atomic(out, json.dumps(evidence_to_json(ev), ensure_ascii=False))
        return len(batch)


def extract_evidence(clips: Sequence[tuple[str, str]], recognizer_id: str, cache_dir: str | Path, *, recognizer=None,
                     accelerator: str = "cpu", devices: int | str = 1, strategy: str = "auto",
                     progress: bool = True) -> dict[tuple[str, str], UtteranceEvidence]:
    """Evidence for each (audio path, text); computed once per clip and cached."""
    cache_dir = Path(cache_dir) / recognizer_id.replace("/", "__")
    cache_dir.mkdir(parents=True, exist_ok=True)
    unique = list(dict.fromkeys((str(a), t) for a, t in clips))
    files = {c: cache_dir / f"{clip_key(c[0], c[1], recognizer_id)}.json" for c in unique}
    todo = [(a, t, str(f)) for (a, t), f in files.items() if not f.exists()]
    if todo:
        loader = DataLoader(_Clips(todo), batch_size=1, collate_fn=list)
        trainer = L.Trainer(accelerator=accelerator, devices=devices, strategy=strategy, logger=False,
                            enable_progress_bar=progress, enable_checkpointing=False, enable_model_summary=False)
        with torch.no_grad():
            trainer.predict(EvidenceModule(recognizer_id, recognizer), loader, return_predictions=False)
    return {c: evidence_from_json(json.loads(f.read_text(encoding="utf-8"))) for c, f in files.items()}
