"""The GPU pretraining script, run here as its CPU smoke test (tiny model, a few phrases, stand-in modules)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_device_script_trains_each_arm_and_writes_back_what_fits(tmp_path):
    env = os.environ | {"LEAKLOSS_DEVICE_SMOKE": "1", "PY": sys.executable, "WORK": str(tmp_path / "work"),
                        "OUT": str(tmp_path / "out"), "BUDGET_S_SMOKE": "40",
                        "ARMS": "plain:content.weight=0\nctc:content.weight=1.0"}
    done = subprocess.run(["bash", str(ROOT / "train_f5" / "device_pretrain.sh")], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    out = tmp_path / "out"
    names = sorted(p.name for p in out.iterdir())
    assert names == ["ctc_model.json", "ctc_model.safetensors", "logs.txt", "plain_model.json",
                     "plain_model.safetensors"]
    assert all((out / n).stat().st_size < 16 * 2**20 for n in names)  # the device returns files of 16 MiB at most
    logs = (out / "logs.txt").read_text(encoding="utf-8")
    assert " ctc " in logs  # the content arm ran its loss, through the stand-in modules (wandb, rjieba, pypinyin)
    for arm, weight in (("plain", 0.0), ("ctc", 1.0)):
        card = json.loads((out / f"{arm}_model.json").read_text(encoding="utf-8"))
        assert card["content_loss"]["weight"] == weight and card["learning_curve"]
