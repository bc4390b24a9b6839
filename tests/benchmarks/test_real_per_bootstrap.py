"""The speaker bootstrap of ``benchmarks/real_per_bootstrap.py`` against a naive recomputation."""

from __future__ import annotations

import random

from tests.conftest import load_benchmark


def test_the_paired_speaker_bootstrap_matches_a_naive_one():
    bench = load_benchmark("real_per_bootstrap")
    speakers = ["s1", "s1", "s2", "s3", "s3", "s3"]
    edits = {"base": [(3, 10), (1, 8), (4, 12), (0, 5), (2, 9), (5, 11)],
             "cand": [(2, 10), (1, 8), (5, 12), (0, 5), (1, 9), (3, 11)]}
    boot = bench.speaker_bootstrap(edits, speakers, "base", resamples=200, seed=3)
    rng, ids, naive_per, naive_diff = random.Random(3), ["s1", "s2", "s3"], [], []
    for _ in range(200):
        drawn = [i for s in (rng.choice(ids) for _ in ids) for i, who in enumerate(speakers) if who == s]
        phones = sum(edits["base"][i][1] for i in drawn)
        naive_per.append(sum(edits["cand"][i][0] for i in drawn) / phones)
        naive_diff.append((sum(edits["cand"][i][0] for i in drawn) - sum(edits["base"][i][0] for i in drawn)) / phones)
    assert boot["cand"]["per"] == sorted(naive_per) and boot["cand"]["diff"] == sorted(naive_diff)
    assert boot["base"]["diff"] == [0.0] * 200
    assert bench.interval(list(range(100))) == (2, 97)
