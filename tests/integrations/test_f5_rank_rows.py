"""integrations.f5_tts.merge_rank_rows: the curve a multi-process run logs is the one a single process logs for the
whole batch (site statistics over all sites, counts summed), for each term, without starting processes (the
two-process run itself: test_f5_distributed)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

pytest.importorskip("f5_tts")

import torch

from integrations.f5_tts import AUXILIARY_TERMS, leak_log_row, merge_rank_rows, rank_log_payload
from leakloss.heads import RawConvHead
from leakloss.paired_penalty import PairedPosteriorPenalty
from leakloss.penalty import LeakPenalty
from leakloss.timing import TimedSite
from tests.integrations.test_f5_margin import RecordingMargin
from tests.tiny_models import speechlike

#: four items, split 2 + 2 over two ranks; the ranks hold 3 and 4 sites, in different kinds and contrasts
SITES = [
    [TimedSite(0.2, 0.3, "deletion", "ʌ->∅"), TimedSite(0.6, 0.7, "quality", "ʌi̯->ɛː")],
    [TimedSite(0.4, 0.5, "deletion", "ʌ->∅")],
    [TimedSite(0.1, 0.2, "quality", "ʌu̯->ɔː")],
    [TimedSite(0.2, 0.3, "deletion", "ʌ->∅"), TimedSite(0.5, 0.6, "deletion", "ʌ->∅"),
     TimedSite(0.8, 0.9, "quality", "ʌi̯->ɛː")],
]
SECONDS = [1.0, 0.8, 0.6, 1.1]
RANKS = ([0, 1], [2, 3])
#: the term's weight: the same on every rank, not a statistic of the batch
NOT_GLOBAL = ("/weight",)


def _batch(items, nonfinite: int | None = None):
    waves = [torch.from_numpy(speechlike(SECONDS[i], seed=i)).float() for i in items]
    refs = [torch.from_numpy(speechlike(SECONDS[i], seed=i + 50)).float() for i in items]
    if nonfinite in items:  # a NaN inside the valid samples: the item is masked, its sites inactive
        waves[items.index(nonfinite)][100] = float("nan")
    pad = torch.nn.utils.rnn.pad_sequence
    lengths = torch.tensor([w.numel() for w in waves])
    return pad(waves, batch_first=True), lengths, pad(refs, batch_first=True), [SITES[i] for i in items]


def _term(name: str, tiny_rec):
    if name == "leak":
        torch.manual_seed(0)
        head = RawConvHead(in_channels=16, width=8, kernel=5, layers=2)
        for p in head.parameters():
            p.data.normal_(0, 0.3)
        penalty = LeakPenalty(tiny_rec, head)
        return lambda w, n, ref, sites: penalty(waves=w, wave_lengths=n, sites=sites)
    if name == "paired":
        penalty = PairedPosteriorPenalty(tiny_rec)
        return lambda w, n, ref, sites: penalty(waves=w, wave_lengths=n, ref_waves=ref, sites=sites)
    margin = RecordingMargin(crops=tuple((5 + 10 * k, 12 + 10 * k) for k in range(3)))

    def run(w, n, ref, sites):  # one spec per site of the item (kinds alternate), as many as the item has
        plans = [margin.plan(ref[i, : int(n[i])], "") for i in range(len(sites))]
        plans = [p._replace(specs=p.specs[: len(s)]) for p, s in zip(plans, sites)]
        return margin(waves=w, wave_lengths=n, plans=plans)

    return run


def _row(name: str, parts, sites, global_penalty):
    """What one process's LeakCurveLogger logs after a forward with only term ``name`` (and its site records)."""
    model = SimpleNamespace(last_flow_loss=None, last_leak_weight=0.0, last_leak_penalty=None, last_leak_parts=None)
    for term in AUXILIARY_TERMS[1:]:
        setattr(model, f"{term}_penalty", object() if term == name else None)
    setattr(model, f"last_{name}_weight", 1.0)
    setattr(model, f"last_{name}_penalty", global_penalty)
    setattr(model, f"last_{name}_parts", parts)
    setattr(model, f"last_{name}_sites", sites)
    return rank_log_payload(model, leak_log_row(model, torch.tensor(1.0)))


@pytest.mark.parametrize("name,nonfinite", [(name, None) for name in AUXILIARY_TERMS]
                         + [("leak", 3), ("paired", 3)])  # the margin stand-in does not mask NaN (the real term does)
def test_the_merged_row_is_the_single_process_row_of_the_whole_batch(tiny_rec, name, nonfinite):
    term = _term(name, tiny_rec)
    with torch.no_grad():
        waves, lengths, refs, sites = _batch([0, 1, 2, 3], nonfinite)
        _, whole = term(waves, lengths, refs, sites)
        reference, *_ = _row(name, whole, sites, whole.penalty)
        gathered = []
        for items in RANKS:
            w, n, ref, s = _batch(items, nonfinite)
            _, parts = term(w, n, ref, s)
            gathered.append(_row(name, parts, s, whole.penalty))  # LeakAwareCFM records the global penalty
    merged = merge_rank_rows(gathered)
    keys = [k for k in reference if k.startswith(f"{name}/") and not k.endswith(NOT_GLOBAL)]
    assert {f"{name}/per_kind/deletion", f"{name}/per_kind/quality", f"{name}/active_sites"} <= set(keys)
    assert reference[f"{name}/nonfinite_items"] == (nonfinite is not None)  # the masked item's sites: inactive
    for key in keys:
        assert merged[key] == pytest.approx(reference[key], rel=1e-4, abs=1e-6), key
    # not a vacuous check: averaging the ranks' own rows (the merge before 2026-12-07) misses the whole batch's means
    averaged = {k: sum(r[k] for r, *_ in gathered if k in r) / sum(k in r for r, *_ in gathered) for k in keys}
    off = [k for k in keys if "/per_kind/" in k and not math.isclose(averaged[k], reference[k], rel_tol=1e-3)]
    assert off, {k: (averaged[k], reference[k]) for k in keys}


def test_a_term_without_per_site_parts_keeps_the_ranks_mean():
    # a custom penalty whose parts name no per-site values: its means are averaged over the ranks, nothing raised
    rows = [({"leak/per_kind/deletion": 0.2, "leak/active_sites": 1.0}, {"leak": []}),
            ({"leak/per_kind/deletion": 0.6, "leak/active_sites": 3.0}, {"leak": []})]
    merged = merge_rank_rows(rows)
    assert merged["leak/per_kind/deletion"] == pytest.approx(0.4) and merged["leak/active_sites"] == 4.0


def test_a_rank_whose_items_were_all_masked_does_not_hide_the_others_sites():
    # rank 0 measured nothing (NaN: not measured); rank 1's sites are the global batch's
    from integrations.f5_tts import SiteRecord

    rows = [({"leak/per_kind/deletion": math.nan, "leak/nonfinite_items": 2.0, "leak/active_sites": 0.0},
             {"leak": [SiteRecord("deletion", "ʌ->∅", False, (0.9,))]}),
            ({"leak/per_kind/deletion": 0.3, "leak/nonfinite_items": 0.0, "leak/active_sites": 2.0},
             {"leak": [SiteRecord("deletion", "ʌ->∅", True, (0.2,)), SiteRecord("deletion", "ʌ->∅", True, (0.4,))]})]
    merged = merge_rank_rows(rows)
    assert merged["leak/per_kind/deletion"] == pytest.approx(0.3)
    assert merged["leak/nonfinite_items"] == 2.0 and merged["leak/active_sites"] == 2.0


@pytest.mark.parametrize("name", ["leak", "paired"])
def test_per_item_parts_are_the_mean_over_every_ranks_items_when_the_ranks_hold_different_counts(tiny_rec, name):
    # */frame_counts was each rank's mean, then averaged over the ranks: a mean of means, wrong with 1 and 3 items
    term = _term(name, tiny_rec)
    with torch.no_grad():
        waves, lengths, refs, sites = _batch([0, 1, 2, 3])
        _, whole = term(waves, lengths, refs, sites)
        reference, _, _ = _row(name, whole, sites, whole.penalty)
        gathered = []
        for items in ([0], [1, 2, 3]):  # frame batches: the ranks hold different numbers of items
            w, n, ref, s = _batch(items)
            _, parts = term(w, n, ref, s)
            gathered.append(_row(name, parts, s, whole.penalty))
    key = f"{name}/frame_counts"
    merged = merge_rank_rows(gathered)
    assert merged[key] == pytest.approx(reference[key], rel=1e-6)
    mean_of_means = sum(row[key] for row, *_ in gathered) / len(gathered)  # the figure logged before
    assert not math.isclose(mean_of_means, reference[key], rel_tol=1e-3), (mean_of_means, reference[key])
    # a rank's row without its totals (an older payload) keeps the ranks' mean rather than a partial sum
    assert merge_rank_rows([gathered[0][:2], gathered[1]])[key] == pytest.approx(mean_of_means)
