"""LeakAwareCFM's cost controls: leak.start_step / leak.every (no penalty call off schedule), leak.item_fraction
(the largest-t items only) and bf16."""

from __future__ import annotations

from typing import NamedTuple

import pytest

pytest.importorskip("f5_tts")
pytest.importorskip("vocos")

import torch  # noqa: E402
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from integrations.f5_tts import largest_t_items, tiny_f5  # noqa: E402
from leakloss.timing import TimedSite  # noqa: E402
from leakloss.vocoder import MelToWave  # noqa: E402

SITE = TimedSite(0.2, 0.3, "deletion", "ʌ->∅", "घर")


class Parts(NamedTuple):
    penalty: torch.Tensor


class Counting(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, waves=None, wave_lengths=None, mels=None, mel_lengths=None, sites=()):
        self.calls += 1
        loss = waves.pow(2).mean()
        return loss, Parts(loss.detach())


def _model(**kwargs):
    return tiny_f5(seed=0, mel_to_wave=MelToWave.tiny(0), site_lookup=lambda t: [SITE], sites_in_span_only=False,
                   audio_drop_prob=0.0, cond_drop_prob=0.0, leak_weight=1.0, **kwargs)


@pytest.mark.parametrize("start, every, accum", [(0, 1, 1), (3, 1, 1), (2, 3, 1), (1, 2, 2)])
def test_penalty_runs_only_on_scheduled_updates(start, every, accum):
    penalty = Counting()
    model = _model(leak_penalty=penalty, leak_start_step=start, leak_every=every, grad_accumulation_steps=accum)
    model.train()
    x, lens = torch.randn(2, 60, 100), torch.tensor([60, 50])
    paid = []
    for forward in range(12):
        before = penalty.calls
        model(x, ["a", "b"], lens=lens)
        paid.append(penalty.calls > before)
        assert (model.last_leak_parts is not None) == paid[-1]
    naive = [(f // accum) >= start and ((f // accum) - start) % every == 0 for f in range(12)]
    assert paid == naive
    model.eval()
    before = penalty.calls
    model(x, ["a", "b"], lens=lens)  # evaluation always measures
    assert penalty.calls == before + 1


def test_bad_schedule_is_refused():
    with pytest.raises(ValueError):
        _model(leak_penalty=Counting(), leak_every=0)


def test_bf16_penalty_stays_close_and_finite():
    from leakloss.heads import RawConvHead
    from leakloss.penalty import LeakPenalty
    from tests.conftest import build_tiny_recognizer

    torch.manual_seed(0)
    penalty = LeakPenalty(build_tiny_recognizer(0), RawConvHead(16, 8, 5, 2))
    values = {}
    for bf16 in (False, True):
        model = _model(leak_penalty=penalty, leak_bf16=bf16)
        model.train()
        torch.manual_seed(3)
        loss, _, _ = model(torch.randn(2, 80, 100), ["a", "b"], lens=torch.tensor([80, 70]))
        loss.backward()
        assert torch.isfinite(loss) and model.last_leak_penalty.dtype == torch.float32
        values[bf16] = float(model.last_leak_penalty)
    assert values[True] == pytest.approx(values[False], rel=0.05)


class Recording(torch.nn.Module):
    """Records the sites of each call (they name the items scored)."""

    def __init__(self) -> None:
        super().__init__()
        self.sites: list = []

    def forward(self, waves=None, wave_lengths=None, mels=None, mel_lengths=None, sites=()):
        self.sites.append([list(s) for s in sites])
        loss = waves.pow(2).mean()
        return loss, Parts(loss.detach())


@pytest.mark.parametrize("fraction, batch", [(0.25, 4), (0.5, 5), (1.0, 3), (0.1, 3)])
def test_item_fraction_scores_the_largest_t_items(fraction, batch):
    import math

    texts = [f"t{i}" for i in range(batch)]
    site_of = {t: TimedSite(0.1 + 0.01 * i, 0.2, "deletion", "ʌ->∅", t) for i, t in enumerate(texts)}
    penalty = Recording()
    model = tiny_f5(seed=0, mel_to_wave=MelToWave.tiny(0), site_lookup=lambda t: [site_of[t]],
                    sites_in_span_only=False, audio_drop_prob=0.0, cond_drop_prob=0.0, leak_weight=1.0,
                    leak_penalty=penalty, leak_item_fraction=fraction)
    seen = {}
    model.transformer.register_forward_pre_hook(lambda m, a, kw: seen.update(time=kw["time"].clone()),
                                                with_kwargs=True)
    model.train()
    x, lens = torch.randn(batch, 60, 100), torch.full((batch,), 60)
    for _ in range(3):
        model(x, texts, lens=lens)
        k = max(1, math.ceil(fraction * batch - 1e-9))
        naive = sorted(sorted(range(batch), key=lambda i: -float(seen["time"][i]))[:k])
        assert [s[0].word for s in penalty.sites[-1]] == [texts[i] for i in naive]
        assert model.last_leak_weight == pytest.approx(float((seen["time"] ** 2).mean()))  # the whole batch's w(t)


@pytest.mark.parametrize("bad", [0, -0.5, 1.5, float("nan"), True, "0.5"])
def test_bad_item_fraction_is_refused(bad):
    with pytest.raises(ValueError, match="leak_item_fraction"):
        _model(leak_penalty=Counting(), leak_item_fraction=bad)


@given(st.lists(st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]) | st.floats(0, 1), max_size=20),
       st.floats(1e-6, 1.0))
def test_largest_t_items_matches_a_naive_choice(times, fraction):
    import math

    chosen = largest_t_items(times, fraction)
    count = 0 if not times else max(1, math.ceil(round(fraction * len(times), 9)))
    assert len(chosen) == count and chosen == sorted(set(chosen))
    others = [i for i in range(len(times)) if i not in chosen]
    for i in chosen:  # nothing left out has a larger t, nor an equal t at an earlier index
        assert all(times[j] < times[i] or (times[j] == times[i] and j > i) for j in others)
    assert largest_t_items(times, 1.0) == list(range(len(times)))


def test_under_accelerate_the_schedule_counts_its_updates_across_epoch_ends():
    """accelerate completes an update at each epoch's end, so with 5 batches an epoch and 2 accumulation steps an
    epoch has 3 updates, not 2.5: the update each forward feeds (and the budget stop's count) must follow F5's
    global_update, not forwards // 2 (which fell one update behind per epoch)."""
    from accelerate import Accelerator

    accelerator = Accelerator(gradient_accumulation_steps=2, cpu=True)
    stand_in = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(stand_in.parameters(), 0.1)
    loader = torch.utils.data.DataLoader(torch.zeros(5, 1), batch_size=1)
    stand_in, optimizer, loader = accelerator.prepare(stand_in, optimizer, loader)
    model = _model(leak_penalty=Counting(), grad_accumulation_steps=2, leak_every=2)
    model.train()
    model.update_synced = lambda: accelerator.sync_gradients
    global_update, fed, starts, due = 0, [], [], []
    for _epoch in range(3):
        for batch in loader:
            with accelerator.accumulate(stand_in):
                starts.append(model.at_update_start())
                fed.append(model.updates_done())
                due.append(model._leak_due())
                assert fed[-1] == global_update  # F5's counter before this micro-batch's step
                stand_in(batch).sum().backward()
                optimizer.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                global_update += 1
    assert global_update == 9 and model.updates_done() == 9
    assert fed == [0, 0, 1, 1, 2, 3, 3, 4, 4, 5, 6, 6, 7, 7, 8]
    assert starts == [True, False, True, False, True] * 3
    assert due == [u % 2 == 0 for u in fed]  # every micro-batch of an update runs the penalty, or none
    model.resume_at(4)
    assert model.updates_done() == 4 and model.at_update_start()
