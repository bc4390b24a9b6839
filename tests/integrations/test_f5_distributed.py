"""Two processes (gloo, DDP as accelerate wraps the model) equal one process on the same global batch."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("f5_tts")
pytest.importorskip("vocos")

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize("term", ["leak", "margin"])
def test_two_gloo_processes_match_the_single_process_global_batch(tmp_path, term):
    """The reference-free penalty, or the path-margin term (a stand-in that always plans: the site counts differ
    between the ranks, 4 and 2, so an unweighted mean of the ranks' penalties would not be the global one)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
           str(_free_port()), str(ROOT / "tests" / "integrations" / "ddp_worker.py"), str(tmp_path), term]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text(encoding="utf-8"))
    print(result)
    assert result["frozen"] and result["replicated"] and result["same_keys"]
    assert abs(result["loss_ddp"] - result["loss_ref"]) < 1e-5
    assert result["grad_max_abs_diff"] < 1e-5 * max(1.0, result["grad_max_abs"])
    assert result["curve"].keys() == result["reference_curve"].keys()
    for name, value in result["reference_curve"].items():  # relative: the margin stand-in's values are ~4e-4
        # the global batch's penalty and site means, not the mean of the ranks' own (4 and 2 sites)
        assert result["curve"][name] == pytest.approx(value, rel=1e-5, abs=1e-9), name
