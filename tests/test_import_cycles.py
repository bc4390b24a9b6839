"""No two modules of the package import each other, directly or through others, even inside functions: each
module sits above what it imports (the text frontend's layers are pinned in tests/text/test_layers.py)."""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "leakloss"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        if "assets" in path.relative_to(PACKAGE).parts:
            continue
        parts = ("leakloss",) + path.relative_to(PACKAGE).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


@lru_cache(maxsize=1)  # parsed once per session: tests/text/test_layers.py asks per module
def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere in it (function-level imports included)."""
    modules = _modules()

    def owner(name: str) -> str | None:  # the module a dotted name lives in (a submodule, else its package)
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for target in targets:
                if target.startswith("leakloss"):
                    found = owner(target)
                    if found is not None and found != module:
                        edges[module].add(found)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_one_that_imports_it_back():
    edges = import_graph()
    # imports inside functions count: Recognizer.load hands a Whisper folder to whisper_recognizer
    assert "leakloss.acoustic.whisper_recognizer" in edges["leakloss.acoustic.recognizer"]
    assert "leakloss.acoustic.recognizer_io" in edges["leakloss.acoustic.whisper_recognizer"]
    assert _cycles(edges) == []


def test_the_library_never_imports_wandb():
    # the loggers are the entry points' business; F5-TTS's own package (imported by integrations.f5_tts) does
    import subprocess
    import sys

    code = ("import sys, leakloss, leakloss.penalty, leakloss.paired_penalty, leakloss.margin_penalty, "
            "leakloss.reward, leakloss.rewards, leakloss.scorer, leakloss.evaluate, leakloss.cli, "
            "integrations.leak_curves, integrations.f5_dataset; print('wandb' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr[-2000:]
