"""The README's Python example must run as written."""

import re
from pathlib import Path

import pytest

from tests.conftest import needs_embedded

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_starts_with_the_two_commands():
    first = README.read_text(encoding="utf-8").split("```bash\n", 1)[1].split("```", 1)[0]
    assert first.splitlines()[0].startswith("make demo") and first.splitlines()[1].startswith("make test")


@needs_embedded
@pytest.mark.slow
def test_penalty_example_runs():
    block = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)[0]
    exec(compile(block, "README.md", "exec"), {})


def test_readme_commands_scripts_and_links_exist():
    """Every `leakloss CMD`, benchmark script and docs link the README shows is real."""
    from typer.main import get_command

    from leakloss.cli import app

    text = README.read_text(encoding="utf-8")
    root = README.parent
    used = set(re.findall(r"(?:^|`)leakloss ([a-z][a-z0-9-]*)", text, re.M))  # code lines and `code`
    assert {"score", "score-batch", "compare", "train-heads", "finetune-f5", "demo"} <= used
    assert used <= set(get_command(app).commands), used - set(get_command(app).commands)
    scripts = set(re.findall(r"python (benchmarks/\w+\.py)", text))
    assert scripts and all((root / s).is_file() for s in scripts), scripts
    links = set(re.findall(r"\]\(((?:docs|benchmarks)/[^)#]+)\)", text))
    assert links and all((root / link).is_file() for link in links), links
