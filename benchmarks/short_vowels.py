"""False flags of the raw-conv head on short retained vowels, pooled over fresh syntheses.

The held-out sentences are read by the held-out teacher voice at seven fast rates; every retained schwa
at a deletion site that lasts 40-60 ms is a correct reading the head must not flag (issue target: at most
1%). One synthesis of the table is one sample of the held-out voice's breath noise: this script pools several,
each with its own draw (``Voice.noise_draw``; espeak is seeded per request since 2026-12-07, so a repeated request
is the same reading, where each synthesis had been another draw by the clock).

Last line: ``short_vowel_flag_rate=… flagged=… short_vowels=… syntheses=…`` (the rate is ``nan`` when no short
vowel was found, not 0).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace

import torch

from leakloss.acoustic.recognizer import Recognizer
from leakloss.heads import load_head
from leakloss.pairs.features import short_vowel_conv_table
from leakloss.scorer import SHIPPED_HEADS
from leakloss.speech.corpus import builtin_sentences, split_sentences
from leakloss.speech.synth import HELDOUT_TEACHER_VOICE
from train_heads.evaluate import rawconv_scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--syntheses", type=int, default=5)
    parser.add_argument("--head", default=str(SHIPPED_HEADS / "rawconv"))
    args = parser.parse_args()
    if args.syntheses < 1:
        parser.error(f"--syntheses must be at least 1, got {args.syntheses}")
    torch.set_num_threads(2)
    head, card = load_head(args.head)
    recognizer = Recognizer.load(card.recognizer.split("@")[0])
    _, held = split_sentences(builtin_sentences())
    flagged = total = 0
    start = time.time()
    for i in range(args.syntheses):
        # the frames the head was trained on (its card's layer: wb's head reads encoder state 4, not the output)
        table = short_vowel_conv_table(recognizer, held, progress=False, layer=card.features.get("layer"),
                                       voice=replace(HELDOUT_TEACHER_VOICE, noise_draw=i))
        f = int((rawconv_scores(head, table) >= card.thresholds["flag"]).sum())
        flagged, total = flagged + f, total + len(table)
        print(f"synthesis {i + 1}: {f} of {len(table)} short vowels flagged  [{time.time() - start:.0f}s]", flush=True)
    if not total:
        print("no short retained vowel found: short_vowel_flag_rate is nan", file=sys.stderr)
    print(f"short_vowel_flag_rate={flagged / total if total else float('nan'):.4f} flagged={flagged} short_vowels={total} "
          f"syntheses={args.syntheses}")


if __name__ == "__main__":
    main()
