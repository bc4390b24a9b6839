"""Word boundaries by CTC forced alignment of set-valued phones.

A phone is a SET of recognizer tokens (``ʌ`` accepts ``ʌ, ə, ɐ``), so the utterance's emissions are
reduced first: column 0 is the blank, then one column per distinct token set (``logsumexp`` of the
log-probs over the set). The targets are those columns; ``torchaudio.functional.forced_align`` finds
the best (Viterbi) frame labelling and ``merge_tokens`` turns it into one span per phone. A word runs
from its first phone's first frame to its last phone's last frame.

``fit`` is the mean, over phones, of the mean per-frame probability of the phone's column on the
frames aligned to it. A reading of the text scores high; audio of other words forces phones onto
frames that say something else and scores low (common phones still match by chance). Measured with
the trained embedded recognizer ``a`` (``benchmarks/site_margins.py --fit``), see :data:`DEFAULT_MIN_FIT`.

``MMSAligner`` is the seed's aligner: Meta's MMS forced aligner (``torchaudio.pipelines.MMS_FA``) on
romanised text. Its weights come from the torch hub cache only; without them it raises
:class:`AlignerUnavailableError` saying what is missing and where to put it.

Shapes: f frames (recognizer, 50 Hz), v vocabulary, c reduced columns (blank + distinct sets),
l targets (phones of the utterance), t samples (16 kHz).
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torchaudio.functional as AF
from torch import Tensor

from leakloss.text.phoneset import PhoneSet, UnmappablePhoneError

#: Alignments whose fit is below this are refused as "text does not match the audio".
#: Measured with recognizer ``a`` on the 57 held-out built-in sentences (held-out voices teacher5 /
#: hindi5; ``benchmarks/site_margins.py --fit --min-fit 0 --sentences 57``): correct text on teacher
#: readings min 0.80 / p10 0.86 / median 0.90, on Hindi-base readings min 0.73 / p10 0.76 / median
#: 0.82; the next sentence's text on the same audio max 0.50 / median 0.28 (teacher) and max 0.48 /
#: median 0.27 (Hindi). 0.6 sits in the gap, nearer the mismatches: real TTS is further from the
#: recognizer's synthetic training audio than these readings, so correct text will score lower there.
#: Speech beyond the text is not seen by the fit: a held-out reading followed by the next sentence, aligned with its
#: own text, fits 0.84-0.97. The word check refuses it before any alignment (phone error 0.85-1.50 > 0.73 on 6 of 6
#: held-out Hindi readings, scorer and reward alike). Two refusals here were tried and withdrawn (2026-12-07,
#: docs/scorer.md): any heard stretch without a phone also refused correct readings of texts with unaligned words
#: (numbers, Latin); only the stretches before the first phone and after the last missed half the extra sentences.
DEFAULT_MIN_FIT: float = 0.6


#: How far :meth:`AlignmentResult.phone_segments` lets a phone reach into the blank frames beside its CTC
#: spike, each side (seconds): a Nepali schwa lasts 50-100 ms, a spike 20-40 ms. Not tuned: 40 and 80 ms gave
#: the same held-out site AUC in ``benchmarks/signal_domains.py`` (the midpoints bind first).
SEGMENT_REACH_S: float = 0.06


class AlignerUnavailableError(RuntimeError):
    """An aligner's weights or text tools are missing; the message says what and how to provide it."""


@dataclass
class WordAlignment:
    index: int  # position of the word in the input list
    word: str
    start: float  # seconds
    end: float  # seconds
    phone_spans: list[tuple[float, float]]  # (start, end) seconds per phone
    score: float  # mean per-frame probability of the aligned tokens of this word


@dataclass
class AlignmentResult:
    ok: bool
    words: list[WordAlignment] = field(default_factory=list)
    reason: str | None = None
    fit: float = 0.0

    def word(self, index: int) -> WordAlignment | None:
        """The alignment of input word ``index`` (words without phones are not aligned)."""
        for w in self.words:
            if w.index == index:
                return w
        return None

    def phone_segments(self, index: int, reach_s: float = SEGMENT_REACH_S) -> list[tuple[float, float]] | None:
        """Word ``index``'s phones as segments rather than CTC spikes (None when the word is not aligned).

        A CTC recognizer marks most phones with one or two frames and labels the rest blank, so
        :attr:`WordAlignment.phone_spans` of a 70 ms vowel is often 20 ms: cutting or scoring that span misses
        the vowel. Each phone here also takes the blank frames beside it, up to the midpoint between its span
        and its neighbour's (across word boundaries too) and at most ``reach_s`` seconds each side (a pause is
        not a phone)."""
        flat = [span for w in self.words for span in w.phone_spans]
        out, k = None, 0
        for w in self.words:
            if w.index == index:
                out = []
                for j in range(k, k + len(w.phone_spans)):
                    a, b = flat[j]
                    lo = a - reach_s if j == 0 else max(a - reach_s, (flat[j - 1][1] + a) / 2)
                    hi = b + reach_s if j == len(flat) - 1 else min(b + reach_s, (b + flat[j + 1][0]) / 2)
                    out.append((max(lo, 0.0), hi))
                break
            k += len(w.phone_spans)
        return out


def _fail(reason: str, fit: float = 0.0) -> AlignmentResult:
    return AlignmentResult(ok=False, words=[], reason=reason, fit=fit)


def reduced_emissions(log_probs: Tensor, token_sets: Sequence[frozenset[int]], blank: int) -> tuple[Tensor, list[int]]:
    """``log_probs [f, v]`` -> (``emission [f, c]`` fp32, target column of each set).

    Column 0 is the blank; column ``j >= 1`` is the ``logsumexp`` over the ``j``-th distinct set.
    """
    lp = log_probs.detach().float()
    columns: dict[frozenset[int], int] = {}
    targets = []
    for s in token_sets:
        targets.append(columns.setdefault(frozenset(s), len(columns) + 1))
    cols = [lp[:, blank]]
    for s in columns:  # dicts keep insertion order = column order
        idx = torch.tensor(sorted(s), dtype=torch.long, device=lp.device)
        cols.append(torch.logsumexp(lp.index_select(1, idx), dim=1))
    return torch.stack(cols, dim=1), targets


def _frames_needed(targets: Sequence[int]) -> int:
    # CTC needs a blank between two equal consecutive targets
    return len(targets) + sum(1 for a, b in zip(targets, targets[1:]) if a == b)


def align_columns(emission: Tensor, n_frames: int, word_targets: Sequence[Sequence[int]], frame_rate: float, *,
                  words: Sequence[str] | None = None, min_fit: float = DEFAULT_MIN_FIT) -> AlignmentResult:
    """Forced alignment on an already reduced ``emission [f, c]`` (column 0 = blank).

    ``word_targets[i]`` are the columns of word ``i``; words with none are not aligned.
    """
    flat = [t for w in word_targets for t in w]
    if not flat:
        return _fail("empty phone sequence")
    n_frames = int(min(n_frames, emission.shape[0]))
    need = _frames_needed(flat)
    if n_frames < need:
        return _fail(f"audio too short for {len(flat)} phones ({n_frames} frames, "
                     f"{n_frames / frame_rate:.2f} s; need at least {need} frames)")
    em = emission[:n_frames].detach().float().cpu()[None]  # forced_align: [1, f, c]
    if bool(torch.isnan(em).any() | torch.isposinf(em).any()):  # (-inf is a phone a frame cannot be)
        return _fail("the recognizer's log-probabilities hold NaN/Inf")  # a NaN fit passed every check
    if not bool(torch.isfinite(em[0][:, sorted(set(flat))]).any(0).all()):  # a phone no frame can be: no path
        return _fail("a phone of the text is impossible in every frame (log-probability -inf)")
    targets = torch.tensor(flat, dtype=torch.int32)[None]
    with warnings.catch_warnings():  # torchaudio 2.9 flags forced_align as deprecated; it is still the tool
        warnings.simplefilter("ignore", UserWarning)
        labels, scores = AF.forced_align(em, targets, torch.tensor([n_frames], dtype=torch.int32),
                                         torch.tensor([len(flat)], dtype=torch.int32), blank=0)
    probs = scores[0].exp()  # (exp(-inf) = 0 is finite: the path's own scores say whether it is possible)
    if bool((labels < 0).any() | (labels >= em.shape[-1]).any()) or not bool(torch.isfinite(scores).all()):
        return _fail("forced alignment found no path through the text")  # labels out of range: an IndexError
    spans = AF.merge_tokens(labels[0], probs, blank=0)
    if len(spans) != len(flat):  # cannot happen for a valid CTC alignment; guard the indexing below
        return _fail(f"forced alignment returned {len(spans)} spans for {len(flat)} phones")
    fit = float(sum(s.score for s in spans) / len(spans))
    if not fit >= min_fit:  # a NaN fit fails too
        return _fail(f"text does not match the audio (fit {fit:.2f} < {min_fit:.2f})", fit)
    out, k = [], 0
    for i, w in enumerate(word_targets):
        if not w:
            continue
        ws = spans[k:k + len(w)]
        k += len(w)
        frames = sum(s.end - s.start for s in ws)
        score = sum(s.score * (s.end - s.start) for s in ws) / max(frames, 1)
        out.append(WordAlignment(
            index=i, word=words[i] if words is not None else str(i),
            start=ws[0].start / frame_rate, end=ws[-1].end / frame_rate,
            phone_spans=[(s.start / frame_rate, s.end / frame_rate) for s in ws], score=float(score),
        ))
    return AlignmentResult(ok=True, words=out, reason=None, fit=fit)


def align_words(log_probs: Tensor, n_frames: int, word_phones: Sequence[Sequence[str]], phoneset: PhoneSet,
                frame_rate: float, *, words: Sequence[str] | None = None,
                min_fit: float = DEFAULT_MIN_FIT) -> AlignmentResult:
    """Align words given as phone lists to one utterance's ``log_probs [f, v]``.

    Returns ``ok=False`` with a reason ("empty phone sequence", "audio too short for N phones",
    "text does not match the audio (fit x < y)", an unmappable phone) instead of raising.
    """
    if log_probs.dim() != 2:
        return _fail(f"log_probs must be [frames, vocab], got shape {tuple(log_probs.shape)}")
    if isinstance(frame_rate, bool) or not isinstance(frame_rate, (int, float)) or not 0 < frame_rate < math.inf:
        return _fail(f"frame_rate must be a finite number of frames per second > 0, got {frame_rate!r}")
    if words is not None and len(words) != len(word_phones):  # an IndexError, or words named wrongly
        return _fail(f"{len(words)} word names for {len(word_phones)} words")
    sets_per_word: list[list[frozenset[int]]] = []
    for phones in word_phones:
        try:
            sets_per_word.append([phoneset.tokens(p) for p in phones])
        except UnmappablePhoneError as err:
            return _fail(str(err.args[0]) if err.args else str(err))
    flat = [s for w in sets_per_word for s in w]
    if not flat:
        return _fail("empty phone sequence")
    emission, targets = reduced_emissions(log_probs[: max(int(n_frames), 0)], flat, phoneset.blank)
    word_targets, k = [], 0
    for w in sets_per_word:
        word_targets.append(targets[k:k + len(w)])
        k += len(w)
    return align_columns(emission, n_frames, word_targets, frame_rate, words=words, min_fit=min_fit)


def align_batch(log_probs: Tensor, frame_lengths: Tensor, word_phones: Sequence[Sequence[Sequence[str]]],
                phoneset: PhoneSet, frame_rate: float, **kwargs) -> list[AlignmentResult]:
    """:func:`align_words` for each item of ``log_probs [b, f, v]`` (forced_align is per utterance)."""
    return [align_words(lp, int(n), wp, phoneset, frame_rate, **kwargs)
            for lp, n, wp in zip(log_probs, frame_lengths.tolist(), word_phones)]


# ----------------------------------------------------------------------------- MMS


def mms_weights_path() -> Path:
    """Where ``torch.hub`` caches the MMS_FA checkpoint (``<hub dir>/checkpoints/<file>``)."""
    from torchaudio.pipelines import MMS_FA

    return Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(MMS_FA._path)


def _uroman():
    try:
        import uroman  # type: ignore[import-not-found]
    except ImportError:
        return None
    return uroman.Uroman()


def romanize_words(words: Sequence[str]) -> list[str]:
    """Romanise with ``uroman`` (lower case, letters of the MMS dictionary kept by the aligner)."""
    if all(w.isascii() for w in words):
        return [w.lower() for w in words]
    ur = _uroman()
    if ur is None:
        raise AlignerUnavailableError(
            "MMS alignment needs romanised text and the `uroman` package is not installed: "
            "`pip install uroman`, or pass romanized=[...] yourself"
        )
    return [ur.romanize_string(w).lower() for w in words]


class MMSAligner:
    """Meta's MMS forced aligner (``torchaudio.pipelines.MMS_FA``, 315M) on romanised words.

    Never downloads: the checkpoint must already be at :func:`mms_weights_path` or ``weights_path``.
    """

    def __init__(self, weights_path: str | Path | None = None, device: str | torch.device = "cpu") -> None:
        from torchaudio.pipelines import MMS_FA

        path = Path(weights_path).expanduser() if weights_path is not None else mms_weights_path()
        if not path.is_file():
            raise AlignerUnavailableError(
                f"MMS_FA weights not found at {path}. leakloss never downloads: on a machine with network run "
                "`python -c \"import torchaudio; torchaudio.pipelines.MMS_FA.get_model()\"` and copy "
                f"{os.path.basename(MMS_FA._path)} from its torch hub cache (<hub>/checkpoints/) to {path}, "
                f"or pass weights_path= (source: {MMS_FA._path})"
            )
        try:  # model_dir + file_name point load_state_dict_from_url at the existing file: no download
            model = MMS_FA.get_model(with_star=False, dl_kwargs={"model_dir": str(path.parent), "file_name": path.name})
        except Exception as err:  # a damaged checkpoint is "unavailable" too, with the cause chained
            raise AlignerUnavailableError(f"MMS_FA weights at {path} could not be loaded: {err}") from err
        self.model = model.eval().to(device)
        self.labels = MMS_FA.get_labels(star=None)
        self.dictionary = {c: i for i, c in enumerate(self.labels)}
        self.sample_rate = int(MMS_FA.sample_rate)
        self.frame_rate = self.sample_rate / 320.0  # conv stack stride of wav2vec 2.0

    @torch.no_grad()
    def align(self, wave: Tensor, words: Sequence[str], *, romanized: Sequence[str] | None = None,
              min_fit: float = 0.05) -> AlignmentResult:
        """``wave [t]`` (16 kHz) and the words of its text -> word spans (same result type as align_words)."""
        roman = list(romanized) if romanized is not None else romanize_words(words)
        word_targets = [[self.dictionary[c] for c in r if c in self.dictionary and c != self.labels[0]] for r in roman]
        x = wave.float().reshape(1, -1).to(next(self.model.parameters()).device)
        emission, _ = self.model(x)  # log-probs [1, f, c]
        return align_columns(emission[0], emission.shape[1], word_targets, self.frame_rate, words=list(words),
                             min_fit=min_fit)
