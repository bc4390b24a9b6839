"""Many readings at once: ``score-batch`` as a Lightning predict loop.

Each manifest line is ``{"id": str, "query": path, "text": str, "refs": [path, ...]}`` (paths relative
to the manifest's folder). Results go to ``OUT/<id>.json`` in the ``score`` format, written
atomically; a rerun skips ids already written, so an interrupted run resumes. Recognizers and heads
are loaded once per process; ``devices``/``strategy`` spread the work over GPUs and nodes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import lightning as L
from torch.utils.data import Dataset


class BatchManifestError(ValueError):
    pass


def read_batch_manifest(path: str | Path) -> list[dict]:
    path = Path(path)
    items, seen = [], set()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise BatchManifestError(f"cannot read {path}: {err}") from err
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except json.JSONDecodeError as err:
            raise BatchManifestError(f"{path}:{n}: not valid JSON ({err.msg})") from err
        for key, typ in (("id", str), ("query", str), ("text", str), ("refs", list)):
            if not isinstance(d.get(key), typ):
                raise BatchManifestError(f"{path}:{n}: field {key!r} must be a {typ.__name__}")
        if not d["id"] or "/" in d["id"] or d["id"].startswith("."):
            raise BatchManifestError(f"{path}:{n}: id {d['id']!r} must be a plain file name")
        if d["id"] in seen:
            raise BatchManifestError(f"{path}:{n}: duplicate id {d['id']!r}")
        seen.add(d["id"])
        base = path.parent
        d["query"] = str(base / d["query"])
        d["refs"] = [str(base / r) for r in d["refs"]]
        items.append(d)
    return items


class _Items(Dataset):
    def __init__(self, items: list[dict]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict:
        return self.items[i]


class ScoringModule(L.LightningModule):
    """Wraps a :class:`leakloss.scorer.Scorer`; ``predict_step`` scores one reading and writes it."""

    def __init__(self, scorer_kwargs: dict, out_dir: str | Path) -> None:
        super().__init__()
        self.scorer_kwargs, self.out_dir, self.scorer = scorer_kwargs, Path(out_dir), None

    def setup(self, stage: str) -> None:
        from leakloss.scorer import Scorer

        self.scorer = Scorer(**self.scorer_kwargs, device=str(self.device))

    def predict_step(self, batch: list[dict], batch_idx: int) -> list[str]:
        done = []
        for item in batch:
            result = self.scorer.score(item["query"], item["text"], item["refs"])
            result["id"] = item["id"]
            for key in ("system", "sentence_id"):
                if key in item:
                    result[key] = item[key]
            tmp = self.out_dir / f".{item['id']}.json.tmp"
            tmp.write_text(json.dumps(result, ensure_ascii=False, indent=1), encoding="utf-8")
            os.replace(tmp, self.out_dir / f"{item['id']}.json")
            done.append(item["id"])
        return done


def score_batch(manifest: str | Path, out_dir: str | Path, *, accelerator: str = "cpu", devices: int | str = 1,
                strategy: str = "auto", progress: bool = True, **scorer_kwargs) -> dict:
    items = read_batch_manifest(manifest)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    todo = [d for d in items if not (out_dir / f"{d['id']}.json").exists()]
    summary = {"total": len(items), "skipped_existing": len(items) - len(todo), "scored": 0}
    if not todo:
        return summary
    from torch.utils.data import DataLoader

    loader = DataLoader(_Items(todo), batch_size=1, collate_fn=list)
    trainer = L.Trainer(accelerator=accelerator, devices=devices, strategy=strategy, logger=False,
                        enable_progress_bar=progress, enable_checkpointing=False)
    outputs = trainer.predict(ScoringModule(scorer_kwargs, out_dir), loader)
    summary["scored"] = sum(len(o) for o in outputs or [])
    return summary
