"""real_speech_conv_table: negatives at the training speakers' testable sites, and with schwa_cuts physical pairs
cut at every spoken schwa of their recordings."""

import pytest
import torch

from leakloss.pairs.features import REAL_SPEECH, real_speech_conv_table


@pytest.fixture(scope="module")
def w_and_clips():
    from leakloss.acoustic.recognizer import Recognizer, RecognizerLoadError
    from leakloss.speech.real import real_clips

    clips = real_clips(split="train")[:2]
    if not clips:
        pytest.skip("no real training-speaker recordings (LEAKLOSS_SHARED)")
    try:
        return Recognizer.load("w"), clips
    except (RecognizerLoadError, FileNotFoundError) as err:
        pytest.skip(f"recognizer w not loadable here: {err}")


def test_schwa_cuts_add_cut_sham_and_intact_rows_in_the_intact_timing(w_and_clips):
    rec, clips = w_and_clips
    plain = real_speech_conv_table(rec, clips, progress=False)
    cuts = real_speech_conv_table(rec, clips, progress=False, schwa_cuts=True)
    assert float(plain.y.sum()) == 0 and len(cuts) > len(plain)
    rows = [i for i, m in enumerate(cuts.meta) if m["pair_id"].startswith("real-cut-")]
    assert len(cuts) - len(rows) == len(plain)  # the testable-site negatives are still there
    extra = [cuts.meta[i] for i in rows]
    assert all(m["pair_kind"] == REAL_SPEECH and m["kind"] == "deletion" for m in extra)
    y = cuts.y[rows]
    positives = int(y.sum())
    # per schwa: one cut (1), its sham and the intact reading (0)
    assert positives > 0 and len(extra) == 3 * positives
    assert [m["role"] for m in extra[:3]] == ["query", "control", "control"] and y[:3].tolist() == [1.0, 0.0, 0.0]
    for i in rows:  # the vowel's frames inside the word's window
        assert cuts.feats[i].shape[-1] == cuts.masks[i].numel() and bool(cuts.masks[i].any())
    # the cut differs from the intact reading more than its sham does (the sham is it, up to the fades)
    cut, sham, intact = (cuts.feats[i] for i in rows[:3])
    n = min(cut.shape[-1], sham.shape[-1], intact.shape[-1])
    assert (cut[:, :n] - intact[:, :n]).abs().mean() > (sham[:, :n] - intact[:, :n]).abs().mean()


def test_schwa_cuts_are_cached_apart(w_and_clips, tmp_path):
    rec, clips = w_and_clips
    a = real_speech_conv_table(rec, clips[:1], progress=False, cache_dir=tmp_path)
    b = real_speech_conv_table(rec, clips[:1], progress=False, cache_dir=tmp_path, schwa_cuts=True)
    assert len(list(tmp_path.glob("real-*.pt"))) == 2 and len(b) > len(a)
    again = real_speech_conv_table(rec, clips[:1], progress=False, cache_dir=tmp_path, schwa_cuts=True)
    assert torch.equal(again.y, b.y) and len(again) == len(b)


def test_augmented_copies_are_aligned_afresh_in_their_clips_split_and_reproducible(w_and_clips):
    rec, clips = w_and_clips
    plain = real_speech_conv_table(rec, clips[:1], progress=False, schwa_cuts=True)
    more = real_speech_conv_table(rec, clips[:1], progress=False, schwa_cuts=True, augment_copies=1)
    again = real_speech_conv_table(rec, clips[:1], progress=False, schwa_cuts=True, augment_copies=1)
    assert len(plain) < len(more) <= 2 * len(plain)  # a copy whose words no longer align gives no row
    copies = [m for m in more.meta if "~" in m["pair_id"]]
    assert copies and {m["split"] for m in more.meta} == {plain.meta[0]["split"]}
    assert {m["sentence_id"] for m in copies} == {clips[0].id}
    assert torch.equal(more.y, again.y) and all(torch.equal(a, b) for a, b in zip(more.feats, again.feats))


def test_held_out_words_give_no_row_and_a_clip_ending_on_a_schwa_is_cut_within_it():
    """The held-out words' vowels were training negatives (हैन, नेकपा, बैठकमा: the head's held-out rows for them were
    measured on words it trained on), and a clip whose last phone is a spoken schwa failed the whole table (its
    segment reaches 60 ms past the end: "span ... is outside the clip")."""
    from dataclasses import dataclass

    from leakloss.acoustic.recognizer import Recognizer, RecognizerLoadError
    from leakloss.pairs.build import DEFAULT_HELDOUT_WORDS
    from leakloss.speech.synth import TRAIN_TEACHER_VOICES, speak_phones
    from leakloss.text.sites import SiteFinder

    try:
        rec = Recognizer.load("wb")
    except (RecognizerLoadError, FileNotFoundError) as err:
        pytest.skip(f"recognizer wb not loadable here: {err}")
    text = "हैन, म आज त्यहाँ जान सक्दिनँ।"
    wave = speak_phones([w.nepali for w in SiteFinder()(text) if w.skipped is None], TRAIN_TEACHER_VOICES[0]).waveform

    @dataclass
    class Clip:
        id: str
        text: str
        speaker: str

        def load(self):
            return wave

    clips = [Clip("spk1-0001", text, "spk1")]
    kept = real_speech_conv_table(rec, clips, progress=False, layer=4, schwa_cuts=True)
    assert "हैन" in {m["word"] for m in kept.meta} and kept.y.sum() > 0  # cut at the final schwa too, no error
    left = real_speech_conv_table(rec, clips, progress=False, layer=4, schwa_cuts=True,
                                  exclude_words=DEFAULT_HELDOUT_WORDS)
    assert "हैन" not in {m["word"] for m in left.meta} and len(left) < len(kept)
