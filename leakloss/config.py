"""Where the shipped Hydra configs live, for entry points: package data, found with ``importlib.resources``.

The library itself never reads a config; ``python -m train_heads`` / ``train_recognizers`` /
``train_vocoder``, ``leakloss demo --retrain`` and the tests compose them from here, so a wheel install has
them too. ``compose_config("train_heads", ["experiment=smoke"])`` composes one outside ``@hydra.main``.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import resources

#: Top-level configs shipped in ``leakloss/conf`` (each an entry point's ``config_name``).
ENTRY_CONFIGS = ("train_heads", "train_recognizer", "train_whisper_recognizer", "train_vocoder", "train_f5")


def config_dir() -> str:
    """Absolute path of the shipped config folder (``leakloss/conf`` inside the installed package)."""
    path = resources.files("leakloss") / "conf"
    if not path.joinpath("train_heads.yaml").is_file():
        raise FileNotFoundError(f"the shipped configs are missing from {path}: reinstall leakloss")
    return str(path)


def compose_config(config_name: str, overrides: Sequence[str] = (), return_hydra_config: bool = False):
    """Compose ``config_name`` with Hydra overrides, as ``@hydra.main`` would (no working-dir change);
    ``return_hydra_config`` also accepts ``hydra.*`` overrides (e.g. ``hydra.run.dir=...``)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return compose(config_name=config_name, overrides=list(overrides), return_hydra_config=return_hydra_config)
