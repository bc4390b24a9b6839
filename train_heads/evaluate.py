"""Held-out tables in the seed's form: caught / total and false flags on controls, per pair kind and head."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from leakloss.atomic import write_text_atomic
from leakloss.decision import batch_decisions
from leakloss.heads import MLPHead, RawConvHead
from leakloss.pairs.features import ConvTable, FeatureTable
from train_heads.data import collate_crops


def match_rows(table_a: FeatureTable, table_b: FeatureTable) -> tuple[list[int], list[int]]:
    """Row indices of the two recognizers' tables that describe the same (pair, role)."""
    index_b = {(m["pair_id"], m["role"]): i for i, m in enumerate(table_b.meta)}
    ia, ib = [], []
    for i, m in enumerate(table_a.meta):
        j = index_b.get((m["pair_id"], m["role"]))
        if j is not None:
            ia.append(i)
            ib.append(j)
    return ia, ib


@torch.no_grad()
def mlp_heldout_rows(head: MLPHead, head_name: str, own: FeatureTable, table_a: FeatureTable, table_b: FeatureTable,
                     flag: float = 0.5, no_change: float = 0.2) -> list[dict]:
    """Decisions with the gates on both recognizers, for held-out rows of ``head_name``'s kind."""
    kind = "deletion" if head_name == "deletion" else "quality"
    a, b = table_a.select(kind=kind, split="heldout"), table_b.select(kind=kind, split="heldout")
    ia, ib = match_rows(a, b)
    own_is_a = own is table_a
    x = (a.x if own_is_a else b.x)[ia if own_is_a else ib]
    scores = head.score(x) if len(ia) else torch.zeros(0)
    decisions = batch_decisions(scores, a.x[ia], b.x[ib], flag=flag, no_change=no_change)
    rows = []
    for pair_kind in ("physical", "natural", "model"):
        sel = [k for k, i in enumerate(ia) if a.meta[i]["pair_kind"] == pair_kind
               and voice_family(a.meta[i].get("voice", "")) == "espeak"]
        q = [k for k in sel if a.meta[ia[k]]["role"] == "query"]
        c = [k for k in sel if a.meta[ia[k]]["role"] == "control"]
        rows.append({"head": head_name, "pair_kind": pair_kind, "caught": sum(decisions[k] == "flagged" for k in q),
                     "total": len(q), "false_flags": sum(decisions[k] == "flagged" for k in c), "shams": len(c)})
    families = sorted({voice_family(a.meta[i].get("voice", "")) for i in ia} - {"espeak"})
    for family in families:  # one block per recorded-voice family (physical pairs only are built on them)
        sel = [k for k, i in enumerate(ia) if voice_family(a.meta[i].get("voice", "")) == family]
        q = [k for k in sel if a.meta[ia[k]]["role"] == "query"]
        c = [k for k in sel if a.meta[ia[k]]["role"] == "control"]
        rows.append({"head": head_name, "pair_kind": f"physical ({family})", "caught": sum(decisions[k] == "flagged" for k in q),
                     "total": len(q), "false_flags": sum(decisions[k] == "flagged" for k in c), "shams": len(c)})
    return rows


def voice_family(voice: str) -> str:
    """``espeak`` for the espeak voices, else the Festival/flite family (the unseen one is marked)."""
    from leakloss.speech import festival

    v = festival.VOICES_BY_NAME.get(voice)
    if v is None:
        return "espeak"
    return v.family + (" — unseen" if v.family == festival.UNSEEN_FAMILY or voice in festival.UNSEEN_SPEAKER_TWINS
                       else "")


@torch.no_grad()
def rawconv_scores(head: RawConvHead, table: ConvTable) -> torch.Tensor:
    if not len(table):
        return torch.zeros(0)
    batch = collate_crops(list(zip(table.feats, table.masks, table.y)))
    return torch.sigmoid(RawConvHead.pool(head(batch["feats"]), batch["mask"]).float())


def rawconv_heldout_rows(head: RawConvHead, table: ConvTable, short: ConvTable | None, flag: float = 0.5) -> list[dict]:
    held = table.select(split="heldout")
    scores = rawconv_scores(head, held)
    rows = []
    for pair_kind in ("physical", "natural", "model"):
        q = [i for i, m in enumerate(held.meta) if m["pair_kind"] == pair_kind and m["role"] == "query"]
        c = [i for i, m in enumerate(held.meta) if m["pair_kind"] == pair_kind and m["role"] == "control"]
        rows.append({"head": "rawconv", "pair_kind": pair_kind, "caught": int((scores[q] >= flag).sum()),
                     "total": len(q), "false_flags": int((scores[c] >= flag).sum()), "shams": len(c)})
    if short is not None:
        s = rawconv_scores(head, short)
        rows.append({"head": "rawconv", "pair_kind": "short_vowel", "caught": 0, "total": 0,
                     "false_flags": int((s >= flag).sum()), "shams": len(short)})
    return rows


def heldout_markdown(rows: list[dict]) -> str:
    lines = ["| Head | Pair kind | Caught | False flags |", "|---|---|---|---|"]
    for r in rows:
        caught = "—" if r["pair_kind"] == "short_vowel" else f"{r['caught']} / {r['total']}"
        lines.append(f"| {r['head']} | {r['pair_kind']} | {caught} | {r['false_flags']} / {r['shams']} |")
    return "\n".join(lines) + "\n"


def write_heldout(out_dir: str | Path, rows: list[dict]) -> None:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in (("heldout.md", heldout_markdown(rows)), ("heldout.json", json.dumps(rows, indent=1))):
        write_text_atomic(out_dir / name, text)
