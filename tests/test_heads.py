import pickle

import pytest
import torch

from leakloss.heads import HeadCard, HeadLoadError, MLPHead, RawConvHead, load_head, n_parameters, save_head


def test_mlp_head_has_the_seeds_945_parameters():
    assert n_parameters(MLPHead(57, 16)) == 945


def test_save_load_roundtrip_is_exact(tmp_path):
    torch.manual_seed(0)
    head = MLPHead()
    head.fit_normalisation(torch.randn(100, 57) * 3 + 1)
    card = HeadCard(head="deletion", architecture={}, recognizer="b", feature_schema_version="1",
                    heldout=[{"head": "deletion", "pair_kind": "physical", "caught": 3, "total": 4,
                              "false_flags": 0, "shams": 4}])
    save_head(tmp_path / "deletion", head, card)
    loaded, card2 = load_head(tmp_path / "deletion.safetensors")
    x = torch.randn(7, 57)
    assert torch.equal(loaded(x), head(x))
    assert card2.recognizer == "b" and card2.thresholds == {"flag": 0.5, "no_change": 0.2}
    assert card2.heldout[0]["caught"] == 3 and card2.architecture["hidden"] == 16
    assert not list(tmp_path.glob("*.tmp"))


def test_pickle_is_refused(tmp_path):
    bad = tmp_path / "head.pt"
    bad.write_bytes(pickle.dumps({"evil": 1}))
    with pytest.raises(HeadLoadError, match="pickle"):
        load_head(bad)


def test_corrupt_or_mismatched_files(tmp_path):
    head = MLPHead()
    save_head(tmp_path / "h", head, HeadCard("quality", {}, "a", "1"))
    (tmp_path / "h.safetensors").write_bytes(b"garbage")
    with pytest.raises(HeadLoadError, match="safetensors"):
        load_head(tmp_path / "h.safetensors")
    save_head(tmp_path / "g", MLPHead(57, 8), HeadCard("quality", {}, "a", "1"))
    text = (tmp_path / "g.json").read_text().replace('"hidden": 8', '"hidden": 16')
    (tmp_path / "g.json").write_text(text)
    with pytest.raises(HeadLoadError, match="architecture holds 1,059 weights, the file 587"):
        load_head(tmp_path / "g")
    with pytest.raises(HeadLoadError, match="not found"):
        load_head(tmp_path / "missing")


def test_a_dotted_head_name_is_its_own_files(tmp_path):
    # with_suffix made deletion.v2 into deletion: another head's files were loaded, and overwritten on save
    save_head(tmp_path / "deletion", MLPHead(57, 8), HeadCard("deletion", {}, "a", "1"))
    path = save_head(tmp_path / "deletion.v2", MLPHead(57, 16), HeadCard("deletion", {}, "a", "1"))
    assert path == tmp_path / "deletion.v2.safetensors" and (tmp_path / "deletion.v2.json").is_file()
    for name in ("deletion.v2", "deletion.v2.safetensors", "deletion.v2.json"):
        assert load_head(tmp_path / name)[1].architecture["hidden"] == 16
    assert load_head(tmp_path / "deletion")[1].architecture["hidden"] == 8


def _edit_head(tmp_path, card_change=None, tensor_change=None):
    import json

    from safetensors.torch import load_file, save_file

    save_head(tmp_path / "h", MLPHead(57, 8), HeadCard("quality", {}, "a", "1"))
    if card_change is not None:
        card = json.loads((tmp_path / "h.json").read_text(encoding="utf-8"))
        card_change(card)
        (tmp_path / "h.json").write_text(json.dumps(card), encoding="utf-8")
    if tensor_change is not None:
        tensors = load_file(str(tmp_path / "h.safetensors"))
        tensor_change(tensors)
        save_file(tensors, str(tmp_path / "h.safetensors"))
    return tmp_path / "h"


@pytest.mark.parametrize("card_change, tensor_change, match", [
    (lambda c: c.pop("thresholds"), None, "no thresholds"),  # the defaults were shown as the card's own
    (lambda c: c["architecture"].update(hidden=4_000_000), None, "holds"),  # allocated 1.45 GB before refusing
    (None, lambda t: t.update(std=-t["std"]), "std must be above 0"),  # flipped every score
    (None, lambda t: t.update(std=torch.zeros_like(t["std"])), "std must be above 0"),
    (None, lambda t: t.update(mean=(t["mean"] * 1000).long()), "not floating point"),  # cast silently
    (None, lambda t: t.update(std=t["std"] > 0), "not floating point"),
])
def test_a_damaged_card_or_weights_are_refused_at_load(tmp_path, card_change, tensor_change, match):
    with pytest.raises(HeadLoadError, match=match):
        load_head(_edit_head(tmp_path, card_change, tensor_change))


@pytest.mark.parametrize("card, loaded, warns", [
    ("wb", "w@55714b26", True),  # no hash on the card: the names decide
    ("a@8eb29e95", "a", False),  # a sharded folder has no hash: same name
    ("wb@427360c1", "/copy/of/wb@427360c1", False),  # the same weights in another folder
    ("wb@427360c1", "wb@00000000", True),
    ("b", "/tmp/models/b@f3f1f27b", False),  # a card without a hash, a folder of the same name
])
def test_check_recognizer_compares_hashes_where_both_have_one_else_names(card, loaded, warns):
    import warnings

    from leakloss.heads import check_recognizer

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_recognizer(HeadCard("quality", {}, card, "1"), loaded)
    assert bool(caught) is warns


@pytest.mark.parametrize("change", [
    lambda c: c["architecture"].update(colour="blue"),  # a key the head does not take
    lambda c: c.update(architecture=[1]),  # not a mapping
    lambda c: c["architecture"].update(hidden="x"),
    lambda c: c["architecture"].update(hidden=-3),
])
def test_a_card_whose_architecture_cannot_be_built_is_a_head_load_error(tmp_path, change):
    import json

    save_head(tmp_path / "h", MLPHead(57, 8), HeadCard("quality", {}, "a", "1"))
    card = json.loads((tmp_path / "h.json").read_text())
    change(card)
    (tmp_path / "h.json").write_text(json.dumps(card))
    with pytest.raises(HeadLoadError, match="h.json"):
        load_head(tmp_path / "h")


def test_a_card_that_is_not_utf8_is_a_head_load_error(tmp_path):
    save_head(tmp_path / "h", MLPHead(57, 8), HeadCard("quality", {}, "a", "1"))
    (tmp_path / "h.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(HeadLoadError, match="not a valid head card"):
        load_head(tmp_path / "h")


def test_rawconv_is_fully_convolutional_and_pools_safely():
    torch.manual_seed(0)
    head = RawConvHead(in_channels=16, width=8)
    feats = torch.randn(2, 16, 300)
    logits = head(feats)
    assert logits.shape == (2, 300)
    # a frame's logit depends only on a local window: changing far frames leaves it unchanged
    feats2 = feats.clone()
    feats2[:, :, 200:] += 5
    assert torch.allclose(head(feats2)[:, :100], logits[:, :100])
    mask = torch.zeros(2, 300, dtype=torch.bool)
    mask[0, 10:20] = True
    pooled = RawConvHead.pool(logits, mask)
    assert torch.isfinite(pooled).all() and pooled[1] < -100
    assert logits[0, 10:20].min() - 1e-5 <= pooled[0] <= logits[0, 10:20].max() + 1e-5


def test_rawconv_ensemble_averages_independent_members(tmp_path):
    torch.manual_seed(0)
    head = RawConvHead(in_channels=8, width=6, members=3)
    feats = torch.randn(2, 8, 30)
    members = head.member_logits(feats)
    assert members.shape == (3, 2, 30)
    assert not torch.allclose(members[0], members[1])  # different initialisations
    torch.testing.assert_close(head(feats), members.mean(0))
    single = RawConvHead(in_channels=8, width=6)
    assert n_parameters(head) == 3 * n_parameters(single)
    card = HeadCard(head="rawconv", architecture={}, recognizer="a", feature_schema_version="1")
    save_head(tmp_path / "rawconv", head, card)
    loaded, card = load_head(tmp_path / "rawconv")
    assert card.architecture["members"] == 3
    torch.testing.assert_close(loaded(feats), head(feats))


def test_rawconv_heads_saved_before_ensembles_still_load(tmp_path):
    from safetensors.torch import save_file

    torch.manual_seed(0)
    head = RawConvHead(in_channels=8, width=6)
    legacy = {k.replace("nets.0.", "net."): v for k, v in head.state_dict().items()}  # the old key names
    save_file(legacy, str(tmp_path / "old.safetensors"))
    arch = {"class": "RawConvHead", "in_channels": 8, "width": 6, "kernel": 5, "layers": 3}  # no "members"
    card = HeadCard(head="rawconv", architecture=arch, recognizer="a", feature_schema_version="1")
    import dataclasses
    import json

    (tmp_path / "old.json").write_text(json.dumps(dataclasses.asdict(card)))
    loaded, _ = load_head(tmp_path / "old")
    feats = torch.randn(1, 8, 20)
    torch.testing.assert_close(loaded(feats), head(feats))


@pytest.mark.parametrize("kernel,layers", [(5, 3), (3, 2), (7, 1)])
def test_rawconv_context_frames_is_how_far_an_impulse_reaches(kernel, layers):
    torch.manual_seed(0)
    head = RawConvHead(in_channels=4, width=6, kernel=kernel, layers=layers)
    x = torch.zeros(1, 4, 101, requires_grad=True)
    head(x)[0, 50].backward()
    touched = x.grad.abs().sum(1)[0].nonzero().flatten()
    assert int(touched.max() - 50) == int(50 - touched.min()) == head.context_frames


@pytest.mark.parametrize("thresholds, message", [
    ({"flag": "x"}, r"thresholds lack 'no_change'"),  # the reviewer's card: score crashed with KeyError 'no_change'
    ({"no_change": 0.2}, r"thresholds lack 'flag'"),
    ({}, r"thresholds lack 'flag', 'no_change'"),
    ([0.5, 0.2], r"thresholds must be an object"),
    ({"flag": "x", "no_change": 0.2}, r"flag threshold must be a probability in \[0, 1\], got 'x'"),
    ({"flag": 0.5, "no_change": None}, r"no-change threshold must be a probability"),
    ({"flag": 1.5, "no_change": 0.2}, r"flag threshold must be a probability in \[0, 1\], got 1.5"),
    ({"flag": 0.5, "no_change": -0.1}, r"no-change threshold must be a probability"),
    ({"flag": True, "no_change": 0.2}, r"flag threshold must be a probability"),
    ({"flag": 0.3, "no_change": 0.6}, r"no-change threshold \(0.6\) must not exceed the flag threshold \(0.3\)"),
])
def test_a_card_with_bad_thresholds_is_a_head_load_error(tmp_path, thresholds, message):
    import json

    save_head(tmp_path / "deletion", MLPHead(57, 8), HeadCard("deletion", {}, "b", "1"))
    card = json.loads((tmp_path / "deletion.json").read_text())
    card["thresholds"] = thresholds
    (tmp_path / "deletion.json").write_text(json.dumps(card))
    with pytest.raises(HeadLoadError, match=r"deletion\.json: .*" + message):
        load_head(tmp_path / "deletion")


def test_a_card_with_nan_thresholds_is_a_head_load_error(tmp_path):
    save_head(tmp_path / "h", MLPHead(57, 8), HeadCard("quality", {}, "a", "1"))
    text = (tmp_path / "h.json").read_text().replace('"flag": 0.5', '"flag": NaN')  # json.loads accepts NaN
    (tmp_path / "h.json").write_text(text)
    with pytest.raises(HeadLoadError, match="flag threshold must be a probability in \\[0, 1\\], got nan"):
        load_head(tmp_path / "h")


def test_edge_thresholds_and_extra_keys_load(tmp_path):
    import json

    save_head(tmp_path / "h", MLPHead(57, 8), HeadCard("quality", {}, "a", "1"))
    card = json.loads((tmp_path / "h.json").read_text())
    card["thresholds"] = {"flag": 1, "no_change": 1, "note": "same"}  # ints, equal, an extra key: fine
    (tmp_path / "h.json").write_text(json.dumps(card))
    assert load_head(tmp_path / "h")[1].thresholds["flag"] == 1


def test_shipped_head_cards_pass_the_threshold_check():
    import json
    from pathlib import Path

    import leakloss
    from leakloss.heads import _check_card_thresholds

    assets = Path(leakloss.__file__).parent / "assets"
    cards = sorted(assets.glob("heads*/*.json"))
    cards = [c for c in cards if c.with_suffix(".safetensors").exists()]
    assert cards
    for js in cards:
        _check_card_thresholds(json.loads(js.read_text(encoding="utf-8"))["thresholds"], js)


@pytest.mark.parametrize("heldout, message", [
    ({"head": "deletion"}, r"'heldout' must be a list of rows"),
    ([{"head": "deletion", "pair_kind": "physical", "caught": 5, "total": 4, "false_flags": 0, "shams": 4}],
     r"heldout\[0\]: caught/false_flags exceed"),
    ([{"head": "deletion", "pair_kind": "spliced", "caught": 1, "total": 4, "false_flags": 0, "shams": 4}],
     r"heldout\[0\].*pair_kind"),
])
def test_a_card_with_bad_heldout_rows_is_a_head_load_error(tmp_path, heldout, message):
    """``leakloss heads`` and the demo print a card's rows: a bad one is a load error, not a traceback there."""
    import json

    save_head(tmp_path / "deletion", MLPHead(57, 8), HeadCard("deletion", {}, "b", "1"))
    card = json.loads((tmp_path / "deletion.json").read_text())
    card["heldout"] = heldout
    (tmp_path / "deletion.json").write_text(json.dumps(card))
    with pytest.raises(HeadLoadError, match=r"deletion\.json: " + message):
        load_head(tmp_path / "deletion")


def test_heldout_rows_in_the_old_form_load_as_fields(tmp_path):
    save_head(tmp_path / "h", MLPHead(57, 8), HeadCard("deletion", {}, "b", "1", heldout=[
        {"head": "deletion", "pair_kind": "physical (flite-clustergen — unseen)", "caught": 2, "total": 3,
         "false_flags": 0, "shams": 3}]))
    (row,) = load_head(tmp_path / "h")[1].heldout
    assert (row["pair_kind"], row["voice_family"], row["unseen"]) == ("physical", "flite-clustergen", True)


def test_a_diverged_head_is_neither_saved_nor_loaded(tmp_path):
    """outside_weight=nan trained an all-NaN raw-conv head; it was exported and loaded as a working one."""
    from safetensors.torch import save_file

    head = MLPHead()
    with torch.no_grad():
        next(head.parameters()).fill_(float("nan"))
    with pytest.raises(ValueError, match="hold NaN/Inf: a diverged head is not saved"):
        save_head(tmp_path / "deletion", head, HeadCard("deletion", {}, "b", "1"))
    assert not list(tmp_path.iterdir())
    good = save_head(tmp_path / "deletion", MLPHead(), HeadCard("deletion", {}, "b", "1"))
    save_file({k: v.contiguous() for k, v in head.state_dict().items()}, str(good))
    with pytest.raises(HeadLoadError, match="hold NaN/Inf"):
        load_head(good)


def test_a_card_field_of_the_wrong_type_is_a_head_load_error(tmp_path):
    """"recognizer": 12 reached the scorer's .split('@'): an AttributeError traceback."""
    import json

    from leakloss.heads import HeadLoadError

    save_head(tmp_path / "deletion", MLPHead(), HeadCard("deletion", {}, "b@1", "1"))
    card = json.loads((tmp_path / "deletion.json").read_text(encoding="utf-8"))
    for field_name, value in (("recognizer", 12), ("architecture", []), ("feature_names", "x")):
        (tmp_path / "deletion.json").write_text(json.dumps(card | {field_name: value}), encoding="utf-8")
        with pytest.raises(HeadLoadError, match=f"field '{field_name}' must be"):
            load_head(tmp_path / "deletion")


@pytest.mark.parametrize("card, message", [
    (dict(head="deletion", feature_schema_version="0.0-bogus"), "trained on feature schema '0.0-bogus'"),
    (dict(head="vowel"), "head must be one of deletion, quality, rawconv, got 'vowel'"),
    (dict(head="quality", recognizer=" "), "field 'recognizer' is empty"),
    (dict(head="deletion", feature_names=["x"] * 57), "feature_names differ"),
])
def test_a_card_this_code_cannot_read_the_features_of_is_refused(tmp_path, card, message):
    """These loaded: a head fitted to another feature schema scored today's features as if they were its own."""
    fields = dict(head="deletion", architecture={}, recognizer="b", feature_schema_version="1") | card
    save_head(tmp_path / "h", MLPHead(), HeadCard(**fields))
    with pytest.raises(HeadLoadError, match=message):
        load_head(tmp_path / "h")


def test_heads_of_no_width_cannot_be_built():
    """hidden=0 trained and exported a constant head (0.5001 for every site: all flagged)."""
    from leakloss.heads import RawConvHead

    for kwargs in ({"hidden": 0}, {"in_features": -1}, {"hidden": True}):
        with pytest.raises(ValueError, match="must be a whole number >= 1"):
            MLPHead(**kwargs)
    with pytest.raises(ValueError, match="width must be a whole number >= 1"):
        RawConvHead(width=0)


def test_the_penalty_refuses_a_head_that_is_not_a_raw_conv_head(tmp_path):
    from leakloss.penalty import LeakPenalty

    save_head(tmp_path / "deletion", MLPHead(), HeadCard("deletion", {}, "a", "1"))
    with pytest.raises(HeadLoadError, match="a deletion head; the leak penalty takes a raw-conv head"):
        LeakPenalty.load(head_path=tmp_path / "deletion.safetensors")  # was AttributeError 'min_samples' later


def test_a_card_that_disagrees_with_its_weights_or_its_class_is_a_head_load_error(tmp_path):
    # each loaded: quality weights under a deletion card, a raw-conv head named "deletion" (AttributeError 'score' in
    # the scorer), an MLP of 56 features (a size error at the first score), a frame head reading 512 channels whose
    # card said 64
    import json
    import shutil

    save_head(tmp_path / "quality", MLPHead(), HeadCard("quality", {}, "a", "1"))
    save_head(tmp_path / "deletion", MLPHead(), HeadCard("deletion", {}, "a", "1"))
    shutil.copy(tmp_path / "quality.safetensors", tmp_path / "deletion.safetensors")
    with pytest.raises(HeadLoadError, match="weights of head 'quality', beside the card of head 'deletion'"):
        load_head(tmp_path / "deletion")
    save_head(tmp_path / "odd", RawConvHead(in_channels=8, width=4, kernel=3, members=1),
              HeadCard("rawconv", {}, "a", "1", features={"source": "conv", "layer": 4, "channels": 8}))
    card = json.loads((tmp_path / "odd.json").read_text())
    for change, message in (({"features": {"source": "conv", "layer": 4, "channels": 64}},
                             "features.channels 64 but the head reads 8 channels"),
                            ({"head": "deletion"}, "head 'deletion' is a MLPHead, the card builds a RawConvHead")):
        (tmp_path / "odd.json").write_text(json.dumps(card | change))
        if "head" in change:  # the weights say rawconv too: the class check is reached only under a matching name
            save_head(tmp_path / "odd", RawConvHead(in_channels=8, width=4, kernel=3, members=1),
                      HeadCard("deletion", {}, "a", "1"))
        with pytest.raises(HeadLoadError, match=message):
            load_head(tmp_path / "odd")
    save_head(tmp_path / "narrow", MLPHead(56, 16), HeadCard("deletion", {}, "a", "1"))
    with pytest.raises(HeadLoadError, match="in_features 56, but this code computes 57 site features"):
        load_head(tmp_path / "narrow")


def test_normalisation_fitted_on_one_row_or_frame_is_finite():
    # std of one row was NaN: the head trained on NaN and was refused as diverged when saved
    mlp = MLPHead()
    mlp.fit_normalisation(torch.randn(1, 57))
    conv = RawConvHead(in_channels=4, width=4, kernel=3, members=1)
    mask = torch.zeros(1, 6, dtype=torch.bool)
    mask[0, 2] = True
    conv.fit_normalisation(torch.randn(1, 4, 6), mask)
    assert torch.isfinite(mlp.std).all() and torch.isfinite(conv.std).all()
    assert torch.isfinite(mlp(torch.randn(3, 57))).all()


def test_a_shipped_head_set_is_found_by_name_from_any_folder(tmp_path, monkeypatch):
    # --heads leakloss/assets/heads_w worked only from the repository's root (and not from an installed wheel)
    from typer.testing import CliRunner

    from leakloss.cli import app
    from leakloss.heads import ESPEAK_HEADS, SHIPPED_HEADS, W_HEADS, heads_folder

    monkeypatch.chdir(tmp_path)
    assert heads_folder(None) == SHIPPED_HEADS and heads_folder("wb") == SHIPPED_HEADS
    assert heads_folder("w") == W_HEADS and heads_folder("espeak") == ESPEAK_HEADS
    (tmp_path / "w").mkdir()  # a folder of that name here is what the user means
    assert heads_folder("w") == type(tmp_path)("w")
    r = CliRunner().invoke(app, ["heads", "--dir", "espeak", "--json"])
    assert r.exit_code == 0 and "deletion" in r.stdout, r.output
