from pathlib import Path

import nbformat
import pytest

from tests.conftest import needs_embedded

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "walkthrough.ipynb"


def test_notebook_is_stored_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in nb.cells if c.cell_type == "code")


@needs_embedded
@pytest.mark.slow
def test_notebook_executes(tmp_path, monkeypatch):
    from nbclient import NotebookClient

    # the F5 comparison's 200 steps are tests/integrations/test_f5_tts.py's own test; here the cell runs through
    monkeypatch.setenv("LEAKLOSS_NOTEBOOK_STEPS", "20")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # the per-cell timeout only guards against a hung kernel (the F5 comparison cell is minutes on a busy CPU)
    NotebookClient(nb, timeout=1200, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert "penalty" in text and "reward" in text
