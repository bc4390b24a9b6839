"""leakloss: find where Nepali TTS still sounds Hindi, and turn it into a training signal.

Top-level names are imported lazily (torch-heavy modules load on first use).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "load_head": "leakloss.heads",
    "save_head": "leakloss.heads",
    "LeakPenalty": "leakloss.penalty",
    "PairedPosteriorPenalty": "leakloss.paired_penalty",
    "PathMarginPenalty": "leakloss.margin_penalty",
    "leak_reward": "leakloss.reward",
    "place_sites": "leakloss.site_placement",
    "place_dataset_sites": "leakloss.site_placement",
    "Scorer": "leakloss.scorer",
    "SiteFinder": "leakloss.text.sites",
    "NepaliFrontend": "leakloss.text.frontend",
    "Recognizer": "leakloss.acoustic.recognizer",
    "TimedSite": "leakloss.timing",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'leakloss' has no attribute {name!r}")
