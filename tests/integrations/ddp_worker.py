"""Worker for test_f5_distributed: one rank of a 2-process gloo run of LeakAwareCFM under DDP (as accelerate
wraps it), then (rank 0) the single-process reference on the same global batch. Writes OUT/result.json.

Run: python -m torch.distributed.run --nproc_per_node 2 tests/integrations/ddp_worker.py OUT [leak|margin]
(the term under test: the reference-free penalty, or the path-margin term through a stand-in that always plans)
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from integrations.f5_tts import LeakCurveLogger, _term_row, read_leak_curve, tiny_f5
from leakloss.heads import RawConvHead
from leakloss.penalty import LeakPenalty
from leakloss.timing import TimedSite
from leakloss.vocoder import MelToWave
from tests.conftest import build_tiny_recognizer

FRAMES = [150, 120, 180, 140]  # four items of the global batch, two per rank
SITES = {
    "t0": [TimedSite(0.3, 0.4, "deletion", "ʌ->∅"), TimedSite(0.9, 1.0, "quality", "ʌi̯->ɛː")],
    "t1": [TimedSite(0.5, 0.6, "quality", "ʌu̯->ɔː")],
    "t2": [TimedSite(0.2, 0.3, "deletion", "ʌ->∅"), TimedSite(0.8, 0.9, "deletion", "ʌ->∅"),
           TimedSite(1.5, 1.6, "quality", "ʌi̯->ɛː")],
    "t3": [],  # an item without sites: contributes nothing
}


def build(penalty: torch.nn.Module, term: str = "leak"):
    torch.manual_seed(0)
    return tiny_f5(seed=0, **{f"{term}_penalty": penalty, f"{term}_weight": 2.0}, mel_to_wave=MelToWave.tiny(0),
                   site_lookup=lambda t: SITES[t], sites_in_span_only=False, audio_drop_prob=0.0, cond_drop_prob=0.0)


def penalty_modules(term: str = "leak"):
    if term == "margin":
        from tests.integrations.test_f5_margin import RecordingMargin

        return RecordingMargin()
    torch.manual_seed(0)
    head = RawConvHead(in_channels=16, width=8, kernel=5, layers=2)
    for p in head.parameters():
        p.data.normal_(0, 0.3)
    return LeakPenalty(build_tiny_recognizer(0), head)


def shard_batch(rank: int):
    g = torch.Generator().manual_seed(7)
    mels = [torch.randn(n, 100, generator=g) for n in FRAMES]
    items = [2 * rank, 2 * rank + 1]
    n = max(FRAMES[i] for i in items)
    x = torch.stack([torch.nn.functional.pad(mels[i], (0, 0, 0, n - FRAMES[i])) for i in items])
    return x, [f"t{i}" for i in items], torch.tensor([FRAMES[i] for i in items])


def main(out: Path, term: str = "leak") -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == 2
    penalty = penalty_modules(term)
    model = build(penalty, term)
    model.train()
    ddp = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
    wrapped = {id(p) for p in ddp.parameters()}
    csv = out / "curves.csv"
    logger = LeakCurveLogger(csv, every=1, is_main=rank == 0)
    handle = model.register_forward_hook(logger)
    x, texts, lens = shard_batch(rank)
    torch.manual_seed(100 + rank)
    random.seed(100 + rank)
    loss, _, _ = ddp(x, texts, lens=lens)
    loss.backward()
    handle.remove()
    reduced = loss.detach().clone()
    dist.all_reduce(reduced)
    grads = {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}
    frozen = all(not p.requires_grad and p.grad is None for p in penalty.parameters())
    replicated = not any(id(p) in wrapped for p in penalty.parameters())
    dist.barrier()
    dist.destroy_process_group()
    if rank != 0:
        return

    # ---- single-process reference on the same global batch (same draws per shard: CFM samples noise, time and
    # span per process, so those are taken from the ranks' seeds; the penalty is ONE call on all four items)
    ref_pen = penalty_modules(term)
    captured: list = []
    given = "plans" if term == "margin" else "sites"  # what the term is told besides the audio

    class Capture(torch.nn.Module):
        recognizer = getattr(ref_pen, "recognizer", None)

        def plan(self, wave, text):
            return ref_pen.plan(wave, text)

        def forward(self, waves=None, wave_lengths=None, **kwargs):
            captured.append((waves, wave_lengths, list(kwargs[given])))
            return ref_pen(waves=waves, wave_lengths=wave_lengths, **kwargs)

    ref = build(Capture(), term)
    ref.train()
    flows, weights = [], []
    for r in range(world):
        xr, tr, lr = shard_batch(r)
        torch.manual_seed(100 + r)
        random.seed(100 + r)
        total_r, _, _ = ref(xr, tr, lens=lr)
        part_r, _ = ref_pen(waves=captured[-1][0], wave_lengths=captured[-1][1], **{given: captured[-1][2]})
        term_weight = getattr(ref, f"last_{term}_weight")
        flows.append(total_r - term_weight * part_r)  # the flow loss, with its graph
        weights.append(term_weight / 2.0)  # weight * mean t^2 of the shard, / weight
    waves = torch.nn.utils.rnn.pad_sequence([w for wv, _, _ in captured for w in wv], batch_first=True)
    lengths = torch.cat([wl for _, wl, _ in captured])
    told = [s for _, _, ss in captured for s in ss]
    global_pen, parts = ref_pen(waves=waves, wave_lengths=lengths, **{given: told})
    weight = 2.0 * sum(weights) / len(weights)  # equal shard sizes: the mean of t^2 over the global batch
    ref_total = sum(flows) / world + weight * global_pen
    ref.zero_grad()
    ref_total.backward()
    ref_grads = {k: p.grad for k, p in ref.named_parameters() if p.grad is not None}
    grad_diff = max(float((grads[k] - ref_grads[k]).abs().max()) for k in ref_grads)  # DDP grads: rank mean
    grad_scale = max(float(g.abs().max()) for g in ref_grads.values())
    # what one process logs for the whole batch: every site statistic, count and per-item mean (*/frame_counts)
    reference_curve = {k: v for k, v in _term_row(term, 0.0, None, parts).items() if not k.endswith("/weight")}
    curve = {name: read_leak_curve(csv, name)[-1][1] for name in reference_curve}
    result = dict(loss_ddp=float(reduced) / world, loss_ref=float(ref_total), grad_max_abs_diff=grad_diff,
                  grad_max_abs=grad_scale, frozen=frozen, replicated=replicated, curve=curve,
                  reference_curve=reference_curve, same_keys=sorted(grads) == sorted(ref_grads))
    (out / "result.json").write_text(json.dumps(result, ensure_ascii=False, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]), *sys.argv[2:3])
