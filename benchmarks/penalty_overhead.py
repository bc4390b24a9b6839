"""Benchmark: what the leak penalty adds to an F5-TTS training step, and what the scorer's recognizer costs.

The penalty runs on ``--recognizer`` (default: the recognizer the shipped head's card names,
``leakloss/assets/heads/rawconv.json``): ``a``, recognizer A's wav2vec2 conv stack to layer 4 (64 channels, kernels
10,3,3,3,3, strides 5,2,2,2,2; 5 ms frames) under the shipped head (or ``conf/head/rawconv.yaml``'s
``RawConvHead(64, 48, 5, 3, members 3)``); ``wb``, the multilingual Whisper base encoder (d_model 512, 6 layers,
8 heads, 80 mel bins, 2 convs; 20 ms frames) run on each item's own length, as recognizer wb runs it, under the
shipped head when its card names wb, the encoder run only to the state the head reads (its card's
``features.layer``: 4 of 6 since 2026-12-06), else ``conf/head/whisper_frame.yaml``'s frame head
(``RawConvHead(512, 64, 3, 3, members 3)``) with random weights on the output; ``w``, Whisper tiny.en (384, 4
layers) padded to 30 s. The Whisper architectures are built offline with random weights (the same FLOPs;
:func:`whisper_architecture`, shapes checked against the real recognizers when they are installed), so the
benchmark runs on a fresh clone.

Figures, measured in one run:

``penalty_flops_share``
    FLOPs of the penalty's forward + backward (to the mel) per training step, as a share of one
    F5 v1 Base training step (DiT dim 1024, depth 22, heads 16, ff_mult 2, text_dim 512,
    conv_layers 4, 100 mels; transformer forward on ``[b, n, 100]`` + backward) at its published
    batch of 38,400 mel frames per GPU. The penalty: the released ``charactr/vocos-mel-24khz``
    generator (ConvNeXt backbone dim 512 / intermediate 1536 / 8 layers + ISTFT head n_fft 1024
    hop 256, random weights, built offline from ``vocos`` classes) on the mels plus their silent tail
    (``VOCODER_TAIL_FRAMES``), resample 24k -> 16k, the recognizer's frame features (see above) on the items plus
    the penalty's ``tail_samples`` and the head. Upper bound: every item of the batch has sites and every step
    pays (no CFG text drop). Counted with ``torch.utils.flop_counter.FlopCounterMode`` on fake
    tensors (no memory, no compute), with two additions (see ``_flop_counter``): CPU SDPA kernels and
    the weight gradient of grouped convolutions. The inverse FFT of the ISTFT head is not an op the
    counter knows; it is added analytically (2.5 N log2 N per frame and direction); Whisper's log-mel STFT
    (n_fft 400) is left out (< 0.1% of its encoder). The stage sum is checked against the whole
    ``LeakPenalty(mels=...)`` counted on real tensors (printed).

``penalty_flops_share_cropped``
    The same F5 v1 Base step with the penalty as ``LeakAwareCFM(leak_crop=True)`` runs it
    (:mod:`leakloss.functional.crop` via ``integrations.f5_tts.cropped_penalty``): only crops around the
    sites inside F5's infilled span are vocoded (site window + the context computed from the released Vocos /
    recognizer / head modules: a wav2vec2 stack's receptive field, or for Whisper's global attention its crop
    margin ``WHISPER_CROP_MARGIN_S``, 1 s each side), in length groups padded to their longest as the code
    batches them, and only the scored regions go through the recognizer and head (also in length groups, each
    with the penalty's tail of zeros). Sites are drawn per utterance as a Poisson
    process at ``--crop-site-density`` sites/s (default 0.6: the built-in sentences' 0.24 testable sites/word
    at 2.5 words/s), ``--site-duration`` long; the infilled span is F5's (70-100% of each utterance, random
    start); ``--crop-draws`` seeded batches, the mean share is reported. Issue 40's target on the Whisper
    encoder: at most 2%. On a Whisper recognizer the share at other crop margins (``--margin-sensitivity``,
    draw 0) is printed before the last line.

``penalty_flops_share_default``
    The same F5 v1 Base step with the penalty as ``finetune-f5`` runs it by default: on ``leak.item_fraction``
    (``--item-fraction``; the shipped config's, 1: every item) of the batch's items, those with the largest ``t``
    (:func:`integrations.f5_tts.largest_t_items`; every item has sites here, so this is the upper bound), cropped
    on a wav2vec2 recognizer and whole on a Whisper one (``leak.crop=null``: a crop of Whisper states is another
    function of the audio, docs/penalty.md). Every penalty step pays it: it is a per-step figure, not an average
    over skipped steps (``leak.every``) or CFG text drops. The share at other fractions
    (``--fraction-sensitivity``, default 0.25: the whole-item wb penalty at 1.9%) is printed before the last line.

``wall_ratio``
    Wall clock of a tiny F5 (``tiny_f5()``: dim 64, depth 2) training step (forward + backward +
    AdamW step, batch 4 of ~2 s utterances, real CPU) WITH the penalty (``LeakAwareCFM`` with
    ``LeakPenalty(the recognizer above, its head, MelToWave.tiny(0))``, ``leak_weight=1``,
    two sites per text) divided by WITHOUT it; CFG drops off so every step pays; steps of the two
    models interleaved, median of ``--steps`` after warm-up. The tiny F5 is ~1000x smaller than
    Base while the recognizer keeps its real size, so this ratio says little about
    Base: it is the end-to-end check that the penalty runs in a real training step, and what it
    costs next to a very small model.

``scorer_speed_before`` / ``scorer_speed_after``
    Seconds of audio per second of CPU wall clock of the scorer's recognizer pass (``recognizer(wave[None])``,
    no gradient, one reading at a time, as ``Scorer`` runs it), before: w (Whisper tiny.en padded to 30 s, the
    scorer's until 2026-12-05), after: wb (Whisper base, own length, ``DEFAULT_RECOGNIZER`` since), with their real
    weights, on the same ``--scorer-clips`` clips (real test-speaker recordings of
    ``shared/data/real-nepali-speech`` cut to ``--scorer-seconds``, else speech-like signals), interleaved, after a
    warm-up, on ``--scorer-threads`` torch threads (default 1: on a busy 2-core machine two threads wait on each
    other and the figures swing 3x). ``nan`` (and why, on stderr) when either recognizer's weights are not
    installed. Not the penalty's recognizer: measured whatever
    ``--recognizer`` is.

``recognizer``
    The penalty's recognizer the shares and the ratio were measured on.

``margin_flops_share``
    The same F5 v1 Base step with the text-paired path-margin term (``finetune-f5 leak.margin_weight > 0``,
    :func:`margin_parts_flops`) on every item, whole: vocoder, resampler, the Whisper encoder through all its
    layers and the phone head (BiLSTM counted analytically); ``nan`` on recognizer A (the term runs on Whisper
    recognizers here). Counted on ``--recognizer`` (``finetune-f5``'s ``leak.margin_recognizer`` defaults to the same
    wb); a per-step figure that leaves out the planning pass per utterance (vocoder + recognizer forward on its
    ground truth, without gradient, again whenever the utterance has left the 20,000 most recently planned). Its share at ``--fraction-sensitivity`` is printed before the
    last line.

Also printed before the last line: ``site_window_flops_share=...``, the earlier rough estimate with fixed
crops (``--site-density`` sites/s, ``--window-margin`` each side).

Run: ``OMP_NUM_THREADS=2 python benchmarks/penalty_overhead.py [--recognizer wb]`` (about 2 min for a, 4-5 min
for wb on 2 busy cores; ``OMP_NUM_THREADS=1`` for one). The last line is ``penalty_flops_share=X.XXXX
penalty_flops_share_cropped=Z.ZZZZ penalty_flops_share_default=D.DDDD penalty_flops_share_bridge=G.GGGG
penalty_flops_share_bridge_cropped=C.CCCC margin_flops_share=M.MMMM margin_flops_share_bridge=N.NNNN wall_ratio=Y.YY scorer_speed_before=B.BB
scorer_speed_after=A.AA recognizer=NAME`` (every item whole, every item cropped, then what ``finetune-f5`` runs by
default, the mel bridge whole, the mel bridge with the encoder on crops, the path-margin term through the vocoder
and through the mel bridge).

``margin_flops_share_bridge``
    The path-margin term heard through the mel bridge (``PathMarginPenalty(mel_bridge=...)``,
    :func:`margin_bridge_parts_flops`): the bridge, the Whisper encoder through all its layers and the phone head,
    every item whole; no vocoder. A library option: ``finetune-f5``'s ``leak.mel_bridge`` leaves the margin term on
    the vocoder, since its direction check missed the half on the bridge (docs/penalty.md).

``penalty_flops_share_bridge_cropped``
    ``leak.mel_bridge=true leak.crop=true`` (:meth:`leakloss.penalty.LeakPenalty.cropped`): every item's mels
    bridged whole, then Whisper's encoder (to the head's state) and the head only on crops of
    ``crop_context_s`` (site padding + head context + the 1 s Whisper margin + a hop) each side of the sites of
    the same draws as the cropped share, in the length groups the code runs. ``nan`` on recognizer A.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torchaudio.functional as AF
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from leakloss.acoustic.whisper_recognizer import WHISPER_FRAME_RMS, WHISPER_FRAME_SOURCE
from leakloss.constants import DEFAULT_RECOGNIZER, MEL_BINS, MEL_HOP, MEL_N_FFT, MEL_SAMPLE_RATE, SAMPLE_RATE
from leakloss.heads import RawConvHead
from leakloss.penalty import LeakPenalty
from leakloss.timing import TimedSite
from leakloss.vocoder import VOCODER_TAIL_FRAMES, MelToWave

F5_BATCH_FRAMES = 38_400  # F5TTS_v1_Base.yaml: batch_size_per_gpu (frame-wise), max_samples 64
FRAME_RATE = MEL_SAMPLE_RATE / MEL_HOP  # 93.75 mel frames per second
TARGET_SHARE = 0.05
#: the issue's bound on the cropped penalty's share of a step (issue 40: on the Whisper encoder)
TARGET_SHARE_CROPPED = 0.02
RECOGNIZERS = ("a", "wb", "w")
WHISPER_RECOGNIZERS = ("w", "wb")
#: Whisper encoders' shapes (OpenAI's model dims), as :meth:`WhisperFrames.load` reads them from the weights: the
#: benchmark builds them with random weights, so it runs without the encoders installed
WHISPER_ENCODER_DIMS = {
    "tiny.en": {"d_model": 384, "encoder_layers": 4, "encoder_attention_heads": 6, "encoder_ffn_dim": 1536,
                "num_mel_bins": 80, "max_source_positions": 1500},
    "base": {"d_model": 512, "encoder_layers": 6, "encoder_attention_heads": 8, "encoder_ffn_dim": 2048,
             "num_mel_bins": 80, "max_source_positions": 1500},
}
#: the scorer's recognizer before and after issue 40 (w padded to 30 s; wb at each clip's own length)
SCORER_BEFORE, SCORER_AFTER = "w", DEFAULT_RECOGNIZER

aten = torch.ops.aten


# ---------------------------------------------------------------------------------------------------------------
# FLOP counting


def _flop_counter() -> FlopCounterMode:
    """``FlopCounterMode`` with two fixes for this workload.

    - CPU attention: ``F.scaled_dot_product_attention`` on CPU dispatches to
      ``_scaled_dot_product_flash_attention_for_cpu`` (+ ``_backward``), which torch's table lacks (it
      would count 0); counted with torch's own SDPA formulas.
    - Grouped / depthwise convolutions: torch's ``convolution_backward`` formula counts the weight
      gradient as if the conv were dense (x ``groups``: 512x too much for F5's depthwise text convs);
      the weight gradient costs exactly the forward's multiply-adds, counted so here.
    """
    from torch.utils import flop_counter as fc

    def sdpa_cpu(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return fc.sdpa_flop_count(query_shape, key_shape, value_shape)

    def sdpa_cpu_backward(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs):
        return fc.sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)

    def conv_backward(grad_out_shape, x_shape, w_shape, _bias, _stride, _padding, _dilation, transposed,
                      _output_padding, _groups, output_mask, out_shape) -> int:
        flops = 0
        if output_mask[0]:  # grad input: a transposed conv of grad_out with the (per-group) weight
            flops += fc.conv_flop_count(grad_out_shape, w_shape, fc.get_shape(out_shape[0]), not transposed)
        if output_mask[1]:  # grad weight: same multiply-adds as the forward
            flops += fc.conv_flop_count(x_shape, w_shape, grad_out_shape, transposed)
        return flops

    mapping: dict = {aten.convolution_backward: conv_backward}
    for name, formula in (("_scaled_dot_product_flash_attention_for_cpu", sdpa_cpu),
                          ("_scaled_dot_product_flash_attention_for_cpu_backward", sdpa_cpu_backward)):
        if hasattr(aten, name):
            mapping[getattr(aten, name)] = formula
    return FlopCounterMode(display=False, custom_mapping=mapping)


def count_flops(fn: Callable[[], None]) -> tuple[int, dict[str, int]]:
    with _flop_counter() as counter:
        fn()
    per_op = {str(k): int(v) for k, v in counter.get_flop_counts().get("Global", {}).items()}
    return int(counter.get_total_flops()), per_op


def fwd_bwd(module: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> Callable[[], None]:
    """Forward + backward of ``module`` to its input (frozen weights: input gradient only)."""

    def run() -> None:
        inp = x.detach().requires_grad_(True)
        out = module(inp)
        out.backward(torch.ones_like(out))

    return run


def counted(module: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> tuple[int, torch.Tensor]:
    """FLOPs of :func:`fwd_bwd` of ``module`` on ``x``, and its output (detached): one forward, not two."""
    held: list[torch.Tensor] = []

    def run() -> None:
        inp = x.detach().requires_grad_(True)
        out = module(inp)
        out.backward(torch.ones_like(out))
        held.append(out.detach())

    return count_flops(run)[0], held[0]


def irfft_flops(frames: int, n_fft: int = MEL_N_FFT) -> int:
    """Analytic: a real FFT of size N ~ 2.5 N log2 N flops; forward (irfft) + backward (its adjoint)."""
    return int(2 * frames * 2.5 * n_fft * math.log2(n_fft))


class CountableISTFTHead(nn.Module):
    """Vocos' ``ISTFTHead`` forward, op for op, minus its ``assert (window_envelope > 1e-11).all()``.

    The assert reads a value (data-dependent), which fake tensors cannot; it costs no FLOPs. Checked
    against the real head on real tensors in :func:`check_istft_copy`.
    """

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.head = head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head.out(x).transpose(1, 2)
        mag, p = x.chunk(2, dim=1)
        mag = torch.clip(torch.exp(mag), max=1e2)
        spec = mag * (torch.cos(p) + 1j * torch.sin(p))
        istft = self.head.istft
        pad = (istft.win_length - istft.hop_length) // 2
        _, _, frames = spec.shape
        ifft = torch.fft.irfft(spec, istft.n_fft, dim=1, norm="backward") * istft.window[None, :, None]
        size = (frames - 1) * istft.hop_length + istft.win_length
        fold = dict(output_size=(1, size), kernel_size=(1, istft.win_length), stride=(1, istft.hop_length))
        y = nn.functional.fold(ifft, **fold)[:, 0, 0, pad:-pad]
        window_sq = istft.window.square().expand(1, frames, -1).transpose(1, 2)
        envelope = nn.functional.fold(window_sq, **fold).squeeze()[pad:-pad]
        return y / envelope


def check_istft_copy(vocoder: MelToWave) -> float:
    """Max abs difference between the real ISTFT head and :class:`CountableISTFTHead` (real tensors)."""
    with torch.no_grad():
        hidden = vocoder.backbone(torch.randn(1, MEL_BINS, 40))
        return float((vocoder.head(hidden) - CountableISTFTHead(vocoder.head)(hidden)).abs().max())


class Resample(nn.Module):
    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        return AF.resample(wave, MEL_SAMPLE_RATE, SAMPLE_RATE)


class FrameFeatures(nn.Module):
    """The recognizer's frame features as ``LeakPenalty.frame_logits`` asks for them (``normalize=False``): a
    wav2vec2 recognizer's conv stack to its layer, or a Whisper recognizer's encoder state (:func:`whisper_states`,
    which fake tensors can run)."""

    def __init__(self, recognizer: nn.Module, layer: int) -> None:
        super().__init__()
        self.recognizer, self.layer = recognizer, layer

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        if self.recognizer.frame_source == WHISPER_FRAME_SOURCE:
            return whisper_states(self.recognizer, wave, self.layer)
        return self.recognizer.frame_features(wave, None, self.layer, normalize=False)[0]


def whisper_states(recognizer: nn.Module, wave: torch.Tensor, layer: int) -> torch.Tensor:
    """``WhisperRecognizer.frame_features(wave, layer=layer, normalize=False)`` on ``[b, t]`` items all ``t`` long,
    op for op, with the frame counts taken from the shape: the library reads them from a lengths tensor
    (``int(frames.max())``), which fake tensors cannot. No key mask (every item is ``t`` long, so the library adds
    none either). Checked against the real penalty on real tensors in :func:`check_against_full_penalty`."""
    from leakloss.acoustic.whisper_encoder import N_SAMPLES, SAMPLES_PER_FRAME

    frames = recognizer.frames
    b, t = wave.shape
    n = max(1, -(-t // N_SAMPLES))  # 30 s windows
    windows = nn.functional.pad(wave.float(), (0, n * N_SAMPLES - t)).reshape(b * n, N_SAMPLES)
    own = -(-min(t, N_SAMPLES) // SAMPLES_PER_FRAME) if frames.own_length else None  # the longest window's frames
    mel = frames.mel(windows * WHISPER_FRAME_RMS, own)
    states = frames.encode_mel(mel, layer)  # [b * n, f, d]
    states = states.reshape(b, -1, states.shape[-1])[:, : -(-t // SAMPLES_PER_FRAME)]
    return states.float().transpose(1, 2)


def whisper_all_states(recognizer: nn.Module, wave: torch.Tensor) -> torch.Tensor:
    """``WhisperRecognizer.hidden_states(wave)`` (every state ``[b, l, f, d]``, as the phone head mixes them) on
    ``[b, t]`` items all ``t`` long (at most 30 s), op for op, frame counts from the shape (as
    :func:`whisper_states`)."""
    from leakloss.acoustic.whisper_encoder import N_SAMPLES, SAMPLES_PER_FRAME

    frames = recognizer.frames
    t = wave.shape[-1]
    if t > N_SAMPLES:
        raise ValueError("whisper_all_states counts items of at most 30 s")
    windows = nn.functional.pad(wave.float(), (0, N_SAMPLES - t))
    own = -(-t // SAMPLES_PER_FRAME) if frames.own_length else None
    raw, last = frames._encode(frames.mel(windows, own))  # the recognizer hears the wave as given
    return torch.stack(raw[:-1] + [last], 1)[:, :, : -(-t // SAMPLES_PER_FRAME)]


def lstm_flops(lstm: nn.LSTM, batch: int, steps: int) -> int:
    """Multiply-add FLOPs of ``lstm``'s forward plus its backward to the input (frozen weights: the same matmuls
    again), counted analytically: the flop counter does not see the fused LSTM op. Per step, layer and direction
    the gates cost ``2 * 4h * (in + h)``; elementwise gate ops are left out, as elsewhere."""
    h, directions = lstm.hidden_size, 2 if lstm.bidirectional else 1
    total = 0
    for layer in range(lstm.num_layers):
        width = lstm.input_size if layer == 0 else h * directions
        total += directions * 2 * 4 * h * (width + h)
    return 2 * batch * steps * total


def vocoder_stage_flops(vocoder: MelToWave, batch: int, frames: int, out: dict[str, int]) -> torch.Tensor:
    """Under ``FakeTensorMode``: the vocoder on ``[batch, frames, 100]`` mels plus their silent tail
    (:data:`~leakloss.vocoder.VOCODER_TAIL_FRAMES`) and the resampler to 16 kHz, forward + backward FLOPs added to
    ``out`` by stage (the ISTFT's inverse FFT analytically); returns the 16 kHz waves cut to the items' samples."""
    from leakloss.vocoder import mel_lengths_to_samples

    vocoded = frames + VOCODER_TAIL_FRAMES
    mel = torch.randn(batch, vocoded, MEL_BINS)
    out["vocoder backbone"], hidden = counted(lambda m: vocoder.backbone(m.transpose(1, 2)), mel)
    out["vocoder ISTFT head"], wave24 = counted(CountableISTFTHead(vocoder.head), hidden)
    out["vocoder ISTFT head"] += irfft_flops(batch * vocoded)
    out["resampler"], wave16 = counted(Resample(), wave24)
    return wave16[:, : int(mel_lengths_to_samples(frames))]


def margin_parts_flops(recognizer: nn.Module, vocoder: MelToWave, batch: int, frames: int) -> dict[str, int]:
    """Forward + backward (to the mel) FLOPs of each stage of the text-paired path-margin term
    (:class:`leakloss.margin_penalty.PathMarginPenalty`, ``LeakAwareCFM(margin_penalty=...)``) on ``[batch, frames,
    100]`` mels, whole items: the vocoder and resampler as the penalty's, the Whisper encoder through **all** its
    layers (the phone head mixes every state), the phone head (its BiLSTM counted by :func:`lstm_flops`) and
    the log-softmax. The CTC lattices over the sites' crops (two paths, three crops a site, ~2L+1 states over a
    word's frames) are elementwise: not counted, as the other elementwise ops (a few MFLOP a batch)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    out: dict[str, int] = {}
    with FakeTensorMode(allow_non_fake_inputs=True):
        wave16 = vocoder_stage_flops(vocoder, batch, frames, out)
        out["whisper encoder, all layers"], states = counted(lambda w: whisper_all_states(recognizer, w), wave16)
        head = recognizer.head
        out["phone head"], _ = counted(lambda x: torch.log_softmax(head(x).float(), -1), states)
    out["phone head"] += lstm_flops(head.lstm, batch, states.shape[2])
    return out


def margin_bridge_parts_flops(recognizer: nn.Module, bridge: nn.Module, batch: int, frames: int) -> dict[str, int]:
    """Forward + backward (to the mel) FLOPs of each stage of the path-margin term heard through the mel bridge
    (``PathMarginPenalty(mel_bridge=...)(mels=...)``, or ``LeakAwareCFM`` given such a term) on ``[batch, frames,
    100]`` mels, whole items: the bridge on the mels plus the silent frames its receptive field reads (as
    :meth:`leakloss.mel_bridge.MelBridge.whisper_log_mel`), the Whisper encoder through all its layers on the items'
    own 20 ms frames (no tail: the term hears the item alone) and the phone head; no vocoder, no resampler, no STFT."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from leakloss.functional.mel_bridge import bridge_frames
    from leakloss.mel_bridge import bridged_samples

    encoder_frames = int(recognizer.frame_count(int(bridged_samples(torch.tensor([frames]), recognizer)[0])))
    n_out, grid, needed = bridge_frames(encoder_frames, bridge.receptive_frames)
    out: dict[str, int] = {}
    with FakeTensorMode(allow_non_fake_inputs=True):
        mel = torch.randn(batch, max(frames, needed), MEL_BINS)
        lengths, out_lengths = torch.full((batch,), frames), torch.full((batch,), n_out)
        out["mel bridge"], log_mel = counted(lambda m: bridge(m, lengths, grid, out_lengths)[..., :n_out], mel)
        out["whisper encoder, all layers"], states = counted(lambda x: recognizer.frames.mel_states(x), log_mel)
        head = recognizer.head
        out["phone head"], _ = counted(lambda x: torch.log_softmax(head(x).float(), -1), states)
    out["phone head"] += lstm_flops(head.lstm, batch, states.shape[2])
    return out


def recognizer_part(recognizer: nn.Module) -> str:
    """The name of the recognizer's stage in the printed breakdown."""
    return "whisper encoder" if recognizer.frame_source == WHISPER_FRAME_SOURCE else "recognizer convs"


#: build_head's note when it returns the shipped head (main then counts the penalty to that head's frame layer).
SHIPPED_HEAD_NOTE = "shipped rawconv head"


def _shipped_card() -> dict:
    from leakloss.penalty import SHIPPED_HEADS

    return json.loads((SHIPPED_HEADS / "rawconv.json").read_text(encoding="utf-8"))


def shipped_head_recognizer() -> str:
    """The recognizer the shipped penalty head was trained on (its card, ``rawconv.json``): the default."""
    return _shipped_card()["recognizer"].split("@", 1)[0]


def shipped_head_layer(recognizer_name: str) -> int | None:
    """The frame layer the shipped penalty head reads (its card's ``features.layer``) when it was trained on
    ``recognizer_name``, else None (the recognizer's default frames): the penalty runs the encoder only that far."""
    card = _shipped_card()
    if card["recognizer"].split("@", 1)[0] != recognizer_name:
        return None
    return card.get("features", {}).get("layer")


def whisper_architecture(name: str, seed: int = 0):
    """Embedded Whisper recognizer ``name`` (w, wb) with random weights, offline: the encoder its
    ``config.json`` names (:data:`WHISPER_ENCODER_DIMS`), run as it runs (``own_length``), and its phone head."""
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    from leakloss.acoustic.recognizer import EMBEDDED_DIR
    from leakloss.acoustic.whisper_encoder import WhisperFrames
    from leakloss.acoustic.whisper_recognizer import WhisperPhoneHead, WhisperRecognizer

    folder = EMBEDDED_DIR / name
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    encoder_name = config.get("encoder_name", "tiny.en")  # as WhisperRecognizer.load reads it
    # as WhisperFrames.load builds it from the weights
    whisper = WhisperConfig(**WHISPER_ENCODER_DIMS[encoder_name], activation_function="gelu", dropout=0.0,
                            attention_dropout=0.0, activation_dropout=0.0)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        frames = WhisperFrames(WhisperEncoder(whisper), source=f"{encoder_name} architecture",
                               own_length=bool(config.get("own_length", False)))
        head = WhisperPhoneHead(**config["head"])
    return WhisperRecognizer(frames, head, vocab, name=f"{name}-architecture", encoder_name=encoder_name)


def build_recognizer(name: str = "a"):
    """Recognizer ``name``'s architecture for counting and the tiny-F5 step: the embedded recognizer A when
    built, else A's architecture with random weights; a Whisper recognizer's architecture with random weights
    (:func:`whisper_architecture`: the same FLOPs, and no encoder weights needed)."""
    from leakloss.acoustic.recognizer import EMBEDDED_DIR, Recognizer
    from leakloss.acoustic.recognizer_training import RecognizerArchitecture, build_model, build_vocab

    if name in WHISPER_RECOGNIZERS:
        rec = whisper_architecture(name)
        how = "own length" if rec.frames.own_length else "padded to 30 s"
        return rec, (f"recognizer {name} architecture (Whisper {rec.encoder_name} encoder, d {rec.frames.dim}, "
                     f"{len(rec.frames.encoder.layers)} layers, {how}), random weights")
    if (EMBEDDED_DIR / "a" / "model.safetensors").exists():
        return Recognizer.load("a"), "embedded recognizer A"
    vocab = build_vocab([])
    with torch.random.fork_rng():
        model = build_model(RecognizerArchitecture(), vocab, 0)
    return Recognizer(model, vocab, name="a-architecture"), "recognizer A architecture, random weights (A not built)"


def build_head(recognizer_name: str, in_channels: int) -> tuple[RawConvHead, str]:
    """The shipped penalty head when its card names ``recognizer_name`` (and its width is ``in_channels``), else the head its training config gives
    that recognizer (``conf/head/rawconv.yaml`` for A, ``whisper_frame.yaml`` for a Whisper recognizer) with
    random weights."""
    from importlib import resources

    from omegaconf import OmegaConf

    from leakloss.heads import load_head
    from leakloss.penalty import SHIPPED_HEADS

    path = SHIPPED_HEADS / "rawconv.safetensors"
    if path.exists() and shipped_head_recognizer() == recognizer_name:
        head, _ = load_head(path)
        if isinstance(head, RawConvHead) and head.in_channels == in_channels:  # a smaller stand-in encoder: its own
            return head, SHIPPED_HEAD_NOTE
    conf = "whisper_frame.yaml" if recognizer_name in WHISPER_RECOGNIZERS else "rawconv.yaml"
    model = OmegaConf.to_container(OmegaConf.create(
        resources.files("leakloss.conf").joinpath(f"head/{conf}").read_text(encoding="utf-8")).model)
    shape = {k: v for k, v in model.items() if k != "_target_"} | {"in_channels": in_channels}
    with torch.random.fork_rng():
        torch.manual_seed(0)
        head = RawConvHead(**shape)
    return head, (f"RawConvHead({', '.join(f'{k}={v}' for k, v in shape.items())}) of conf/head/{conf}, "
                  "random weights")


def released_vocos() -> MelToWave:
    """``charactr/vocos-mel-24khz`` generator shapes (its config.yaml), random weights, offline."""
    from vocos.heads import ISTFTHead
    from vocos.models import VocosBackbone

    with torch.random.fork_rng():
        torch.manual_seed(0)
        backbone = VocosBackbone(input_channels=MEL_BINS, dim=512, intermediate_dim=1536, num_layers=8)
        head = ISTFTHead(dim=512, n_fft=MEL_N_FFT, hop_length=MEL_HOP, padding="same")
    return MelToWave(backbone, head)


def _v1_base_arch() -> dict:
    from importlib import resources

    from omegaconf import OmegaConf

    text = resources.files("leakloss.conf").joinpath("f5/f5_v1_base.yaml").read_text(encoding="utf-8")
    return OmegaConf.to_container(OmegaConf.create(text).arch)


def f5_step_flops(batch: int, frames: int) -> int:
    """F5 v1 Base: transformer forward on ``[batch, frames, 100]`` + backward of the flow MSE (fake tensors)."""
    from f5_tts.model import DiT
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        # the shipped preset's arch (leakloss/conf/f5/f5_v1_base.yaml), so the benchmark times what finetune-f5 builds
        dit = DiT(**_v1_base_arch(), mel_dim=MEL_BINS, text_num_embeds=2545)  # pinyin vocab: embeddings cost no FLOPs
        x1, x0 = torch.randn(batch, frames, MEL_BINS), torch.randn(batch, frames, MEL_BINS)
        t = torch.rand(batch)
        x_t = (1 - t[:, None, None]) * x0 + t[:, None, None] * x1
        text = torch.randint(1, 2545, (batch, frames // 4))

        def step() -> None:
            pred = dit(x=x_t, cond=x1, text=text, time=t, drop_audio_cond=False, drop_text=False, mask=None)
            nn.functional.mse_loss(pred, x1 - x0).backward()

        total, _ = count_flops(step)
        params = sum(p.numel() for p in dit.parameters())
    f5_step_flops.params = params  # type: ignore[attr-defined]
    return total


def penalty_parts_flops(penalty: LeakPenalty, batch: int, frames: int) -> dict[str, int]:
    """Forward + backward (to the mel) FLOPs of each stage of the penalty on ``[batch, frames, 100]`` mels, as
    ``LeakPenalty(mels=...)`` runs them: the vocoder on the mels plus their silent tail
    (:data:`~leakloss.vocoder.VOCODER_TAIL_FRAMES`), the recognizer on the items' samples plus the penalty's
    ``tail_samples``."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    out: dict[str, int] = {}
    with FakeTensorMode(allow_non_fake_inputs=True):  # real (frozen) weights, fake activations
        wave16 = vocoder_stage_flops(penalty.mel_to_wave, batch, frames, out)
        wave16 = nn.functional.pad(wave16, (0, penalty.min_samples + penalty.tail_samples - min(
            wave16.shape[-1], penalty.min_samples)))  # frame_logits' padding and silent tail
        rec = FrameFeatures(penalty.recognizer, penalty.conv_layer)
        out[recognizer_part(penalty.recognizer)], feats = counted(rec, wave16)
        out["raw-conv head"] = counted(penalty.head, feats)[0]
    return out


def bridge_parts_flops(penalty: LeakPenalty, batch: int, frames: int) -> dict[str, int]:
    """Forward + backward (to the mel) FLOPs of each stage of the penalty's mel-bridge path on ``[batch, frames,
    100]`` mels, as ``LeakPenalty(mels=..., mel_bridge=...)`` runs them: the bridge on the mels plus the silent
    frames its grid and receptive field need, Whisper's encoder to the head's state on the items' 20 ms frames plus
    the penalty's tail (the own-length frames: no vocoder, no resampler, no STFT), and the head."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from leakloss.functional.mel_bridge import bridge_frames
    from leakloss.vocoder import mel_lengths_to_samples

    bridge, encoder = penalty.mel_bridge, penalty.recognizer.frames
    heard = int(mel_lengths_to_samples(frames)) + penalty.tail_samples
    encoder_frames = min(int(penalty.recognizer.frame_count(heard, penalty.conv_layer)),
                         encoder.encoder.config.max_source_positions)
    n_out, grid, needed = bridge_frames(encoder_frames, bridge.receptive_frames)
    vocos_frames = max(frames, needed)
    out: dict[str, int] = {}
    with FakeTensorMode(allow_non_fake_inputs=True):
        mel = torch.randn(batch, vocos_frames, MEL_BINS)
        lengths, out_lengths = torch.full((batch,), frames), torch.full((batch,), n_out)
        out["mel bridge"], log_mel = counted(lambda m: bridge(m, lengths, grid, out_lengths)[..., :n_out], mel)
        out["whisper encoder"], states = counted(lambda x: encoder.encode_mel(x, penalty.conv_layer), log_mel)
        out["raw-conv head"] = counted(penalty.head, states.float().transpose(1, 2))[0]
    return out


def bridge_cropped_parts_flops(penalty: LeakPenalty, batch: int, frames: int,
                               sites: list[list[TimedSite]]) -> tuple[dict[str, int], int]:
    """Forward + backward (to the mel) FLOPs of ``LeakPenalty.cropped`` on ``[batch, frames, 100]`` mels with
    ``sites``: the bridge on every whole item (as :func:`bridge_parts_flops`), then Whisper's encoder to the head's
    state and the head on the crops of :meth:`LeakPenalty.crop_plan`, in the length groups the code runs (each
    padded to its longest); and the number of crops."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from leakloss.functional.crop import length_groups
    from leakloss.vocoder import mel_lengths_to_samples

    out = {k: v for k, v in bridge_parts_flops(penalty, batch, frames).items() if k == "mel bridge"}
    encoder = penalty.recognizer.frames
    limit = encoder.encoder.config.max_source_positions  # the code clamps items to the encoder's 30 s
    samples = min(int(mel_lengths_to_samples(frames)), limit * penalty.frame_hop_samples)
    item = int(penalty.recognizer.frame_count(samples, penalty.conv_layer))
    heard = min(int(penalty.recognizer.frame_count(samples + penalty.tail_samples, penalty.conv_layer)), limit)
    crops, _, stops = penalty.crop_plan(sites, [item] * batch, [heard] * batch)
    sizes = [stop - c.start for c, stop in zip(crops, stops)]
    out["whisper encoder"] = out["raw-conv head"] = 0
    with FakeTensorMode(allow_non_fake_inputs=True):
        for group in (length_groups(sizes) if sizes else []):
            longest = max(sizes[i] for i in group)
            log_mel = torch.randn(len(group), encoder.encoder.config.num_mel_bins, 2 * longest)
            flops, states = counted(lambda x: encoder.encode_mel(x, penalty.conv_layer), log_mel)
            out["whisper encoder"] += flops
            out["raw-conv head"] += counted(penalty.head, states.float().transpose(1, 2))[0]
    return out, len(crops)


def check_margin_bridge_stages(recognizer: nn.Module, bridge: nn.Module, frames: int = 188) -> tuple[int, int]:
    """(FLOPs of the bridged margin term's forward + backward on one real ``frames``-frame item, counted on real
    CPU tensors through ``PathMarginPenalty(mels=...)`` with a plan of one site, vs the sum of
    :func:`margin_bridge_parts_flops` without its analytic LSTM count, which the flop counter cannot see on either
    side)."""
    from leakloss.acoustic.features import SiteSpec
    from leakloss.margin_penalty import MarginPlan, PathMarginPenalty

    term = PathMarginPenalty(recognizer, mel_bridge=bridge)
    mel = torch.randn(1, frames, MEL_BINS) - 2.0
    (_, enc), _ = term._bridged(mel[0])
    ids = [frozenset({i}) for i in range(1, 4)]  # any three phone ids: the cost does not depend on them
    spec = SiteSpec(key=(0, 0), kind="deletion", position=1, nepali=tuple(ids), hindi=(ids[0], ids[2]),
                    hindi_side=ids[2], crops=((20, 40), (18, 42), (16, 44)))
    plan = MarginPlan((spec,), "ok", None, int(enc[0]), str(recognizer.name))
    x = mel.clone().requires_grad_(True)

    def run() -> None:
        loss, _ = term(mels=x, plans=[plan])
        loss.backward()

    whole, _ = count_flops(run)
    parts = margin_bridge_parts_flops(recognizer, bridge, 1, frames)
    lstm = lstm_flops(recognizer.head.lstm, 1, int(enc[0]))
    return whole, sum(parts.values()) - lstm


def check_against_full_penalty(penalty: LeakPenalty, frames: int = 188) -> tuple[int, int]:
    """Real CPU tensors, one ~2 s item: the whole ``LeakPenalty(mels=...)`` vs the sum of its stages."""
    torch.manual_seed(0)
    mel = torch.randn(1, frames, MEL_BINS)
    sites = [[TimedSite(0.5, 0.6, "deletion", "ʌ->∅"), TimedSite(1.2, 1.3, "quality", "ʌi̯->ɛː")]]

    def run() -> None:
        x = mel.clone().requires_grad_(True)
        loss, _ = penalty(mels=x, sites=sites)
        loss.backward()

    whole, _ = count_flops(run)
    parts = (bridge_parts_flops if penalty.mel_bridge is not None else penalty_parts_flops)(penalty, 1, frames)
    return whole, sum(parts.values())


def site_density_hint() -> str:
    try:
        from leakloss.speech.corpus import builtin_sentences
        from leakloss.text.sites import SiteFinder

        finder = SiteFinder()
        words = sites = 0
        for text in builtin_sentences():
            found = finder(text)
            words += len(found)
            sites += sum(len(w.testable_sites) for w in found if w.skipped is None)
        per_word = sites / max(words, 1)
        return f"built-in sentences: {per_word:.2f} testable sites/word (~{2.5 * per_word:.2f}/s at 2.5 words/s)"
    except Exception as err:  # the hint is optional
        return f"site density of built-in sentences unavailable ({type(err).__name__})"


def cropped_parts_flops(penalty: LeakPenalty, groups: list[tuple[int, int]],
                        wave_groups: list[tuple[int, int]]) -> dict[str, int]:
    """Forward + backward FLOPs of the cropped penalty: the vocoder on each length group ``(crops, frames)``
    (padded to the group's longest, as ``cropped_penalty`` batches them), the recognizer convs + head on each
    length group of scored regions ``(regions, samples)`` (padded to the group's longest plus the penalty's
    ``tail_samples``, as ``LeakPenalty.frame_logits`` runs them)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    vocoder = penalty.mel_to_wave
    out: dict[str, int] = {"vocoder backbone": 0, "vocoder ISTFT head": 0, "resampler": 0}
    with FakeTensorMode(allow_non_fake_inputs=True):
        for count, mel_frames in groups:
            mel = torch.randn(count, mel_frames, MEL_BINS)
            flops, hidden = counted(lambda m: vocoder.backbone(m.transpose(1, 2)), mel)
            out["vocoder backbone"] += flops
            flops, wave24 = counted(CountableISTFTHead(vocoder.head), hidden)
            out["vocoder ISTFT head"] += flops + irfft_flops(count * mel_frames)
            out["resampler"] += counted(Resample(), wave24)[0]
        rec, part = FrameFeatures(penalty.recognizer, penalty.conv_layer), recognizer_part(penalty.recognizer)
        out[part] = out["raw-conv head"] = 0
        for count, samples in wave_groups:
            wave16 = torch.randn(count, max(samples, penalty.min_samples) + penalty.tail_samples)
            flops, feats = counted(rec, wave16)
            out[part] += flops
            out["raw-conv head"] += counted(penalty.head, feats)[0]
    return out


def draw_sites(batch: int, utt_frames: int, density: float, site_s: float, seed: int) -> list[list[TimedSite]]:
    """One F5 batch's sites: Poisson sites (``density``/s) kept inside F5's infilled span."""
    g = torch.Generator().manual_seed(seed)
    sites = []
    for _ in range(batch):
        frac = 0.7 + 0.3 * float(torch.rand((), generator=g))  # F5 frac_lengths_mask_ratio (0.7, 1.0)
        span = int(frac * utt_frames)
        start = int(float(torch.rand((), generator=g)) * (utt_frames - span + 1))
        dur = utt_frames / FRAME_RATE
        n = int(torch.poisson(torch.tensor(density * dur), generator=g))
        times = (torch.rand(n, generator=g) * (dur - site_s)).tolist()
        keep = [t for t in times if start <= (t + site_s / 2) * FRAME_RATE < start + span]
        sites.append([TimedSite(t, t + site_s, "deletion", "ʌ->∅") for t in sorted(keep)])
    return sites


def draw_crops(penalty: LeakPenalty, batch: int, utt_frames: int, density: float, site_s: float, seed: int):
    """One F5 batch's crops (:func:`draw_sites`), planned by crop.py as ``cropped_penalty`` plans them."""
    from integrations.f5_tts import penalty_crop_context
    from leakloss.functional.crop import plan_crops

    ctx = penalty_crop_context(penalty, penalty.mel_to_wave)
    sites = draw_sites(batch, utt_frames, density, site_s, seed)
    # cropped_penalty plans on the mels with their silent tail (silence_past_lengths), as the whole path vocodes
    crops, shifted = plan_crops(sites, [utt_frames] * batch, FRAME_RATE, ctx,
                                padded_frames=utt_frames + VOCODER_TAIL_FRAMES)
    return crops, sum(map(len, shifted)), ctx


def cropped_shares(penalty: LeakPenalty, f5: int, batch: int, utt_frames: int, density: float, site_s: float,
                   seeds, log: Callable[[str], None] | None = print) -> tuple[list[float], object]:
    """The cropped penalty's share of an F5 step (``f5`` FLOPs) for each seeded batch of sites
    (:func:`draw_crops`), and the crop context; ``log`` gets one line per draw."""
    from leakloss.functional.crop import length_groups
    from leakloss.vocoder import mel_lengths_to_samples

    frames = batch * utt_frames
    shares, ctx = [], None
    for draw in seeds:
        crops, n_sites, ctx = draw_crops(penalty, batch, utt_frames, density, site_s, seed=draw)
        if not crops:
            shares.append(0.0)
            continue
        sizes = [c.mel_frames for c in crops]
        groups = [(len(g), max(sizes[i] for i in g)) for g in length_groups(sizes)]
        region = [int(mel_lengths_to_samples(c.end - c.start)) for c in crops]
        wave_groups = [(len(g), max(region[i] for i in g)) for g in length_groups(region)]
        parts_c = cropped_parts_flops(penalty, groups, wave_groups)
        shares.append(sum(parts_c.values()) / f5)
        padded = sum(n * m for n, m in groups)
        if log is not None:
            log(f"  cropped draw {draw}: {n_sites} sites in span -> {len(crops)} crops in {len(groups)} length groups,"
                f" {padded / frames:.0%} of the batch's frames vocoded ({sum(sizes) / frames:.0%} before group"
                f" padding); recognizer on {len(crops)} regions in {len(wave_groups)} length groups"
                f" ({sum(n * m for n, m in wave_groups) / max(sum(region), 1):.2f}x their samples, + tail):"
                f" share {shares[-1]:.4f} (" + ", ".join(f"{k} {v / f5:.4f}" for k, v in parts_c.items()) + ")")
    return shares, ctx


def default_item_fraction() -> float:
    """``leak.item_fraction`` of ``finetune-f5``'s shipped config (``leakloss/conf/finetune_f5.yaml``)."""
    from importlib import resources

    from omegaconf import OmegaConf

    text = resources.files("leakloss.conf").joinpath("finetune_f5.yaml").read_text(encoding="utf-8")
    return float(OmegaConf.create(text).leak.item_fraction)


def default_run_share(penalty: LeakPenalty, f5: int, batch: int, utt_frames: int, fraction: float, density: float,
                      site_s: float, seeds) -> tuple[float, str]:
    """The penalty's share of an F5 step (``f5`` FLOPs) as ``finetune-f5`` runs it by default: on the
    ``leak.item_fraction`` of the batch's items it scores (:func:`integrations.f5_tts.largest_t_items`; every item
    has sites here, the upper bound), cropped or whole by its rule for the recognizer
    (:func:`integrations.finetune_f5.resolve_leak_crop`); and how, in words."""
    from integrations.f5_tts import largest_t_items
    from integrations.finetune_f5 import resolve_leak_crop

    scored = len(largest_t_items([0.0] * batch, fraction))
    how = f"{scored} of {batch} items scored (leak.item_fraction {fraction:g})"
    if resolve_leak_crop(None, penalty):
        shares, _ = cropped_shares(penalty, f5, scored, utt_frames, density, site_s, seeds, log=None)
        return statistics.mean(shares), how + ", cropped"
    return sum(penalty_parts_flops(penalty, scored, utt_frames).values()) / f5, how + ", whole items (no crop)"


# ---------------------------------------------------------------------------------------------------------------
# wall clock on a tiny F5


def tiny_batch(n_items: int = 4, seed: int = 0):
    from f5_tts.model.dataset import collate_fn

    from integrations.f5_tts import WaveTextDataset

    g = torch.Generator().manual_seed(seed)
    texts = ["घर जानु पर्छ", "म भात खान्छु", "उसले किताब पढ्यो", "हामी बजार गयौं"]
    items = []
    for i in range(n_items):
        dur = 1.8 + 0.4 * i / max(n_items - 1, 1)  # 1.8 .. 2.2 s
        t = torch.arange(int(dur * MEL_SAMPLE_RATE)) / MEL_SAMPLE_RATE
        wave = 0.1 * torch.sin(2 * math.pi * (120 + 40 * i) * t) + 0.02 * torch.randn(t.numel(), generator=g)
        items.append((wave, MEL_SAMPLE_RATE, texts[i % len(texts)]))
    batch = collate_fn([WaveTextDataset(items)[i] for i in range(n_items)])
    return batch["mel"].permute(0, 2, 1).contiguous(), batch["mel_lengths"], batch["text"]


def wall_ratio(recognizer, head: RawConvHead, steps: int, warmup: int, layer: int | None = None) -> dict:
    from integrations.f5_tts import tiny_f5

    sites = [TimedSite(0.55, 0.63, "deletion", "ʌ->∅"), TimedSite(1.25, 1.35, "quality", "ʌi̯->ɛː")]
    penalty = LeakPenalty(recognizer, head, mel_to_wave=MelToWave.tiny(0), conv_layer=layer)
    no_cfg = dict(audio_drop_prob=0.0, cond_drop_prob=0.0)
    base = tiny_f5(seed=0, **no_cfg)
    leak = tiny_f5(seed=0, leak_penalty=penalty, leak_weight=1.0, site_lookup=lambda text: sites, **no_cfg)
    models = {"without": base, "with": leak}
    optims = {k: torch.optim.AdamW(m.parameters(), lr=1e-4) for k, m in models.items()}
    mel, lens, text = tiny_batch()
    times: dict[str, list[float]] = {"without": [], "with": []}
    paid = 0
    torch.manual_seed(0)
    for step in range(warmup + steps):
        for key in ("without", "with") if step % 2 == 0 else ("with", "without"):  # alternate order: fair drift
            model, opt = models[key], optims[key]
            model.train()
            start = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss, _, _ = model(mel, text, lens=lens)
            loss.backward()
            opt.step()
            elapsed = time.perf_counter() - start
            if step >= warmup:
                times[key].append(elapsed)
                if key == "with" and model.last_leak_parts is not None:
                    paid += 1
    med = {k: statistics.median(v) for k, v in times.items()}
    return dict(ratio=med["with"] / med["without"], median=med, paid=paid, steps=steps,
                frames=int(lens.sum()), shape=tuple(mel.shape), split=penalty_wall_split(penalty, mel),
                params=sum(p.numel() for p in base.parameters()))


def penalty_wall_split(penalty: LeakPenalty, mel: torch.Tensor, reps: int = 5) -> dict[str, float]:
    """Median seconds of fwd+bwd (to the input) of the vocoder and of the convs + head, on the whole batch."""
    wave = penalty.mel_to_wave(mel).detach()
    stages = {
        "vocoder": (lambda x: penalty.mel_to_wave(x), mel),
        f"{recognizer_part(penalty.recognizer)} + head": (lambda x: penalty.frame_logits(x)[0], wave),
    }
    out = {}
    for name, (fn, x) in stages.items():
        run = fwd_bwd(fn, x)
        run()  # warm-up
        samples = []
        for _ in range(reps):
            start = time.perf_counter()
            run()
            samples.append(time.perf_counter() - start)
        out[name] = statistics.median(samples)
    return out


# ---------------------------------------------------------------------------------------------------------------
# the scorer's recognizer: throughput before (w, padded to 30 s) and after (wb, own length)


def scorer_clips(n: int, seconds: float) -> tuple[list[torch.Tensor], str]:
    """Up to ``n`` real Nepali recordings (test speakers, at most ``seconds`` each, whole readings as the scorer
    gets them), else ``n`` seeded speech-like signals of 2-``seconds`` s (the data is absent: the recognizers'
    cost does not depend on what the audio says)."""
    from leakloss.speech.real import real_clips

    clips = [c.load()[: int(seconds * SAMPLE_RATE)] for c in real_clips(split="test")[:n]]
    if clips:
        return clips, f"{len(clips)} real test-speaker recordings"
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        t = torch.arange(int((2 + (seconds - 2) * i / max(n - 1, 1)) * SAMPLE_RATE)) / SAMPLE_RATE
        f0 = 110 + 30 * i + 20 * torch.sin(2 * math.pi * 3 * t)  # a wandering pitch, bursts at 4 Hz
        out.append(0.1 * torch.sin(2 * math.pi * torch.cumsum(f0, 0) / SAMPLE_RATE) * (torch.sin(8 * math.pi * t) > 0)
                   + 0.01 * torch.randn(t.numel(), generator=g))
    return out, f"{n} speech-like signals (no real recordings here)"


def load_real_recognizer(name: str):
    """Embedded recognizer ``name`` with its weights, or (None, why) when they are not installed here."""
    from leakloss.acoustic.recognizer import Recognizer, RecognizerLoadError, RecognizerNotFoundError
    from leakloss.acoustic.whisper_models import WhisperJoinError, WhisperModelNotFoundError

    try:
        return Recognizer.load(name), ""
    except (RecognizerLoadError, RecognizerNotFoundError, WhisperModelNotFoundError, WhisperJoinError,
            FileNotFoundError) as err:
        return None, f"recognizer {name} cannot be loaded ({type(err).__name__}: {err})"


def parameter_shapes(module: nn.Module) -> list[tuple[str, tuple[int, ...]]]:
    return [(k, tuple(v.shape)) for k, v in module.state_dict().items()]


def scorer_speed(clips: list[torch.Tensor], before: str = SCORER_BEFORE, after: str = SCORER_AFTER) -> dict:
    """Seconds of audio per wall second of the scorer's recognizer pass (``recognizer(wave[None])``, no gradient,
    one reading at a time, as :meth:`leakloss.scorer.Scorer._recognize` runs it) with ``before`` and ``after``, on
    the same clips, interleaved, after one warm-up of each. ``{"before": nan, "after": nan, "why": ...}`` when a
    recognizer's weights are not installed. ``arch_matches``: the random-weight architecture counted above has
    the real one's parameter shapes (:func:`whisper_architecture`)."""
    models, why = {}, []
    for key, name in (("before", before), ("after", after)):
        models[key], reason = load_real_recognizer(name)
        if reason:
            why.append(reason)
    if why:
        return {"before": math.nan, "after": math.nan, "why": "; ".join(why)}
    seconds = {k: 0.0 for k in models}
    audio = sum(c.numel() for c in clips) / SAMPLE_RATE
    with torch.no_grad():
        for model in models.values():
            model(clips[0][None])  # warm-up
        for i, clip in enumerate(clips):
            for key in ("before", "after") if i % 2 == 0 else ("after", "before"):
                start = time.perf_counter()
                models[key](clip[None])
                seconds[key] += time.perf_counter() - start
    out: dict = {k: audio / v for k, v in seconds.items()}
    out["names"] = {k: m.name for k, m in models.items()}
    out["arch_matches"] = {}
    for key, model in models.items():
        if getattr(model, "frame_source", None) == WHISPER_FRAME_SOURCE:
            short = model.name.split("@", 1)[0]
            arch = whisper_architecture(short)
            out["arch_matches"][short] = (parameter_shapes(arch) == parameter_shapes(model)
                                          and arch.frames.own_length == model.frames.own_length)
    return out


# ---------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--utt-frames", type=int, default=960,
                        help="mel frames per utterance of the F5 batch (default 960 = 10.24 s: 40 x 960 = 38,400)")
    parser.add_argument("--site-density", type=float, default=1.0, help="sites per second of speech (site windows)")
    parser.add_argument("--site-duration", type=float, default=0.08, help="seconds per site (site windows)")
    parser.add_argument("--window-margin", type=float, default=0.15, help="seconds each side of a site (site windows)")
    parser.add_argument("--crop-site-density", type=float, default=0.6,
                        help="sites per second of speech for the cropped path (built-in sentences: ~0.6)")
    parser.add_argument("--crop-draws", type=int, default=5, help="seeded batches for the cropped share (mean)")
    parser.add_argument("--steps", type=int, default=12, help="timed steps per model (median), after warm-up")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--recognizer", choices=RECOGNIZERS, default=None,
                        help="the penalty's recognizer: a (wav2vec2 conv stack), wb (Whisper base encoder, own length)"
                             " or w (Whisper tiny.en, padded to 30 s); default: the one the shipped head's card names")
    parser.add_argument("--scorer-clips", type=int, default=4,
                        help=f"clips for the scorer's recognizer throughput ({SCORER_BEFORE} vs {SCORER_AFTER})")
    parser.add_argument("--scorer-seconds", type=float, default=8.0, help="longest scorer clip, seconds")
    parser.add_argument("--scorer-threads", type=int, default=1,
                        help="torch threads for the scorer's throughput (1: on a busy machine two threads wait on"
                             " each other, the small own-length matrices most; see whisper_own_length.py)")
    parser.add_argument("--item-fraction", type=float, default=None,
                        help="share of a batch's items the penalty scores (default: finetune-f5's leak.item_fraction)")
    parser.add_argument("--fraction-sensitivity", type=float, nargs="*", default=[0.25],
                        help="leak.item_fraction values to price besides the default (none: skip)")
    parser.add_argument("--margin-sensitivity", type=float, nargs="*", default=[0.25],
                        help="Whisper crop margins (s) to price on draw 0 besides the shipped one (none: skip)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or args.crop_draws < 1 or args.scorer_clips < 1 or args.scorer_threads < 1 \
            or not 0 < args.utt_frames <= F5_BATCH_FRAMES or not args.scorer_seconds >= 2:
        # before minutes of counting: each of these failed late with a traceback (an empty median, an empty batch)
        parser.error(f"need --steps >= 1, --warmup >= 0, --crop-draws >= 1, --scorer-clips >= 1, --scorer-threads >= 1, "
                     f"0 < --utt-frames <= {F5_BATCH_FRAMES} and --scorer-seconds >= 2")
    rec_name = args.recognizer or shipped_head_recognizer()
    if rec_name not in RECOGNIZERS:
        parser.error(f"the shipped head's card names recognizer {rec_name!r}; give --recognizer "
                     f"({', '.join(RECOGNIZERS)})")
    t_start = time.perf_counter()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")

    recognizer, rec_note = build_recognizer(rec_name)
    head, head_note = build_head(rec_name, recognizer.frame_channels(None))
    layer = shipped_head_layer(rec_name) if head_note == SHIPPED_HEAD_NOTE else None
    if layer is not None:
        head_note += f" on frame layer {layer}"
    print(f"recognizer {rec_name}{'' if args.recognizer else ' (the shipped head card names it)'}: {rec_note};"
          f" head: {head_note}")

    # ---- FLOPs -------------------------------------------------------------------------------------------------
    batch = F5_BATCH_FRAMES // args.utt_frames
    frames = batch * args.utt_frames
    f5 = f5_step_flops(batch, args.utt_frames)
    print(f"F5 v1 Base ({f5_step_flops.params / 1e6:.1f} M params) step, fwd+bwd on [{batch}, {args.utt_frames}, 100]"
          f" = {frames:,} frames ({frames / FRAME_RATE:.1f} s audio): {f5 / 1e12:.2f} TFLOP")
    penalty = LeakPenalty(recognizer, head, mel_to_wave=released_vocos(), conv_layer=layer)
    diff = check_istft_copy(penalty.mel_to_wave)
    print(f"ISTFT head copy used for counting matches Vocos' head: max abs diff {diff:.1e}")
    parts = penalty_parts_flops(penalty, batch, args.utt_frames)
    total = sum(parts.values())
    share = total / f5
    print(f"penalty fwd+bwd-to-mel on the same {frames:,} frames (every item, every step): {total / 1e12:.3f} TFLOP")
    for name, flops in parts.items():
        print(f"  {name:<20} {flops / 1e9:9.1f} GFLOP  {flops / f5:7.2%} of F5 step  {flops / total:6.1%} of penalty")
    fft = irfft_flops(batch * (args.utt_frames + VOCODER_TAIL_FRAMES))  # the vocoder's frames: the items + tail
    print(f"  (ISTFT inverse FFT counted analytically: {fft / 1e9:.2f} GFLOP; elementwise ops are not counted on"
          " either side)")
    whole, summed = check_against_full_penalty(penalty)
    print(f"check, one 2 s item on real CPU tensors: whole LeakPenalty(mels=...) fwd+bwd {whole / 1e9:.2f} GFLOP vs"
          f" stages {summed / 1e9:.2f} GFLOP (the stage sum adds"
          f" {irfft_flops(188 + VOCODER_TAIL_FRAMES) / 1e9:.3f} GFLOP of FFT)"
          + ("; Whisper's log-mel STFT (n_fft 400) is counted on neither side: < 0.1% of its encoder"
             if recognizer.frame_source == WHISPER_FRAME_SOURCE else ""))
    print(f"with F5's CFG text drop (cond_drop_prob 0.2, the penalty skips those steps): {0.8 * share:.4f} expected")
    for utt in (600, 2400):
        b = F5_BATCH_FRAMES // utt
        alt = f5_step_flops(b, utt)
        alt_pen = sum(penalty_parts_flops(penalty, b, utt).values())
        print(f"sensitivity: batch {b} x {utt} frames -> F5 {alt / 1e12:.2f} TFLOP, share {alt_pen / alt:.4f}")
    dominant = max(parts, key=parts.get)
    verdict = "within" if share <= TARGET_SHARE else "ABOVE"
    print(f"penalty share {share:.2%}: {verdict} the {TARGET_SHARE:.0%} target; dominant part: {dominant}"
          f" ({parts[dominant] / total:.0%} of the penalty)")

    # the mel bridge in place of vocoder + resampler + STFT (Whisper recognizers)
    bridge_share = bridge_cropped_share = math.nan
    if recognizer.frame_source == WHISPER_FRAME_SOURCE:
        from leakloss.mel_bridge import MelBridge

        bridged = LeakPenalty(recognizer, head, conv_layer=layer, mel_bridge=MelBridge.embedded())
        bridge_parts = bridge_parts_flops(bridged, batch, args.utt_frames)
        bridge_total = sum(bridge_parts.values())
        bridge_share = bridge_total / f5
        print(f"mel bridge path (leak.mel_bridge=true), every item, whole: {bridge_total / 1e12:.3f} TFLOP, share "
              f"{bridge_share:.4f}, {'within' if bridge_share <= TARGET_SHARE_CROPPED else 'ABOVE'} the "
              f"{TARGET_SHARE_CROPPED:.0%} target")
        for name, flops in bridge_parts.items():
            print(f"  {name:<20} {flops / 1e9:9.1f} GFLOP  {flops / f5:7.2%} of F5 step")
        b_whole, b_summed = check_against_full_penalty(bridged)
        print(f"check, one 2 s item on real CPU tensors: whole bridged LeakPenalty(mels=...) fwd+bwd "
              f"{b_whole / 1e9:.3f} GFLOP vs stages {b_summed / 1e9:.3f} GFLOP")
        for option in args.fraction_sensitivity:
            scored = max(1, math.ceil(option * batch))
            alt = sum(bridge_parts_flops(bridged, scored, args.utt_frames).values()) / f5
            print(f"mel bridge on {scored} of {batch} items (leak.item_fraction {option:g}): share {alt:.4f}")
        # leak.mel_bridge=true leak.crop=true: every item bridged, the encoder and head on crops around the sites
        bridge_cropped = []
        for draw in range(args.crop_draws):
            sites = draw_sites(batch, args.utt_frames, args.crop_site_density, args.site_duration, seed=draw)
            parts_bc, n_crops = bridge_cropped_parts_flops(bridged, batch, args.utt_frames, sites)
            bridge_cropped.append(sum(parts_bc.values()) / f5)
            print(f"  bridged crop draw {draw}: {sum(map(len, sites))} sites in span -> {n_crops} encoder crops: share "
                  f"{bridge_cropped[-1]:.4f} (" + ", ".join(f"{k} {v / f5:.4f}" for k, v in parts_bc.items()) + ")")
        bridge_cropped_share = statistics.mean(bridge_cropped)
        print(f"mel bridge, encoder on crops (leak.mel_bridge=true leak.crop=true; "
              f"{bridged.crop_context_s * 1000:.0f} ms each side of a site): mean share over {args.crop_draws} draws "
              f"{bridge_cropped_share:.4f}, "
              f"{'within' if bridge_cropped_share <= TARGET_SHARE_CROPPED else 'ABOVE'} the "
              f"{TARGET_SHARE_CROPPED:.0%} target")

    # the text-paired path-margin term (leak.margin_weight): whole items, every state of the encoder
    margin_share = margin_bridge_share = math.nan
    if recognizer.frame_source == WHISPER_FRAME_SOURCE:
        margin_parts = margin_parts_flops(recognizer, penalty.mel_to_wave, batch, args.utt_frames)
        margin_share = sum(margin_parts.values()) / f5
        print(f"path-margin term (leak.margin_weight > 0), every item, whole: {sum(margin_parts.values()) / 1e12:.3f} "
              f"TFLOP, share {margin_share:.4f}, {'within' if margin_share <= TARGET_SHARE_CROPPED else 'ABOVE'} the "
              f"{TARGET_SHARE_CROPPED:.0%} target")
        for name, flops in margin_parts.items():
            print(f"  {name:<28} {flops / 1e9:9.1f} GFLOP  {flops / f5:7.2%} of F5 step")
        for option in args.fraction_sensitivity:
            scored = max(1, math.ceil(option * batch))
            alt = sum(margin_parts_flops(recognizer, penalty.mel_to_wave, scored, args.utt_frames).values()) / f5
            print(f"path-margin term on {scored} of {batch} items (leak.item_fraction {option:g}): share {alt:.4f}")
        from leakloss.mel_bridge import MelBridge

        bridge = MelBridge.embedded()
        margin_bridge_parts = margin_bridge_parts_flops(recognizer, bridge, batch, args.utt_frames)
        margin_bridge_share = sum(margin_bridge_parts.values()) / f5
        print(f"path-margin term through the mel bridge (PathMarginPenalty(mel_bridge=...)), every item, whole: "
              f"{sum(margin_bridge_parts.values()) / 1e12:.3f} TFLOP, share {margin_bridge_share:.4f}, "
              f"{'within' if margin_bridge_share <= TARGET_SHARE_CROPPED else 'ABOVE'} the "
              f"{TARGET_SHARE_CROPPED:.0%} target")
        for name, flops in margin_bridge_parts.items():
            print(f"  {name:<28} {flops / 1e9:9.1f} GFLOP  {flops / f5:7.2%} of F5 step")
        m_whole, m_summed = check_margin_bridge_stages(recognizer, bridge)
        print(f"check, one 2 s item on real CPU tensors: PathMarginPenalty(mels=..., mel_bridge) fwd+bwd "
              f"{m_whole / 1e9:.3f} GFLOP vs stages {m_summed / 1e9:.3f} GFLOP (the LSTM counted analytically on "
              "the stages' side only)")
        for option in args.fraction_sensitivity:
            scored = max(1, math.ceil(option * batch))
            alt = sum(margin_bridge_parts_flops(recognizer, bridge, scored, args.utt_frames).values()) / f5
            print(f"path-margin term through the bridge on {scored} of {batch} items (leak.item_fraction "
                  f"{option:g}): share {alt:.4f}")

    # site windows: vocode + score only crops around the sites
    crop_frames = math.ceil((args.site_duration + 2 * args.window_margin) * FRAME_RATE)
    n_crops = math.ceil(frames / FRAME_RATE * args.site_density)
    crop_parts = penalty_parts_flops(penalty, n_crops, crop_frames)
    window_share = sum(crop_parts.values()) / f5
    print(f"site windows: {n_crops} crops of {crop_frames} frames (site {args.site_duration * 1000:.0f} ms"
          f" +/- {args.window_margin * 1000:.0f} ms) at {args.site_density:g} sites/s of speech"
          f" [{site_density_hint()}]; covers {n_crops * crop_frames / frames:.0%} of the frames; vocoder receptive"
          " field is +/-27 frames (288 ms), so crop edges vocode with less context than the full utterance")
    print(f"site_window_flops_share={window_share:.4f}")

    # cropped path, as LeakAwareCFM(leak_crop=True) runs it
    shares, ctx = cropped_shares(penalty, f5, batch, args.utt_frames, args.crop_site_density, args.site_duration,
                                 range(args.crop_draws))
    cropped_share = statistics.mean(shares)
    verdict = "within" if cropped_share <= TARGET_SHARE_CROPPED else "ABOVE"
    print(f"cropped context: {ctx.wave_s * 1000:.0f} ms each side at the recognizer, {ctx.vocoder_frames} mel frames"
          f" each side for the vocoder (released Vocos shapes), grid {ctx.grid} frames; mean share over"
          f" {args.crop_draws} draws {cropped_share:.4f}: {verdict} the {TARGET_SHARE_CROPPED:.0%} target;"
          " x0.8 with CFG text drops")
    if recognizer.frame_source == WHISPER_FRAME_SOURCE:
        # what the Whisper crop margin (WHISPER_CROP_MARGIN_S, not a receptive field) costs: the same draw 0
        for margin in args.margin_sensitivity:
            recognizer.crop_margin_s = margin  # this instance only (frame_context_s reads it)
            try:
                alt, alt_ctx = cropped_shares(penalty, f5, batch, args.utt_frames, args.crop_site_density,
                                              args.site_duration, [0], log=None)
            finally:
                del recognizer.crop_margin_s
            print(f"sensitivity: Whisper crop margin {margin:g} s ({alt_ctx.wave_s * 1000:.0f} ms each side at the"
                  f" recognizer) -> cropped share {alt[0]:.4f} (draw 0; shipped margin"
                  f" {recognizer.crop_margin_s:g} s: {shares[0]:.4f})")

    # what finetune-f5 runs by default: its crop rule for this recognizer, on leak.item_fraction of the items
    fraction = args.item_fraction if args.item_fraction is not None else default_item_fraction()
    default_share, how = default_run_share(penalty, f5, batch, args.utt_frames, fraction, args.crop_site_density,
                                           args.site_duration, range(args.crop_draws))
    verdict = "within" if default_share <= TARGET_SHARE_CROPPED else "ABOVE"
    print(f"finetune-f5's default on {rec_name}: {how}: share {default_share:.4f}, {verdict} the"
          f" {TARGET_SHARE_CROPPED:.0%} target (a per-step cost: every penalty step pays it)")
    for option in args.fraction_sensitivity:
        alt, alt_how = default_run_share(penalty, f5, batch, args.utt_frames, option, args.crop_site_density,
                                         args.site_duration, [0])
        print(f"sensitivity: {alt_how}: share {alt:.4f} (draw 0 where cropped)")

    # ---- wall clock ----------------------------------------------------------------------------------------------
    wall = wall_ratio(recognizer, head, args.steps, args.warmup, layer)
    print(f"tiny F5 step (batch {wall['shape'][0]}, {wall['frames']} valid mel frames, padded {wall['shape'][1]}):"
          f" median without {wall['median']['without'] * 1000:.1f} ms,"
          f" with penalty {wall['median']['with'] * 1000:.1f} ms"
          f" over {wall['steps']} steps each (penalty paid on {wall['paid']}/{wall['steps']});"
          f" tiny F5 has {wall['params'] / 1e6:.2f} M params (Base {f5_step_flops.params / 1e6:.0f} M), the recognizer"
          " keeps its real size, so this ratio is not Base's")
    print("  penalty alone, fwd+bwd on the batch: " + ", ".join(
        f"{k} {v * 1000:.1f} ms" for k, v in wall["split"].items()) + " (MelToWave.tiny(0): dim 32, 1 layer)")

    # ---- the scorer's recognizer -----------------------------------------------------------------------------------
    clips, clips_note = scorer_clips(args.scorer_clips, args.scorer_seconds)
    threads = torch.get_num_threads()
    torch.set_num_threads(args.scorer_threads)
    try:
        speed = scorer_speed(clips)
    finally:
        torch.set_num_threads(threads)
    if "why" in speed:
        print(f"scorer throughput not measured: {speed['why']}", file=sys.stderr)
    else:
        audio = sum(c.numel() for c in clips) / SAMPLE_RATE
        print(f"scorer recognizer pass (no gradient, one reading at a time, {args.scorer_threads} torch thread(s)) on"
              f" {clips_note}, {audio:.1f} s of audio:"
              f" before {speed['names']['before']} {speed['before']:.2f} s audio/s, after {speed['names']['after']}"
              f" {speed['after']:.2f} s audio/s ({speed['after'] / speed['before']:.2f}x); random-weight"
              " architectures match the real ones: " + ", ".join(f"{k} {v}" for k, v in speed["arch_matches"].items()))
    print(f"elapsed {time.perf_counter() - t_start:.1f} s")
    print(f"penalty_flops_share={share:.4f} penalty_flops_share_cropped={cropped_share:.4f}"
          f" penalty_flops_share_default={default_share:.4f} penalty_flops_share_bridge={bridge_share:.4f}"
          f" penalty_flops_share_bridge_cropped={bridge_cropped_share:.4f}"
          f" margin_flops_share={margin_share:.4f} margin_flops_share_bridge={margin_bridge_share:.4f}"
          f" wall_ratio={wall['ratio']:.2f} scorer_speed_before={speed['before']:.2f}"
          f" scorer_speed_after={speed['after']:.2f} recognizer={rec_name}")


if __name__ == "__main__":
    main()
