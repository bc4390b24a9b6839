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
