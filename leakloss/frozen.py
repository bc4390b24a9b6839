"""The frozen scorers a training signal runs (:class:`~leakloss.penalty.LeakPenalty`,
:class:`~leakloss.paired_penalty.PairedPosteriorPenalty`, :class:`~leakloss.margin_penalty.PathMarginPenalty`): the
gradient reaches the audio, never their weights, whatever the model that holds them does to its own modules."""

from __future__ import annotations

from typing import TypeVar

import torch
from torch import nn

_Self = TypeVar("_Self", bound="FrozenScorer")


class FrozenScorer(nn.Module):
    """Always in eval mode, no parameter trainable, its weights in the dtype they were loaded in (bf16 runs through
    autocast).

    - ``.train()`` leaves it in eval (a parent's ``model.train()`` reaches it so);
    - a parent's ``requires_grad_(True)`` sets its parameters directly, past any override: :meth:`freeze` undoes it
      and every ``forward`` of a subclass calls it first;
    - a parent's ``.half()`` / ``.double()`` / ``.to(dtype)`` leaves its dtype and values as they are (its
      recognizers read float32 audio: a half conv on float32 input failed; a round trip through bf16 would have
      rounded its weights for good); ``.to(device)`` moves it as usual.
    """

    def freeze(self: _Self) -> _Self:
        for p in self.parameters():
            if p.requires_grad:
                p.requires_grad_(False)
        return super().train(False)

    def train(self: _Self, mode: bool = True) -> _Self:  # frozen: always eval
        return super().train(False)

    def _apply(self, fn, recurse: bool = True):
        def device_only(t: torch.Tensor) -> torch.Tensor:
            moved = fn(t)
            if t.is_floating_point() and moved.dtype != t.dtype:  # a cast: the original values, on its device
                return t.to(device=moved.device)
            return moved

        return super()._apply(device_only, recurse)


__all__ = ["FrozenScorer"]
