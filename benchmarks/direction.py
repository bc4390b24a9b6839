"""Direction check of the training signal.

Start from Hindi-base readings of held-out sentences, descend the leak penalty of recognizer A (its
raw-conv head) on the *input*, then ask a different instrument — the reference-paired scorer as shipped
(heads on recognizer w; ``--heads-dir leakloss/assets/heads_espeak --check-recognizer a``: the espeak-only
heads on recognizers A/B, the judge of the figures before 2026-12-01 13:00) — whether fewer sites are flagged.

Two input domains:

- ``mel`` (default): log-gains on 32 mel bands per 5 ms frame inside each site's window (±30 ms),
  limited to ±26 dB, applied to the reading's own STFT (its phase kept) and inverted. Zero gains give
  the reading back exactly. The penalty is averaged over random copies (noise at 15-40 dB SNR, ±3 dB
  gain, 0-2.5 ms shift), so a perturbation that only fools one exact waveform does not pay.
- ``wave``: Adam on the raw samples. This one is adversarially easy: recognizer A's penalty goes to
  ~0 while recognizer B's flags do not move (measured; see the README).

A control applies random band gains of the same size as the learned ones: if it moved B's flags as
much, the direction would not come from A's gradient.

Last line: ``flags_before=… flags_after=… flags_control=… sites=… steps=… domain=…``.
"""

from __future__ import annotations

import argparse
import math
import time

import torch
import torchaudio
from torch import Tensor, nn

from leakloss.constants import SAMPLE_RATE
from leakloss.penalty import LeakPenalty
from leakloss.site_placement import place_sites
from leakloss.scorer import Scorer
from leakloss.speech.corpus import builtin_sentences, split_sentences
from leakloss.speech.synth import HELDOUT_HINDI_VOICE, TRAIN_TEACHER_VOICES, speak_phones, speak_text
from leakloss.text.sites import SiteFinder

HOP = 80  # STFT hop in samples (5 ms)
WIN = 400
N_FFT = 512


class BandGain(nn.Module):
    """``forward() -> [t]``: the reading with learned mel-band log-gains inside the site windows."""

    def __init__(self, wave: Tensor, sites, pad_s: float = 0.03, bands: int = 32, limit: float = 3.0) -> None:
        super().__init__()
        self.limit, self.length = limit, wave.numel()
        self.register_buffer("window", torch.hann_window(WIN, dtype=wave.dtype))
        self.register_buffer("spec", torch.stft(wave, N_FFT, HOP, WIN, self.window, return_complex=True))  # [f, m]
        fb = torchaudio.functional.melscale_fbanks(N_FFT // 2 + 1, 0.0, SAMPLE_RATE / 2, bands, SAMPLE_RATE)
        fb[0, 0] = 1.0  # the DC bin belongs to the lowest band
        self.register_buffer("fb", fb / fb.sum(1, keepdim=True).clamp(min=1e-6))  # [f, j], rows sum to 1
        frames = torch.zeros(self.spec.shape[-1], dtype=torch.bool)
        for s in sites:
            a, b = int((s.start - pad_s) * SAMPLE_RATE / HOP), int(math.ceil((s.end + pad_s) * SAMPLE_RATE / HOP))
            frames[max(a, 0): b + 1] = True
        self.register_buffer("frames", frames.nonzero().flatten())
        self.log_gain = nn.Parameter(torch.zeros(bands, self.frames.numel(), dtype=wave.dtype))

    def forward(self) -> Tensor:
        g = self.limit * torch.tanh(self.log_gain / self.limit)  # [j, m'] within ±limit nepers
        full = g.new_zeros(self.fb.shape[1], self.spec.shape[-1]).index_copy(1, self.frames, g)
        return torch.istft(self.spec * torch.exp(self.fb @ full), N_FFT, HOP, WIN, self.window, length=self.length)


class SampleDelta(nn.Module):
    """``forward() -> [t]``: the reading plus a free per-sample delta (clamped to [-1, 1])."""

    def __init__(self, wave: Tensor) -> None:
        super().__init__()
        self.register_buffer("wave", wave)
        self.delta = nn.Parameter(torch.zeros_like(wave))

    def forward(self) -> Tensor:
        return (self.wave + self.delta).clamp(-1, 1)


def random_copies(x: Tensor, k: int, generator: torch.Generator) -> Tensor:
    """``[t] -> [k, t]``: noise at 15-40 dB SNR, ±3 dB gain, a 0-2.5 ms delay (expectation over transformations)."""
    rms = x.detach().pow(2).mean().sqrt()
    out = []
    for _ in range(k):
        gain = 10 ** (torch.empty(1).uniform_(-3, 3, generator=generator) / 20)
        snr = torch.empty(1).uniform_(15, 40, generator=generator)
        noise = torch.randn(x.shape, generator=generator, dtype=x.dtype) * rms / 10 ** (snr / 20)
        shift = int(torch.randint(0, 40, (1,), generator=generator))
        out.append((nn.functional.pad(x, (shift, 0))[: x.numel()] + noise) * gain)
    return torch.stack(out)


def descend(penalty: LeakPenalty, edit: nn.Module, sites, steps: int, lr: float, copies: int,
            generator: torch.Generator) -> list[float]:
    opt = torch.optim.Adam(edit.parameters(), lr=lr)
    curve = []
    for _ in range(steps):
        x = edit()
        batch = random_copies(x, copies, generator) if copies > 1 else x[None]
        loss, _ = penalty(waves=batch, sites=[sites] * batch.shape[0])
        opt.zero_grad()
        loss.backward()
        opt.step()
        curve.append(float(loss.detach()))
    return curve


def flags(scorer: Scorer, wave: Tensor, text: str, refs) -> dict[str, tuple[int, int]]:
    """(flagged, sites) per contrast kind, by the reference-paired scorer."""
    r = scorer.score(wave, text, refs)
    out = {}
    for s in (s for w in r["words"] for s in w["sites"]):
        f, n = out.get(s["kind"], (0, 0))
        out[s["kind"]] = (f + (s["decision"] == "flagged"), n + 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=10, help="held-out sentences with testable sites")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--domain", choices=("mel", "wave"), default="mel")
    parser.add_argument("--lr", type=float, default=None, help="default 0.05 (mel) / 1e-3 (wave)")
    parser.add_argument("--copies", type=int, default=2, help="random copies per step (1: none)")
    parser.add_argument("--heads-dir", default=None,
                        help="the judge's heads (default: the shipped ones, on recognizer w; "
                             "leakloss/assets/heads_espeak: the espeak-only heads on A/B)")
    parser.add_argument("--check-recognizer", default=None, help="the judge's word check (default: the scorer's)")
    args = parser.parse_args()
    lr = args.lr or (0.05 if args.domain == "mel" else 1e-3)
    torch.set_num_threads(2)
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    _, held = split_sentences(builtin_sentences())
    finder = SiteFinder()
    penalty = LeakPenalty.load()  # raw-conv head on recognizer A
    scorer = Scorer(heads_dir=args.heads_dir, check_recognizer=args.check_recognizer)  # the heads' own recognizers
    totals = {"before": {}, "after": {}, "control": {}}
    done, start = 0, time.time()
    for text in held:
        if done == args.sentences:
            break
        words = [w for w in finder(text) if w.skipped is None]
        if not any(w.testable_sites for w in words):
            continue
        wave = speak_text(text, HELDOUT_HINDI_VOICE).waveform
        sites = place_sites(wave, text, penalty.recognizer)
        if not sites:
            continue
        done += 1
        refs = [speak_phones([w.nepali for w in words], v).waveform for v in TRAIN_TEACHER_VOICES[:2]]
        edit = BandGain(wave, sites) if args.domain == "mel" else SampleDelta(wave)
        curve = descend(penalty, edit, sites, args.steps, lr, args.copies, generator)
        with torch.no_grad():
            new = edit()
            control = BandGain(wave, sites) if args.domain == "mel" else SampleDelta(wave)
            learned = next(edit.parameters())
            noise = torch.randn(learned.shape, generator=generator, dtype=learned.dtype)
            next(control.parameters()).copy_(noise / noise.norm() * learned.norm())
            control_wave = control()
        snr = 10 * math.log10(float(wave.pow(2).sum() / (new - wave).pow(2).sum().clamp(min=1e-12)))
        row = {"before": flags(scorer, wave, text, refs), "after": flags(scorer, new, text, refs),
               "control": flags(scorer, control_wave, text, refs)}
        for when, per_kind in row.items():
            for kind, (f, n) in per_kind.items():
                tf, tn = totals[when].get(kind, (0, 0))
                totals[when][kind] = (tf + f, tn + n)
        show = "  ".join(f"{k} {row['before'][k][0]}->{row['after'][k][0]} (control {row['control'][k][0]}) "
                         f"of {n}" for k, (_, n) in row["before"].items())
        print(f"{text[:32]}…  penalty {curve[0]:.3f} -> {curve[-1]:.3f}  {show}  edit SNR {snr:.1f} dB  "
              f"[{time.time() - start:.0f}s]", flush=True)
    for kind in sorted(totals["before"]):
        b, n = totals["before"][kind]
        print(f"{kind}: flagged before {b}/{n}, after {totals['after'][kind][0]}/{n}, "
              f"control {totals['control'][kind][0]}/{n}")
    total = {when: sum(f for f, _ in per.values()) for when, per in totals.items()}
    sites = sum(n for _, n in totals["before"].values())
    print(f"{time.time() - start:.0f}s for {done} sentences")
    print(f"flags_before={total['before']} flags_after={total['after']} flags_control={total['control']} "
          f"sites={sites} steps={args.steps} domain={args.domain}")


if __name__ == "__main__":
    main()
