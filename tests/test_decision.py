import pytest
import torch

from leakloss.acoustic.features import FEATURE_NAMES
from leakloss.decision import (
    batch_decisions, combine_references, gates_pass, hindi_realised, reference_qualifies, site_decision, word_decision,
)

I = {n: i for i, n in enumerate(FEATURE_NAMES)}
T = dict(flag=0.5, no_change=0.2)  # the release thresholds of the shipped head cards


def features(**values) -> torch.Tensor:
    x = torch.zeros(57)
    for k, v in values.items():
        x[I[k]] = v
    return x


LEAK_DELETION = dict(margin_reference_max=-0.3, reference_nepali_peak=-0.2, margin_query_min=0.2,
                     query_nepali_peak=-4.0, query_hindi_peak=-5.0, kind_deletion=1.0)


def test_deletion_gate_needs_the_vowel_absent_not_the_next_phone():
    x = features(**LEAK_DELETION)
    assert bool(gates_pass(x)) and bool(reference_qualifies(x))
    assert not bool(gates_pass(features(**(LEAK_DELETION | {"query_nepali_peak": -0.5}))))  # vowel still there
    assert not bool(gates_pass(features(**(LEAK_DELETION | {"margin_query_min": -0.01}))))  # one crop prefers Nepali
    assert not bool(reference_qualifies(features(**(LEAK_DELETION | {"reference_nepali_peak": -2.0}))))


def test_quality_gate_needs_the_hindi_vowel():
    q = LEAK_DELETION | {"kind_deletion": 0.0, "query_hindi_peak": -1.0}
    assert bool(hindi_realised(features(**q)))
    assert not bool(hindi_realised(features(**(q | {"query_hindi_peak": -3.0}))))


def test_decision_rule_thresholds_and_references():
    assert site_decision(0.9, True, **T) == "flagged"
    assert site_decision(0.9, False, **T) == "uncertain"
    assert site_decision(0.3, True, **T) == "uncertain"
    assert site_decision(0.1, True, **T) == "no_change"
    assert combine_references([]) == "unscored"
    assert combine_references(["flagged", "flagged"]) == "flagged"
    assert combine_references(["flagged", "no_change"]) == "uncertain"
    assert word_decision([]) == "not_tested"
    assert word_decision(["no_change", "flagged"]) == "flagged"
    assert word_decision(["unscored", "unscored"]) == "unscored"
    assert word_decision(["no_change", "unscored"]) == "no_change"


def test_batch_decisions_mark_unqualified_references_unscored():
    good = features(**LEAK_DELETION)
    bad_ref = features(**(LEAK_DELETION | {"margin_reference_max": 0.5}))
    feats = torch.stack([good, bad_ref])
    out = batch_decisions(torch.tensor([0.9, 0.9]), feats, feats, **T)
    assert out == ["flagged", "unscored"]


@pytest.mark.parametrize("flag, no_change", [(float("nan"), 0.1), (2.0, 0.1), (0.5, -0.1), (0.1, 0.9), (True, 0.1)])
def test_thresholds_that_could_never_flag_are_refused(flag, no_change):
    from leakloss.decision import check_thresholds

    with pytest.raises(ValueError, match="threshold"):
        check_thresholds(flag, no_change)
    check_thresholds(0.5, 0.2)  # a usable pair
    check_thresholds(0.5)

