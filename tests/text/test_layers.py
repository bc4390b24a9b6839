"""The text frontend's modules form layers: a module imports (at the top or inside a function) only modules of
lower layers, so the rules never reach the learned model and the model's parts never reach the model or the
frontend that use them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_import_cycles import import_graph

TEXT = Path(__file__).resolve().parents[2] / "leakloss" / "text"
#: lowest first; a module may import those before it (its own layer excluded)
LAYERS: tuple[tuple[str, ...], ...] = (
    ("normalize", "phones"),
    ("phoneset", "hindi"),
    ("g2p",),  # the letter-to-sound rules and lexicon readers
    ("slots", "tables"),  # a word's slots as the rules see them; the learned parts' stored tables
    ("morphology", "phonotactics"),
    ("retention_net",),
    ("retention",),  # the learned model
    ("frontend",),  # lexicon + model + rules
    ("sites",),
    ("train_retention",),
)
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _text_imports(module: str) -> set[str]:
    """The ``leakloss.text`` modules ``leakloss.text.<module>`` imports anywhere in it (function-level too)."""
    return {t.split(".")[2] for t in import_graph()[f"leakloss.text.{module}"] if t.count(".") == 2
            and t.startswith("leakloss.text.")}


def test_every_text_module_has_a_layer():
    modules = {p.stem for p in TEXT.glob("*.py")} - {"__init__"}
    assert modules == set(RANK)


@pytest.mark.parametrize("module", sorted(RANK))
def test_a_module_imports_only_lower_layers(module):
    upward = sorted(m for m in _text_imports(module) if RANK[m] >= RANK[module])
    assert not upward, f"leakloss.text.{module} imports {upward}, not of a lower layer"


def test_the_rules_load_without_the_model():
    code = ("import sys, leakloss.text.g2p, leakloss.text.slots, leakloss.text.tables; "
            "print(sorted(m for m in sys.modules if m.split('.')[-1] in "
            "('retention', 'retention_net', 'frontend', 'phonotactics', 'morphology')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
