import json

from leakloss.speech.corpus import Corpus, build_corpus, builtin_sentences, split_sentences


def test_builtin_sentences_are_many_and_devanagari():
    sentences = builtin_sentences()
    assert len(sentences) >= 300
    assert sentences[0] == "आज नेकपा र अरू दलका प्रतिनिधि बैठकमा आए।"


def test_split_is_fixed_and_disjoint():
    s = builtin_sentences()
    train, held = split_sentences(s)
    assert set(train).isdisjoint(held) and len(train) + len(held) == len(s)
    assert split_sentences(s) == (train, held)


def test_build_corpus_is_deterministic_and_cached(tmp_path):
    sentences = builtin_sentences()[:3]
    c1 = build_corpus(sentences, tmp_path, roles=("teacher", "hindi", "variant"), seed=1, progress=False)
    assert len(c1) == 9
    lines = (c1.root / "manifest.jsonl").read_text(encoding="utf-8").splitlines()
    item = json.loads(lines[0])
    assert set(item) >= {"id", "text", "role", "voice", "audio", "phones", "word_spans"}
    assert not list(c1.root.glob("*.tmp"))
    mtime = (c1.root / "manifest.jsonl").stat().st_mtime
    c2 = build_corpus(sentences, tmp_path, roles=("teacher", "hindi", "variant"), seed=1, progress=False)
    assert (c2.root / "manifest.jsonl").stat().st_mtime == mtime  # reused, not rebuilt
    assert [i.phones for i in c2.items] == [i.phones for i in c1.items]
    wave = Corpus.load(c1.root).audio(c1.items[0])
    assert abs(wave.numel() / 16000 - c1.items[0].duration) < 0.01
    teacher = [i for i in c1.items if i.role == "teacher"][0]
    assert len(teacher.word_spans) == len(teacher.words)


def test_recorded_and_piper_roles_label_what_the_voice_said(tmp_path, monkeypatch):
    import shutil

    import pytest

    from leakloss.speech import festival, piper_voice

    roles = tuple(r for r, ok in (("recorded", shutil.which("festival") is not None),
                                  ("piper", piper_voice.piper_available())) if ok)
    if not roles:
        pytest.skip("neither festival nor piper installed")
    voices = [v for v in festival.VOICES if v.name in ("fest-kal", "fest-it-pc") and festival.voice_available(v)]
    if "recorded" in roles and not voices:
        roles = tuple(r for r in roles if r != "recorded")
    sentences = builtin_sentences()[:2]
    c1 = build_corpus(sentences, tmp_path, roles=roles, recorded_voices=voices, progress=False)
    assert len(c1) == 2 * len(roles) and {i.role for i in c1.items} == set(roles)
    for item in c1.items:
        assert item.phone_ends and len(item.phone_ends) == len(item.phones) == len(item.phone_starts)
        assert len(item.word_spans) == len(item.words)
        assert abs(Corpus.load(c1.root).audio(item).numel() / 16000 - item.duration) < 0.01
    c2 = build_corpus(sentences, tmp_path, roles=roles, recorded_voices=voices, progress=False)
    assert c2.root == c1.root and [i.phones for i in c2.items] == [i.phones for i in c1.items]
    # espeak-only corpora keep their keys: the new voices enter the key only with their role
    from leakloss.speech.corpus import corpus_key
    from leakloss.speech.synth import TRAIN_HINDI_VOICES, TRAIN_TEACHER_VOICES

    from leakloss.text.frontend import NepaliFrontend

    espeak = build_corpus(sentences[:1], tmp_path, roles=("teacher",), recorded_voices=voices, progress=False)
    assert espeak.root.name == corpus_key(sentences[:1], ("teacher",), list(TRAIN_TEACHER_VOICES) +
                                          list(TRAIN_HINDI_VOICES), 0,
                                          extra=f"n=1;frontend={NepaliFrontend().fingerprint}")
    if "recorded" in roles:  # relabelled segments make a new corpus, never the cached labels
        current = build_corpus(sentences[:1], tmp_path, roles=("recorded",), recorded_voices=voices, progress=False)
        monkeypatch.setattr(festival, "LABELS_VERSION", festival.LABELS_VERSION + 1)
        relabelled = build_corpus(sentences[:1], tmp_path, roles=("recorded",), recorded_voices=voices, progress=False)
        assert relabelled.root.name != current.root.name


def test_recorded_role_needs_voices(tmp_path):
    import pytest

    with pytest.raises(ValueError):
        build_corpus(builtin_sentences()[:1], tmp_path, roles=("recorded",), progress=False)


def test_sentence_files_that_cannot_train_are_typed_errors(tmp_path):
    import pytest

    from leakloss.speech.corpus import SentenceFileError, read_sentences, split_for_training

    with pytest.raises(SentenceFileError, match="cannot read"):
        read_sentences(tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_text("# only a comment\n\n", encoding="utf-8")
    with pytest.raises(SentenceFileError, match="no sentence"):
        read_sentences(tmp_path / "empty.txt")
    (tmp_path / "bom.tsv").write_bytes("\ufeffp1\tनेकपा आयो\np2\t\nघर\n".encode("utf-8"))
    assert read_sentences(tmp_path / "bom.tsv") == ["नेकपा आयो", "घर"]
    with pytest.raises(SentenceFileError, match="nothing left to train on"):
        split_for_training(["घर"], 0.1)
    assert split_for_training(["घर", "नेकपा", "आयो"], 0.1)[0]


def test_no_sentence_or_no_reading_per_sentence_is_refused_and_wordless_sentences_are_said(tmp_path, capsys):
    import pytest

    for kwargs in ({"readings_per_sentence": 0}, {}):
        with pytest.raises(ValueError, match="readings_per_sentence|no sentences"):
            build_corpus([] if not kwargs else builtin_sentences()[:1], tmp_path, roles=("hindi",), progress=False,
                         **kwargs)
    corpus = build_corpus(["123 ...", builtin_sentences()[0]], tmp_path, roles=("hindi",), progress=False)
    assert len(corpus) == 1 and "1 sentence(s) with no word to say skipped" in capsys.readouterr().out


def test_the_corpus_key_takes_the_synthesizers_versions(monkeypatch):
    # an upgraded espeak-ng (or recorded voice, or Piper) reused the old synthesizer's corpus
    from leakloss.speech import festival, piper_voice, versions
    from leakloss.speech.corpus import corpus_key
    from leakloss.speech.synth import TRAIN_TEACHER_VOICES

    voices = [*TRAIN_TEACHER_VOICES, festival.get_voice("fest-kal")]
    args = (["नेकपा"], ("teacher", "recorded", "piper"), voices, 0)
    key = corpus_key(*args)
    assert corpus_key(*args) == key  # the same across calls
    teacher_only = corpus_key(["नेकपा"], ("teacher",), voices, 0)
    monkeypatch.setattr(versions, "espeak_version", lambda: "espeak-ng 9.9")
    assert corpus_key(*args) != key and corpus_key(["नेकपा"], ("teacher",), voices, 0) != teacher_only
    monkeypatch.undo()
    monkeypatch.setattr(festival, "voice_version", lambda voice: "festival 9.9")
    assert corpus_key(*args) != key
    assert corpus_key(["नेकपा"], ("teacher",), voices, 0) == teacher_only  # no recorded role: not its version
    monkeypatch.undo()
    monkeypatch.setattr(piper_voice, "synthesizer_version", lambda: "piper-tts 9.9")
    assert corpus_key(*args) != key
