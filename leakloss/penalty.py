"""The differentiable leak signal: per-frame leak probability and an auxiliary loss over contrast sites.

:class:`LeakPenalty` runs a frozen recognizer's frame features — a wav2vec2 recognizer's conv stack to layer 4
(5 ms frames), or a Whisper recognizer's encoder states (20 ms frames), whichever the head was trained on
(``frame_features`` of :class:`leakloss.acoustic.recognizer.Recognizer` and
:class:`leakloss.acoustic.whisper_recognizer.WhisperRecognizer`) — and the frozen reference-free frame head on a
batch of 16 kHz waveforms — or of F5 mels, vocoded by a frozen Vocos (backbone + head) and resampled — and returns
``(loss, parts)``: the mean over the given sites of ``-log(1 - p)`` (p the soft-max pooled leak probability;
non-saturating), and detached parts for logging (per-site probabilities, their means per contrast kind and
contrast). No parameter of recognizer, head or vocoder receives a gradient; the input does. The training signal is
never NaN: items with NaN/Inf are masked out (zero contribution, zero gradient, counted in
``parts.nonfinite_items``), the gradient of near-silent items is bounded, input shorter than one frame contributes
zero (:class:`LeakPenalty`).

The reward for RL built on the same signal lives in :mod:`leakloss.reward`, site placement (where the sites
lie in time on a reading) in :mod:`leakloss.site_placement`; their names stay importable from here. Both run on
``penalty.recognizer``: the word check, the placement and the site scores hear with one recognizer.

Shapes: b batch, t samples (16 kHz), n mel frames, d mel bins (100), c feature channels, g feature frames
(5 ms or 20 ms), k sites.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor, nn

from leakloss.checks import PenaltyInputError  # noqa: F401 - its public home for users is here
from leakloss.constants import SAMPLE_RATE
from leakloss.frozen import FrozenScorer
from leakloss.functional.crop import length_groups
from leakloss.functional.leak import (
    active_sites,
    at_least_fp32,
    leak_penalty_from_logits,
    mask_nonfinite_items,
    quiet_gradient_scale,
    rms_normalize,
    scale_gradient,
    site_masks,
)
from leakloss.heads import (  # SHIPPED_HEADS, ESPEAK_HEADS: still importable from here
    ESPEAK_HEADS,
    FLAG_THRESHOLD,
    SHIPPED_HEADS,
    HeadCard,
    HeadLoadError,
    RawConvHead,
    load_head,
)
from leakloss.schema import KINDS
from leakloss.timing import TimedSite

#: What a head card without ``features`` was trained on: recognizer A's conv layer 4 (every card before them).
LEGACY_FRAME_FEATURES = {"source": "wav2vec2-conv", "layer": 4}


#: RMS (of the mean-removed valid samples) below which an item's penalty gradient is scaled down by
#: ``rms / QUIET_RMS``: -40 dBFS, quieter than usable speech (espeak reads at ~0.1, studio speech at 0.03-0.1).
QUIET_RMS = 0.01


class LeakParts(NamedTuple):
    """Detached parts of the penalty, for logging."""

    penalty: Tensor  # scalar
    per_kind: dict  # "deletion"/"quality" -> scalar mean site probability
    per_contrast: dict  # e.g. "ʌ->∅", "ʌi̯->ɛː" -> scalar
    active_sites: Tensor  # number of sites with frames in the input
    site_probs: Tensor  # [k]
    frame_probs: Tensor  # [b, g] per-frame leak probability (5 ms); 0 past an item's frame_counts
    nonfinite_items: Tensor  # items masked out for NaN/Inf among their valid samples (or mel frames)
    quiet_items: Tensor  # items quieter than QUIET_RMS, whose gradient was scaled down
    site_active: Tensor  # [k] bool: the site has frames in its (finite) item
    frame_counts: Tensor  # [b] valid frames of each item (0 for a masked item): frame_probs[i, :frame_counts[i]]


class LeakPenalty(FrozenScorer):
    """``forward(waves=..., wave_lengths=..., sites=...)`` or ``forward(mels=..., mel_lengths=..., sites=...)``.

    Each item is centred and divided by its RMS (a DC offset does not change the score; ``wave_mean [b]`` and
    ``wave_rms [b]`` override the two, as the cropped penalty does) and zero-padded past its end by
    :attr:`tail_samples`, so that an item scores the same alone and in any batch.

    Bad items never poison the batch; each rule is tested:

    - **Non-finite input**: an item with any NaN/Inf among its valid samples (or valid mel frames, or in its
      vocoded wave) is masked out by ``torch.where`` before any arithmetic: zero contribution, a gradient of
      exactly 0, counted in ``parts.nonfinite_items``. NaN/Inf in the padding is zeroed and not counted.
    - **Near-silence**: each item is normalised to unit RMS, so the true gradient grows as
      1/RMS (1e4-fold speech's at RMS 1e-7). Below ``QUIET_RMS`` (-40 dBFS) an item's gradient is multiplied
      by ``rms / QUIET_RMS``: the same direction, the size it would have at -40 dBFS (exact digital silence,
      rms 0, gets a zero gradient). The loss is unchanged. Counted in ``parts.quiet_items``.
    - **Very short input**: an item shorter than one frame of the recognizer (``min_samples``: the 10 ms receptive
      field of recognizer A's conv stack; 1 sample on a Whisper encoder run at the item's own length, whose one
      frame is scored), or of 0 mel frames, is zero-padded: it has no frames, so its sites are inactive and it
      contributes exactly zero.
    - Waves not ``[b, t]``, mels not ``[b, n, d]``, lengths outside ``[0, t]``: :class:`PenaltyInputError`.

    **The mel bridge** (``mel_bridge=``, a :class:`leakloss.mel_bridge.MelBridge`, Whisper recognizers only): mels
    go straight to Whisper's log-mel instead of through the vocoder (``mel_to_wave``) and Whisper's STFT, for a
    fraction of the cost and an approximation of the signal (docs/penalty.md). The same rules hold; each item is
    levelled to unit energy in the log domain, so a quiet item's gradient is bounded without the quiet rule
    (``parts.quiet_items`` stays 0); items are scored up to 30 s (:class:`PenaltyInputError` past it). Waves
    still take the wave path.
    """

    def __init__(self, recognizer: nn.Module, head: RawConvHead, mel_to_wave: nn.Module | None = None,
                 conv_layer: int | None = None, pad_s: float = 0.02, quiet_rms: float = QUIET_RMS,
                 flag_threshold: float = FLAG_THRESHOLD, mel_bridge: nn.Module | None = None) -> None:
        """``conv_layer``: the layer of the recognizer's frame features the head reads (a wav2vec2 conv layer,
        or a Whisper encoder state; None: the recognizer's ``default_frame_layer``, conv layer 4 / the encoder's
        output). A recognizer without frame features, or whose features are not as wide as the head's input, is a
        :class:`~leakloss.acoustic.recognizer.RecognizerLoadError` here, not a shape error in the first forward.
        ``mel_bridge``: score mels through it instead of ``mel_to_wave`` (give one of the two); a Whisper
        recognizer's encoder only (else ``ValueError``)."""
        from leakloss.checks import check_number
        from leakloss.decision import check_thresholds

        check_thresholds(flag_threshold)
        # a silent item's gradient is scaled by rms / quiet_rms: 0 or NaN would make the loss NaN
        check_number(quiet_rms, "quiet_rms must be a finite number > 0", low=0.0, low_inclusive=False)
        check_frame_recognizer(recognizer, head, conv_layer)
        if mel_bridge is not None:
            from leakloss.mel_bridge import check_bridge_recognizer

            check_bridge_recognizer(mel_bridge, recognizer)
            if mel_to_wave is not None:
                raise ValueError("give mel_to_wave (vocode mels) or mel_bridge (bridge them to Whisper's log-mel), "
                                 "not both")
        super().__init__()
        self.recognizer, self.head, self.mel_to_wave = recognizer, head.eval(), mel_to_wave
        self.mel_bridge = mel_bridge
        layer = recognizer.default_frame_layer if conv_layer is None else conv_layer
        self.conv_layer, self.pad_s, self.quiet_rms = layer, pad_s, quiet_rms
        self.flag_threshold = flag_threshold  # a site probability at or above it counts as flagged (head card)
        self.freeze()

    @property
    def frame_layer(self) -> int:
        """The layer of the recognizer's frame features the head reads (``conv_layer``, named for either kind)."""
        return self.conv_layer

    @property
    def frame_hop_s(self) -> float:
        """Seconds between the head's frames (5 ms on wav2vec2 conv layer 4, 20 ms on Whisper states)."""
        return self.recognizer.frame_hop_s(self.conv_layer)

    @classmethod
    def load(cls, recognizer: str | None = None, head_path: str | Path | None = None,
             mel_to_wave: nn.Module | None = None, device: str | torch.device = "cpu",
             head: str | None = None, mel_bridge: nn.Module | bool | str | os.PathLike | None = None) -> "LeakPenalty":
        """The frame head at ``head_path``, or named ``head`` (:data:`NAMED_HEADS`; default: the shipped one), on
        ``recognizer`` (default: the one its card names; another is loaded as given, with a warning when its
        weights differ from the card's). ``mel_bridge``: a :class:`~leakloss.mel_bridge.MelBridge`, True for the
        shipped one or a path to one (:meth:`MelBridge.embedded`), in place of ``mel_to_wave``.

        Raises:
            HeadLoadError: not a frame (raw-conv) head, an unknown ``head`` name, or ``head`` with ``head_path``.
            RecognizerLoadError: the recognizer cannot be loaded, or does not offer the frame features the head
                was trained on (e.g. recognizer w under recognizer A's head: :func:`check_frame_recognizer`).
        """
        from leakloss.acoustic.recognizer import Recognizer, split_recognizer_id
        from leakloss.heads import check_recognizer

        if head is not None and head_path is not None:
            raise HeadLoadError("give head (a name) or head_path, not both")
        head_path = named_head_path(head) if head is not None else head_path or SHIPPED_HEADS / "rawconv.safetensors"
        module, card = load_head(head_path)
        if not isinstance(module, RawConvHead):  # an MLP head failed later as "no attribute 'min_samples'"
            raise HeadLoadError(f"{head_path}: a {card.head} head; the leak penalty takes a raw-conv head "
                                "(rawconv.safetensors)")
        # by name: weights other than the card's (another training of it) load, and check_recognizer says so
        rec = Recognizer.load(split_recognizer_id(card.recognizer)[0] if recognizer is None else recognizer,
                              device=device)
        features = card_frame_features(card)
        check_frame_recognizer(rec, module, features.get("layer"), features["source"], card.recognizer)
        check_recognizer(card, rec.name)
        if mel_bridge is True or isinstance(mel_bridge, (str, os.PathLike)):
            from leakloss.mel_bridge import MelBridge

            mel_bridge = MelBridge.embedded(None if mel_bridge is True else mel_bridge)
        return cls(rec, module, mel_to_wave, conv_layer=features.get("layer"),
                   flag_threshold=card.thresholds["flag"], mel_bridge=mel_bridge or None).to(device)

    @property
    def min_samples(self) -> int:
        """Fewest samples that make one frame of the recognizer's features (shorter input is zero-padded)."""
        return self.recognizer.frame_min_samples(self.conv_layer)

    @property
    def frame_hop_samples(self) -> int:
        """:attr:`frame_hop_s` in 16 kHz samples."""
        return round(self.frame_hop_s * SAMPLE_RATE)

    @property
    def tail_samples(self) -> int:
        """Zeros appended to every item (and heard as part of it) before the recognizer: enough that each item's
        last frames see the features of silence after it, whatever the batch's padding (the longest item would
        otherwise see the head's zero padding instead, and its end sites would score differently alone than in a
        batch)."""
        return self.head.context_frames * self.frame_hop_samples + self.min_samples

    @property
    def crop_context_s(self) -> float:
        """Seconds each side of a site that its pooled logit depends on, at the recognizer's frames: the site
        padding, the head's context, the recognizer's (a conv stack's receptive field; a Whisper encoder's crop
        margin, :data:`leakloss.acoustic.whisper_recognizer.WHISPER_CROP_MARGIN_S`) and one hop for frame-centre
        rounding. A crop keeps this much around its sites (:meth:`cropped`, and the vocoder path's
        ``integrations.f5_tts.cropped_penalty``)."""
        hop_s = self.frame_hop_s
        return self.pad_s + self.head.context_frames * hop_s + self.recognizer.frame_context_s(self.conv_layer) + hop_s

    def frame_logits(self, waves: Tensor, wave_lengths: Tensor | None = None,
                     wave_rms: Tensor | None = None, wave_mean: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``[b, t]`` -> per-frame leak logits ``[b, g]`` (fp32) and valid frame counts ``[b]``.

        Each item is centred and divided by its RMS (``wave_mean [b]`` / ``wave_rms [b]`` when given: the
        cropped penalty passes them pooled over an utterance's crops;
        :func:`leakloss.functional.leak.rms_normalize`). Finite
        input only (:meth:`forward` masks); ``t`` below :attr:`min_samples` is zero-padded. Items run in groups
        of similar length (:func:`leakloss.functional.crop.length_groups`), each padded to its longest plus
        :attr:`tail_samples` zeros, so an item's logits do not depend on the other items of its batch and
        short items do not pay for the longest; logits past an item's last frame are 0.
        """
        b, t = waves.shape
        if wave_lengths is None:
            wave_lengths = torch.full((b,), t, dtype=torch.long, device=waves.device)
        waves = rms_normalize(waves, wave_lengths, wave_rms, wave_mean)
        lengths = wave_lengths.tolist()
        groups = length_groups(lengths) if b else []
        logits = waves.new_zeros(b, self._frames(t), dtype=torch.float32)
        frames = torch.zeros(b, dtype=torch.long, device=waves.device)
        for group in groups:
            index = torch.tensor(group, device=waves.device)
            longest = max(lengths[i] for i in group)
            chunk = waves.index_select(0, index)[:, :longest]
            chunk = torch.nn.functional.pad(chunk, (0, max(self.min_samples - longest, 0) + self.tail_samples))
            # each item is heard with its silent tail (a recognizer that reads lengths, as Whisper's encoder does,
            # must not stop at the item's end); its valid frames are those of its own length
            item_lengths = wave_lengths.index_select(0, index)
            heard = (item_lengths + self.tail_samples).clamp(max=chunk.shape[-1])
            feats, _ = self.recognizer.frame_features(chunk, heard, self.conv_layer, normalize=False)
            n = self.recognizer.frame_count(item_lengths, self.conv_layer).to(frames.device)
            g = min(self._frames(max(longest, 1)), logits.shape[-1], feats.shape[-1])
            item_logits = self.head(feats).float()[..., :g]
            # past an item's own frames the group's padding was heard: 0 there, as documented (forward masks them;
            # a direct caller got head outputs on the silent padding)
            own = torch.arange(g, device=item_logits.device)[None, :] < n.to(item_logits.device)[:, None]
            item_logits = torch.where(own, item_logits, torch.zeros((), device=item_logits.device))
            logits = logits.index_copy(0, index, torch.nn.functional.pad(item_logits, (0, logits.shape[-1] - g)))
            frames = frames.index_copy(0, index, n)
        return logits, frames

    def _frames(self, samples: int) -> int:
        """Frames of ``samples`` input samples (at least :attr:`min_samples`)."""
        return int(self.recognizer.frame_count(max(samples, self.min_samples), self.conv_layer))

    def forward(self, waves: Tensor | None = None, wave_lengths: Tensor | None = None, mels: Tensor | None = None,
                mel_lengths: Tensor | None = None, sites: Sequence[Sequence[TimedSite]] = (),
                wave_rms: Tensor | None = None, wave_mean: Tensor | None = None) -> tuple[Tensor, LeakParts]:
        self.freeze()
        bad = None
        for name, value in (("waves", waves), ("mels", mels), ("wave_rms", wave_rms), ("wave_mean", wave_mean)):
            if value is not None and not isinstance(value, Tensor):
                raise PenaltyInputError(f"{name} must be a tensor, got {type(value).__name__}"
                                        + (" (pad a list of waves into [batch, samples] with wave_lengths)"
                                           if name in ("waves", "mels") else ""))
        source = mels if mels is not None else waves
        if mels is not None and (waves is not None or wave_lengths is not None):
            raise PenaltyInputError("give waves (with wave_lengths) or mels (with mel_lengths), not both")
        if mel_lengths is not None and mels is None:
            raise PenaltyInputError("mel_lengths goes with mels; waves take wave_lengths")
        if mels is not None and self.mel_bridge is not None:
            if wave_rms is not None or wave_mean is not None:  # the bridge levels each item from its own mel
                raise PenaltyInputError("wave_rms / wave_mean go with waves or vocoded mels, not with a mel bridge")
            return self._bridged_forward(mels, mel_lengths, sites, source)
        if mels is not None:
            waves, wave_lengths, bad = self._vocode(mels, mel_lengths)
        if waves is None:
            raise PenaltyInputError("give waves or mels")
        if waves.dim() != 2:
            raise PenaltyInputError(f"waves must be [batch, samples], got shape {tuple(waves.shape)}")
        if not waves.is_floating_point():  # bool or complex "audio", or int PCM of unknown full scale
            raise PenaltyInputError(f"waves must be real float samples, got dtype {waves.dtype} "
                                    "(int16 PCM: divide by 32768)")
        b, t = waves.shape
        check_site_lists(sites, b)
        if wave_lengths is not None:
            wave_lengths = check_lengths(wave_lengths, b, t, "wave_lengths", waves.device)
        if wave_rms is not None and (wave_rms.shape != (b,) or not bool(torch.isfinite(wave_rms).all())
                                     or bool((wave_rms < 0).any())):
            raise PenaltyInputError(f"wave_rms must be [batch] finite and >= 0, got shape {tuple(wave_rms.shape)}")
        if wave_mean is not None and (wave_mean.shape != (b,) or not bool(torch.isfinite(wave_mean).all())):
            raise PenaltyInputError(f"wave_mean must be [batch] and finite, got shape {tuple(wave_mean.shape)}")
        waves, bad_wave = mask_nonfinite_items(waves, wave_lengths)
        bad = bad_wave if bad is None else bad | bad_wave
        # given an item's RMS (the cropped penalty's, pooled over its crops), the rule is the item's: a quiet
        # stretch of a loud item is no quiet item, as in the whole-item computation
        quiet = (wave_rms.detach().float() / self.quiet_rms).clamp(max=1.0) if wave_rms is not None \
            else quiet_gradient_scale(waves, wave_lengths, self.quiet_rms)
        # fp32 before the gradient scale: a quiet fp16 item's unscaled gradient (~1 / rms) overflows fp16
        waves = at_least_fp32(waves)
        if waves.requires_grad:
            waves = scale_gradient(waves, quiet)
        logits, frames = self.frame_logits(waves, wave_lengths, wave_rms, wave_mean)
        heard = wave_lengths > 0 if wave_lengths is not None else torch.full_like(bad, t > 0)  # 0 samples: not quiet
        return self._site_loss(logits, frames, bad, sites, source,
                               quiet=((quiet < 1) & ~bad & heard.to(bad.device)).sum().detach())

    def _site_loss(self, logits: Tensor, frames: Tensor, bad: Tensor, sites: Sequence[Sequence[TimedSite]],
                   source: Tensor, quiet: Tensor) -> tuple[Tensor, LeakParts]:
        """Frame logits ``[b, g]`` and valid frames ``[b]`` -> the loss over the sites and its parts (items in
        ``bad [b]`` have no frame)."""
        frames = torch.where(bad.to(frames.device), torch.zeros_like(frames), frames)  # masked items: no frames
        masks, index = site_masks(sites, logits.shape[-1], hop_s=self.frame_hop_s,
                                  pad_s=self.pad_s, frame_lengths=frames,
                                  device=logits.device)
        item = torch.tensor([i for i, _ in index], dtype=torch.long, device=logits.device)
        active = active_sites(logits, masks, item)
        loss, probs = leak_penalty_from_logits(logits, masks, item, active)
        if source.numel() == 0 and source.requires_grad:  # an empty batch: a zero loss still on the input's graph
            loss = loss + source.sum().float() * 0
        parts = self._parts(loss, probs, active, index, logits, frames)
        return loss, parts._replace(nonfinite_items=bad.sum().detach(), quiet_items=quiet)

    def cropped(self, mels: Tensor, mel_lengths: Tensor | None = None,
                sites: Sequence[Sequence[TimedSite]] = ()) -> tuple[Tensor, LeakParts]:
        """:meth:`forward` on mels through :attr:`mel_bridge`, with Whisper's encoder run only on crops around the
        sites: each item is bridged whole (the bridge is cheap and levels the item as a whole), then its log mel is
        cut to windows of :attr:`crop_context_s` around its sites (merged where they meet; :meth:`crop_plan`) and
        those are encoded, in length groups, each crop's frames at their positions in the item. The same
        ``(loss, parts)`` as :meth:`forward` (items, the sites in their order), but ``parts.frame_probs`` is 0
        where no crop reached. The loss is the whole computation's but for what Whisper's global attention hears
        beyond the margin (exact where a crop holds its item; measured in the tests and docs/penalty.md). The
        input rules are :meth:`forward`'s for mels through a bridge."""
        self.freeze()  # as forward: a parent's requires_grad_(True) never reaches these weights
        if self.mel_bridge is None:
            raise PenaltyInputError("cropped() crops a mel bridge's log mel; this penalty vocodes mels (crop those "
                                    "with integrations.f5_tts.cropped_penalty, or load it with mel_bridge=True)")
        if not isinstance(mels, Tensor):
            raise PenaltyInputError(f"mels must be a tensor, got {type(mels).__name__}")
        return self._bridged_forward(mels, mel_lengths, sites, mels, crop=True)

    def _bridged_forward(self, mels: Tensor, mel_lengths: Tensor | None, sites: Sequence[Sequence[TimedSite]],
                         source: Tensor, crop: bool = False) -> tuple[Tensor, LeakParts]:
        """:meth:`forward` on mels through :attr:`mel_bridge`: frame logits of each item as the wave path would
        hear the item plus :attr:`tail_samples` of silence (the same frames, the same batch independence).
        ``crop``: encode only windows of the bridged log mel around the sites (:meth:`cropped`)."""
        from leakloss.constants import MEL_BINS
        from leakloss.mel_bridge import bridged_samples

        if mels.dim() != 3:
            raise PenaltyInputError(f"mels must be [batch, frames, bins], got shape {tuple(mels.shape)}")
        if mels.shape[-1] != MEL_BINS:
            raise PenaltyInputError(f"mels have {mels.shape[-1]} bins, the mel bridge takes {MEL_BINS}: "
                                    f"[batch, frames, {MEL_BINS}]")
        if not mels.is_floating_point():
            raise PenaltyInputError(f"mels must be real float log magnitudes, got dtype {mels.dtype}")
        b, n = mels.shape[:2]
        check_site_lists(sites, b)
        if mel_lengths is None:
            mel_lengths = torch.full((b,), n, dtype=torch.long, device=mels.device)
        mel_lengths = check_lengths(mel_lengths, b, n, "mel_lengths", mels.device)
        samples = bridged_samples(mel_lengths, self.recognizer)
        max_frames = self.recognizer.frames.encoder.config.max_source_positions
        mels, bad = mask_nonfinite_items(at_least_fp32(mels), mel_lengths)
        lengths = samples.tolist()
        logits = mels.new_zeros(b, self._frames(max(lengths, default=0)), dtype=torch.float32)
        frames = torch.zeros(b, dtype=torch.long, device=mels.device)
        item_log_mels: list[Tensor] = [mels.new_zeros(0)] * b  # crop: each item's bridged log mel, encoded later
        for group in (length_groups(lengths) if b else []):
            index = torch.tensor(group, device=mels.device)
            item_mel_lengths = mel_lengths.index_select(0, index)
            heard = samples.index_select(0, index) + self.tail_samples
            enc_frames = self.recognizer.frame_count(heard, self.conv_layer).clamp(max=max_frames)
            chunk = mels.index_select(0, index)

            def encode(chunk: Tensor) -> tuple[Tensor, Tensor]:
                log_mel = self.mel_bridge.whisper_log_mel(chunk, item_mel_lengths, enc_frames)
                if crop:  # the encoder runs on the crops below; nothing here can blow up in it
                    return log_mel, log_mel.new_zeros(log_mel.shape[0], 1, 1)
                return log_mel, self.recognizer.frames.encode_mel(log_mel, self.conv_layer, enc_frames)

            log_mel, feats = encode(chunk)
            # finite but huge mels can overflow in the bridge or, through a huge log mel, in the encoder
            blown = ~(torch.isfinite(log_mel).flatten(1).all(-1) & torch.isfinite(feats).flatten(1).all(-1))
            if bool(blown.any()):  # again without them: no graph we keep holds a non-finite value
                chunk = torch.where(blown[:, None, None], torch.zeros((), dtype=chunk.dtype, device=chunk.device),
                                    chunk)
                log_mel, feats = encode(chunk)
                bad = bad.index_copy(0, index, bad.index_select(0, index) | blown)
            item_frames = self.recognizer.frame_count(samples.index_select(0, index), self.conv_layer)
            frames = frames.index_copy(0, index, item_frames.to(frames.device))
            if crop:
                for row, i in enumerate(group):
                    item_log_mels[i] = log_mel[row, :, : 2 * int(enc_frames[row])]
                continue
            g = min(self._frames(max(lengths[i] for i in group)), logits.shape[-1], feats.shape[1])
            logits = logits.index_copy(0, index, torch.nn.functional.pad(
                self.head(feats.float().transpose(1, 2)).float()[..., :g], (0, logits.shape[-1] - g)))
        if crop:
            return self._cropped_site_loss(item_log_mels, frames, bad, sites, source)
        return self._site_loss(logits, frames, bad, sites, source, quiet=frames.sum().detach() * 0)

    def crop_plan(self, sites: Sequence[Sequence[TimedSite]], frames: Sequence[int],
                  heard_frames: Sequence[int]) -> tuple[list, list[list[TimedSite]], list[int]]:
        """Where :meth:`cropped` runs the encoder: crops of each item's ``frames[b]`` encoder frames around its
        sites (:func:`leakloss.functional.crop.plan_crops` on the encoder's frames, :attr:`crop_context_s` each
        side, merged where they meet), each crop's sites shifted to its start, and the frame each crop's encoding
        stops at: its end, or ``heard_frames[b]`` (the item and its silent tail) for a crop that reaches its
        item's end, which hears that tail as the whole item does."""
        from leakloss.functional.crop import CropContext, plan_crops

        ctx = CropContext(self.crop_context_s, 0, grid=1, phase=1)
        crops, shifted = plan_crops(sites, list(frames), 1.0 / self.frame_hop_s, ctx)
        stops = [int(heard_frames[c.item]) if c.end >= int(frames[c.item]) else c.end for c in crops]
        return crops, shifted, stops

    def _cropped_site_loss(self, log_mels: list[Tensor], frames: Tensor, bad: Tensor,
                           sites: Sequence[Sequence[TimedSite]], source: Tensor) -> tuple[Tensor, LeakParts]:
        """Each item's bridged log mel ``[80, 2 f]`` (``frames [b]`` valid encoder frames, ``bad [b]`` masked
        items) -> the site loss with the encoder and head run on the crops of :meth:`crop_plan` only. Each crop's
        logits go back to its frames of its item: every site's window lies inside its crop, so the site loss is
        the whole computation's on those logits; frames no crop covers have no logit (probability 0 in
        ``parts.frame_probs``)."""
        b = len(log_mels)
        crops, _, stops = self.crop_plan(sites, frames.tolist(), [m.shape[-1] // 2 for m in log_mels])
        width = max([int(f) for f in frames.tolist()] + [0])
        item_logits = source.new_zeros(b, width, dtype=torch.float32)
        scored = torch.zeros(b, width, dtype=torch.bool, device=frames.device)
        if crops:
            sizes = [stop - c.start for c, stop in zip(crops, stops)]
            crop_logits: list[Tensor] = [item_logits.new_zeros(0)] * len(crops)
            for group in length_groups(sizes):
                longest = max(sizes[i] for i in group)
                windows = torch.stack([torch.nn.functional.pad(
                    log_mels[crops[i].item][:, 2 * crops[i].start: 2 * stops[i]], (0, 2 * (longest - sizes[i])))
                    for i in group])
                counts = torch.tensor([sizes[i] for i in group], device=frames.device)
                # each crop's frames keep their positions in the item (what the whole item's encoding gives them)
                offsets = torch.tensor([crops[i].start for i in group], device=frames.device)
                feats = self.recognizer.frames.encode_mel(windows, self.conv_layer, counts, offsets)
                blown = ~torch.isfinite(feats).flatten(1).all(-1)
                if bool(blown.any()):  # a huge log mel overflowing in the encoder: again without those crops
                    windows = torch.where(blown[:, None, None], torch.zeros((), dtype=windows.dtype,
                                                                             device=windows.device), windows)
                    feats = self.recognizer.frames.encode_mel(windows, self.conv_layer, counts, offsets)
                    bad = bad.clone()
                    for row, i in enumerate(group):
                        bad[crops[i].item] |= bool(blown[row])
                logits = self.head(feats.float().transpose(1, 2)).float()
                for row, i in enumerate(group):
                    crop_logits[i] = logits[row, : crops[i].end - crops[i].start]
            rows = torch.cat([torch.full((c.end - c.start,), c.item, dtype=torch.long) for c in crops])
            cols = torch.cat([torch.arange(c.start, c.end) for c in crops])
            rows, cols = rows.to(frames.device), cols.to(frames.device)
            item_logits = item_logits.index_put((rows, cols), torch.cat(crop_logits))  # crops never overlap
            scored = scored.index_put((rows, cols), torch.ones((), dtype=torch.bool, device=frames.device))
        loss, parts = self._site_loss(item_logits, frames, bad, sites, source, quiet=frames.sum().detach() * 0)
        if not crops and source.requires_grad:  # nothing encoded: a zero loss still on the input's graph, as
            # forward's (the bridged log mels are finite: a blown item was bridged again as silence)
            loss = loss + sum((m.sum() for m in log_mels), source.new_zeros((), dtype=torch.float32)) * 0
        return loss, parts._replace(frame_probs=parts.frame_probs * scored)

    def _vocode(self, mels: Tensor, mel_lengths: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
        """Finite mels ``[b, n, d]`` -> (waves ``[b, t]``, wave lengths ``[b]``, non-finite items ``[b]``)."""
        if self.mel_to_wave is None:
            raise ValueError("mel input needs a mel_to_wave vocoder (leakloss.vocoder.MelToWave)")
        from leakloss.vocoder import mel_lengths_to_samples, silence_past_lengths

        if mels.dim() != 3:
            raise PenaltyInputError(f"mels must be [batch, frames, bins], got shape {tuple(mels.shape)}")
        if not mels.is_floating_point():  # bool, int or complex "mels" were cast and vocoded
            raise PenaltyInputError(f"mels must be real float log-mels, got dtype {mels.dtype}")
        embed = getattr(getattr(self.mel_to_wave, "backbone", None), "embed", None)
        bins = getattr(embed, "in_channels", None)
        if bins is not None and mels.shape[-1] != bins:
            raise PenaltyInputError(f"mels have {mels.shape[-1]} bins, the vocoder takes {bins}: "
                                    f"[batch, frames, {bins}]")
        b, n = mels.shape[:2]
        if mel_lengths is not None:
            mel_lengths = check_lengths(mel_lengths, b, n, "mel_lengths", mels.device)
        elif n == 0:
            mel_lengths = torch.zeros(b, dtype=torch.long, device=mels.device)
        if b == 0:  # nothing to vocode: an empty batch of waves (loss 0, as for wave input)
            empty = torch.zeros(0, dtype=torch.long, device=mels.device)
            return mels.new_zeros(0, 0, dtype=torch.float32), empty, empty.bool()
        weight = next(self.mel_to_wave.parameters(), None)
        if weight is not None and mels.dtype != weight.dtype:  # fp16/bf16/fp64 mels into an fp32 vocoder
            mels = mels.to(weight.dtype)
        mels, bad = mask_nonfinite_items(mels, mel_lengths)  # before the vocoder: its backward would see NaN
        if mel_lengths is None:
            mel_lengths = torch.full((b,), n, dtype=torch.long, device=mels.device)
        mels = silence_past_lengths(mels, mel_lengths)  # the batch's padding never reaches an item
        waves = self.mel_to_wave(mels)
        blown = ~torch.isfinite(waves).all(-1) & ~bad  # finite but huge mels can overflow inside the vocoder
        if bool(blown.any()):  # vocode again without them, so that no graph we keep holds a non-finite value
            mels = torch.where(blown[:, None, None], torch.zeros((), dtype=mels.dtype, device=mels.device), mels)
            waves, bad = self.mel_to_wave(mels), bad | blown
        wave_lengths = torch.as_tensor(mel_lengths_to_samples(mel_lengths), device=waves.device).clamp(
            max=waves.shape[-1])
        return waves[:, : int(wave_lengths.max()) if b else 0], wave_lengths, bad

    @staticmethod
    def _parts(loss, probs, active, index, logits, frames) -> LeakParts:
        def mean_where(keep: list[bool]) -> Tensor:
            sel = torch.tensor(keep, dtype=torch.bool, device=probs.device) & active
            return probs[sel].mean().detach() if bool(sel.any()) else probs.new_zeros(())

        per_kind = {k: mean_where([s.kind == k for _, s in index]) for k in KINDS}
        contrasts = sorted({s.contrast for _, s in index})
        per_contrast = {c: mean_where([s.contrast == c for _, s in index]) for c in contrasts}
        zero = active.sum().detach() * 0
        valid = torch.arange(logits.shape[-1], device=logits.device) < frames.to(logits.device)[:, None]
        frame_probs = torch.where(valid, torch.sigmoid(logits), torch.zeros((), device=logits.device))
        return LeakParts(loss.detach(), per_kind, per_contrast, active.sum().detach(), probs.detach(),
                         frame_probs.detach(), zero, zero, active.detach(), frames.detach())


#: Heads by name (:meth:`LeakPenalty.load` ``head=``): the shipped default, and recognizer A's raw-conv head, which
#: stays loadable by this name when the default moves to another recognizer (heads_espeak first, then the default's
#: folder while A's head is still the default there).
NAMED_HEADS = {"rawconv": (SHIPPED_HEADS,), "rawconv_a": (ESPEAK_HEADS, SHIPPED_HEADS)}


def named_head_path(name: str) -> Path:
    """The files of head ``name`` (:data:`NAMED_HEADS`), else :class:`HeadLoadError`."""
    if name not in NAMED_HEADS:
        raise HeadLoadError(f"unknown head {name!r}; named heads: {', '.join(NAMED_HEADS)} (or give head_path)")
    for folder in NAMED_HEADS[name]:
        path = folder / "rawconv.safetensors"
        if not path.exists():
            continue
        if name == "rawconv_a":  # A's head by name: another recognizer's head in that folder is not it
            card = load_head(path)[1]
            if card.recognizer.split("@", 1)[0] != "a":
                continue
        return path
    raise HeadLoadError(f"head {name!r} is not installed (looked in {', '.join(str(f) for f in NAMED_HEADS[name])})")


def card_frame_features(card: HeadCard) -> dict:
    """What the head's frames are: ``{"source": ..., "layer": ...}`` from its card (:data:`LEGACY_FRAME_FEATURES`
    for cards written before the field)."""
    return dict(card.features) if card.features else dict(LEGACY_FRAME_FEATURES)


def check_frame_recognizer(recognizer: nn.Module, head: nn.Module, layer: int | None = None,
                           source: str | None = None, trained_on: str | None = None) -> None:
    """The recognizer must offer frame features (of ``source`` when given: what the head was trained on) as wide
    as the head's input, at ``layer``; else RecognizerLoadError naming both (issue 43: recognizer w under A's head
    loaded with a warning, then failed in the first forward)."""
    from leakloss.acoustic.recognizer import RecognizerLoadError

    name = getattr(recognizer, "name", type(recognizer).__name__)
    has = getattr(recognizer, "frame_source", None)
    if has is None or not callable(getattr(recognizer, "frame_features", None)):
        raise RecognizerLoadError(f"recognizer {name}: it offers no frame features (frame_features) for the leak "
                                  "penalty's head")
    if source is not None and has != source:
        if source == LEGACY_FRAME_FEATURES["source"]:  # issue 43's wording, kept
            raise RecognizerLoadError(f"recognizer {name}: the leak penalty reads a wav2vec2 recognizer's conv stack "
                                      f"for this head (trained on {trained_on or 'a wav2vec2 recognizer'}), which this "
                                      f"one has not (its frames: {has}); load the head trained on it")
        raise RecognizerLoadError(f"recognizer {name}: its frame features are {has}, the head was trained on "
                                  f"{source} ({trained_on or 'another recognizer'}); load the head trained on it")
    try:
        width = recognizer.frame_channels(layer)
    except (ValueError, IndexError) as err:
        raise RecognizerLoadError(f"recognizer {name}: {err}") from err
    in_channels = getattr(head, "in_channels", None)
    if in_channels is not None and width != in_channels:
        raise RecognizerLoadError(f"recognizer {name}: its frame features have {width} channels, the head reads "
                                  f"{in_channels}: the head was trained on another recognizer")


def check_site_lists(sites: object, b: int) -> None:
    """``sites``: one sequence of :class:`TimedSite` per item of a ``b``-item batch, else PenaltyInputError."""
    if isinstance(sites, (str, bytes)) or not isinstance(sites, Sequence):
        raise PenaltyInputError(f"sites must be one list of TimedSite per item, got {type(sites).__name__}")
    if any(isinstance(item_sites, TimedSite) for item_sites in sites):
        raise PenaltyInputError("sites must have one list of TimedSite per item, not TimedSites: "
                                "e.g. sites=[[site, ...]]")
    if len(sites) != b:
        raise PenaltyInputError(f"sites must have one list per item: {len(sites)} lists for {b} items")
    for i, item_sites in enumerate(sites):
        if isinstance(item_sites, (str, bytes)) or not isinstance(item_sites, Sequence):
            raise PenaltyInputError(f"sites[{i}] must be a list of TimedSite, got {type(item_sites).__name__}")
        for site in item_sites:
            if not isinstance(site, TimedSite):
                hint = " (a cache row: TimedSite(**row))" if isinstance(site, dict) else ""
                raise PenaltyInputError(f"sites[{i}] holds a {type(site).__name__}, not a TimedSite{hint}")


def check_wave(wave: object, name: str) -> None:
    """``wave`` must be one reading: a 1-D float tensor ``[samples]``, else PenaltyInputError (checked before its
    text, so a wrong shape is an error whatever the text says)."""
    if not isinstance(wave, Tensor):
        raise PenaltyInputError(f"{name} must be a tensor [samples], got {type(wave).__name__} (torch.as_tensor(array))")
    if wave.dim() != 1:
        raise PenaltyInputError(f"{name} must be one wave [samples], got shape {tuple(wave.shape)}")
    if not wave.is_floating_point():
        raise PenaltyInputError(f"{name} must be real float samples, got dtype {wave.dtype} (int16 PCM: divide by 32768)")


def check_lengths(lengths: Tensor, b: int, t: int, name: str, device: torch.device) -> Tensor:
    """``lengths [b]`` whole numbers in ``[0, t]`` -> long on ``device`` (that of the data), else PenaltyInputError."""
    try:
        lengths = torch.as_tensor(lengths)
    except (TypeError, ValueError, RuntimeError) as err:  # [200, None], ["200"]: not numbers
        raise PenaltyInputError(f"{name} must be numbers of samples/frames, got {lengths!r:.80}") from err
    if lengths.shape != (b,):
        raise PenaltyInputError(f"{name} must have one length per item: shape {tuple(lengths.shape)} for {b} items")
    if lengths.dtype == torch.bool or lengths.is_complex():  # True would read as a length of 1
        raise PenaltyInputError(f"{name} must be numbers of samples/frames, got dtype {lengths.dtype}")
    if lengths.is_floating_point() and not bool((lengths == lengths.round()).all()):
        raise PenaltyInputError(f"{name} must be whole numbers, got {lengths.tolist()}")
    if bool((lengths < 0).any()):
        raise PenaltyInputError(f"{name} must lie in [0, {t}], got {lengths.tolist()}")
    if lengths.is_floating_point():
        lengths = lengths.clamp(max=t + 1)  # whole numbers beyond int64 would wrap below t
    lengths = lengths.long()  # compared in int64: t wraps in a small dtype (70000 in int16)
    if bool((lengths > t).any()):
        raise PenaltyInputError(f"{name} must lie in [0, {t}], got {lengths.tolist()}")
    return lengths.to(device)


#: Names that lived here before the reward and site placement got their own homes; still importable from here.
_MOVED = {
    "SitePlacement": "leakloss.site_placement", "locate_sites": "leakloss.site_placement",
    "place_sites": "leakloss.site_placement", "placement_id": "leakloss.site_placement",
    "site_key": "leakloss.site_placement", "place_dataset_sites": "leakloss.site_placement",
    "SITE_CACHE_VERSION": "leakloss.site_placement",
    "WORST_REWARD": "leakloss.reward", "RewardResult": "leakloss.reward", "leak_reward": "leakloss.reward",
    "leak_reward_details": "leakloss.reward", "check_max_per": "leakloss.reward",
}


def __getattr__(name: str):
    if name in _MOVED:
        import importlib

        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
