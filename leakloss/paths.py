"""Where the project's shared data lives (the lexicon, prompts and real recordings: never copied into the repository)."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path


def shared_path(sub: str = "") -> str:
    """Absolute path of ``$LEAKLOSS_SHARED/SUB``, else of ``shared/SUB`` beside the repository (the configs'
    ``${leakloss.shared:data/real-nepali-speech}``). A relative ``../shared/...`` was found only from the
    repository root: from anywhere else the whisper recognizer trained without the extra sentences (a warning)
    or refused its real clips."""
    root = os.environ.get("LEAKLOSS_SHARED") or str(Path(str(resources.files("leakloss"))).parent.parent / "shared")
    return str(Path(root).expanduser().resolve() / sub)


def cache_path(sub: str = "") -> Path:
    """``$LEAKLOSS_CACHE/SUB``, else ``$XDG_CACHE_HOME/leakloss/SUB``, else ``~/.cache/leakloss/SUB``: files
    leakloss rebuilds itself (synthesised references, a joined model, checkpoints), never the only copy of anything."""
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    root = os.environ.get("LEAKLOSS_CACHE") or Path(xdg) / "leakloss"
    return Path(root).expanduser() / sub
