"""Benchmark: what the leak penalty adds to an F5-TTS training step.

Two figures, measured in one run:

``penalty_flops_share``
    FLOPs of the penalty's forward + backward (to the mel) per training step, as a share of one
    F5 v1 Base training step (DiT dim 1024, depth 22, heads 16, ff_mult 2, text_dim 512,
    conv_layers 4, 100 mels; transformer forward on ``[b, n, 100]`` + backward) at its published
    batch of 38,400 mel frames per GPU. The penalty: the released ``charactr/vocos-mel-24khz``
    generator (ConvNeXt backbone dim 512 / intermediate 1536 / 8 layers + ISTFT head n_fft 1024
    hop 256, random weights, built offline from ``vocos`` classes), resample 24k -> 16k, the
    recognizer's conv stack to layer 4 (64 channels, kernels 10,3,3,3,3, strides 5,2,2,2,2) and
    ``RawConvHead(64, 48, 5, 3)``. Upper bound: every item of the batch has sites and every step
    pays (no CFG text drop). Counted with ``torch.utils.flop_counter.FlopCounterMode`` on fake
    tensors (no memory, no compute), with two additions (see ``_flop_counter``): CPU SDPA kernels and
    the weight gradient of grouped convolutions. The inverse FFT of the ISTFT head is not an op the
    counter knows; it is added analytically (2.5 N log2 N per frame and direction).

``wall_ratio``
    Wall clock of a tiny F5 (``tiny_f5()``: dim 64, depth 2) training step (forward + backward +
    AdamW step, batch 4 of ~2 s utterances, real CPU) WITH the penalty (``LeakAwareCFM`` with
    ``LeakPenalty(recognizer A architecture, RawConvHead, MelToWave.tiny(0))``, ``leak_weight=1``,
    two sites per text) divided by WITHOUT it; CFG drops off so every step pays; steps of the two
    models interleaved, median of ``--steps`` after warm-up. The tiny F5 is ~1000x smaller than
    Base while the recognizer conv stack keeps its real size, so this ratio says little about
    Base: it is the end-to-end check that the penalty runs in a real training step, and what it
    costs next to a very small model.

``penalty_flops_share_cropped``
    The same F5 v1 Base step with the penalty as ``LeakAwareCFM(leak_crop=True)`` runs it
    (:mod:`leakloss.functional.crop` via ``integrations.f5_tts.cropped_penalty``): only crops around the
    sites inside F5's infilled span are vocoded (site window + the receptive-field context computed from the
    released Vocos / recognizer / head modules), in length groups padded to their longest as the code batches
    them, and only the scored regions go through the recognizer convs and head (also in length groups, each
    with the penalty's tail of zeros). Sites are drawn per utterance as a Poisson
    process at ``--crop-site-density`` sites/s (default 0.6: the built-in sentences' 0.24 testable sites/word
    at 2.5 words/s), ``--site-duration`` long; the infilled span is F5's (70-100% of each utterance, random
    start); ``--crop-draws`` seeded batches, the mean share is reported.

Also printed before the last line: ``site_window_flops_share=...``, the earlier rough estimate with fixed
crops (``--site-density`` sites/s, ``--window-margin`` each side).

Run: ``OMP_NUM_THREADS=1 python benchmarks/penalty_overhead.py`` (~1 min on one core). The last line is
``penalty_flops_share=X.XXXX penalty_flops_share_cropped=Z.ZZZZ wall_ratio=Y.YY`` (uncropped share first, as
before; the cropped one is what ``finetune-f5`` runs by default).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable

import torch
import torchaudio.functional as AF
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from leakloss.constants import MEL_BINS, MEL_HOP, MEL_N_FFT, MEL_SAMPLE_RATE, SAMPLE_RATE
from leakloss.heads import RawConvHead
from leakloss.penalty import LeakPenalty
from leakloss.timing import TimedSite
from leakloss.vocoder import MelToWave

F5_BATCH_FRAMES = 38_400  # F5TTS_v1_Base.yaml: batch_size_per_gpu (frame-wise), max_samples 64
FRAME_RATE = MEL_SAMPLE_RATE / MEL_HOP  # 93.75 mel frames per second
TARGET_SHARE = 0.05

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


class ConvStack(nn.Module):
    def __init__(self, recognizer: nn.Module, layer: int = 4) -> None:
        super().__init__()
        self.recognizer, self.layer = recognizer, layer

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        return self.recognizer.conv_features(wave, self.layer)[0]


def build_recognizer():
    """The embedded recognizer A when built, else its architecture with random weights."""
    from leakloss.acoustic.recognizer import EMBEDDED_DIR, Recognizer
    from leakloss.acoustic.recognizer_training import RecognizerArchitecture, build_model, build_vocab

    if (EMBEDDED_DIR / "a" / "model.safetensors").exists():
        return Recognizer.load("a"), "embedded recognizer A"
    vocab = build_vocab([])
    with torch.random.fork_rng():
        model = build_model(RecognizerArchitecture(), vocab, 0)
    return Recognizer(model, vocab, name="a-architecture"), "recognizer A architecture, random weights (A not built)"


def build_head() -> tuple[RawConvHead, str]:
    from leakloss.penalty import SHIPPED_HEADS

    path = SHIPPED_HEADS / "rawconv.safetensors"
    if path.exists():
        from leakloss.heads import load_head

        head, _ = load_head(path)
        if isinstance(head, RawConvHead):
            return head, "shipped rawconv head"
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return RawConvHead(in_channels=64, width=48, kernel=5, layers=3), "RawConvHead(64, 48, 5, 3), random weights"


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
    """Forward + backward (to the mel) FLOPs of each stage of the penalty on ``[batch, frames, 100]`` mels."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    vocoder = penalty.mel_to_wave
    out: dict[str, int] = {}
    with FakeTensorMode(allow_non_fake_inputs=True):  # real (frozen) weights, fake activations
        mel = torch.randn(batch, frames, MEL_BINS)
        hidden = vocoder.backbone(mel.transpose(1, 2))
        out["vocoder backbone"] = count_flops(fwd_bwd(lambda m: vocoder.backbone(m.transpose(1, 2)), mel))[0]
        head = CountableISTFTHead(vocoder.head)
        wave24 = head(hidden)
        out["vocoder ISTFT head"] = count_flops(fwd_bwd(head, hidden))[0] + irfft_flops(batch * frames)
        resample = Resample()
        wave16 = resample(wave24)
        out["resampler"] = count_flops(fwd_bwd(resample, wave24))[0]
        convs = ConvStack(penalty.recognizer, penalty.conv_layer)
        feats = convs(wave16)
        out["recognizer convs"] = count_flops(fwd_bwd(convs, wave16))[0]
        out["raw-conv head"] = count_flops(fwd_bwd(penalty.head, feats))[0]
    return out


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
    parts = penalty_parts_flops(penalty, 1, frames)
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
            hidden = vocoder.backbone(mel.transpose(1, 2))
            out["vocoder backbone"] += count_flops(fwd_bwd(lambda m: vocoder.backbone(m.transpose(1, 2)), mel))[0]
            head = CountableISTFTHead(vocoder.head)
            wave24 = head(hidden)
            out["vocoder ISTFT head"] += count_flops(fwd_bwd(head, hidden))[0] + irfft_flops(count * mel_frames)
            out["resampler"] += count_flops(fwd_bwd(Resample(), wave24))[0]
        convs = ConvStack(penalty.recognizer, penalty.conv_layer)
        out["recognizer convs"] = out["raw-conv head"] = 0
        for count, samples in wave_groups:
            wave16 = torch.randn(count, samples + penalty.tail_samples)
            feats = convs(wave16)
            out["recognizer convs"] += count_flops(fwd_bwd(convs, wave16))[0]
            out["raw-conv head"] += count_flops(fwd_bwd(penalty.head, feats))[0]
    return out


def draw_crops(penalty: LeakPenalty, batch: int, utt_frames: int, density: float, site_s: float, seed: int):
    """One F5 batch's crops: Poisson sites (``density``/s) kept inside F5's infilled span, planned by crop.py."""
    from integrations.f5_tts import penalty_crop_context
    from leakloss.functional.crop import plan_crops

    g = torch.Generator().manual_seed(seed)
    ctx = penalty_crop_context(penalty, penalty.mel_to_wave)
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
    crops, shifted = plan_crops(sites, [utt_frames] * batch, FRAME_RATE, ctx, padded_frames=utt_frames)
    return crops, sum(map(len, shifted)), ctx


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


def wall_ratio(recognizer, head: RawConvHead, steps: int, warmup: int) -> dict:
    from integrations.f5_tts import tiny_f5

    sites = [TimedSite(0.55, 0.63, "deletion", "ʌ->∅"), TimedSite(1.25, 1.35, "quality", "ʌi̯->ɛː")]
    penalty = LeakPenalty(recognizer, head, mel_to_wave=MelToWave.tiny(0))
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
        "recognizer convs + head": (lambda x: penalty.frame_logits(x)[0], wave),
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


def main() -> None:
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
    args = parser.parse_args()
    t_start = time.perf_counter()
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")

    recognizer, rec_note = build_recognizer()
    head, head_note = build_head()
    print(f"recognizer: {rec_note}; head: {head_note}")

    # ---- FLOPs -------------------------------------------------------------------------------------------------
    batch = F5_BATCH_FRAMES // args.utt_frames
    frames = batch * args.utt_frames
    f5 = f5_step_flops(batch, args.utt_frames)
    print(f"F5 v1 Base ({f5_step_flops.params / 1e6:.1f} M params) step, fwd+bwd on [{batch}, {args.utt_frames}, 100]"
          f" = {frames:,} frames ({frames / FRAME_RATE:.1f} s audio): {f5 / 1e12:.2f} TFLOP")
    penalty = LeakPenalty(recognizer, head, mel_to_wave=released_vocos())
    diff = check_istft_copy(penalty.mel_to_wave)
    print(f"ISTFT head copy used for counting matches Vocos' head: max abs diff {diff:.1e}")
    parts = penalty_parts_flops(penalty, batch, args.utt_frames)
    total = sum(parts.values())
    share = total / f5
    print(f"penalty fwd+bwd-to-mel on the same {frames:,} frames (every item, every step): {total / 1e12:.3f} TFLOP")
    for name, flops in parts.items():
        print(f"  {name:<20} {flops / 1e9:9.1f} GFLOP  {flops / f5:7.2%} of F5 step  {flops / total:6.1%} of penalty")
    print(f"  (ISTFT inverse FFT counted analytically: {irfft_flops(frames) / 1e9:.2f} GFLOP; elementwise ops are not"
          " counted on either side)")
    whole, summed = check_against_full_penalty(penalty)
    print(f"check, one 2 s item on real CPU tensors: whole LeakPenalty(mels=...) fwd+bwd {whole / 1e9:.2f} GFLOP vs"
          f" stages {summed / 1e9:.2f} GFLOP (the stage sum adds {irfft_flops(188) / 1e9:.3f} GFLOP of FFT)")
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
    from leakloss.vocoder import mel_lengths_to_samples

    shares, covered = [], []
    for draw in range(args.crop_draws):
        crops, n_sites, ctx = draw_crops(penalty, batch, args.utt_frames, args.crop_site_density,
                                         args.site_duration, seed=draw)
        if not crops:
            shares.append(0.0)
            continue
        from leakloss.functional.crop import length_groups

        sizes = [c.mel_frames for c in crops]
        groups = [(len(g), max(sizes[i] for i in g)) for g in length_groups(sizes)]
        region = [int(mel_lengths_to_samples(c.end - c.start)) for c in crops]
        wave_groups = [(len(g), max(region[i] for i in g)) for g in length_groups(region)]
        parts_c = cropped_parts_flops(penalty, groups, wave_groups)
        shares.append(sum(parts_c.values()) / f5)
        covered.append(sum(sizes) / frames)
        padded = sum(n * m for n, m in groups)
        print(f"  cropped draw {draw}: {n_sites} sites in span -> {len(crops)} crops in {len(groups)} length groups,"
              f" {padded / frames:.0%} of the batch's frames vocoded ({covered[-1]:.0%} before group padding);"
              f" recognizer on {len(crops)} regions in {len(wave_groups)} length groups"
              f" ({sum(n * m for n, m in wave_groups) / max(sum(region), 1):.2f}x their samples, + tail):"
              f" share {shares[-1]:.4f} ("
              + ", ".join(f"{k} {v / f5:.4f}" for k, v in parts_c.items()) + ")")
    cropped_share = statistics.mean(shares)
    print(f"cropped context: {ctx.wave_s * 1000:.0f} ms each side at the recognizer, {ctx.vocoder_frames} mel frames"
          f" each side for the vocoder (released Vocos shapes), grid {ctx.grid} frames; mean share over"
          f" {args.crop_draws} draws {cropped_share:.4f} (target 0.015); x0.8 with CFG text drops")

    # ---- wall clock ----------------------------------------------------------------------------------------------
    wall = wall_ratio(recognizer, head, args.steps, args.warmup)
    print(f"tiny F5 step (batch {wall['shape'][0]}, {wall['frames']} valid mel frames, padded {wall['shape'][1]}):"
          f" median without {wall['median']['without'] * 1000:.1f} ms,"
          f" with penalty {wall['median']['with'] * 1000:.1f} ms"
          f" over {wall['steps']} steps each (penalty paid on {wall['paid']}/{wall['steps']});"
          f" tiny F5 has {wall['params'] / 1e6:.2f} M params (Base {f5_step_flops.params / 1e6:.0f} M), the recognizer"
          " convs keep their real size, so this ratio is not Base's")
    print("  penalty alone, fwd+bwd on the batch: " + ", ".join(
        f"{k} {v * 1000:.1f} ms" for k, v in wall["split"].items()) + " (MelToWave.tiny(0): dim 32, 1 layer)")
    print(f"elapsed {time.perf_counter() - t_start:.1f} s")
    print(f"penalty_flops_share={share:.4f} penalty_flops_share_cropped={cropped_share:.4f}"
          f" wall_ratio={wall['ratio']:.2f}")


if __name__ == "__main__":
    main()
