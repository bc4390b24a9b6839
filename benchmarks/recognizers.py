"""Phone error rate and one-vowel-edit picking of the embedded recognizers A and B.

Held-out sentences (the fixed 10% split of the built-in sentences) read by held-out voices
(teacher and Hindi base). PER counts ʌ and ə as one phone (canonical labels). Edit pairs: the same
sentence by the held-out teacher voice with and without one pronounced Nepali schwa; the recognizer
picks the version whose phone sequence has the higher CTC likelihood; also with white noise at
20 dB SNR added to both. Last line: ``per_a=… per_b=… edit_pick_a=… edit_pick_b=…`` (``edit_pick`` is ``nan``
when no sentence gives an edit pair).
"""

from __future__ import annotations

import argparse
import random
import time

import torch

from leakloss.acoustic.recognizer import Recognizer
from leakloss.functional.ctc_paths import ctc_set_log_likelihood, paths_from_token_sets
from leakloss.speech.augment import add_noise
from leakloss.speech.corpus import builtin_sentences, split_sentences, split_text_words
from leakloss.speech.synth import HELDOUT_HINDI_VOICE, HELDOUT_TEACHER_VOICE, speak_phones, speak_text
from leakloss.text.frontend import NepaliFrontend
from leakloss.scorer import corpus_phone_error_rate
from leakloss.text.phones import canonical


def build_edit_pairs(sentences: list[str], frontend: NepaliFrontend, rng: random.Random):
    """(waveform_with, waveform_without, phones_with, phones_without) per sentence with a medial schwa."""
    pairs = []
    for text in sentences:
        words = [list(frontend.pronounce(w).phones) for w in split_text_words(text)]
        candidates = [(wi, pi) for wi, w in enumerate(words) for pi, p in enumerate(w)
                      if p == "ʌ" and 0 < pi < len(w) - 1]
        if not candidates:
            continue
        wi, pi = rng.choice(candidates)
        edited = [list(w) for w in words]
        del edited[wi][pi]
        a, b = speak_phones(words, HELDOUT_TEACHER_VOICE), speak_phones(edited, HELDOUT_TEACHER_VOICE)
        pairs.append((a.waveform, b.waveform, a.phones, b.phones))
    return pairs


def edit_pick_accuracy(model: Recognizer, pairs, snr_db: float | None, seed: int = 0) -> float:
    g = torch.Generator().manual_seed(seed)
    correct = trials = 0
    vocab = len(model.vocab)
    for wave_a, wave_b, phones_a, phones_b in pairs:
        sets = [[sorted(model.phoneset.tokens(canonical(p))) for p in ph] for ph in (phones_a, phones_b)]
        allowed, lengths = paths_from_token_sets(sets, vocab)
        for truth, wave in enumerate((wave_a, wave_b)):
            if snr_db is not None:
                wave = add_noise(wave, snr_db, g)
            with torch.no_grad():
                log_probs, frames = model(wave[None])
            lp = log_probs.expand(2, -1, -1)
            ll = ctc_set_log_likelihood(lp, allowed, frames.expand(2), lengths, blank=model.blank)
            correct += int(int(ll.argmax()) == truth)
            trials += 1
    return correct / trials if trials else float("nan")  # no pair: no accuracy, not 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--recognizers", nargs="+", default=["a", "b"])
    parser.add_argument("--limit", type=int, default=None, help="at most this many held-out sentences")
    args = parser.parse_args()
    if args.limit is not None and args.limit < 1:
        parser.error(f"--limit must be at least 1, got {args.limit}")
    models = {}
    for name in args.recognizers:  # before the synthesis: an unknown name is a clear error at once
        try:
            models[name] = Recognizer.load(name)
        except (ValueError, OSError) as err:
            parser.error(f"--recognizers: {err}")
    torch.set_num_threads(2)
    _, held = split_sentences(builtin_sentences())
    held = held[: args.limit] if args.limit else held
    frontend = NepaliFrontend()
    start = time.time()
    readings = []
    for text in held:
        words = [list(frontend.pronounce(w).phones) for w in split_text_words(text)]
        readings.append(speak_phones(words, HELDOUT_TEACHER_VOICE))
        readings.append(speak_text(" ".join(split_text_words(text)), HELDOUT_HINDI_VOICE))
    pairs = build_edit_pairs(held, frontend, random.Random(0))
    print(f"{len(held)} held-out sentences, {len(readings)} readings, {len(pairs)} edit pairs "
          f"(synthesis {time.time() - start:.1f}s)")
    results = {}
    for name, model in models.items():
        per = corpus_phone_error_rate(model, [r.waveform for r in readings], [r.phones for r in readings])
        pick = edit_pick_accuracy(model, pairs, None)
        pick_noisy = edit_pick_accuracy(model, pairs, 20.0)
        results[name] = (per, min(pick, pick_noisy))
        print(f"recognizer {name}: PER {per:.3%}  edit pick clean {pick:.3%}  at 20 dB SNR {pick_noisy:.3%}")
    print(" ".join(f"per_{n}={results[n][0]:.4f}" for n in results) + " " +
          " ".join(f"edit_pick_{n}={results[n][1]:.4f}" for n in results))


if __name__ == "__main__":
    main()
