"""The one result schema: its vocabulary, its validator, and that every module uses it."""

import ast
from pathlib import Path
from typing import get_args

import pytest

from leakloss import schema
from leakloss.schema import (
    DECISIONS,
    KINDS,
    PAIR_KINDS,
    SITE_DECISIONS,
    STATUSES,
    TESTED,
    ResultError,
    validate_result,
)

PACKAGE = Path(schema.__file__).resolve().parent


def result(**over) -> dict:
    site = {"kind": "deletion", "nepali": "ʌ", "hindi": None, "score": 0.9, "decision": "flagged",
            "references_used": 2}
    r = {"query": "q.wav", "text": "नेकपा", "status": "scored", "references": ["r.wav"],
         "reference_checks": [{"reference": "r.wav", "used": True, "reason": None}],
         "words": [{"index": 0, "word": "नेकपा", "start": 0.1, "end": 0.5, "decision": "flagged", "sites": [site]}]}
    r.update(over)
    return r


def test_tuples_are_the_literals():
    assert KINDS == ("deletion", "quality")
    assert set(TESTED) <= set(SITE_DECISIONS) <= set(DECISIONS)
    assert "not_tested" in DECISIONS and "not_tested" not in SITE_DECISIONS
    assert STATUSES == get_args(schema.Status) and "unscored" in STATUSES


def test_a_full_result_validates():
    assert validate_result(result())["status"] == "scored"


@pytest.mark.parametrize("status", [s for s in STATUSES if s != "scored"])
def test_every_status_but_scored_needs_a_reason(status):
    with pytest.raises(ResultError, match="must say why"):
        validate_result(result(status=status))
    assert validate_result(result(status=status, reason="every reference rejected"))["status"] == status


def test_huge_numbers_and_a_flag_without_a_score_are_result_errors():
    r = result()
    r["words"][0]["end"] = 10**400
    with pytest.raises(ResultError, match="finite numbers of seconds"):
        validate_result(r)
    r = result()
    r["words"][0]["sites"][0]["score"] = None
    with pytest.raises(ResultError, match="a flagged site must carry its score"):
        validate_result(r)


@pytest.mark.parametrize("where, key", [("word", "start"), ("word", "end"), ("site", "hindi"), ("site", "score")])
def test_the_keys_the_typed_dicts_require_must_be_there(where, key):
    """A word without start/end validated (as null) and render_report then failed with a bare KeyError."""
    from leakloss.report import render_report

    r = result()
    target = r["words"][0] if where == "word" else r["words"][0]["sites"][0]
    if where == "word":
        target["start"] = target["end"] = None  # not aligned
    elif key == "hindi":
        target["hindi"] = None  # no Hindi counterpart
    validate_result(r)  # null is a value
    del target[key]
    with pytest.raises(ResultError, match=f"missing required field '{key}'"):
        validate_result(r)
    with pytest.raises(ResultError):  # the report checks its input with the same validator
        render_report(r, None)


def test_a_site_cannot_be_not_tested():
    r = result()
    r["words"][0]["sites"][0]["decision"] = "not_tested"
    with pytest.raises(ResultError, match=r"sites\[0\]\.decision must be one of"):
        validate_result(r)


@pytest.mark.parametrize("over, message", [
    ({"reference_checks": [{"reference": 1, "used": True}]}, "reference_checks"),
    ({"reference_checks": "r.wav"}, "reference_checks"),
    ({"audio": [1, 2]}, "audio must be an object"),
    ({"audio": {"original_rate": 16000, "sample_rate": 16000, "channels": 1, "duration_s": 1.0, "resampled": "no",
                "downmixed": False, "clipped_fraction": 0.0, "warnings": []}}, r"audio\.resampled"),
    ({"warnings": "clipped"}, "'warnings' must be a list of strings"),
    ({"reference_checks": [{"reference": "r.wav", "used": True, "reason": None, "audio": {"sample_rate": -1}}]},
     r"reference_checks\[0\]\.audio\.original_rate"),
    ({"reference_checks": [{"reference": "r.wav", "used": False, "reason": None}]}, "not used but gives no reason"),
    ({"reference_checks": [{"reference": "r.wav", "used": True, "reason": 3}]}, r"reason must be a string or null"),
    ({"id": 5}, "id"),  # score-batch resumes by it
    ({"status": "failed", "reason": "   "}, "must say why"),
    ({"audio": {"original_rate": 16000, "sample_rate": 16000, "channels": 1, "duration_s": 10**400,
                "resampled": False, "downmixed": False, "clipped_fraction": 0.0, "warnings": []}},
     r"audio\.duration_s must be a non-negative number"),  # was OverflowError from math.isfinite
])
def test_optional_blocks_are_checked(over, message):
    with pytest.raises(ResultError, match=message):
        validate_result(result(**over))


def _string_tuples(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            yield node.lineno, frozenset(e.value for e in node.elts)


def test_no_module_spells_the_vocabulary_again():
    """The kind/decision/status/pair-kind sets live in leakloss.schema only (subsets are policies, fine)."""
    vocab = {frozenset(t) for t in (KINDS, DECISIONS, SITE_DECISIONS, STATUSES, PAIR_KINDS)}
    offenders = [f"{p.relative_to(PACKAGE)}:{line}" for p in sorted(PACKAGE.rglob("*.py")) if p != PACKAGE / "schema.py"
                 for line, values in _string_tuples(p) if values in vocab]
    assert offenders == []


def test_the_audio_block_of_a_real_reading_validates(tmp_path):
    import numpy as np
    import soundfile as sf

    from leakloss.audio import load_audio

    x = np.clip(np.sin(np.linspace(0, 800, 22_050)) * 3, -1, 1)
    sf.write(tmp_path / "loud.wav", np.stack([x, x], 1), 22_050, subtype="FLOAT")
    _, info = load_audio(tmp_path / "loud.wav")
    r = validate_result(result(audio=info.as_dict(), warnings=[f"query: {w}" for w in info.warnings]))
    assert r["audio"]["downmixed"] and r["audio"]["resampled"] and r["warnings"]


def test_reward_results_carry_a_schema_status_and_a_reward_in_range():
    from leakloss.penalty import WORST_REWARD, RewardResult
    from leakloss.schema import JUDGED_REWARD_STATUSES, REWARD_STATUSES

    assert set(JUDGED_REWARD_STATUSES) <= set(REWARD_STATUSES)
    for status in REWARD_STATUSES:
        RewardResult(WORST_REWARD, status)
    RewardResult(0.7, "scored")
    with pytest.raises(ValueError, match="not one of"):
        RewardResult(0.0, "quarantined")
    for bad in (float("nan"), -0.1, 1.5, float("inf")):
        with pytest.raises(ValueError, match=r"not a number in \[0, 1\]"):
            RewardResult(bad, "scored")
    with pytest.raises(ValueError, match="worst reward"):  # an RL loop must never profit from an unjudged reading
        RewardResult(0.5, "unintelligible")


def test_reference_origin_is_checked_and_defaults_to_given():
    from leakloss.schema import REFERENCE_ORIGINS, reference_origin

    assert REFERENCE_ORIGINS == ("given", "synthesised", "reference_free")
    assert reference_origin(validate_result(result())) == "given"  # results written before the field
    synthesised = {"origin": "synthesised", "detail": "embedded teacher voices teacher0, teacher2"}
    assert reference_origin(validate_result(result(reference_origin=synthesised))) == "synthesised"
    for bad in ({"origin": "guessed", "detail": "x"}, {"origin": "given"}, {"origin": "given", "detail": " "}, "given"):
        with pytest.raises(ResultError, match="reference_origin"):
            validate_result(result(reference_origin=bad))
    with pytest.raises(ResultError, match="reference_free result uses no references"):
        validate_result(result(reference_origin={"origin": "reference_free", "detail": "rawconv"}))
    free = result(reference_origin={"origin": "reference_free", "detail": "rawconv"}, references=[], reference_checks=[])
    assert reference_origin(validate_result(free)) == "reference_free"


def test_a_result_file_nested_too_deeply_is_a_result_error(tmp_path):
    # a RecursionError traceback from compare, listeners and a score-batch resume
    from leakloss.schema import load_result

    path = tmp_path / "r.json"
    path.write_text("[" * 5000 + "]" * 5000, encoding="utf-8")
    with pytest.raises(ResultError, match="is not valid JSON: nested too deeply"):
        load_result(path)
