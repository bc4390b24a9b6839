"""``benchmarks/penalty_cuda.py``, issue 40's GPU check (the penalty's wall-clock share of an F5 v1 Base step), run
here as its CPU smoke test; and the device scripts that carry it to a lent GPU."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import load_benchmark

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    pytest.importorskip("f5_tts")
    return load_benchmark("penalty_cuda")


def last_figures(out: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in out.strip().splitlines()[-1].split())


def test_sites_are_seeded_inside_their_items_and_follow_the_density(bench):
    durations = [8.0] * 200
    first = bench.draw_sites(durations, 0.6, 0.08, seed=3)
    assert first == bench.draw_sites(durations, 0.6, 0.08, seed=3)
    assert first != bench.draw_sites(durations, 0.6, 0.08, seed=4)
    for sites, duration in zip(first, durations):
        assert [s.start for s in sites] == sorted(s.start for s in sites)
        assert all(0.0 <= s.start and s.end <= duration and math.isclose(s.end - s.start, 0.08) for s in sites)
    mean = sum(map(len, first)) / len(first)
    assert abs(mean - 0.6 * 8.0) < 0.5  # Poisson(4.8) over 200 items: the mean within ~3 standard errors
    assert bench.draw_sites([8.0, 2.0], 0.0, 0.08, seed=0) == [[], []]


@pytest.mark.slow
def test_smoke_run_times_every_arm_and_prints_every_share(bench, capsys):
    assert bench.main(["--smoke"]) == 0
    figures = last_figures(capsys.readouterr().out)
    assert [k for k in figures if k.startswith("share_")] == [f"share_{arm}" for arm in bench.ARMS[1:]]
    assert all(math.isfinite(float(figures[f"share_{arm}"])) for arm in bench.ARMS[1:])
    assert figures["device"] == "cpu-smoke" and figures["items"] == "2" and float(figures["step_ms"]) > 0


@pytest.mark.slow
def test_one_arm_only_prints_the_others_as_nan(bench, capsys):
    assert bench.main(["--smoke", "--arms", "bridge"]) == 0
    figures = last_figures(capsys.readouterr().out)
    assert math.isfinite(float(figures["share_bridge"])) and figures["share_whole"] == "nan"


@pytest.mark.skipif(torch.cuda.is_available(), reason="measures on CUDA when there is one")
def test_without_cuda_it_measures_nothing_and_says_so(bench, capsys):
    assert bench.main([]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "cuda=0"


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--warmup", "-1"], ["--item-seconds", "0"],
                                  ["--site-density", "0"], ["--site-density", "nan"], ["--site-seconds", "0"]])
def test_bad_arguments_are_refused(bench, argv, capsys):
    assert bench.main(["--smoke", *argv]) == 2
    assert capsys.readouterr().err.startswith("error: ")


@pytest.mark.slow
def test_device_script_smoke_runs_with_the_stand_in_modules(tmp_path):
    """What a lent GPU runs (benchmarks/penalty_cuda.sh through train_f5/device_env.sh), here on the CPU: wandb,
    rjieba and pypinyin are the stand-ins there, and the log lands in $OUT."""
    env = os.environ | {"LEAKLOSS_DEVICE_SMOKE": "1", "PY": sys.executable, "WORK": str(tmp_path / "work"),
                        "OUT": str(tmp_path / "out")}
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "penalty_cuda.sh"), "--arms", "cropped"], env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    log = (tmp_path / "out" / "penalty_cuda.log").read_text(encoding="utf-8")
    assert "share_cropped=" in log.strip().splitlines()[-1]
    assert (tmp_path / "work" / "stub" / "wandb" / "__init__.py").exists()


@pytest.mark.slow
def test_a_step_without_the_penalty_is_not_timed_as_the_arm(bench, monkeypatch, capsys):
    """No site anywhere: the penalty arm's steps are plain steps, and the script says so instead of a share."""
    monkeypatch.setattr(bench, "batch_sites", lambda durations, args: [[] for _ in durations])
    assert bench.main(["--smoke", "--arms", "bridge"]) == 1
    assert "did not run on every timed step" in capsys.readouterr().err


def test_device_prepare_refuses_an_unknown_job(tmp_path):
    # a copy of the script in an empty folder: were the check ever lost, it would cut that folder, not this checkout
    (tmp_path / "train_f5").mkdir()
    script = tmp_path / "train_f5" / "device_prepare.sh"
    script.write_text((ROOT / "train_f5" / "device_prepare.sh").read_text(encoding="utf-8"), encoding="utf-8")
    done = subprocess.run(["bash", str(script), "nonsense"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and done.stderr.startswith("error: ")
