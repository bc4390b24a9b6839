"""The 57 numbers per contrast site per recognizer (the seed's feature table), named and versioned.

For ONE reading of one site (:class:`SiteEvidence`): the word is cut three times (tight, ±30 ms,
±60 ms; :mod:`leakloss.acoustic.crops`) and each crop is scored along two set-valued CTC paths: the
word's Nepali phones, and the same path with the Hindi change (site vowel removed for a deletion,
swapped for the Hindi vowel's token set for a quality site). Per crop:

* ``fit_nepali``, ``fit_hindi``: log-likelihood of the path / frames of the crop;
* ``margin = fit_hindi - fit_nepali`` (positive: the audio fits the Hindi version better).

Log-likelihoods per frame are floored at :data:`LOG_FLOOR` (an unalignable path would otherwise
give ``NEG_INF_FINITE / frames``); ``feasible`` says whether both paths could be aligned.

Vowel evidence (13 numbers, tight crop only). ``occ[t]`` is the Nepali path's posterior occupancy
of the site vowel's state (``ctc_set_occupancy``). The *site window* is the frames with
``occ >= 0.1``, widened by one frame each side; if no frame reaches 0.1, the argmax frame of
``occ``. ``e_X[t] = logsumexp_{token in X} log_probs[t, token]``. The *Hindi side* X_h is the Hindi
vowel's set (quality) or, for a deletion, the next phone's set (the Hindi path jumps straight to it;
the blank for a word-final site). Log values are clamped at :data:`LOG_FLOOR`.

====  ======================  =============================================================
 1    nepali_peak             max of e_nepali_vowel over the window
 2    nepali_mean             mean of e_nepali_vowel over the window
 3    hindi_peak              max of e_hindi_side over the window
 4    hindi_mean              mean of e_hindi_side over the window
 5    site_duration_s         sum_t occ[t] / frame_rate (expected frames in the site state)
 6    prev_peak               max of e_previous_phone over the window (LOG_FLOOR if none)
 7    next_peak               max of e_next_phone over the window (LOG_FLOOR if none)
 8    energy_db               10 log10(mean energy of the window / mean energy of the tight crop)
 9    blank_mean              mean blank probability over the window
 10   nepali_argmax_share     share of window frames whose argmax token is in the Nepali vowel set
 11   hindi_argmax_share      share of window frames whose argmax token is in the Hindi-side set
 12   relative_position       site position / number of phones of the word
 13   nepali_vs_greedy        fit_nepali (tight) - mean over the crop of max_v log_probs
====  ======================  =============================================================

Energy is per recognizer frame (mean square of the frame's samples); without a waveform it is 0.

The 57 (:data:`FEATURE_NAMES`): 18 path-margin numbers (query margin over the 3 crops: mean,
median, min, max, spread; the same for the reference; the same for the per-crop query - reference
differences; query fit_nepali and fit_hindi means; kind 1.0 deletion / 0.0 quality), then the 13
evidence numbers of the query, of the reference, and query - reference.

Everything from ``log_probs`` on is a function of that tensor (:func:`evidence_from_log_probs`):
autograd flows through margins, fits and the continuous evidence numbers (not through the window
choice, argmax shares or the position).

Shapes: f frames of the utterance, v vocabulary, b items (sites x crops x 2 paths), t crop frames,
s path positions, n = 2s + 1 extended CTC states, c crops (3), e evidence numbers (13).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from einops import rearrange, reduce
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from leakloss.acoustic.align import DEFAULT_MIN_FIT, AlignmentResult, align_words
from leakloss.acoustic.crops import CROP_PADS_S, crop_frames, word_crops
from leakloss.functional.ctc_paths import NEG_INF_FINITE, ctc_set_occupancy, paths_from_token_sets, set_emissions
from leakloss.schema import KINDS, EvidenceStatus, Kind
from leakloss.text.phoneset import UnmappablePhoneError
from leakloss.text.sites import WordSites

FEATURE_SCHEMA_VERSION = "1"

#: Floor for every per-frame log value in the features (keeps impossible paths from dominating).
LOG_FLOOR: float = -30.0
#: Occupancy threshold of the site window.
WINDOW_OCCUPANCY: float = 0.1

EVIDENCE_NAMES: tuple[str, ...] = (
    "nepali_peak", "nepali_mean", "hindi_peak", "hindi_mean", "site_duration_s", "prev_peak", "next_peak",
    "energy_db", "blank_mean", "nepali_argmax_share", "hindi_argmax_share", "relative_position",
    "nepali_vs_greedy",
)
_STATS = ("mean", "median", "min", "max", "spread")
FEATURE_NAMES: tuple[str, ...] = (
    tuple(f"margin_query_{s}" for s in _STATS)
    + tuple(f"margin_reference_{s}" for s in _STATS)
    + tuple(f"margin_diff_{s}" for s in _STATS)
    + ("fit_nepali_query", "fit_hindi_query", "kind_deletion")
    + tuple(f"query_{n}" for n in EVIDENCE_NAMES)
    + tuple(f"reference_{n}" for n in EVIDENCE_NAMES)
    + tuple(f"diff_{n}" for n in EVIDENCE_NAMES)
)
assert len(EVIDENCE_NAMES) == 13 and len(FEATURE_NAMES) == 57

SiteKey = tuple[int, int]  # (word index, site position in the word's Nepali phones)


@dataclass
class SiteEvidence:
    """One reading (query or reference) of one site."""

    kind: str  # "deletion" | "quality"
    margin: Tensor  # [c] fit_hindi - fit_nepali per crop
    fit_nepali: Tensor  # [c] ll / frames, floored at LOG_FLOOR
    fit_hindi: Tensor  # [c]
    evidence: Tensor  # [e] see EVIDENCE_NAMES
    feasible: tuple[bool, ...]  # per crop: both paths could be aligned to the crop's frames

    def as_dict(self) -> dict[str, float]:
        d = {f"margin_{i}": float(m) for i, m in enumerate(self.margin)}
        d |= {n: float(x) for n, x in zip(EVIDENCE_NAMES, self.evidence)}
        return d


@dataclass(frozen=True)
class SiteSpec:
    """Everything the scoring needs about one site of one utterance (token sets and crop frames)."""

    key: SiteKey
    kind: str
    position: int
    nepali: tuple[frozenset[int], ...]  # the word's Nepali path
    hindi: tuple[frozenset[int], ...]  # the Hindi-altered path
    hindi_side: frozenset[int]  # Hindi vowel's set (quality), next phone's set or blank (deletion)
    crops: tuple[tuple[int, int], ...]  # (first, last_exclusive) frames per crop, tight first


@dataclass
class UtteranceEvidence:
    status: EvidenceStatus  # leakloss.schema
    reason: str | None = None
    sites: dict[SiteKey, SiteEvidence] = field(default_factory=dict)
    alignment: AlignmentResult | None = None
    log_probs: Tensor | None = None  # [f, v]
    duration: float = 0.0  # seconds of the waveform
    margins_per_frame: dict[SiteKey, Tensor] = field(default_factory=dict)  # tight crop [t]
    skipped: dict[SiteKey, str] = field(default_factory=dict)  # testable sites that could not be scored
    specs: list[SiteSpec] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


# ----------------------------------------------------------------------------- pure math


def _stats(x: Tensor) -> Tensor:
    """``[c]`` -> [mean, median, min, max, spread] (median of 3 = the middle value)."""
    lo, hi = x.min(), x.max()
    return torch.stack([x.mean(), x.median(), lo, hi, hi - lo])


def site_feature_vector(query: SiteEvidence, reference: SiteEvidence, kind: Kind) -> Tensor:
    """The 57 features (:data:`FEATURE_NAMES`) of one site from a query and a reference reading."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    q, r = query.margin.float(), reference.margin.float().to(query.margin.device)
    kind_x = q.new_tensor([1.0 if kind == "deletion" else 0.0])
    path = torch.cat([_stats(q), _stats(r), _stats(q - r),
                      torch.stack([query.fit_nepali.float().mean(), query.fit_hindi.float().mean()]), kind_x])
    qe, re_ = query.evidence.float(), reference.evidence.float().to(q.device)
    return torch.cat([path, qe, re_, qe - re_])


def _state_emissions(log_probs: Tensor, allowed: Tensor, blank: int) -> Tensor:
    """``[b, t, v]``, ``[b, s, v]`` -> log emission of each extended state ``[b, t, n]``."""
    em_pos = set_emissions(log_probs, allowed)  # [b, t, s] fp32
    b, t, s = em_pos.shape
    em_blank = log_probs[..., blank].to(em_pos.dtype)[..., None]  # [b, t, 1]
    inter = rearrange([em_blank.expand(b, t, s), em_pos], "two b t s -> b t (s two)")  # blank, p0, blank, p1, ...
    return torch.cat([inter, em_blank], dim=-1)


def _set_log_posterior(log_probs: Tensor, tokens: frozenset[int]) -> Tensor:
    """``[t, v]`` -> ``logsumexp`` over ``tokens`` ``[t]`` (fp32)."""
    idx = torch.tensor(sorted(tokens), dtype=torch.long, device=log_probs.device)
    return torch.logsumexp(log_probs.float().index_select(-1, idx), dim=-1)


def _window(occ: Tensor) -> Tensor:
    """Site window mask ``[t]`` bool from the site state's occupancy (detached choice)."""
    occ = occ.detach()
    core = occ >= WINDOW_OCCUPANCY
    if not bool(core.any()):
        core = torch.zeros_like(core)
        core[int(occ.argmax())] = True
    wide = core.clone()
    wide[1:] |= core[:-1]
    wide[:-1] |= core[1:]
    return wide


def _masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp_min(1.0)


def _masked_max(x: Tensor, mask: Tensor) -> Tensor:
    return torch.where(mask, x, torch.finfo(x.dtype).min).max()


def _vowel_evidence(lp: Tensor, occ: Tensor, spec: SiteSpec, blank: int, frame_rate: float,
                    fit_nepali_tight: Tensor, energy: Tensor | None) -> Tensor:
    """The 13 numbers on the tight crop: ``lp [t, v]``, ``occ [t]`` -> ``[e]``."""
    lp = lp.float()
    win = _window(occ)
    pos, phones = spec.position, spec.nepali
    nep_set = phones[pos]
    e_nep = _set_log_posterior(lp, nep_set).clamp_min(LOG_FLOOR)
    e_hin = _set_log_posterior(lp, spec.hindi_side).clamp_min(LOG_FLOOR)
    floor = lp.new_tensor(LOG_FLOOR)
    prev = _masked_max(_set_log_posterior(lp, phones[pos - 1]).clamp_min(LOG_FLOOR), win) if pos > 0 else floor
    nxt = (_masked_max(_set_log_posterior(lp, phones[pos + 1]).clamp_min(LOG_FLOOR), win)
           if pos + 1 < len(phones) else floor)
    if energy is not None:
        e = energy.float()
        # 1e-10 ~ -100 dB: silence stays finite
        energy_db = 10.0 * torch.log10((_masked_mean(e, win) + 1e-10) / (e.mean() + 1e-10))
    else:
        energy_db = lp.new_zeros(())
    best = lp.argmax(-1)
    in_nep = torch.isin(best, torch.tensor(sorted(nep_set), device=lp.device))
    in_hin = torch.isin(best, torch.tensor(sorted(spec.hindi_side), device=lp.device))
    greedy = lp.max(-1).values.mean()
    return torch.stack([
        _masked_max(e_nep, win), _masked_mean(e_nep, win),
        _masked_max(e_hin, win), _masked_mean(e_hin, win),
        occ.float().sum() / frame_rate,
        prev, nxt, energy_db,
        _masked_mean(lp[:, blank].exp(), win),
        _masked_mean(in_nep.float(), win), _masked_mean(in_hin.float(), win),
        lp.new_tensor(pos / len(phones)),
        (fit_nepali_tight - greedy).clamp_min(LOG_FLOOR),
    ])


def evidence_from_log_probs(
    log_probs: Tensor, specs: Sequence[SiteSpec], blank: int, frame_rate: float, frame_energy: Tensor | None = None,
) -> tuple[dict[SiteKey, SiteEvidence], dict[SiteKey, Tensor]]:
    """Score every site x crop x {Nepali, Hindi} path in ONE batched forward-backward.

    Args:
        log_probs: ``[f, v]`` one utterance's log-softmax (gradients flow to it).
        specs: sites with token-set paths and crop frame ranges (:func:`site_specs`).
        blank: blank token id.
        frame_rate: recognizer frames per second.
        frame_energy: optional ``[f]`` mean square of the samples of each frame (for ``energy_db``).

    Returns:
        (evidence per site key, per-frame margin ``fit_hindi - fit_nepali`` on the tight crop ``[t]``).
    """
    if not specs:
        return {}, {}
    slices, paths, frames = [], [], []
    for spec in specs:
        for first, last in spec.crops:
            for path in (spec.nepali, spec.hindi):  # item order: site, crop, (nepali, hindi)
                slices.append(log_probs[first:last])
                paths.append([sorted(s) for s in path])
                frames.append(last - first)
    batch = pad_sequence(slices, batch_first=True)  # [b, t, v], zero padding (ignored by frame_lengths)
    allowed, path_lengths = paths_from_token_sets(paths, batch.shape[-1], device=batch.device)
    frame_lengths = torch.tensor(frames, dtype=torch.long, device=batch.device)
    ll, gamma = ctc_set_occupancy(batch, allowed, frame_lengths, path_lengths, blank)  # [b], [b, t, n]
    fit_frames = (gamma * _state_emissions(batch, allowed, blank)).sum(-1)  # [b, t], expected log emission
    possible = ll > NEG_INF_FINITE
    per_frame_fit = (ll / frame_lengths.clamp_min(1).to(ll.dtype)).clamp_min(LOG_FLOOR)

    n_crops = len(specs[0].crops)
    out: dict[SiteKey, SiteEvidence] = {}
    margins: dict[SiteKey, Tensor] = {}
    for i, spec in enumerate(specs):
        base = i * n_crops * 2
        nep = torch.arange(n_crops, device=batch.device) * 2 + base
        fit_n, fit_h = per_frame_fit[nep], per_frame_fit[nep + 1]
        feasible = tuple(bool(a) and bool(b) for a, b in zip(possible[nep].tolist(), possible[nep + 1].tolist()))
        first, last = spec.crops[0]
        t0 = last - first
        occ = gamma[base, :t0, 2 * spec.position + 1]
        energy = frame_energy[first:last] if frame_energy is not None else None
        ev = _vowel_evidence(log_probs[first:last], occ, spec, blank, frame_rate, fit_n[0], energy)
        out[spec.key] = SiteEvidence(spec.kind, fit_h - fit_n, fit_n, fit_h, ev, feasible)
        margins[spec.key] = fit_frames[base + 1, :t0] - fit_frames[base, :t0]
    return out, margins


# ----------------------------------------------------------------------------- utterance glue


def site_specs(words: Sequence[WordSites], word_phones: Sequence[Sequence[str]], alignment: AlignmentResult,
               phoneset, frame_rate: float, n_frames: int, duration: float,
               pads: tuple[float, ...] = CROP_PADS_S) -> tuple[list[SiteSpec], dict[SiteKey, str]]:
    """Testable sites of aligned words -> specs; sites that cannot be scored -> a reason."""
    specs, skipped = [], {}
    for i, (w, phones) in enumerate(zip(words, word_phones)):
        for site in w.testable_sites:
            key = (w.index, site.position)
            wa = alignment.word(i)
            if wa is None:
                skipped[key] = "word not aligned"
                continue
            if site.position >= len(phones) or phones[site.position] != site.nepali:
                skipped[key] = f"site phone {site.nepali!r} is not at position {site.position} of {list(phones)}"
                continue
            try:
                nep = tuple(phoneset.tokens(p) for p in phones)
                if site.kind == "deletion":
                    hin = nep[:site.position] + nep[site.position + 1:]
                    side = nep[site.position + 1] if site.position + 1 < len(nep) else frozenset({phoneset.blank})
                else:
                    side = phoneset.tokens(site.hindi)
                    hin = nep[:site.position] + (side,) + nep[site.position + 1:]
            except UnmappablePhoneError as err:
                skipped[key] = f"unmappable phone: {err.args[0] if err.args else err}"
                continue
            crops = tuple(crop_frames(c, frame_rate, n_frames) for c in word_crops(wa.start, wa.end, duration, pads))
            specs.append(SiteSpec(key, site.kind, site.position, nep, hin, side, crops))
    return specs, skipped


def frame_energies(wave: Tensor, samples_per_frame: int, n_frames: int) -> Tensor:
    """``wave [t]`` -> mean square of each recognizer frame's samples ``[f]`` (fp32)."""
    x = wave.float()
    need = n_frames * samples_per_frame
    x = torch.nn.functional.pad(x[:need], (0, max(need - x.numel(), 0)))
    return reduce(x.pow(2), "(g k) -> g", "mean", k=samples_per_frame)


#: audio whose peak is below this is silent: nothing to hear, not scored (status ``silent``)
SILENCE_PEAK = 1e-4


class EvidenceExtractor:
    """One recognizer pass per utterance, forced alignment if not given, then every site's evidence
    (:meth:`extract`), or only where the sites are (:meth:`locate`: no CTC lattice per site and path)."""

    def __init__(self, recognizer, *, min_fit: float = DEFAULT_MIN_FIT, silence_peak: float = SILENCE_PEAK) -> None:
        self.recognizer = recognizer
        self.min_fit = min_fit
        self.silence_peak = silence_peak

    def locate(self, wave: Tensor, word_phones: Sequence[Sequence[str]], words: Sequence[WordSites],
               alignment: AlignmentResult | None = None,
               recognized: tuple[Tensor, Tensor] | None = None) -> UtteranceEvidence:
        """:meth:`extract` up to the site specs: status, alignment, ``log_probs``, ``specs`` and ``skipped``, no
        ``sites`` (the per-site evidence is not computed). Same arguments and statuses."""
        if not isinstance(wave, Tensor) or wave.dim() != 1 or wave.numel() == 0 or not wave.is_floating_point():
            return UtteranceEvidence("bad_input", "wave must be a non-empty 1-D float tensor")
        if len(word_phones) != len(words):
            return UtteranceEvidence("bad_input", f"{len(word_phones)} phone lists for {len(words)} words")
        rec = self.recognizer
        duration = wave.numel() / (rec.samples_per_frame * rec.frame_rate)
        if not bool(torch.isfinite(wave).all()):
            return UtteranceEvidence("bad_input", "wave contains NaN or Inf", duration=duration)
        if float(wave.detach().abs().max()) < self.silence_peak:
            return UtteranceEvidence("silent", f"audio is silent (peak below {self.silence_peak:g})", duration=duration)
        with torch.set_grad_enabled(wave.requires_grad):  # scoring needs no graph unless the caller asks
            recognized = recognized if recognized is not None else rec(wave[None])
        return self.locate_recognized(recognized, duration, word_phones, words, alignment)

    def locate_recognized(self, recognized: tuple[Tensor, Tensor], duration: float,
                          word_phones: Sequence[Sequence[str]], words: Sequence[WordSites],
                          alignment: AlignmentResult | None = None) -> UtteranceEvidence:
        """:meth:`locate` after the recognizer has heard the audio (``recognized``: its ``(log_probs [1, f, v],
        frames [1])``; ``duration``: the audio's seconds), for audio that is not a wave (a TTS's mel heard through
        :class:`leakloss.mel_bridge.MelBridge`): the caller has checked it is finite and not silent."""
        if len(word_phones) != len(words):
            return UtteranceEvidence("bad_input", f"{len(word_phones)} phone lists for {len(words)} words")
        rec = self.recognizer
        log_probs, frame_lengths = recognized
        n = int(frame_lengths[0])
        lp = log_probs[0, :n]
        if alignment is None:
            alignment = align_words(lp, n, word_phones, rec.phoneset, rec.frame_rate,
                                    words=[w.word for w in words], min_fit=self.min_fit)
        if not alignment.ok:
            return UtteranceEvidence("alignment_failed", f"alignment failed: {alignment.reason}",
                                     alignment=alignment, log_probs=lp, duration=duration)
        specs, skipped = site_specs(words, word_phones, alignment, rec.phoneset, rec.frame_rate, n, duration)
        if not specs:
            why = "no testable site"
            if skipped:
                why += f" ({len(skipped)} skipped: {next(iter(skipped.values()))})"
            return UtteranceEvidence("no_testable_site", why, alignment=alignment, log_probs=lp,
                                     duration=duration, skipped=skipped)
        return UtteranceEvidence("ok", None, {}, alignment, lp, duration, {}, skipped, specs)

    def extract(self, wave: Tensor, word_phones: Sequence[Sequence[str]], words: Sequence[WordSites],
                alignment: AlignmentResult | None = None,
                recognized: tuple[Tensor, Tensor] | None = None) -> UtteranceEvidence:
        """``wave [t]`` at 16 kHz; ``word_phones[i]`` are the Nepali phones of ``words[i]``. ``recognized``: this
        recognizer's ``(log_probs [1, f, v], frames [1])`` for ``wave`` when the caller already has them."""
        located = self.locate(wave, word_phones, words, alignment, recognized)
        if not located.ok:
            return located
        rec, lp = self.recognizer, located.log_probs
        with torch.set_grad_enabled(wave.requires_grad):
            energy = frame_energies(wave.to(lp.device), rec.samples_per_frame, lp.shape[0])
            located.sites, located.margins_per_frame = evidence_from_log_probs(lp, located.specs, rec.blank,
                                                                               rec.frame_rate, energy)
        return located
