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
