import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from leakloss.text.morphology import LISTED, NOMINAL, VERB, Morphology, form_bits
from leakloss.text.retention import (
    FEATURE_SCHEMA, SHIPPED_MODEL, RetentionModel, RetentionModelError, _hash, mixed_probability, plan_word,
)
from leakloss.text.retention_net import (
    UNIT_FIELDS, NumpyRetentionNet, RetentionNet, batch_ids, expected_shapes, field_sizes, net_logits, unit_ids,
)

WORDS = ["नेकपा", "बजारको", "घरहरूमा", "रामप्रसाद", "गर्छ", "कमल", "सडकमा", "हुनसक्छ", "उपचार", "सुन्दरता",
         "अक्षरहरू", "काठमाडौँमा", "पानीवाला", "सम्पादकहरूलाई", "आमा", "क"]


# a few word forms, so that the morphology fields are not all "unknown"
FORMS = Morphology({_hash("सडकमा"): form_bits([(NOMINAL, 2)]), _hash("सडक"): form_bits([(LISTED, 0)]),
                    _hash("गर्छ"): form_bits([(VERB, 2)]), _hash("गर्"): form_bits([(LISTED, 0)]),
                    _hash("घरहरूमा"): form_bits([(NOMINAL, 5), (NOMINAL, 2)])})
NO_FORMS = Morphology({})


def _net(seed: int = 0) -> RetentionNet:
    torch.manual_seed(seed)
    return RetentionNet(field_sizes(), embed=6, hidden=8, layers=2).eval()


@pytest.mark.parametrize("word", WORDS)
def test_unit_ids_are_in_range_and_mark_the_slots(word):
    plan = plan_word(word)
    ids = unit_ids(plan, FORMS)
    assert ids.shape == (len(plan.units), UNIT_FIELDS) and ids.dtype == np.int64
    assert ((ids >= 0) & (ids < np.asarray(field_sizes()))).all()
    decision = ids[:, 6]
    assert [i for i in range(len(plan.units)) if decision[i]] == list(plan.slots)
    assert [bool(decision[k] - 1) for k in plan.slots] == list(plan.rule_kept)
    np.testing.assert_array_equal(ids[:, 8:], FORMS.unit_fields(plan))
    np.testing.assert_array_equal(unit_ids(plan, NO_FORMS)[:, :8], ids[:, :8])  # no dictionary: spelling alike


def test_the_network_reads_the_morphology():
    plan = plan_word("सडकमा")
    assert (unit_ids(plan, FORMS)[:, 8:] != unit_ids(plan, NO_FORMS)[:, 8:]).any()
    net = _net(1)
    assert not np.allclose(net_logits(net, [plan], FORMS)[0], net_logits(net, [plan], NO_FORMS)[0])


@settings(max_examples=20, deadline=None)
@given(picks=st.lists(st.sampled_from(WORDS), min_size=1, max_size=6), seed=st.integers(0, 3))
def test_a_word_gets_the_same_logits_alone_and_in_a_padded_batch(picks, seed):
    net = _net(seed)
    plans = [plan_word(w) for w in picks]
    batched = net_logits(net, plans, FORMS)
    for plan, got in zip(plans, batched):
        assert got.shape == (len(plan.slots),) and got.dtype == np.float64
        np.testing.assert_allclose(got, net_logits(net, [plan], FORMS)[0], atol=1e-5)


def test_batch_ids_pad_and_mask():
    plans = [plan_word("कमल"), plan_word("आमा")]
    ids, lengths, mask = batch_ids(plans, FORMS)
    assert ids.shape == (2, 3, UNIT_FIELDS) and lengths.tolist() == [3, 2]
    assert mask.tolist() == [[True, True, True], [False, False, False]]


def test_forward_is_float32_and_differentiable():
    net = _net().train()
    ids, lengths, mask = batch_ids([plan_word(w) for w in WORDS], FORMS)
    out = net(ids, lengths)
    assert out.shape == mask.shape and out.dtype == torch.float32
    out[mask].sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in net.parameters() if p.requires_grad)


def _numpy_state(net: RetentionNet) -> dict:
    return {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}


def test_expected_shapes_are_the_state_dicts():
    for kw in (dict(embed=6, hidden=8, layers=2), dict(embed=4, hidden=5, layers=1)):
        net = RetentionNet(field_sizes(), **kw)
        assert expected_shapes(field_sizes(), **kw) == {k: tuple(v.shape) for k, v in net.state_dict().items()}


@settings(max_examples=15, deadline=None)
@given(picks=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4), seed=st.integers(0, 5),
       layers=st.integers(1, 2))
def test_numpy_forward_matches_torch(picks, seed, layers):
    torch.manual_seed(seed)
    net = RetentionNet(field_sizes(), embed=6, hidden=8, layers=layers).eval()
    with torch.no_grad():  # larger weights than the init's: the gates saturate and the check is not trivial
        for p in net.parameters():
            p.mul_(3.0)
    fast = NumpyRetentionNet(_numpy_state(net), field_sizes(), 6, 8, layers, FORMS)
    plans = [plan_word(w) for w in picks]
    for plan, want in zip(plans, net_logits(net, plans, FORMS)):
        np.testing.assert_allclose(fast.logits(plan), want, rtol=1e-4, atol=1e-4)


def test_numpy_net_refuses_weights_of_another_shape():
    state = _numpy_state(_net())
    with pytest.raises(ValueError, match="tensor shapes"):
        NumpyRetentionNet({**state, "head.0.bias": np.zeros(9, np.float32)}, field_sizes(), 6, 8, 2, FORMS)
    with pytest.raises(ValueError, match="missing tensors"):
        NumpyRetentionNet({k: v for k, v in state.items() if k != "head.2.bias"}, field_sizes(), 6, 8, 2, FORMS)
    with pytest.raises(ValueError, match="non-finite"):
        NumpyRetentionNet({**state, "head.2.bias": np.array([np.nan], np.float32)}, field_sizes(), 6, 8, 2, FORMS)


def test_an_ensemble_reads_one_morphology_table():
    from leakloss.text.retention_net import NetEnsemble

    state = _numpy_state(_net())
    one, same = (NumpyRetentionNet(state, field_sizes(), 6, 8, 2, FORMS) for _ in range(2))
    assert NetEnsemble([one, same]).morphology is FORMS
    with pytest.raises(ValueError, match="same morphology"):
        NetEnsemble([one, NumpyRetentionNet(state, field_sizes(), 6, 8, 2, NO_FORMS)])


def test_mixed_probability_is_a_weighted_sum_of_log_odds():
    trees, net = np.array([2.0, -1.0]), np.array([-2.0, 3.0])
    np.testing.assert_allclose(mixed_probability(trees, None, 0.7), 1 / (1 + np.exp(-trees)))
    np.testing.assert_allclose(mixed_probability(trees, net, 0.25), 1 / (1 + np.exp(-(0.75 * trees + 0.25 * net))))


@pytest.fixture(scope="module")
def shipped_spec() -> dict:
    return json.loads(SHIPPED_MODEL.read_text(encoding="utf-8"))


def _spec_with_net(spec: dict, net: RetentionNet, **change) -> dict:
    spec = dict(spec)
    spec["net"] = {"file": "n.safetensors", "sha256": "x", "weight": 0.3, "members": 1, "sizes": list(net.sizes), "embed": 6,
                   "hidden": 8, "layers": 2, **change}
    return spec


def test_a_model_with_a_network_needs_fitting_weights(shipped_spec):
    net = _net()
    state = {f"member0.{k}": v for k, v in _numpy_state(net).items()}
    model = RetentionModel(_spec_with_net(shipped_spec, net), net_state=state)
    assert model.net is not None and model.net_weight == 0.3 and model.fingerprint
    plan = plan_word("सडकमा")
    trees, n = model.plan_logits(plan)
    assert model.net.morphology is model.morphology  # the network reads the model's word forms
    np.testing.assert_allclose(n, net_logits(net, [plan], model.morphology)[0], atol=1e-5)
    np.testing.assert_allclose(model.predict_plan(plan), mixed_probability(trees, n, 0.3))
    with pytest.raises(RetentionModelError, match="weights were not given"):
        RetentionModel(_spec_with_net(shipped_spec, net))
    with pytest.raises(RetentionModelError, match="network weight must be in"):
        RetentionModel(_spec_with_net(shipped_spec, net, weight=float("nan")), net_state=state)
    with pytest.raises(RetentionModelError, match="unit fields of sizes"):
        RetentionModel(_spec_with_net(shipped_spec, net, sizes=[3] * UNIT_FIELDS), net_state=state)
    with pytest.raises(RetentionModelError, match="do not fit its architecture"):
        RetentionModel(_spec_with_net(shipped_spec, net, hidden=16), net_state=state)
    with pytest.raises(RetentionModelError, match="malformed"):
        RetentionModel(_spec_with_net(shipped_spec, net, weight="heavy"), net_state=state)
    with pytest.raises(RetentionModelError, match="do not fit its architecture"):  # a second member is missing
        RetentionModel(_spec_with_net(shipped_spec, net, members=2), net_state=state)
    with pytest.raises(RetentionModelError, match="tensors of no member"):
        RetentionModel(_spec_with_net(shipped_spec, net), net_state={**state, "stray": np.zeros(1, np.float32)})
    with pytest.raises(RetentionModelError, match="ensemble of 0 members"):
        RetentionModel(_spec_with_net(shipped_spec, net, members=0), net_state=state)
    assert _spec_with_net(shipped_spec, net)["feature_schema"] == FEATURE_SCHEMA
