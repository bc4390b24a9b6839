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
    naive = [(f // accum) >= start and ((f // accum) + 1) % every == 0 for f in range(12)]
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


def _accelerated(batches: int):
    """An accelerate loop stand-in (2 accumulation steps, ``batches`` an epoch) and a tiny model (leak_every 2) that
    counts its updates at accelerate's sync points, as train_f5 sets it up."""
    from accelerate import Accelerator

    accelerator = Accelerator(gradient_accumulation_steps=2, cpu=True)
    stand_in = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(stand_in.parameters(), 0.1)
    loader = torch.utils.data.DataLoader(torch.zeros(batches, 1), batch_size=1)
    stand_in, optimizer, loader = accelerator.prepare(stand_in, optimizer, loader)
    model = _model(leak_penalty=Counting(), grad_accumulation_steps=2, leak_every=2)
    model.train()
    model.update_synced = lambda: accelerator.sync_gradients
    return accelerator, stand_in, optimizer, loader, model


def test_under_accelerate_the_schedule_counts_its_updates_across_epoch_ends():
    """accelerate completes an update at each epoch's end, so with 5 batches an epoch and 2 accumulation steps an
    epoch has 3 updates, not 2.5: the update each forward feeds (and the budget stop's count) must follow F5's
    global_update, not forwards // 2 (which fell one update behind per epoch)."""
    accelerator, stand_in, optimizer, loader, model = _accelerated(batches=5)
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
    assert due == [(u + 1) % 2 == 0 for u in fed]  # every micro-batch of an update runs the penalty, or none
    model.resume_at(4)
    assert model.updates_done() == 4 and model.at_update_start()


def test_the_curve_logger_labels_rows_with_accelerates_updates_and_logs_the_penalty_it_schedules(tmp_path):
    """The logger counted forwards // accumulation: under accelerate (an update at each epoch's end) its rows fell
    behind F5's global_update (updates 2 and 6 never logged); and with leak.every = log_every = 2 the penalty ran on
    updates 1, 3, 5 and was logged on none."""
    import csv

    from integrations.f5_tts import LeakCurveLogger

    accelerator, stand_in, optimizer, loader, model = _accelerated(batches=3)
    model.register_forward_hook(LeakCurveLogger(tmp_path / "c.csv", every=2, grad_accumulation_steps=2))
    x, lens = torch.randn(2, 60, 100), torch.tensor([60, 50])
    global_update = 0
    for _epoch in range(4):
        for batch in loader:
            with accelerator.accumulate(stand_in):
                model(x, ["a", "b"], lens=lens)
                stand_in(batch).sum().backward()
                optimizer.step()
                optimizer.zero_grad()
            if accelerator.sync_gradients:
                global_update += 1
    assert global_update == 8
    with (tmp_path / "c.csv").open(newline="") as f:
        rows = list(csv.reader(f))[1:]
    assert sorted({int(r[0]) for r in rows}) == [2, 4, 6, 8]
    assert {int(r[0]) for r in rows if r[1] == "leak/penalty"} == {2, 4, 6, 8}


@pytest.mark.parametrize("kwargs, message", [
    ({"leak_every": 2.7}, "leak_every must be a whole number >= 1"),  # became 2
    ({"leak_every": True}, "leak_every must be a whole number >= 1"),
    ({"leak_every": float("inf")}, "leak_every must be a whole number >= 1"),  # an OverflowError
    ({"leak_every": "2"}, "leak_every must be a whole number >= 1"),  # a TypeError
    ({"grad_accumulation_steps": 1.5}, "grad_accumulation_steps must be a whole number >= 1"),  # became 1
    ({"leak_start_step": None}, "leak_start_step must be a whole number >= 0"),
])
def test_a_schedule_that_is_not_whole_numbers_is_refused_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _model(leak_penalty=Counting(), **kwargs)


def test_a_site_lookup_that_is_not_a_function_or_a_penalty_without_a_vocoder_is_refused(embedded_penalty):
    # both failed at the first scheduled forward: "'dict' object is not callable", "needs a mel_to_wave vocoder"
    with pytest.raises(ValueError, match="site_lookup must be a function"):
        tiny_f5(leak_penalty=Counting(), leak_weight=1.0, site_lookup={"a": [SITE]})
    with pytest.raises(ValueError, match="leak_penalty hears x1_hat through a vocoder"):
        tiny_f5(leak_penalty=embedded_penalty, leak_weight=1.0, site_lookup=lambda t: [SITE])
    model = _model(leak_penalty=Counting())
    for bad in (-2, 2.5):  # were taken
        with pytest.raises(ValueError, match="update must be a whole number >= 0"):
            model.resume_at(bad)


def test_a_batch_of_one_frame_items_has_a_zero_flow_loss_not_nan():
    # F5 infills (0.7..1.0 * 1) = 0 frames of a 1-frame item: its loss was the mean of nothing
    model = tiny_f5(seed=0, audio_drop_prob=0.0, cond_drop_prob=0.0)
    model.train()
    x = torch.randn(2, 1, 100, requires_grad=True)
    loss, _, _ = model(x, ["a", "b"], lens=torch.tensor([1, 1]))
    loss.backward()
    assert float(loss) == 0.0 and all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())
    bad = torch.randn(2, 40, 100)
    bad[0, 3, 3] = float("nan")  # a NaN input stays a NaN loss: the curve logger stops on it
    assert not torch.isfinite(model(bad, ["a", "b"], lens=torch.tensor([40, 40]))[0])


def test_a_step_without_a_term_reads_nothing_back_to_the_host_beyond_what_f5_reads(monkeypatch):
    # the 1-frame rule read the flow loss with bool() every step: a device-to-host stall on a GPU
    from f5_tts.model import CFM

    model = tiny_f5(seed=0, audio_drop_prob=0.0, cond_drop_prob=0.0)
    model.train()
    reads: list[str] = []
    for name in ("__bool__", "item", "tolist", "__float__", "__int__"):
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _o=original, _n=name: reads.append(_n) or _o(self, *a))
    x, lens = torch.randn(2, 40, 100), torch.tensor([40, 30])
    model(x, ["a", "b"], lens=lens)
    ours = list(reads)
    reads.clear()
    CFM.forward(model, x, ["a", "b"], lens=lens)
    assert ours == reads


def test_a_term_step_with_no_site_logs_no_nan_and_a_too_short_clip_is_refused():
    # a margin step that scored no item logged site_margins / site_hinges NaN (the documented NaN is for steps
    # whose items were all non-finite); a 300-sample clip was a raw STFT error mid-training
    from integrations.f5_tts import WaveTextDataset, _term_row

    class MarginLike(NamedTuple):
        penalty: torch.Tensor
        site_margins: torch.Tensor
        site_hinges: torch.Tensor
        nonfinite_items: torch.Tensor

    empty = torch.zeros(0)
    row = _term_row("margin", 0.5, torch.zeros(()), MarginLike(torch.zeros(()), empty, empty, torch.zeros(())))
    assert all(v == v for v in row.values()) and "margin/site_margins" not in row
    with pytest.raises(ValueError, match=r"items\[0\]: the wave is \d+ samples at 24000 Hz, shorter than"):
        WaveTextDataset([(torch.randn(300) * 0.1, 16_000, "आज")])


def test_the_curve_logger_takes_no_probe_with_probe_every_0_and_refuses_a_probe_never_run(tmp_path):
    # finetune-f5's probe.every=0 (no probe) crashed after the site placement when probe_every had to be >= 1
    from integrations.f5_tts import LeakCurveLogger

    LeakCurveLogger(tmp_path / "c.csv", every=1, probe=None, probe_every=0)
    with pytest.raises(ValueError, match="probe_every must be a whole number >= 1"):
        LeakCurveLogger(tmp_path / "d.csv", every=1, probe=lambda model: {}, probe_every=0)
    with pytest.raises(ValueError, match="every must be a whole number >= 1"):
        LeakCurveLogger(tmp_path / "e.csv", every=0)
