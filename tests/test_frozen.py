"""leakloss.frozen.FrozenScorer: the penalties stay frozen, in eval and in float32 whatever the model holding them does
to its modules (train(), requires_grad_(True), half(), double(), to(dtype)), and still run."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from leakloss.heads import RawConvHead
from leakloss.margin_penalty import MarginPlan, PathMarginPenalty
from leakloss.paired_penalty import PairedPosteriorPenalty
from leakloss.penalty import LeakPenalty
from leakloss.timing import TimedSite
from leakloss.vocoder import MelToWave

SITES = [TimedSite(0.2, 0.3, "deletion", "ʌ->∅"), TimedSite(0.5, 0.62, "quality", "ʌi̯->ɛː")]


@pytest.fixture()
def penalties(tiny_rec):
    torch.manual_seed(0)
    leak = LeakPenalty(copy.deepcopy(tiny_rec), RawConvHead(in_channels=16, width=8), mel_to_wave=MelToWave.tiny(0))
    return {"leak": leak, "paired": PairedPosteriorPenalty(copy.deepcopy(tiny_rec)),
            "margin": PathMarginPenalty(copy.deepcopy(tiny_rec))}


def _run(name, module, waves):
    if name == "leak":
        return module(waves=waves, sites=[SITES] * waves.shape[0])
    if name == "margin":  # nothing to plan on a tiny recognizer: the call still refreezes, the loss is 0
        return module(waves, plans=[MarginPlan((), "no_testable_site", "test")] * waves.shape[0])
    return module(waves, None, waves.detach().flip(-1), [SITES] * waves.shape[0])


@pytest.mark.parametrize("name", ["leak", "paired", "margin"])
def test_a_parent_that_unfreezes_everything_does_not_train_the_penalty(penalties, name):
    parent = nn.Module()
    parent.penalty = penalties[name]
    parent.requires_grad_(True)  # sets the penalty's parameters directly: no override of ours is called
    parent.train()
    waves = (torch.randn(2, 16000, generator=torch.Generator().manual_seed(1)) * 0.1).requires_grad_(True)
    loss, _ = _run(name, parent.penalty, waves)
    loss.backward()
    assert waves.grad is not None and (name == "margin" or float(waves.grad.abs().sum()) > 0)
    assert all(p.grad is None and not p.requires_grad for p in parent.penalty.parameters())
    assert not any(m.training for m in parent.penalty.modules())


@pytest.mark.parametrize("cast", ["half", "double", "bfloat16"])
@pytest.mark.parametrize("name", ["leak", "paired", "margin"])
def test_a_parent_cast_to_another_dtype_leaves_the_penalty_as_it_was_and_running(penalties, name, cast):
    module = penalties[name]
    waves = torch.randn(1, 16000, generator=torch.Generator().manual_seed(2)) * 0.1
    before, _ = _run(name, module, waves)
    parent = nn.Module()
    parent.penalty = module
    parent.half() if cast == "half" else parent.double() if cast == "double" else parent.to(torch.bfloat16)
    assert all(t.dtype == torch.float32 for t in [*module.parameters(), *module.buffers()] if t.is_floating_point())
    after, _ = _run(name, module, waves)
    assert torch.equal(after, before)  # not rounded through the dtype and back
