"""LeakAwareCFM's cost controls: leak.start_step / leak.every (no penalty call off schedule) and bf16."""

from __future__ import annotations

from typing import NamedTuple

import pytest

pytest.importorskip("f5_tts")
pytest.importorskip("vocos")

import torch  # noqa: E402

from integrations.f5_tts import tiny_f5  # noqa: E402
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
