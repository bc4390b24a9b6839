"""Physical pairs in Festival/flite voices (PairBuilder.add_recorded_sentence)."""

import soundfile as sf
import pytest

from leakloss.pairs.build import PairBuilder, build_embedded_pairs
from leakloss.pairs.schema import read_manifest, resolve
from leakloss.speech import festival
from leakloss.speech.synth import TRAIN_TEACHER_VOICES
from leakloss.text.sites import SiteFinder

needs_flite = pytest.mark.skipif(not festival.flite_available(), reason="flite not installed")


@needs_flite
def test_recorded_sentence_gives_cut_and_sham_at_the_site(tmp_path):
    builder = PairBuilder(tmp_path, heldout_words=())
    text = "नेकपा बैठकमा हैन"
    added = builder.add_recorded_sentence("s0", text, SiteFinder()(text), festival.get_voice("flite-awb"),
                                          TRAIN_TEACHER_VOICES[0], "train", max_sites=10)
    assert added > 0 and added == len(builder.records)
    path = builder.write()
    records = read_manifest(path)
    kinds = {r.kind for r in records}
    assert kinds == {"deletion", "quality"}  # quality: the donor word says the Hindi vowel (ɛː) in the same voice
    for r in records:
        assert r.pair_kind == "physical" and r.voice == "flite-awb" and r.split == "train"
        cut, sham = (sf.read(resolve(path, x))[0] for x in (r.query, r.control))
        if r.kind == "deletion":
            assert len(cut) < len(sham)  # the vowel's segments are gone; the sham keeps every sample
        else:
            assert len(cut) != len(sham) or abs(cut - sham).max() > 1e-3  # another vowel's samples went in


@needs_flite
def test_heldout_sentences_get_every_heldout_voice(tmp_path):
    path, _ = build_embedded_pairs(tmp_path, max_sentences=12, progress=False,  # 3 held-out sentences
                                   heldout_recorded_voices=["flite-slt", "flite-awb"])
    voices = {r.voice for r in read_manifest(path) if r.voice.startswith("flite")}
    assert voices == {"flite-slt", "flite-awb"}  # the capped build's 3 held-out sentences, each in every held-out voice
    assert all(r.split == "heldout" for r in read_manifest(path) if r.voice.startswith("flite"))


def test_unknown_or_excluded_voice_is_an_error_before_any_synthesis(tmp_path):
    with pytest.raises(KeyError):
        build_embedded_pairs(tmp_path, max_sentences=1, progress=False, heldout_recorded_voices=["no-such-voice"])
    with pytest.raises(festival.ExcludedVoiceError):
        build_embedded_pairs(tmp_path / "b", max_sentences=1, progress=False,
                             heldout_recorded_voices=[sorted(festival.EXCLUDED_PACKAGES)[-1]])
    assert not list(tmp_path.glob("**/*.wav"))  # refused before a single reading was made
