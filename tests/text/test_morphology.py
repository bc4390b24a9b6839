import json
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leakloss.text.morphology import (
    COUNT_BITS, COUNT_SHIFT, HUNSPELL_NE, LISTED, MORPHOLOGY_NAMES, MORPHOLOGY_UNIT_SIZES, NO_AFFIX, NOMINAL, VERB,
    Morphology, MorphologyError, expand_hunspell, form_bits, parse_affixes,
)
from leakloss.text.slots import plan_word, spelling_pieces
from leakloss.text.tables import RetentionModelError, _hash, _pack

# a hunspell pair in the shape of ne_NP: flag 1 verb endings on halanta roots (with a continuation into the
# negative prefix 17 and the case endings 15), flag 15 case endings of nouns
AFF = """SET UTF-8
FLAG num

SFX 1 Y 3
SFX 1 ् िन ्
SFX 1 ् ेको/17X,15X ्
SFX 1 ् 0 ्

SFX 15 Y 2
SFX 15 0 को .
SFX 15 0 मा [^ा]

PFX 17 Y 1
PFX 17 0 न .
"""
DIC = """4
सुन्/1
घर/15
राजा/15
टिफिन
"""
H = "\u094d"


def _forms() -> dict[str, int]:
    return expand_hunspell(DIC, AFF)


def test_parse_affixes_reads_flags_strips_conditions_and_continuations():
    rules = parse_affixes(AFF)
    assert sorted(rules) == ["1", "15", "17"]
    in_rule = rules["1"][0]
    assert (in_rule.kind, in_rule.strip, in_rule.add, in_rule.continuation) == ("SFX", H, "िन", ())
    assert rules["1"][1].continuation == ("17X", "15X")
    assert rules["15"][1].condition.pattern == "[^ा]$" and rules["17"][0].condition is None
    assert rules["1"][0].apply("सुन्") == ("सुनिन", 3) and rules["1"][0].apply("घर") is None
    assert rules["15"][1].apply("राजा") is None  # the condition refuses a base ending in ा
    assert rules["17"][0].apply("सुनेको") == ("नसुनेको", 0)
    with pytest.raises(MorphologyError, match="bad condition"):
        parse_affixes("SFX 1 Y 1\nSFX 1 0 को [\n")


def test_expansion_records_what_made_each_form_and_where_its_affix_starts():
    forms = _forms()
    assert set(forms) == {"सुन्", "सुनिन", "सुनेको", "सुन", "नसुनेको", "सुनेकोको", "सुनेकोमा", "घर", "घरको",
                          "घरमा", "राजा", "राजाको", "टिफिन"}
    assert forms["टिफिन"] == form_bits([(LISTED, 0)])
    assert forms["सुनिन"] == form_bits([(VERB, 2)])  # सुन + िन: the affix is the last 2 characters
    # a continuation suffix extends the first affix (ेको + को); a prefix leaves it where it was (न + सुन + ेको)
    assert forms["सुनेकोको"] == form_bits([(VERB, 5)]) and forms["नसुनेको"] == form_bits([(VERB, 3)])
    assert forms["घरमा"] == form_bits([(NOMINAL, 2)])
    assert forms["सुन"] == form_bits([(VERB, 0)])  # the imperative: the halanta stripped, nothing added
    assert "राजामा" not in forms


def test_form_bits_pack_kinds_counts_and_affix_lengths():
    bits = form_bits([(LISTED, 0), (VERB, 2), (VERB, 5), (NOMINAL, 40)])
    assert bits & LISTED and bits & VERB and bits & NOMINAL
    assert (bits >> COUNT_SHIFT) & ((1 << COUNT_BITS) - 1) == 4
    assert form_bits([(VERB, 1)] * 40) >> COUNT_SHIFT & ((1 << COUNT_BITS) - 1) == (1 << COUNT_BITS) - 1  # capped
    assert form_bits([]) == 0


def _naive_features(forms: dict[str, int], word: str) -> np.ndarray:
    """The features straight from the definition, over spellings (no hashes, no batching)."""
    plan = plan_word(word)
    pieces = spelling_pieces(plan)
    whole = "".join(pieces)

    def bits(t: str) -> int:
        return forms.get(t, 0) if t else 0

    def starts(shift_kind: int) -> list[int]:
        from leakloss.text.morphology import LENGTH_BITS, NOMINAL_LENGTH_SHIFT, VERB_LENGTH_SHIFT

        b = bits(whole)
        if not b & shift_kind:
            return []
        shift = VERB_LENGTH_SHIFT if shift_kind == VERB else NOMINAL_LENGTH_SHIFT
        return [len(whole) - n for n in range(LENGTH_BITS) if (b >> (shift + n)) & 1]

    rows = []
    for k in plan.slots:
        end = sum(len(p) for p in pieces[: k + 1])
        left, right = whole[:end], whole[end:]
        before = "".join(pieces[:k])
        start = whole[len(before):]
        d = [min((s - end for s in starts(kind)), key=abs) if starts(kind) else NO_AFFIX for kind in (VERB, NOMINAL)]
        b = bits(whole)
        rows.append([int(b != 0), int(bool(b & LISTED)), int(bool(b & VERB)), int(bool(b & NOMINAL)),
                     int(bits(whole + H) != 0), (b >> COUNT_SHIFT) & 15, *d,
                     int(bits(left) != 0), int(bits(right) != 0) if right else -1, int(bits(left + H) != 0),
                     int(bits(before) != 0) if before else -1, int(bits(start) != 0),
                     int(bool(bits(left + H) & VERB)), int(bool(bits(left) & VERB)), int(bool(bits(left) & LISTED)),
                     int(bool(bits(right) & LISTED)) if right else -1])
    return np.asarray(rows, dtype=np.float64).reshape(len(plan.slots), len(MORPHOLOGY_NAMES))


_LETTERS = ["स", "ु", "न", "ि", "े", "क", "ो", "घ", "र", "म", "ा", "ज", "ट", "फ", H]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(_LETTERS), min_size=1, max_size=9).map("".join))
def test_features_match_the_definition_on_any_spelling(word):
    forms = _forms()
    try:
        plan_word(word)
    except Exception:  # noqa: BLE001 - a spelling the frontend refuses is not the morphology's business
        return
    table = Morphology({_hash(f): b for f, b in forms.items()})
    np.testing.assert_array_equal(table.features(plan_word(word)), _naive_features(forms, word))


@pytest.mark.parametrize("word", ["सुनिन", "सुनेकोमा", "घरमा", "टिफिन", "नसुनेको", "कमल"])
def test_features_of_known_words(word):
    forms = _forms()
    table = Morphology({_hash(f): b for f, b in forms.items()})
    x = table.features(plan_word(word))
    np.testing.assert_array_equal(x, _naive_features(forms, word))
    col = {n: i for i, n in enumerate(MORPHOLOGY_NAMES)}
    if word == "सुनिन":  # one slot, the final न: inside the verb affix िन (starts 2 characters before its end)
        assert x[0, col["morph_word_verb"]] == 1 and x[0, col["morph_verb_affix_distance"]] == -2
        assert x[0, col["morph_nominal_affix_distance"]] == NO_AFFIX
    if word == "कमल":
        assert (x[:, col["morph_word_known"]] == 0).all()


def _naive_unit_fields(forms: dict[str, int], word: str) -> np.ndarray:
    """:meth:`Morphology.unit_fields` straight from its definition, over spellings."""
    from leakloss.text.morphology import LENGTH_BITS, NOMINAL_LENGTH_SHIFT, VERB_LENGTH_SHIFT

    pieces = spelling_pieces(plan_word(word))
    whole = "".join(pieces)
    b = forms.get(whole, 0)

    def form(t: str) -> int:
        return 0 if not forms.get(t) else 2 if forms[t] & VERB else 1

    rows = []
    for i in range(len(pieces)):
        end = sum(len(p) for p in pieces[: i + 1])
        place = []
        for kind, shift in ((VERB, VERB_LENGTH_SHIFT), (NOMINAL, NOMINAL_LENGTH_SHIFT)):
            starts = [len(whole) - n for n in range(LENGTH_BITS) if b & kind and (b >> (shift + n)) & 1]
            place.append(0 if not starts else 2 if any(s < end for s in starts) else 1)
        rows.append([1 + (b & 7), 1 + form(whole[:end]), 1 + form(whole[:end] + H),
                     0 if end == len(whole) else 1 + int(whole[end:] in forms), *place])
    return np.asarray(rows, dtype=np.int64)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(_LETTERS), min_size=1, max_size=9).map("".join))
def test_unit_fields_match_the_definition_on_any_spelling(word):
    forms = _forms()
    try:
        plan = plan_word(word)
    except Exception:  # noqa: BLE001 - a spelling the frontend refuses is not the morphology's business
        return
    got = Morphology({_hash(f): b for f, b in forms.items()}).unit_fields(plan)
    assert got.shape == (len(plan.units), len(MORPHOLOGY_UNIT_SIZES)) and got.dtype == np.int64
    np.testing.assert_array_equal(got, _naive_unit_fields(forms, word))
    assert ((got >= 0) & (got < np.asarray(MORPHOLOGY_UNIT_SIZES))).all()


def _richer_forms() -> dict[str, int]:
    """The toy pair's forms plus forms with two affixes of a kind and a listed verb form (every field value)."""
    return {**_forms(), "घरहरूमा": form_bits([(NOMINAL, 5), (NOMINAL, 2)]), "घरहरू": form_bits([(NOMINAL, 3)]),
            "गर्छ": form_bits([(VERB, 2), (LISTED, 0)]), "गर्": form_bits([(LISTED, 0)]),
            "कमल": form_bits([(LISTED, 0)]), "कम्": form_bits([(VERB, 0)])}


def test_unit_fields_match_the_definition_on_every_form():
    forms = _richer_forms()
    table = Morphology({_hash(f): b for f, b in forms.items()})
    seen = set()
    for word in forms:
        try:
            plan = plan_word(word)
        except Exception:  # noqa: BLE001 - a spelling the frontend refuses is not the morphology's business
            continue
        got = table.unit_fields(plan)
        np.testing.assert_array_equal(got, _naive_unit_fields(forms, word), err_msg=word)
        seen |= {(c, v) for row in got.tolist() for c, v in enumerate(row)}
    # the forms reach every value of every field but the first's (fields 1 and 2 leave 0, the padding id, unused),
    # so a wrong field cannot hide
    assert seen >= {(c, v) for c, n in enumerate(MORPHOLOGY_UNIT_SIZES) for v in range(int(c in (1, 2)), n) if c}


def test_a_unit_between_two_affix_starts_is_inside():
    table = Morphology({_hash(f): b for f, b in _richer_forms().items()})
    # घ र ह रू मा: nominal affixes हरूमा (from ह) and मा; र ends before both, ह at or after the first
    assert table.unit_fields(plan_word("घरहरूमा"))[:, 5].tolist() == [1, 1, 2, 2, 2]


def test_unit_fields_of_a_verb_form_and_of_an_unknown_word():
    table = Morphology({_hash(f): b for f, b in _forms().items()})
    sunina = table.unit_fields(plan_word("सुनिन"))  # सु नि न: सुन् + िन, the affix starts at ि
    assert (sunina[:, 0] == 1 + VERB).all()
    assert sunina[:, 4].tolist() == [1, 2, 2] and sunina[:, 5].tolist() == [0, 0, 0]
    assert sunina[0, 2] == 1  # सु + halanta is no form; सुन् is, but that is the second unit's letter
    assert sunina[1, 1] == 1 and sunina[:, 3].tolist() == [1, 1, 0]
    unknown = Morphology({}).unit_fields(plan_word("कमल"))
    assert unknown.tolist() == [[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0]]


def test_json_round_trip_holds_hashes_only_and_refuses_bad_tables():
    forms = _forms()
    table = Morphology({_hash(f): b for f, b in forms.items()}, source="test")
    spec = json.loads(json.dumps(table.to_json()))
    assert not re.search("[\u0900-\u097f]", json.dumps(spec, ensure_ascii=False))  # no spelling stored
    again = Morphology.from_json(spec)
    assert len(again) == len(forms) and again.source == "test"
    for w in ["सुनिन", "घरको", "टिफिन", "कमल"]:
        np.testing.assert_array_equal(again.features(plan_word(w)), table.features(plan_word(w)))
    with pytest.raises(RetentionModelError, match="hashed with"):
        Morphology.from_json({**spec, "hash": "md5"})
    with pytest.raises(RetentionModelError, match="not base64"):
        Morphology.from_json({**spec, "forms": "??"})
    with pytest.raises(RetentionModelError, match="repeats a hash"):
        Morphology.from_json({**spec, "forms": _pack([1, 1], ">u8"), "bits": _pack([2, 3], ">u4")})
    assert Morphology({}).lookup(["सुन", ""]) == [0, 0] and Morphology({}).features(plan_word("घर")).shape == (2, 17)


def test_from_hunspell_reads_a_pair_and_names_a_missing_one(tmp_path):
    (tmp_path / "x.dic").write_text(DIC, encoding="utf-8")
    (tmp_path / "x.aff").write_text(AFF, encoding="utf-8")
    table = Morphology.from_hunspell(tmp_path / "x")
    assert len(table) == len(_forms()) and table.source == "x"
    with pytest.raises(MorphologyError, match="cannot read"):
        Morphology.from_hunspell(tmp_path / "missing")


@pytest.mark.skipif(not HUNSPELL_NE.with_suffix(".dic").exists(), reason="hunspell-ne not installed")
def test_debian_hunspell_ne_tells_verb_forms_from_nouns():
    table = Morphology.from_hunspell()
    assert len(table) > 700_000
    col = {n: i for i, n in enumerate(MORPHOLOGY_NAMES)}
    sunina = table.features(plan_word("सुनिन"))  # a verb form: the final vowel is kept (sunina)
    assert sunina[0, col["morph_word_verb"]] == 1 and sunina[0, col["morph_verb_affix_distance"]] < 0
    basin = table.features(plan_word("बेसिन"))  # a loanword, no verb form (besin)
    assert basin[0, col["morph_word_verb"]] == 0


def test_shipped_model_carries_the_dictionary_forms():
    from leakloss.text.retention import load_retention_model

    model = load_retention_model()
    assert len(model.morphology) > 700_000 and model.morphology.source == "ne_NP"
