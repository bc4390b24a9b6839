"""leakloss.checks: the one check of numeric settings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leakloss.checks import check_number, is_finite_number


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), True, "0.5", None, -0.1, 0.0, 1.5,
                                   10**400])  # 10**400: math.isfinite raised OverflowError
def test_check_number_refuses_what_is_not_a_finite_number_in_range(value):
    with pytest.raises(ValueError, match=r"^w must be in \(0, 1\], got "):
        check_number(value, "w must be in (0, 1]", low=0.0, low_inclusive=False, high=1.0)


@pytest.mark.parametrize("value", [1e-12, 0.5, 1, 1.0])
def test_check_number_returns_a_float_for_a_number_in_range(value):
    out = check_number(value, "w", low=0.0, low_inclusive=False, high=1.0)
    assert out == value and type(out) is float
    assert check_number(0, "w", low=0.0) == 0.0  # low is inclusive by default


@given(st.one_of(st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
                 st.text(max_size=3)))
def test_is_finite_number_never_raises_and_matches_its_definition(x):
    import math

    expected = (isinstance(x, (int, float)) and not isinstance(x, bool)
                and (abs(x) <= 2**1023 if isinstance(x, int) else math.isfinite(x)))
    assert is_finite_number(x) == expected


def test_check_trained_refuses_no_steps_and_nonfinite_weights():
    import torch

    from leakloss.checks import UntrainedError, check_trained

    check_trained(1, {"w": torch.ones(2), "steps": torch.tensor([3])}, "out")
    with pytest.raises(UntrainedError, match="out: no training step ran"):
        check_trained(0, {"w": torch.ones(2)}, "out")
    with pytest.raises(UntrainedError, match="weights w hold NaN/Inf"):
        check_trained(5, {"w": torch.tensor([1.0, float("nan")]), "b": torch.ones(1)}, "out")


def test_check_choices_needs_a_list_of_allowed_items():
    from omegaconf import OmegaConf

    from leakloss.checks import SettingsError, check_choices

    cfg = OmegaConf.create({"roles": ["a", "b"], "one": "a", "empty": []})
    check_choices(cfg, "roles", ["a", "b"])
    check_choices(cfg, "empty", ["a"], least=0)
    for key, allowed in (("roles", ["a"]), ("one", ["a"]), ("empty", ["a"]), ("missing", ["a"])):
        with pytest.raises(SettingsError, match=f"{key} must be a list of"):
            check_choices(cfg, key, allowed)


def test_first_line_drops_a_message_s_context_lines():
    from leakloss.checks import first_line

    assert first_line(ValueError("bad value\n    full_key: x\n    object_type=dict")) == "bad value"
    assert first_line(ValueError("\n  \n")) == "" and first_line(RuntimeError()) == ""


def test_check_whole_takes_whole_numbers_only():
    import numpy as np

    from leakloss.checks import check_whole, is_whole

    assert check_whole(3, "n") == 3 and check_whole(np.int64(2), "n") == 2 and check_whole(0, "n", low=0) == 0
    for bad in (0, -1, 2.0, 2.5, True, "3", None):
        with pytest.raises(ValueError, match=r"n must be a whole number >= 1, got"):
            check_whole(bad, "n")
    assert is_whole(-5) and not is_whole(False)


@given(st.text(max_size=600))
def test_echoed_quotes_a_text_whole_when_short_and_cut_with_its_length_when_long(value):
    from leakloss.checks import ECHO_CHARS, echoed

    text, out = repr(value), echoed(value)
    if len(text) <= ECHO_CHARS:
        assert out == text
    else:
        assert out == f"{text[:ECHO_CHARS]}... ({len(text)} characters in all)"


@given(st.lists(st.text(max_size=300), max_size=40))
def test_echoed_quotes_a_list_whole_when_short_and_its_first_items_and_length_when_long(value):
    from leakloss.checks import ECHO_CHARS, echoed

    out = echoed(value)
    if len(value) <= 10 and len(repr(value)) <= ECHO_CHARS and all(len(v) <= ECHO_CHARS for v in value):
        assert out == repr(value)
    assert len(out) <= ECHO_CHARS + 30
    assert out.endswith(f" ({len(value)} items)") == (len(value) > 10)


def test_echoed_never_builds_the_repr_of_a_nested_alias_structure():
    import time

    from leakloss.checks import echoed

    deep = ["x"] * 10
    for _ in range(9):  # 10**10 strings once repr walks it: what 9 lines of YAML aliases load as
        deep = [deep] * 10
    start = time.perf_counter()
    out = echoed(deep)
    assert time.perf_counter() - start < 1 and out.startswith("[[") and len(out) <= 210, out


def test_check_same_run_continues_the_same_run_and_refuses_another(tmp_path):
    # one home for the rule of every resume (train_heads' check_head_resume, the recognizers' check_resumable)
    import json

    from leakloss.checks import ResumeError, check_same_run

    record = tmp_path / "run.json"
    identity = {"seed": 0, "lr": 0.03, "data": "abc"}
    kw = {"where": "heads.x.resume", "remedy": "delete it to start afresh"}
    record.write_text(json.dumps({"step": 3, "run": identity}), encoding="utf-8")
    check_same_run(record, identity, **kw)  # the same run: no error
    check_same_run(record, {"data": "abc", "lr": 0.03, "seed": 0}, **kw)  # key order does not matter
    with pytest.raises(ResumeError, match=r"^heads.x.resume: last.ckpt was written by a run with other lr \(0.03 -> "
                                          r"0.01\), new \(<absent> -> 1\); give the same, or delete it to start"):
        check_same_run(record, {**identity, "lr": 0.01, "new": 1}, checkpoint="last.ckpt", hint="give the same, or ",
                       **kw)
    with pytest.raises(ResumeError, match=r"^heads.x.resume: written by a run with other data, seed; delete it"):
        check_same_run(record, {**identity, "seed": 1, "data": "d"}, values=False, **kw)
    with pytest.raises(ResumeError, match=r"other data \('abc' -> <absent>\)"):  # a key the record has and this lacks
        check_same_run(record, {"seed": 0, "lr": 0.03}, **kw)
    with pytest.raises(ResumeError, match=r"other a \(<absent> -> 1\), .*, d \(<absent> -> 1\) and 1 more;"):
        check_same_run(record, {**identity, **{k: 1 for k in "abcde"}}, **kw)


@pytest.mark.parametrize("text, message", [
    ('{"step": 3}', r"the checkpoint has no run record \(run.json: written before checkpoints recorded their run\)"),
    ('{"run": null}', "the checkpoint has no run record"),
    (None, "the checkpoint has no run record"),  # no record at all
    ("{trunc", r"unreadable checkpoint record .*run.json \(Expecting"),
    ('[1, 2]', r"unreadable checkpoint record .*\('list' object has no attribute 'get'\)"),
    ('{"run": [1]}', r"unreadable checkpoint record .*\('run' is a list, not an object\)"),
])
def test_check_same_run_refuses_a_record_it_cannot_compare(tmp_path, text, message):
    from leakloss.checks import ResumeError, check_same_run

    record = tmp_path / "run.json"
    if text is not None:
        record.write_text(text, encoding="utf-8")
    with pytest.raises(ResumeError, match=rf"^w: {message}.*; delete it$"):
        check_same_run(record, {"seed": 0}, where="w", remedy="delete it")
