"""A wheel built with ``pip wheel .`` carries everything the CLI needs: shipped models, data and configs.

The wheel is installed without dependencies into a fresh venv that borrows this environment's packages
through a ``.pth`` line (the dependencies are not what is tested, and nothing is downloaded); commands run
from a folder outside the checkout, so only the installed copy of leakloss can be imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEXT = "आज नेकपा र अरू दलका प्रतिनिधि बैठकमा आए।"


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
                            "-w", str(tmp / "dist"), "-q"], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    wheel = next((tmp / "dist").glob("leakloss-*.whl"))
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.check_output([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                      text=True).strip()
    # This environment's packages, after the venv's own site-packages; the editable-install finder of the
    # checkout lives in a .pth file there, which a plain path line does not run.
    (Path(purelib) / "borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
                              str(wheel)], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]
    work = tmp / "elsewhere"
    work.mkdir()
    return env_dir, work


def _run(env_dir: Path, work: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{env_dir / 'bin'}:{env['PATH']}"
    return subprocess.run(list(args), cwd=work, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_wheel_runs_the_cli_and_loads_the_shipped_configs(wheel_env):
    env_dir, work = wheel_env
    where = _run(env_dir, work, "python", "-c", "import leakloss; print(leakloss.__file__)")
    assert where.returncode == 0 and str(env_dir) in where.stdout, where.stdout + where.stderr

    demo_help = _run(env_dir, work, "leakloss", "demo", "--help")
    assert demo_help.returncode == 0 and "--retrain" in demo_help.stdout

    sites = _run(env_dir, work, "leakloss", "sites", TEXT, "--json")
    assert sites.returncode == 0, sites.stderr
    assert "deletion" in sites.stdout and "quality" in sites.stdout

    configs = _run(env_dir, work, "python", "-c",
                   "from leakloss.config import ENTRY_CONFIGS, compose_config, config_dir\n"
                   "print(config_dir())\n"
                   "for name in ENTRY_CONFIGS: compose_config(name)\n"
                   "print(sorted(compose_config('train_heads', ['experiment=smoke']).heads))")
    assert configs.returncode == 0, configs.stderr
    assert str(env_dir) in configs.stdout and "['deletion', 'quality', 'rawconv']" in configs.stdout

    synth = _run(env_dir, work, "python", "-c",
                 "import soundfile as sf\n"
                 "from leakloss.speech.synth import HELDOUT_TEACHER_VOICE, TEACHER_VOICES, speak_text\n"
                 f"t = {TEXT!r}\n"
                 "sf.write('q.wav', speak_text(t, HELDOUT_TEACHER_VOICE).waveform.numpy(), 16000)\n"
                 "sf.write('r.wav', speak_text(t, TEACHER_VOICES[0]).waveform.numpy(), 16000)\n")
    assert synth.returncode == 0, synth.stderr
    score = _run(env_dir, work, "leakloss", "score", "q.wav", "--text", TEXT, "--ref", "r.wav", "--json", "out.json")
    assert score.returncode == 0, score.stdout + score.stderr
    result = json.loads((work / "out.json").read_text(encoding="utf-8"))
    assert result["status"] in ("scored", "quarantined", "unscored") and result["text"] == TEXT
