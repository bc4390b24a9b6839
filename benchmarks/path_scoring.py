"""Benchmark: batched set-valued CTC path scoring vs a per-path Python loop.

Workload (realistic for one scoring run): 40 sites x 3 crops x 2 paths (Nepali, Hindi) = 240
paths; each crop has 60-150 frames of log-softmax emissions over a 60-token vocabulary; each
path has 8-15 positions, vowel positions accept a set of 3 tokens. Batched = one call over all
240 paths; loop = one call per path on its own un-padded crop. Same run, best of N repeats.

Run: ``OMP_NUM_THREADS=1 python benchmarks/path_scoring.py``. The last line printed is
``batched_speedup=X.X features_realtime=Y.Y`` (``batched_speedup``: frame_fit, i.e. the forward-backward that path
margins need; ``features_realtime``: :func:`measure_features_realtime`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from leakloss.constants import SAMPLE_RATE
from leakloss.functional.ctc_paths import ctc_set_log_likelihood, frame_fit, paths_from_token_sets


@dataclass
class Workload:
    log_probs: torch.Tensor  # [p, t, v], one row per path (the crop's emissions)
    allowed: torch.Tensor  # [p, s, v]
    frame_lengths: torch.Tensor  # [p]
    path_lengths: torch.Tensor  # [p]
    token_sets: list[list[list[int]]]


def build_workload(sites: int = 40, crops: int = 3, vocab: int = 60, min_frames: int = 60,
                   max_frames: int = 150, min_positions: int = 8, max_positions: int = 15,
                   seed: int = 0, device: str | torch.device = "cpu") -> Workload:
    """Random but realistic scoring workload: every crop scored along a Nepali and a Hindi path."""
    g = torch.Generator().manual_seed(seed)
    blank = 0
    vowels = list(range(1, 13))  # a block of vowel ids, sets of 3 neighbours
    consonants = list(range(13, vocab))
    token_sets: list[list[list[int]]] = []
    crop_frames: list[int] = []
    crop_lp: list[torch.Tensor] = []
    for _ in range(sites):
        s = int(torch.randint(min_positions, max_positions + 1, (1,), generator=g))
        nepali = []
        for k in range(s):
            if k % 3 == 1:
                v0 = vowels[int(torch.randint(0, len(vowels) - 2, (1,), generator=g))]
                nepali.append([v0, v0 + 1, v0 + 2])
            else:
                nepali.append([consonants[int(torch.randint(0, len(consonants), (1,), generator=g))]])
        site = 1 + 3 * int(torch.randint(0, (s - 1) // 3 + 0, (1,), generator=g)) if s > 4 else 1
        if torch.rand(1, generator=g).item() < 0.5:
            hindi = nepali[:site] + nepali[site + 1:]  # vowel deleted
        else:
            swapped = [(x + 3 - 1) % len(vowels) + 1 for x in nepali[site]]
            hindi = nepali[:site] + [swapped] + nepali[site + 1:]  # vowel swapped
        for _ in range(crops):
            t = int(torch.randint(min_frames, max_frames + 1, (1,), generator=g))
            logits = 2.0 * torch.randn(t, vocab, generator=g)
            logits[:, blank] += 3.0  # CTC recognisers are blank-dominated
            crop_lp.append(logits.log_softmax(-1))
            crop_frames.append(t)
            token_sets += [nepali, hindi]
    t_max = max(crop_frames)
    lp = torch.zeros(len(token_sets), t_max, vocab)
    frame_lengths = []
    for c, (x, t) in enumerate(zip(crop_lp, crop_frames)):
        lp[2 * c, :t] = x
        lp[2 * c + 1, :t] = x
        frame_lengths += [t, t]
    allowed, path_lengths = paths_from_token_sets(token_sets, vocab)
    return Workload(lp.to(device), allowed.to(device), torch.tensor(frame_lengths, device=device),
                    path_lengths.to(device), token_sets)


def best_time(fn: Callable[[], object], repeats: int = 5, sync: Callable[[], None] | None = None) -> float:
    """Best wall time of ``repeats`` calls, after one warm-up call."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        if sync:
            sync()
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        best = min(best, time.perf_counter() - t0)
    return best


def measure_batched_speedup(work: Workload, score: Callable = frame_fit, repeats: int = 5) -> dict[str, float]:
    """Time one batched ``score`` call against one call per path on the same paths."""
    dev = work.log_probs.device
    sync = torch.cuda.synchronize if dev.type == "cuda" else None
    items = []
    for i in range(work.log_probs.shape[0]):
        t, s = int(work.frame_lengths[i]), int(work.path_lengths[i])
        items.append((work.log_probs[i : i + 1, :t], work.allowed[i : i + 1, :s],
                      work.frame_lengths[i : i + 1], work.path_lengths[i : i + 1]))

    def batched():
        return score(work.log_probs, work.allowed, work.frame_lengths, work.path_lengths)

    def loop():
        return [score(*item) for item in items]

    with torch.inference_mode():
        # the batched call is cheap: more repeats make its best time robust to a busy machine
        t_batched = best_time(batched, 2 * repeats, sync)
        t_loop = best_time(loop, max(1, repeats // 2), sync)
    return {"paths": float(len(items)), "batched_s": t_batched, "loop_s": t_loop,
            "speedup": t_loop / t_batched}


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    if args.repeats < 1:  # 0 left the batched time at inf: a speedup of 0.0
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: no CUDA device here")
    work = build_workload(device=args.device)
    print(f"workload: {work.log_probs.shape[0]} paths, frames {int(work.frame_lengths.min())}-"
          f"{int(work.frame_lengths.max())}, positions {int(work.path_lengths.min())}-"
          f"{int(work.path_lengths.max())}, vocab {work.log_probs.shape[2]}, device {args.device}, "
          f"threads {torch.get_num_threads()}")
    ll = measure_batched_speedup(work, ctc_set_log_likelihood, args.repeats)
    print(f"log_likelihood: batched {ll['batched_s'] * 1e3:.1f} ms, loop {ll['loop_s'] * 1e3:.1f} ms, "
          f"speedup {ll['speedup']:.1f}x")
    fit = measure_batched_speedup(work, frame_fit, args.repeats)
    print(f"frame_fit (forward-backward): batched {fit['batched_s'] * 1e3:.1f} ms, "
          f"loop {fit['loop_s'] * 1e3:.1f} ms, speedup {fit['speedup']:.1f}x")
    results = {"ll_speedup": ll["speedup"], "batched_speedup": fit["speedup"]}
    results["features_realtime"] = measure_features_realtime()
    print(f"batched_speedup={fit['speedup']:.1f} features_realtime={results['features_realtime']:.1f}")
    return results


def measure_features_realtime(n_sentences: int = 20) -> float:
    """Seconds of audio turned into the 57-feature evidence per second of wall time, embedded recognizer
    A (recognizer pass + alignment + all sites' path scores), on held-out teacher and Hindi readings."""
    import time

    from leakloss.acoustic.features import EvidenceExtractor
    from leakloss.acoustic.recognizer import Recognizer
    from leakloss.speech.corpus import builtin_sentences, split_sentences
    from leakloss.speech.synth import HELDOUT_HINDI_VOICE, HELDOUT_TEACHER_VOICE, speak_phones, speak_text
    from leakloss.text.sites import SiteFinder

    extractor, finder = EvidenceExtractor(Recognizer.load("a")), SiteFinder()
    _, held = split_sentences(builtin_sentences())
    jobs = []
    for text in held[:n_sentences]:
        words = [w for w in finder(text) if w.skipped is None]
        phones = [w.nepali for w in words]
        for reading in (speak_phones(phones, HELDOUT_TEACHER_VOICE), speak_text(text, HELDOUT_HINDI_VOICE)):
            jobs.append((reading.waveform, phones, words))
    extractor.extract(*jobs[0])  # warm-up
    start = time.perf_counter()
    audio = 0.0
    for wave, phones, words in jobs:
        extractor.extract(wave, phones, words)
        audio += wave.numel() / SAMPLE_RATE
    return audio / (time.perf_counter() - start)


if __name__ == "__main__":
    main()
