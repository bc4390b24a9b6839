"""``benchmarks/run_all.py``: bad arguments are refused before anything runs or RESULTS.md is rewritten."""

from __future__ import annotations

import pytest

from tests.conftest import load_benchmark


@pytest.mark.parametrize("argv", [["--timeout", "0"], ["--timeout", "-5"], ["--timeout", "nan"], ["--threads", "0"]])
def test_bad_arguments_are_refused_before_any_run(argv, tmp_path, monkeypatch, capsys):
    bench = load_benchmark("run_all")
    monkeypatch.setattr(bench, "RESULTS", tmp_path / "RESULTS.md")
    monkeypatch.setattr(bench, "machine", lambda python: pytest.fail("refuse before probing the machine"))
    monkeypatch.setattr(bench, "run_one", lambda *a, **k: pytest.fail("refuse before running a script"))
    with pytest.raises(SystemExit) as exc:
        bench.main(["--only", "path_scoring", *argv])
    assert exc.value.code == 2 and "need --timeout > 0" in capsys.readouterr().err
    assert not (tmp_path / "RESULTS.md").exists()


def test_the_last_line_of_a_skipped_script_is_read_as_figures():
    run_all = load_benchmark("run_all")
    assert run_all.parse_pairs("per_base=nan speakers=0 base=wb cand=checkpoints/wb_real") == {
        "per_base": "nan", "speakers": "0", "base": "wb", "cand": "checkpoints/wb_real"}
    assert run_all.parse_pairs("skipped: no real test-speaker recording") == {}
