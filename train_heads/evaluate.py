"""Held-out tables in the seed's form: caught / total and false flags on controls, per pair kind and head.

Rows follow :class:`leakloss.schema.HeldoutRow` (checked by :func:`leakloss.schema.validate_heldout_row`
when written): ``pair_kind`` is one of :data:`leakloss.schema.HELDOUT_KINDS`; a row restricted to one voice
family says so in ``voice_family`` (and ``unseen``), and :func:`heldout_label` writes the table's label
from the two (``physical (festival-hts — unseen)``).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from leakloss.atomic import write_text_atomic
from leakloss.decision import batch_decisions
from leakloss.heads import MLPHead, RawConvHead
from leakloss.pairs.features import ConvTable, FeatureTable
from leakloss.schema import PAIR_KINDS, SHORT_VOWEL, HeldoutRow, validate_heldout_row
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

    def row(sel: list[int], pair_kind: str, family: str, unseen: bool) -> dict:
        q = [k for k in sel if a.meta[ia[k]]["role"] == "query"]
        c = [k for k in sel if a.meta[ia[k]]["role"] == "control"]
        return {"head": head_name, "pair_kind": pair_kind, "voice_family": family, "unseen": unseen,
                "caught": sum(decisions[k] == "flagged" for k in q), "total": len(q),
                "false_flags": sum(decisions[k] == "flagged" for k in c), "shams": len(c)}

    group = [(voice_family(a.meta[i].get("voice", "")), unseen_voice(a.meta[i].get("voice", ""))) for i in ia]
    for pair_kind in PAIR_KINDS:
        sel = [k for k, i in enumerate(ia) if a.meta[i]["pair_kind"] == pair_kind and group[k][0] == "espeak"]
        rows.append(row(sel, pair_kind, "espeak", False))
    # one block per recorded-voice family, seen and unseen apart (physical pairs only are built on them)
    for family, unseen in sorted(set(group) - {("espeak", False)}):
        sel = [k for k, i in enumerate(ia) if group[k] == (family, unseen) and a.meta[i]["pair_kind"] == "physical"]
        rows.append(row(sel, "physical", family, unseen))
    return rows


def voice_family(voice: str) -> str:
    """``espeak`` for the espeak voices, else the Festival/flite family (see :func:`unseen_voice`)."""
    from leakloss.speech import festival

    v = festival.VOICES_BY_NAME.get(voice)
    return "espeak" if v is None else v.family


def unseen_voice(voice: str) -> bool:
    """A voice of the family the heads never train on, or the twin of one of its speakers."""
    from leakloss.speech import festival

    v = festival.VOICES_BY_NAME.get(voice)
    return v is not None and (v.family == festival.UNSEEN_FAMILY or voice in festival.UNSEEN_SPEAKER_TWINS)


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
    for pair_kind in PAIR_KINDS:
        q = [i for i, m in enumerate(held.meta) if m["pair_kind"] == pair_kind and m["role"] == "query"]
        c = [i for i, m in enumerate(held.meta) if m["pair_kind"] == pair_kind and m["role"] == "control"]
        rows.append({"head": "rawconv", "pair_kind": pair_kind, "caught": int((scores[q] >= flag).sum()),
                     "total": len(q), "false_flags": int((scores[c] >= flag).sum()), "shams": len(c)})
    if short is not None:
        s = rawconv_scores(head, short)
        rows.append({"head": "rawconv", "pair_kind": SHORT_VOWEL, "caught": 0, "total": 0,
                     "false_flags": int((s >= flag).sum()), "shams": len(short)})
    return rows


def heldout_label(row: HeldoutRow | dict) -> str:
    """The table's label of a row: its pair kind, with the recorded-voice family it is restricted to
    (``physical (flite-clustergen — unseen)``); espeak rows and pooled rows by the kind alone."""
    r = validate_heldout_row(row)
    family = r.get("voice_family", "espeak")
    if family == "espeak":
        return r["pair_kind"]
    return f"{r['pair_kind']} ({family}{' — unseen' if r.get('unseen') else ''})"


def heldout_markdown(rows: list[dict]) -> str:
    lines = ["| Head | Pair kind | Caught | False flags |", "|---|---|---|---|"]
    for i, row in enumerate(rows):
        r = validate_heldout_row(row, f"held-out row {i}")
        caught = "—" if r["pair_kind"] == SHORT_VOWEL else f"{r['caught']} / {r['total']}"
        lines.append(f"| {r['head']} | {heldout_label(r)} | {caught} | {r['false_flags']} / {r['shams']} |")
    return "\n".join(lines) + "\n"


def write_heldout(out_dir: str | Path, rows: list[dict]) -> None:
    out_dir = Path(out_dir)
    rows = [validate_heldout_row(r, f"held-out row {i}") for i, r in enumerate(rows)]
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in (("heldout.md", heldout_markdown(rows)), ("heldout.json", json.dumps(rows, indent=1))):
        write_text_atomic(out_dir / name, text)
