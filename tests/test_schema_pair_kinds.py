"""Pair kinds outside the manifest's three: the held-out rows of ``train_heads/evaluate.py`` and the
short-vowel rows of :func:`leakloss.pairs.features.short_vowel_conv_table` write only values of the one
schema (:mod:`leakloss.schema`), the recorded-voice family as its own field, never inside the kind."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from leakloss.schema import HELDOUT_KINDS, PAIR_KINDS, SHORT_VOWEL, ResultError, validate_heldout_row

ROOT = Path(__file__).resolve().parents[1]
PRODUCERS = [ROOT / "leakloss" / "pairs" / "features.py", ROOT / "train_heads" / "evaluate.py"]


def test_heldout_kinds_are_the_pair_kinds_and_short_vowel():
    assert PAIR_KINDS == ("physical", "natural", "model")  # the manifest's kinds stay three
    assert HELDOUT_KINDS == PAIR_KINDS + ("short_vowel",) and SHORT_VOWEL == "short_vowel"


@pytest.mark.parametrize("path", PRODUCERS, ids=lambda p: p.name)
def test_producers_never_build_a_pair_kind_string(path):
    """Every ``"pair_kind": ...`` a producer writes is a schema constant or a name, never a built string."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = 0
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict):
            continue
        for key, value in zip(node.keys, node.values):
            if isinstance(key, ast.Constant) and key.value == "pair_kind":
                found += 1
                assert not isinstance(value, (ast.JoinedStr, ast.BinOp, ast.Call)), \
                    f"{path.name}:{value.lineno}: pair_kind built as a string"
                if isinstance(value, ast.Constant):
                    assert value.value in HELDOUT_KINDS, f"{path.name}:{value.lineno}: {value.value!r}"
    assert found


def _table(voices: list[str], kind: str = "deletion"):
    from leakloss.pairs.features import FeatureTable

    g = torch.Generator().manual_seed(0)
    meta, n = [], 0
    for voice in voices:
        for pair_kind in (PAIR_KINDS if voice.startswith("espeak") else ("physical",)):
            for role in ("query", "control"):
                meta.append({"pair_id": f"{voice}-{pair_kind}-{n // 2}", "pair_kind": pair_kind, "kind": kind,
                             "contrast": "ʌ->∅", "split": "heldout", "word": "w", "role": role, "sentence_id": "s",
                             "voice": voice})
                n += 1
    return FeatureTable(torch.randn(n, 57, generator=g), torch.tensor([m["role"] == "query" for m in meta]).float(),
                        meta)


def test_mlp_heldout_rows_validate_and_name_the_voice_family_apart():
    from leakloss.heads import MLPHead
    from train_heads.evaluate import heldout_label, heldout_markdown, mlp_heldout_rows

    table = _table(["espeak-ne", "fest-kal", "fest-slt", "flite-awb", "flite-slt"])
    rows = mlp_heldout_rows(MLPHead(), "deletion", table, table, table)
    for r in rows:
        assert validate_heldout_row(r) == r
        assert r["pair_kind"] in PAIR_KINDS and "(" not in r["pair_kind"]
    by = {(r["pair_kind"], r["voice_family"], r["unseen"]): r for r in rows}
    assert set(by) == {("physical", "espeak", False), ("natural", "espeak", False), ("model", "espeak", False),
                       ("physical", "festival-diphone", False), ("physical", "festival-hts", True),
                       ("physical", "flite-clustergen", False), ("physical", "flite-clustergen", True)}
    assert all(r["total"] == 1 and r["shams"] == 1 for r in rows)
    # the table reads as before: espeak rows by kind alone, recorded voices with their family
    assert [heldout_label(r) for r in rows] == [
        "physical", "natural", "model", "physical (festival-diphone)", "physical (festival-hts — unseen)",
        "physical (flite-clustergen)", "physical (flite-clustergen — unseen)"]
    assert "| deletion | physical (festival-hts — unseen) |" in heldout_markdown(rows)


def test_short_vowel_rows_of_the_feature_table_and_rawconv_validate(monkeypatch):
    """The real producer (:func:`short_vowel_conv_table`, espeak readings, a tiny recognizer), with the
    forced alignment replaced by an even split (an untrained recognizer aligns nothing)."""
    from leakloss.acoustic.align import AlignmentResult, WordAlignment
    from leakloss.constants import SAMPLE_RATE
    from leakloss.heads import RawConvHead
    from leakloss.pairs import features
    from tests.conftest import build_tiny_recognizer
    from train_heads.evaluate import heldout_markdown, rawconv_heldout_rows

    class EvenSplit:
        def __init__(self, recognizer):
            pass

        def extract(self, wave, word_phones, words):
            dur = wave.shape[-1] / SAMPLE_RATE
            n = sum(len(p) for p in word_phones)
            out, k = [], 0
            for i, (w, ph) in enumerate(zip(words, word_phones)):
                spans = [((k + j) * dur / n, (k + j + 1) * dur / n) for j in range(len(ph))]
                out.append(WordAlignment(i, w.word, spans[0][0], spans[-1][1], spans, 1.0))
                k += len(ph)
            return type("E", (), {"alignment": AlignmentResult(True, out)})()

    monkeypatch.setattr(features, "EvidenceExtractor", EvenSplit)
    marked = []  # the rows mark the vowel's segment, as sites are placed at inference (not its CTC spike)
    real_mask = features.site_frame_mask
    monkeypatch.setattr(features, "site_frame_mask",
                        lambda *a, segments=False: marked.append(segments) or real_mask(*a, segments=segments))
    rec = build_tiny_recognizer(conv=8)
    short = features.short_vowel_conv_table(rec, ["नेकपा र अरू दलका"], min_s=0.0, max_s=10.0, rates=(260,),
                                            progress=False)
    assert len(short) > 0
    assert {m["pair_kind"] for m in short.meta} == {SHORT_VOWEL}
    assert {m["role"] for m in short.meta} == {"control"}
    assert len(marked) == len(short) and all(marked)
    # a held-out word gives no training row (नेकपा's vowels were training negatives of the shipped frame head)
    assert "नेकपा" in {m["word"] for m in short.meta}
    kept = features.short_vowel_conv_table(rec, ["नेकपा र अरू दलका"], min_s=0.0, max_s=10.0, rates=(260,),
                                           progress=False, exclude_words=["नेकपा"])
    assert "नेकपा" not in {m["word"] for m in kept.meta} and len(kept) < len(short)

    conv = features.ConvTable(short.feats, short.masks, torch.ones(len(short)),
                              [m | {"pair_kind": "physical", "role": "query"} for m in short.meta])
    rows = rawconv_heldout_rows(RawConvHead(in_channels=short.feats[0].shape[0]), conv, short)
    for r in rows:
        assert validate_heldout_row(r) == r and "voice_family" not in r  # rawconv pools every voice
    assert [r["pair_kind"] for r in rows] == ["physical", "natural", "model", "short_vowel"]
    assert rows[-1]["shams"] == len(short) and rows[-1]["total"] == 0
    assert f"| rawconv | short_vowel | — | {rows[-1]['false_flags']} / {len(short)} |" in heldout_markdown(rows)


def test_validator_refuses_what_is_not_in_the_schema():
    ok = {"head": "deletion", "pair_kind": "physical", "caught": 1, "total": 2, "false_flags": 0, "shams": 2}
    assert validate_heldout_row(ok) == ok
    for bad, needle in [
        (ok | {"pair_kind": "short vowel"}, "pair_kind"),
        (ok | {"pair_kind": "physical (festival-hts)", "voice_family": "festival-hts", "unseen": False}, "pair_kind"),
        (ok | {"voice_family": ""}, "voice_family"),
        (ok | {"voice_family": "festival-hts", "unseen": "yes"}, "unseen"),
        (ok | {"unseen": True}, "voice_family"),
        (ok | {"caught": 3}, "caught"),
        (ok | {"shams": -1}, "shams"),
        (ok | {"pair_kind": "short_vowel"}, "short_vowel"),  # nothing to catch among short vowels
        ({k: v for k, v in ok.items() if k != "head"}, "head"),
    ]:
        with pytest.raises(ResultError, match=needle):
            validate_heldout_row(bad, where="row")


def test_shipped_cards_written_before_the_family_field_still_read():
    """Cards exported before the split wrote ``physical (<family>)``: read as the two fields."""
    import json

    from train_heads.evaluate import heldout_label, heldout_markdown

    legacy = {"head": "deletion", "pair_kind": "physical (flite-clustergen — unseen)", "caught": 24, "total": 39,
              "false_flags": 1, "shams": 39}
    row = validate_heldout_row(legacy)
    assert (row["pair_kind"], row["voice_family"], row["unseen"]) == ("physical", "flite-clustergen", True)
    assert heldout_label(legacy) == heldout_label(row) == "physical (flite-clustergen — unseen)"
    for card in sorted((ROOT / "leakloss" / "assets").glob("heads*/*.json")):
        rows = json.loads(card.read_text(encoding="utf-8"))
        rows = rows["heldout"] if isinstance(rows, dict) else rows
        for r in rows:
            assert validate_heldout_row(r, where=str(card))["pair_kind"] in HELDOUT_KINDS
        if card.name == "heldout.json":
            assert heldout_markdown(rows) == (card.parent / "heldout.md").read_text(encoding="utf-8")
