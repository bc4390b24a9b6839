"""The retention model's sequence member: a small BiLSTM over a word's units that gives each inherent vowel a
log-odds of being kept, mixed with the trees' (:class:`leakloss.text.retention.RetentionModel`).

The trees see a fixed letter window and counted contexts; the network reads the whole word in both
directions, so its mistakes differ from theirs. It trains in torch (:class:`RetentionNet`) and runs in numpy
(:class:`NumpyRetentionNet`, checked against torch), as the trees do. Mixed, the two rank words by confidence better than either
(measured on held-out words in ``leakloss/assets/frontend/retention.md``). Each unit of the
:class:`leakloss.text.retention.SlotPlan` is :data:`UNIT_FIELDS` ids (:func:`unit_ids`); the weights ship as
safetensors next to the trees' JSON, which names the file, its sha256 and the architecture.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import nn

from leakloss.text.morphology import MORPHOLOGY_UNIT_SIZES, Morphology
from leakloss.text.slots import SlotPlan, _vocabs

__all__ = ["UNIT_FIELDS", "unit_ids", "field_sizes", "batch_ids", "RetentionNet", "net_logits", "expected_shapes",
           "NumpyRetentionNet", "NetEnsemble"]

#: Per unit: consonant, vowel sign, nasal sign, visarga, part (stem / 1st / 2nd / later suffix), compound
#: boundary, the rules' decision at a slot (0 no slot, 1 drop, 2 keep), the rules' rule name at a slot; then
#: the hunspell morphology of the unit (:meth:`leakloss.text.morphology.Morphology.unit_fields`: is the word a
#: verb / nominal form, is the spelling up to the unit a form, does the unit sit inside a verb / nominal affix).
UNIT_FIELDS = 8 + len(MORPHOLOGY_UNIT_SIZES)


def field_sizes() -> list[int]:
    """How many ids each of the :data:`UNIT_FIELDS` fields takes (its embedding's rows)."""
    cons_v, vow_v, why_v, _, _ = _vocabs()
    return [max(cons_v.values()) + 1, max(vow_v.values()) + 1, 3, 2, 4, 2, 3, max(why_v.values()) + 1,
            *MORPHOLOGY_UNIT_SIZES]


def unit_ids(plan: SlotPlan, morphology: Morphology) -> np.ndarray:
    """``[len(plan.units), UNIT_FIELDS]`` int64 ids of a planned word's units (``morphology``: the word forms the
    model was trained with; ``Morphology({})`` when it knew none)."""
    from leakloss.text import g2p

    cons_v, vow_v, why_v, _, _ = _vocabs()
    slot_of = {k: s for s, k in enumerate(plan.slots)}
    bounds = set(plan.bounds)
    out = np.zeros((len(plan.units), UNIT_FIELDS), dtype=np.int64)
    out[:, 8:] = morphology.unit_fields(plan)
    for part, (_, a, b) in enumerate(plan.parts):
        for i in range(a, b):
            u = plan.units[i]
            s = slot_of.get(i)
            out[i, :8] = (
                cons_v.get(u.cons, 1) if u.cons is not None else 1,
                vow_v.get(u.vowel, 1),
                0 if not u.nasal else (1 if u.nasal == g2p.ANUSVARA else 2),
                int(u.visarga),
                min(part, 3),
                int(i in bounds),
                0 if s is None else 1 + int(plan.rule_kept[s]),
                0 if s is None else why_v.get(plan.rule_why[s], 1),
            )
    return out


def batch_ids(plans: Sequence[SlotPlan], morphology: Morphology) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Padded ids ``[B, T, UNIT_FIELDS]`` (long, :func:`unit_ids`), lengths ``[B]`` (long) and the slot mask
    ``[B, T]`` (bool)."""
    ids = [unit_ids(p, morphology) for p in plans]
    t = max((len(x) for x in ids), default=1)
    out = np.zeros((len(plans), max(t, 1), UNIT_FIELDS), dtype=np.int64)
    mask = np.zeros((len(plans), max(t, 1)), dtype=bool)
    for i, (x, p) in enumerate(zip(ids, plans)):
        out[i, : len(x)] = x
        mask[i, list(p.slots)] = True
    lengths = torch.tensor([max(len(x), 1) for x in ids], dtype=torch.long)
    return torch.from_numpy(out), lengths, torch.from_numpy(mask)


class RetentionNet(nn.Module):
    """Embeddings of each unit field -> ``layers``-deep BiLSTM (``hidden`` a direction) -> MLP -> a log-odds per unit.

    ``forward(ids [B, T, UNIT_FIELDS] long, lengths [B] long) -> [B, T]`` float32 (padding positions are
    computed but meaningless; read the slots)."""

    def __init__(self, sizes: Sequence[int], embed: int = 32, hidden: int = 128, layers: int = 2,
                 dropout: float = 0.2) -> None:
        super().__init__()
        if len(sizes) != UNIT_FIELDS:
            raise ValueError(f"{len(sizes)} field sizes for {UNIT_FIELDS} unit fields")
        self.sizes = [int(n) for n in sizes]
        self.embed = int(embed)
        # small fields (nasal, visarga, part, boundary, decision, the six morphology fields) need few dimensions
        self.embeddings = nn.ModuleList([nn.Embedding(n, embed if n > 10 else 8) for n in self.sizes])
        width = sum(e.embedding_dim for e in self.embeddings)
        self.lstm = nn.LSTM(width, hidden, num_layers=layers, bidirectional=True, batch_first=True,
                            dropout=dropout if layers > 1 else 0.0)
        self.head = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        z = torch.cat([emb(ids[..., i]) for i, emb in enumerate(self.embeddings)], dim=-1)
        packed = nn.utils.rnn.pack_padded_sequence(z, lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=ids.shape[1])
        return self.head(out).squeeze(-1)


@torch.no_grad()
def net_logits(net: RetentionNet, plans: Sequence[SlotPlan], morphology: Morphology,
               batch_size: int = 512) -> list[np.ndarray]:
    """Per plan, the network's log-odds of keeping each inherent vowel: ``[len(plan.slots)]`` float64
    (``morphology``: the word forms it was trained with)."""
    was_training = net.training
    net.eval()
    out: list[np.ndarray] = []
    try:
        for b in range(0, len(plans), batch_size):
            chunk = plans[b: b + batch_size]
            ids, lengths, _ = batch_ids(chunk, morphology)
            logits = net(ids, lengths).float()
            out += [logits[i, list(p.slots)].double().numpy() for i, p in enumerate(chunk)]
    finally:
        net.train(was_training)
    return out


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def expected_shapes(sizes: Sequence[int], embed: int, hidden: int, layers: int) -> dict[str, tuple[int, ...]]:
    """Every tensor of a :class:`RetentionNet`'s state dict with its shape, from the architecture alone."""
    dims = [embed if n > 10 else 8 for n in sizes]
    shapes: dict[str, tuple[int, ...]] = {f"embeddings.{i}.weight": (n, d) for i, (n, d) in enumerate(zip(sizes, dims))}
    width = sum(dims)
    for k in range(layers):
        inp = width if k == 0 else 2 * hidden
        for sfx in ("", "_reverse"):
            shapes[f"lstm.weight_ih_l{k}{sfx}"] = (4 * hidden, inp)
            shapes[f"lstm.weight_hh_l{k}{sfx}"] = (4 * hidden, hidden)
            shapes[f"lstm.bias_ih_l{k}{sfx}"] = (4 * hidden,)
            shapes[f"lstm.bias_hh_l{k}{sfx}"] = (4 * hidden,)
    shapes.update({"head.0.weight": (hidden, 2 * hidden), "head.0.bias": (hidden,), "head.2.weight": (1, hidden),
                   "head.2.bias": (1,)})
    return shapes


class NumpyRetentionNet:
    """A :class:`RetentionNet`'s forward pass in numpy (float32, as trained), one word at a time: the frontend's
    path. Small per-word LSTM steps in torch fight other processes for threads (a 2-core machine ran the
    frontend 10x slower beside another torch job); numpy's small matrix products do not.

    ``state``: the state dict as numpy arrays (``safetensors.numpy.load``); shapes must be those of the
    architecture (:func:`expected_shapes`), else ``ValueError``. ``morphology``: the word forms it was trained
    with (:func:`unit_ids`).
    """

    def __init__(self, state: dict[str, np.ndarray], sizes: Sequence[int], embed: int, hidden: int,
                 layers: int, morphology: Morphology) -> None:
        want = expected_shapes(sizes, embed, hidden, layers)
        if set(state) != set(want):
            missing, extra = sorted(set(want) - set(state)), sorted(set(state) - set(want))
            raise ValueError(f"missing tensors {missing[:4]}, unexpected tensors {extra[:4]}")
        bad = [f"{k}: {tuple(state[k].shape)} != {s}" for k, s in want.items() if tuple(state[k].shape) != s]
        if bad:
            raise ValueError(f"tensor shapes {bad[:4]}")
        self.sizes = [int(n) for n in sizes]
        self.hidden, self.layers = int(hidden), int(layers)
        self.morphology = morphology
        self.w = {k: np.asarray(v, dtype=np.float32) for k, v in state.items()}
        if not all(np.isfinite(v).all() for v in self.w.values()):
            raise ValueError("non-finite weights")

    def _direction(self, x: np.ndarray, k: int, sfx: str) -> np.ndarray:
        w = self.w
        gates_in = x @ w[f"lstm.weight_ih_l{k}{sfx}"].T + w[f"lstm.bias_ih_l{k}{sfx}"] + w[f"lstm.bias_hh_l{k}{sfx}"]
        w_hh = w[f"lstm.weight_hh_l{k}{sfx}"].T
        h = np.zeros(self.hidden, dtype=np.float32)
        c = np.zeros(self.hidden, dtype=np.float32)
        out = np.empty((len(x), self.hidden), dtype=np.float32)
        steps = range(len(x) - 1, -1, -1) if sfx else range(len(x))
        n = self.hidden
        for t in steps:
            gates = gates_in[t] + h @ w_hh
            # torch's gate order; plain slices (np.split cost a third of the frontend's time)
            i, f, g, o = gates[:n], gates[n: 2 * n], gates[2 * n: 3 * n], gates[3 * n:]
            c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
            h = _sigmoid(o) * np.tanh(c)
            out[t] = h
        return out

    def logits(self, plan: SlotPlan, ids: np.ndarray | None = None) -> np.ndarray:
        """Log-odds of keeping each inherent vowel: ``[len(plan.slots)]`` float64 (``ids``: the plan's
        :func:`unit_ids`, when the caller has them already)."""
        if not plan.slots:
            return np.zeros(0)
        ids = unit_ids(plan, self.morphology) if ids is None else ids
        x = np.concatenate([self.w[f"embeddings.{i}.weight"][ids[:, i]] for i in range(UNIT_FIELDS)], axis=1)
        for k in range(self.layers):
            x = np.concatenate([self._direction(x, k, ""), self._direction(x, k, "_reverse")], axis=1)
        hid = np.maximum(x @ self.w["head.0.weight"].T + self.w["head.0.bias"], 0.0)
        out = hid @ self.w["head.2.weight"].T + self.w["head.2.bias"]
        return out[list(plan.slots), 0].astype(np.float64)


class NetEnsemble:
    """Networks whose log-odds are averaged: ``logits(plan) -> [len(plan.slots)]`` float64 (the members read
    one morphology table: their inputs are computed once)."""

    def __init__(self, members: Sequence[NumpyRetentionNet]) -> None:
        if not members:
            raise ValueError("an ensemble needs at least one network")
        self.members = list(members)
        self.morphology = self.members[0].morphology
        if any(m.morphology is not self.morphology for m in self.members):
            raise ValueError("the members of an ensemble must read the same morphology table")

    def logits(self, plan: SlotPlan) -> np.ndarray:
        if not plan.slots:
            return np.zeros(0)
        ids = unit_ids(plan, self.morphology)  # once for all members
        return np.mean([m.logits(plan, ids) for m in self.members], axis=0)
