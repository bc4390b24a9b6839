import json

import pytest
import torch

from leakloss.pairs.build import build_embedded_pairs, edit_word, hindi_spoke_variant
from leakloss.pairs.schema import ManifestError, read_manifest
from leakloss.pairs.splice import delete_span, replace_span, sham_span
from leakloss.text.sites import Site


def test_splices_keep_length_and_fade():
    wave = torch.ones(16000)
    cut = delete_span(wave, 0.5, 0.6)
    assert cut.numel() == 16000 - 1600
    sham = sham_span(wave, 0.5, 0.6)
    assert sham.numel() == 16000
    assert sham[8000 - 1] < 1.0 and sham[8000] < 1.0  # 2 ms fades at the joins
    assert torch.allclose(sham[:7900], wave[:7900]) and torch.allclose(sham[8200:9500], wave[8200:9500])
    swapped = replace_span(wave, 0.5, 0.6, torch.zeros(800))
    assert swapped.numel() == 16000 - 800
    with pytest.raises(ValueError, match="outside"):
        delete_span(wave, 0.9, 1.2)


def test_edit_word_and_hindi_variant():
    words = [["n", "e", "k", "ʌ", "p", "aː"]]
    site = Site("deletion", 3, "ʌ", None, True)
    assert edit_word(words, 0, site) == [["n", "e", "k", "p", "aː"]]
    assert hindi_spoke_variant(words[0], ["n", "eː", "k", "p", "aː"], site)
    assert not hindi_spoke_variant(words[0], ["n", "eː", "k", "ə", "p", "aː"], site)
    q = Site("quality", 1, "ʌi̯", "ɛː", True)
    assert hindi_spoke_variant(["h", "ʌi̯", "n"], ["h", "ɛː", "n"], q)
    assert not hindi_spoke_variant(["h", "ʌi̯", "n"], ["h", "ʌi̯", "n"], q)


@pytest.fixture(scope="module")
def small_manifest(tmp_path_factory):
    out = tmp_path_factory.mktemp("pairs")
    path, stats = build_embedded_pairs(out, max_sentences=6, progress=False)
    return path, stats


def test_embedded_builder_writes_all_three_kinds(small_manifest):
    path, stats = small_manifest
    records = read_manifest(path)
    kinds = {r.pair_kind for r in records}
    assert kinds == {"physical", "natural", "model"}
    assert stats.skipped_timing == 0
    for r in records:
        assert (path.parent / r.query).exists() and (path.parent / r.control).exists()
        assert r.voice not in r.reference  # the reference is another voice
    # a capped build samples both: one of the 6 sentences held out, the rest to train on (not 6 held-out ones)
    assert {r.split for r in records} - {"dev"} == {"heldout", "train"}
    assert len({r.sentence_id for r in records if r.split == "heldout"}) == 1


def test_manifest_errors_name_line_and_field(small_manifest, tmp_path):
    path, _ = small_manifest
    lines = path.read_text(encoding="utf-8").splitlines()
    bad = json.loads(lines[1])
    bad["split"] = "sometimes"
    (tmp_path / "m.jsonl").write_text("\n".join([lines[0], json.dumps(bad, ensure_ascii=False)]), encoding="utf-8")
    with pytest.raises(ManifestError, match=r"m\.jsonl:2: field 'split'"):
        read_manifest(tmp_path / "m.jsonl")
    (tmp_path / "d.jsonl").write_text("\n".join([lines[0], lines[0]]), encoding="utf-8")
    with pytest.raises(ManifestError, match="duplicate"):
        read_manifest(tmp_path / "d.jsonl")
    missing = json.loads(lines[0])
    del missing["word"]
    (tmp_path / "f.jsonl").write_text(json.dumps(missing, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(ManifestError, match="missing field.*word"):
        read_manifest(tmp_path / "f.jsonl")
    (tmp_path / "j.jsonl").write_text("{not json", encoding="utf-8")
    with pytest.raises(ManifestError, match="j.jsonl:1: not valid JSON"):
        read_manifest(tmp_path / "j.jsonl")
    (tmp_path / "l.jsonl").write_bytes(lines[0].encode("utf-8") + b"\n" + '{"word": "caf\u00e9"}'.encode("latin-1"))
    with pytest.raises(ManifestError, match=r"l.jsonl:2: not UTF-8 text \(byte 13"):  # was a UnicodeDecodeError
        read_manifest(tmp_path / "l.jsonl")
    with pytest.raises(ManifestError, match="cannot read the manifest"):  # a folder: was IsADirectoryError
        read_manifest(tmp_path)


def test_nasalised_sites_nasalise_only_deletion_site_vowels():
    from leakloss.pairs.features import _nasalised_sites
    from leakloss.text.sites import SiteFinder

    words = SiteFinder()("नेकपा हैन")
    out = _nasalised_sites(words)
    for before, after in zip(words, out):
        changed = {i for i, (a, b) in enumerate(zip(before.nepali, after.nepali)) if a != b}
        deletion = {s.position for s in before.testable_sites if s.kind == "deletion"}
        assert changed == deletion
        assert all(after.nepali[i] == before.nepali[i] + "\u0303" for i in changed)
    assert words[0].nepali == ["n", "e", "k", "ʌ", "p", "aː"]  # the input is left alone


def test_natural_pairs_are_confirmed_on_16k_mono_and_a_pair_of_no_site_is_a_manifest_error(small_manifest, tmp_path):
    # a 22.05 kHz clip was heard slowed down, a stereo one as [t, 2]; a word/site of no site was a bare StopIteration
    import shutil

    import soundfile as sf

    from leakloss.pairs.build import filter_natural_pairs
    from leakloss.pairs.schema import resolve, write_manifest

    records = [r for r in read_manifest(small_manifest[0]) if r.pair_kind == "natural"][:1]
    assert records, "the small build has a natural pair"
    r = records[0]
    for name in (r.query, r.control):
        shutil.copy(resolve(small_manifest[0], name), tmp_path / name.replace("/", "_"))
    query, control = (tmp_path / n.replace("/", "_") for n in (r.query, r.control))
    mono, rate = sf.read(query, dtype="float32")
    sf.write(query, torch.stack([torch.from_numpy(mono)] * 2, 1).numpy(), rate)  # the same clip, stereo
    manifest = tmp_path / "pairs.jsonl"
    write_manifest(manifest, [r.__class__(**{**vars(r), "query": query.name, "control": control.name})])
    heard = []
    filter_natural_pairs(manifest, lambda wave, *_: heard.append(tuple(wave.shape)) or True)
    assert heard and all(len(shape) == 1 for shape in heard) and heard[0] == (mono.shape[0],)
    write_manifest(manifest, [r.__class__(**{**vars(r), "query": query.name, "control": control.name,
                                             "site_position": 99})])
    with pytest.raises(ManifestError, match="site position 99 is no site of its text"):
        filter_natural_pairs(manifest, lambda *_: True)
