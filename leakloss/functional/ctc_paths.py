"""CTC forward scoring of set-valued phone paths.

A *path* is a sequence of ``s`` positions; position ``k`` accepts a SET of vocabulary tokens
(e.g. the open central vowel accepts ``{ʌ, ə, ɐ}``). Scoring follows standard CTC over the
extended state sequence ``blank, p0, blank, p1, ..., p_{S-1}, blank`` (``n = 2S + 1`` states):

* the emission of a blank state is ``log_probs[..., blank]``;
* the emission of position ``k`` is ``logsumexp`` of ``log_probs`` over its allowed set
  (each frame of the segment may emit any token of the set);
* a state may stay, advance by one, or jump from position ``k-1`` straight to position ``k``
  (skipping the blank between them) only if the two sets are DISJOINT. For single-token sets
  this is exactly CTC's "different labels" rule. For overlapping sets it is conservative: a
  run such as ``ə ə`` could be parsed as one or two positions, so we demand a blank between
  them. With this rule every frame labelling parses in at most one way, hence the score is a
  genuine probability of the set of accepted labellings (it never exceeds 1).

The blank token should not be a member of any set (it is not checked, to avoid a host sync).

Numerics: logs and sums are computed in float32 (float64 if ``log_probs`` is float64), with a
finite floor :data:`NEG_INF_FINITE` instead of ``-inf``, so nothing returns ``-inf`` or NaN.
A path that cannot be aligned (more positions than frames allow, or a position with an empty
set) scores exactly ``NEG_INF_FINITE`` with zero gradient; so does a path whose log-likelihood
underflows the floor. Frames beyond ``frame_lengths`` and positions beyond ``path_lengths`` are
ignored (they may hold garbage, even NaN); a NaN or +inf inside the valid frames reads as the floor. The result of one batch item never depends on
another. The recursion loops over time only; batch and states are vectorised (internally in a
states-major ``[t, n, b]`` layout). ``frame_lengths`` must not exceed ``t``. There is one host
sync per call (the largest set size, to size the gather in :func:`set_emissions`).
Gradients come from autograd through the recursion; no custom backward.

Shape legend (einops style)::

    b  batch
    t  frames (T = max frames)
    v  vocabulary
    s  path positions (S = max positions)
    n  extended states, n = 2s + 1 (blank, p0, blank, p1, ..., blank)
    k  tokens per set (max set size)
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor

from leakloss.checks import check_whole

__all__ = [
    "NEG_INF_FINITE",
    "PathMargin",
    "set_emissions",
    "ctc_set_log_likelihood",
    "ctc_set_occupancy",
    "frame_fit",
    "path_margin",
    "paths_from_token_sets",
]

#: Floor for log-probabilities: impossible paths score this, never -inf/NaN.
NEG_INF_FINITE: float = -1e4


class PathMargin(NamedTuple):
    """Hindi-vs-Nepali path margin; positive = the audio fits the Hindi version better."""

    total: Tensor  # [b] (ll_hindi - ll_nepali) / frames
    per_frame: Tensor  # [b, t] frame_fit_hindi - frame_fit_nepali, 0 on padding
    ll_nepali: Tensor  # [b]
    ll_hindi: Tensor  # [b]


def _compute_dtype(x: Tensor) -> torch.dtype:
    # logs and sums in fp32; keep float64 when the caller asks for it
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _check_shapes(log_probs: Tensor, allowed: Tensor, frame_lengths: Tensor | None = None,
                  path_lengths: Tensor | None = None) -> None:
    if log_probs.dim() != 3:
        raise ValueError(f"log_probs must be [b, t, v], got shape {tuple(log_probs.shape)}")
    if allowed.dim() != 3:
        raise ValueError(f"allowed must be [b, s, v], got shape {tuple(allowed.shape)}")
    b, _, v = log_probs.shape
    if allowed.shape[0] != b or allowed.shape[2] != v:
        raise ValueError(
            f"allowed {tuple(allowed.shape)} does not match log_probs {tuple(log_probs.shape)} "
            "in batch or vocabulary size"
        )
    if allowed.dtype != torch.bool:
        raise TypeError(f"allowed must be a bool mask, got {allowed.dtype}")
    for name, lengths in (("frame_lengths", frame_lengths), ("path_lengths", path_lengths)):
        if lengths is not None and lengths.shape != (b,):
            raise ValueError(f"{name} must be [b] = [{b}], got shape {tuple(lengths.shape)}")


def _as_lengths(lengths, name: str) -> Tensor:
    """A tensor (or list) of whole-number lengths, else ``ValueError`` (a float such as 7.5 would be cut)."""
    lengths = torch.as_tensor(lengths)
    if lengths.dtype == torch.bool or lengths.is_complex():
        raise ValueError(f"{name} must be whole numbers, got dtype {lengths.dtype}")
    if lengths.is_floating_point() and not bool((lengths == lengths.round()).all()):
        raise ValueError(f"{name} must be whole numbers, got {lengths.tolist()}")
    return lengths


def set_emissions(log_probs: Tensor, allowed: Tensor) -> Tensor:
    """Log emission of each path position: logsumexp of ``log_probs`` over its allowed set.

    Args:
        log_probs: ``[b, t, v]`` log-softmax output of a CTC recogniser (any float dtype).
        allowed: ``[b, s, v]`` bool, tokens accepted at each position.

    Returns:
        ``[b, t, s]`` in float32 (float64 for float64 input), at least :data:`NEG_INF_FINITE`;
        a position with no allowed token gets exactly the floor.
    """
    _check_shapes(log_probs, allowed)
    return _set_emissions(log_probs, allowed)


def _set_emissions(log_probs: Tensor, allowed: Tensor, valid_frame: Tensor | None = None) -> Tensor:
    dtype = _compute_dtype(log_probs)
    lp = log_probs.to(dtype)
    b, t, _ = lp.shape
    s = allowed.shape[1]
    counts = allowed.sum(-1)  # [b, s]
    k = int(counts.max()) if counts.numel() else 0  # one host sync; sets are small (k ~ 1-3)
    if s == 0 or k == 0:
        return lp.new_full((b, t, s), NEG_INF_FINITE)
    # gather the allowed tokens slot by slot instead of masking [b, t, s, v]: memory and time
    # scale with k, not v; pairwise logaddexp is cheaper than logsumexp over a tiny last dim
    order = allowed.to(torch.uint8).topk(k, dim=-1, sorted=True).indices  # allowed ids first
    valid = allowed.gather(-1, order)  # [b, s, k]
    # finfo.min (not -inf) for unused slots keeps logaddexp and its gradient finite
    unused = torch.finfo(dtype).min
    out = None
    for j in range(k):
        x = lp.gather(-1, order[:, None, :, j].expand(b, t, s))  # [b, t, s]
        keep = valid[:, None, :, j]
        if valid_frame is not None:
            # padding frames may hold garbage (even NaN): replace it before any log op
            keep = keep & valid_frame[..., None]
        x = torch.where(keep, _floored(x), unused)
        out = x if out is None else torch.logaddexp(out, x)
    return out.clamp_min(NEG_INF_FINITE)


def _floored(x: Tensor) -> Tensor:
    """Log-probabilities at or above :data:`NEG_INF_FINITE`: -inf (which would give NaN gradients in logaddexp),
    and NaN/+inf (no log-probability: a caller's bug, never a log_softmax output) read as the floor, each with
    zero gradient, so one bad frame cannot turn an item's score or gradient into NaN."""
    return torch.where(torch.isnan(x) | (x == float("inf")), NEG_INF_FINITE, x).clamp_min(NEG_INF_FINITE)


class _Lattice(NamedTuple):
    # states-major layout [t, n, b]: the recursions shift along n, and contiguous row blocks
    # make the elementwise kernels several times faster than strided column slices on CPU
    em: Tensor  # [t, n, b] state log emissions, 0 on padding frames
    skip: Tensor  # [n, b] bool, state n may be entered from n - 2
    feasible: Tensor  # [b] bool, the path can be aligned to its frames at all
    valid: Tensor  # [t, n, b] bool, valid frame and state n <= 2 * path_length
    valid_frame: Tensor  # [b, t] bool
    frame_lengths: Tensor  # [b] long
    path_lengths: Tensor  # [b] long


def _lattice(log_probs: Tensor, allowed: Tensor, frame_lengths: Tensor, path_lengths: Tensor,
             blank: int) -> _Lattice:
    frame_lengths, path_lengths = _as_lengths(frame_lengths, "frame_lengths"), _as_lengths(path_lengths, "path_lengths")
    _check_shapes(log_probs, allowed, frame_lengths, path_lengths)
    b, t, v = log_probs.shape
    s = allowed.shape[1]
    n = 2 * s + 1
    try:  # int, numpy or 0-d integer tensor ids; True is not token 1
        blank_id = None if isinstance(blank, bool) else operator.index(blank)
    except TypeError:
        blank_id = None
    if blank_id is None or not 0 <= blank_id < v:
        raise ValueError(f"blank={blank!r} is not a token id of the vocabulary of size {v}")
    blank = blank_id
    device = log_probs.device
    frame_lengths = frame_lengths.to(device=device, dtype=torch.long)
    path_lengths = path_lengths.to(device=device, dtype=torch.long)
    out_of_range = torch.stack([((frame_lengths < 0) | (frame_lengths > t)).any(),
                                ((path_lengths < 0) | (path_lengths > s)).any()]).tolist()  # one host sync
    checks = zip(out_of_range, ("frame_lengths", "path_lengths"), (frame_lengths, path_lengths), (t, s))
    for bad, name, lengths, top in checks:
        if bad:
            raise ValueError(f"{name} must lie in [0, {top}], got {lengths.tolist()}")
    dtype = _compute_dtype(log_probs)

    valid_frame = torch.arange(t, device=device) < frame_lengths[:, None]  # [b, t]
    # padding garbage (even NaN) is replaced before any log op, so it cannot reach gradients
    em_pos = rearrange(_set_emissions(log_probs, allowed, valid_frame), "b t s -> t s b")
    em_blank = torch.where(valid_frame, log_probs[..., blank].to(dtype), 0.0)
    em_blank = _floored(em_blank).T[:, None, :]  # [t, 1, b]
    em = torch.cat(
        [rearrange([em_blank.expand(t, s, b), em_pos], "two t s b -> t (s two) b"), em_blank],
        dim=1,
    )  # [t, n, b]: blank, p0, blank, p1, ..., blank
    em = torch.where(valid_frame.T[:, None, :], em, 0.0)

    pos = torch.arange(s, device=device)
    in_path = pos < path_lengths[:, None]  # [b, s]
    overlap = (allowed[:, 1:] & allowed[:, :-1]).any(-1)  # [b, s-1], pair (k-1, k)
    skip = torch.zeros(n, b, dtype=torch.bool, device=device)
    skip[3::2] = ~overlap.T
    # a blank is mandatory between overlapping neighbours, so each costs one extra frame
    min_frames = path_lengths + (overlap & in_path[:, 1:]).sum(-1)
    empty = (~allowed.any(-1) & in_path).any(-1)
    feasible = (min_frames <= frame_lengths) & ~empty
    valid_state = torch.arange(n, device=device)[:, None] <= 2 * path_lengths[None, :]  # [n, b]
    valid = valid_frame.T[:, None, :] & valid_state[None]
    return _Lattice(em, skip, feasible, valid, valid_frame, frame_lengths, path_lengths)


def _forward(lat: _Lattice) -> tuple[Tensor, Tensor]:
    """Alpha recursion. Returns (alpha [t, n, b] including the emission, ll_raw [b])."""
    em, skip = lat.em, lat.skip
    t, n, b = em.shape
    floor = NEG_INF_FINITE
    # adding the floor (not torch.where) to forbidden jumps: same effect, cheaper per step
    jump_penalty = torch.where(skip, 0.0, floor).to(em.dtype)  # [n, b]
    # virtual start "before frame 0": all mass on state 0, so frame 0 enters states 0 and 1
    start = em.new_full((n, b), floor)
    start[0] = 0.0
    alpha = start
    alphas = []
    for ti in range(t if b else 0):  # an empty batch has nothing to recurse over (F.pad refuses it)
        padded = F.pad(alpha, (0, 0, 2, 0), value=floor)  # [n + 2, b]
        jump = padded[:-2] + jump_penalty
        # two logaddexp calls are ~2x faster than stack + logsumexp at these sizes on CPU
        alpha = torch.logaddexp(torch.logaddexp(alpha, padded[1:-1]), jump) + em[ti]
        alphas.append(alpha)
    alpha_all = torch.stack(alphas) if alphas else em.new_zeros(em.shape)  # [t, n, b] (empty when t or b is 0)

    # read each item at its own last frame (frames beyond never reach the result)
    last = (lat.frame_lengths - 1).clamp_min(0)
    if t > 0 and b > 0:
        final = alpha_all.gather(0, last.view(1, 1, b).expand(1, n, b)).squeeze(0)  # [n, b]
        final = torch.where(lat.frame_lengths > 0, final, start)
    else:
        final = start
    end_blank = final.gather(0, (2 * lat.path_lengths)[None]).squeeze(0)
    end_label = final.gather(0, (2 * lat.path_lengths - 1).clamp_min(0)[None]).squeeze(0)
    end_label = torch.where(lat.path_lengths > 0, end_label, floor)
    ll_raw = torch.logaddexp(end_blank, end_label)
    return alpha_all, ll_raw


def _finish(ll_raw: Tensor, feasible: Tensor) -> tuple[Tensor, Tensor]:
    # impossible = structurally unalignable, or underflowed below the floor
    possible = feasible & (ll_raw > NEG_INF_FINITE)
    return torch.where(possible, ll_raw, NEG_INF_FINITE), possible


def _backward(lat: _Lattice) -> Tensor:
    """Beta recursion. Returns beta [t, n, b] including the emission at t."""
    em, skip = lat.em, lat.skip
    t, n, b = em.shape
    floor = NEG_INF_FINITE
    states = torch.arange(n, device=em.device)[:, None]  # [n, 1]
    two_s = 2 * lat.path_lengths[None, :]  # [1, b]
    terminal = torch.where((states == two_s) | (states == two_s - 1), 0.0, floor).to(em.dtype)
    skip_from = torch.cat([skip, skip.new_zeros(2, b)])[2:]  # state n may jump to n + 2 (F.pad refuses b = 0)
    jump_penalty = torch.where(skip_from, 0.0, floor).to(em.dtype)  # [n, b]
    is_last = torch.arange(t, device=em.device)[:, None] == (lat.frame_lengths - 1)[None, :]
    beta = terminal
    betas = []
    for ti in range(t - 1 if b else -1, -1, -1):
        padded = F.pad(beta, (0, 0, 0, 2), value=floor)  # [n + 2, b]
        jump = padded[2:] + jump_penalty
        rec = torch.logaddexp(torch.logaddexp(beta, padded[1:-1]), jump)
        # an item's last frame restarts from the terminal states; later frames are don't-care
        beta = torch.where(is_last[ti], terminal, rec) + em[ti]
        betas.append(beta)
    betas.reverse()
    return torch.stack(betas) if betas else em.new_zeros(em.shape)  # [t, n, b] (empty when t or b is 0)


def ctc_set_log_likelihood(log_probs: Tensor, allowed: Tensor, frame_lengths: Tensor,
                           path_lengths: Tensor, blank: int = 0) -> Tensor:
    """CTC forward log-likelihood ``log p(path | audio)`` of set-valued paths.

    Args:
        log_probs: ``[b, t, v]`` log-softmax emissions (any float dtype).
        allowed: ``[b, s, v]`` bool, tokens accepted at each position.
        frame_lengths: ``[b]`` valid frames per item.
        path_lengths: ``[b]`` positions per item (0 = all blank).
        blank: blank token id.

    Returns:
        ``[b]`` float32 (float64 for float64 input), differentiable wrt ``log_probs``; always
        finite; impossible paths give exactly :data:`NEG_INF_FINITE` with zero gradient. For
        single-token sets it equals ``-F.ctc_loss(..., reduction="none")``.
    """
    lat = _lattice(log_probs, allowed, frame_lengths, path_lengths, blank)
    _, ll_raw = _forward(lat)
    return _finish(ll_raw, lat.feasible)[0]


def ctc_set_occupancy(log_probs: Tensor, allowed: Tensor, frame_lengths: Tensor,
                      path_lengths: Tensor, blank: int = 0) -> tuple[Tensor, Tensor]:
    """Forward-backward posterior occupancy of the extended states.

    Returns:
        ``(log_likelihood [b], gamma [b, t, 2s+1])``: ``gamma[i, t, n]`` is the posterior
        probability that frame ``t`` sits in extended state ``n`` (blank, p0, blank, p1, ...).
        Rows sum to 1 on valid frames; 0 on padding frames, on states beyond the path, and for
        impossible paths. Differentiable wrt ``log_probs``.
    """
    lat = _lattice(log_probs, allowed, frame_lengths, path_lengths, blank)
    ll, gamma = _occupancy(lat)
    return ll, rearrange(gamma, "t n b -> b t n").contiguous()


def _occupancy(lat: _Lattice) -> tuple[Tensor, Tensor]:
    """Returns (ll [b], gamma [t, n, b])."""
    alpha, ll_raw = _forward(lat)
    beta = _backward(lat)
    ll, possible = _finish(ll_raw, lat.feasible)
    mask = lat.valid & possible
    # alpha and beta both include the frame's emission: remove it once
    log_gamma = alpha + beta - lat.em - ll_raw
    # mask in the log domain before exp: masked entries must not overflow (inf * 0 = NaN grads)
    gamma = torch.exp(torch.where(mask, log_gamma, NEG_INF_FINITE))
    return ll, torch.where(mask, gamma, 0.0)


def _fit(lat: _Lattice, ll: Tensor, gamma: Tensor) -> Tensor:
    fit = (gamma * lat.em).sum(1).T  # [b, t]
    possible = ll > NEG_INF_FINITE
    # an impossible path explains no frame: floor on its valid frames, 0 on padding
    fit = torch.where(possible[:, None], fit, NEG_INF_FINITE)
    return torch.where(lat.valid_frame, fit, 0.0)


def frame_fit(log_probs: Tensor, allowed: Tensor, frame_lengths: Tensor, path_lengths: Tensor,
              blank: int = 0) -> Tensor:
    """Expected log emission per frame under the path posterior.

    ``fit[i, t] = sum_n gamma[i, t, n] * log_emission[i, t, n]``: how well frame ``t`` fits the
    path where the path thinks it is. Per-frame margins are ``fit_hindi - fit_nepali``.

    Returns:
        ``[b, t]``; 0 on padding frames; :data:`NEG_INF_FINITE` on the valid frames of an
        impossible path. Differentiable wrt ``log_probs``.
    """
    lat = _lattice(log_probs, allowed, frame_lengths, path_lengths, blank)
    ll, gamma = _occupancy(lat)
    return _fit(lat, ll, gamma)


def path_margin(log_probs: Tensor, allowed_nepali: Tensor, allowed_hindi: Tensor,
                frame_lengths: Tensor, len_nepali: Tensor, len_hindi: Tensor,
                blank: int = 0) -> PathMargin:
    """Hindi-vs-Nepali margin of the same audio; positive = fits the Hindi path better.

    ``allowed_nepali`` ``[b, s1, v]`` and ``allowed_hindi`` ``[b, s2, v]`` may differ in ``s``.
    ``total = (ll_hindi - ll_nepali) / frame_lengths`` (per-frame average log-likelihood ratio);
    ``per_frame = frame_fit_hindi - frame_fit_nepali`` (0 on padding).
    """
    lat_n = _lattice(log_probs, allowed_nepali, frame_lengths, len_nepali, blank)
    lat_h = _lattice(log_probs, allowed_hindi, frame_lengths, len_hindi, blank)
    ll_n, gamma_n = _occupancy(lat_n)
    ll_h, gamma_h = _occupancy(lat_h)
    per_frame = _fit(lat_h, ll_h, gamma_h) - _fit(lat_n, ll_n, gamma_n)
    frames = lat_n.frame_lengths.clamp_min(1).to(ll_n.dtype)
    return PathMargin(total=(ll_h - ll_n) / frames, per_frame=per_frame, ll_nepali=ll_n,
                      ll_hindi=ll_h)


def paths_from_token_sets(token_sets: Sequence[Sequence[Sequence[int]]], vocab_size: int,
                          device: torch.device | str | None = None) -> tuple[Tensor, Tensor]:
    """Pack per-item lists of per-position token-id lists into a padded mask.

    Example: ``[[[5], [7, 8, 9]], []]`` -> ``allowed [2, 2, v]``, ``path_lengths [2, 0]``.

    Returns:
        ``(allowed [b, s_max, v] bool, path_lengths [b] long)``; padding positions are empty.
    """
    check_whole(vocab_size, "vocab_size")
    b = len(token_sets)
    s_max = max((len(p) for p in token_sets), default=0)
    allowed = torch.zeros(b, s_max, vocab_size, dtype=torch.bool)
    for i, path in enumerate(token_sets):
        for k, tokens in enumerate(path):
            for given in tokens:
                try:  # int, numpy or 0-d integer tensor ids; 1.7 was read as token 1, True as 1
                    tok = None if isinstance(given, bool) else operator.index(given)
                except TypeError:
                    tok = None
                if tok is None:
                    raise TypeError(f"token {given!r} (item {i}, position {k}) is not a whole token id")
                if not 0 <= tok < vocab_size:
                    raise ValueError(f"token {tok} (item {i}, position {k}) is outside "
                                     f"the vocabulary of size {vocab_size}")
                allowed[i, k, int(tok)] = True
    lengths = torch.tensor([len(p) for p in token_sets], dtype=torch.long)
    return allowed.to(device), lengths.to(device)
