"""A synthetic Nepali/Hindi speech corpus: readings with the phones actually spoken as labels.

Roles:
- ``teacher``: the Nepali teacher, espeak ``ne`` voices speaking the Nepali frontend's phones.
- ``hindi``: the Hindi base, espeak ``hi`` voices reading the Devanagari text.
- ``variant``: espeak ``ne`` speaking its own pronunciation with random vowel edits (schwas dropped
  or inserted, ऐ/औ as monophthongs or diphthongs): phone variety for recognizer training.
- ``recorded``: a Festival/flite voice built from recordings (:mod:`leakloss.speech.festival`) saying
  the frontend's phones through its phone input; labels are the phones it said, mapped onto the
  recognizers' inventory (those with no counterpart are dropped from the target).
- ``piper``: the Piper neural voice (:mod:`leakloss.speech.piper_voice`), the same way.

Deterministic from a seed, cached on disk (``manifest.jsonl`` + 16 kHz WAVs), keyed by a content hash (the
synthesizers' versions included: :func:`synthesizer_versions`).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

import soundfile as sf
from tqdm.auto import tqdm

from leakloss.atomic import write_text_atomic
from leakloss.audio import save_audio
from leakloss.speech import versions
from leakloss.speech.synth import (
    SAMPLE_RATE, TRAIN_HINDI_VOICES, TRAIN_TEACHER_VOICES, Reading, Voice, speak_mnemonics, speak_phones, speak_text,
)
from leakloss.text.normalize import split_text_words  # noqa: F401  (importable from here, as before)
from leakloss.textfile import text_lines

CORPUS_VERSION = 2  # 2: nasal vowels spoken with espeak one-letter mnemonics
ROLES = ("teacher", "hindi", "variant", "recorded", "piper")


@dataclass
class CorpusItem:
    id: str
    sentence_index: int
    text: str
    role: str
    voice: str
    audio: str  # path relative to the manifest's folder
    words: list[str]
    phones: list[str]
    phone_starts: list[float]
    phone_words: list[int]
    word_spans: list[tuple[float, float]]
    duration: float
    phone_ends: list[float] | None = None  # where the synthesizer gives them (recorded, piper)


def builtin_sentences() -> list[str]:
    """The project's own Nepali sentences (written for leakloss, rich in contrast sites)."""
    text = resources.files("leakloss.data").joinpath("sentences_ne.txt").read_text(encoding="utf-8")
    return [line.strip() for line in text_lines(text) if line.strip() and not line.startswith("#")]


class SentenceFileError(ValueError):
    """A sentence file that cannot be read or holds no sentence."""


def read_sentences(path: str | Path) -> list[str]:
    """Sentences from a UTF-8 text file: one per line, or ``id<TAB>text`` lines (e.g. a prompts.tsv).

    Raises:
        SentenceFileError: the file is missing, unreadable, not UTF-8, or has no sentence."""
    try:
        lines = text_lines(Path(path).read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError) as err:
        raise SentenceFileError(f"cannot read the sentences file {path}: {getattr(err, 'strerror', None) or err}") from err
    sentences = [line.split("\t", 1)[-1].strip() for line in lines if line.strip() and not line.startswith("#")]
    if not any(sentences):
        raise SentenceFileError(f"{path}: no sentence in it (one per line, or id<TAB>text)")
    return [s for s in sentences if s]


def split_for_training(sentences: Sequence[str], heldout_fraction: float) -> tuple[list[str], list[str]]:
    """:func:`split_sentences` for a training run: at least one sentence must be left to train on."""
    train, held = split_sentences(sentences, heldout_fraction)
    if not train:
        raise SentenceFileError(f"{len(sentences)} sentence(s), all held out at heldout_fraction={heldout_fraction}: "
                                "nothing left to train on; give more sentences")
    return train, held


#: the built-in sentences' held-out share: calibration and every benchmark test on this tenth
BUILTIN_HELDOUT_FRACTION = 0.1


def check_builtin_heldout(sentences: object, heldout_fraction: float) -> None:
    """``ValueError`` when a training run on the built-in sentences (``sentences`` None) would hold out less than
    :data:`BUILTIN_HELDOUT_FRACTION`: a smaller share trains on sentences calibration and the benchmarks hold out
    (0.05 trained on 29 of their 57)."""
    if sentences is None and heldout_fraction < BUILTIN_HELDOUT_FRACTION:
        raise ValueError(f"heldout_fraction={heldout_fraction} on the built-in sentences trains on some of the "
                         f"{BUILTIN_HELDOUT_FRACTION:g} that calibration and the benchmarks hold out: use at least "
                         f"{BUILTIN_HELDOUT_FRACTION:g} (or give sentences=FILE)")


def split_sentences(sentences: Sequence[str], heldout_fraction: float = BUILTIN_HELDOUT_FRACTION,
                    seed: int = 0) -> tuple[list[str], list[str]]:
    """Fixed (train, held-out) split of sentences; every recognizer and benchmark uses seed 0."""
    order = list(range(len(sentences)))
    random.Random(seed).shuffle(order)
    held = set(order[: max(1, int(len(sentences) * heldout_fraction))])
    return [s for i, s in enumerate(sentences) if i not in held], [s for i, s in enumerate(sentences) if i in held]


def teacher_reading(text: str, voice: Voice, frontend=None) -> Reading:
    """The Nepali teacher: an espeak ``ne`` ``voice`` says the Nepali frontend's phones of ``text``."""
    if frontend is None:
        from leakloss.text.frontend import NepaliFrontend

        frontend = NepaliFrontend()
    return speak_phones([list(frontend.pronounce(w).phones) for w in split_text_words(text)], voice)


def _edit_mnemonics(word: str, rng: random.Random) -> str:
    """Random vowel edits of one word of espeak ``ne`` mnemonics (space-separated phonemes)."""
    out = []
    for ph in word.split():
        base = ph.lstrip("',")
        stress = ph[: len(ph) - len(base)]
        if base.startswith("_"):
            continue
        if base in ("@", "V", "@-") and rng.random() < 0.25:
            continue  # drop a schwa the Hindi way
        if base == "E:" and rng.random() < 0.5:
            base = "VI"
        elif base == "O:" and rng.random() < 0.5:
            base = "VU"
        out.append(stress + base)
        if base not in ("@", "V", "a:", "i", "i:", "I", "u", "u:", "U", "e", "e:", "o", "o:", "E:", "O:", "VI", "VU") \
                and rng.random() < 0.08:
            out.append("V")  # insert a schwa after a consonant
    return "".join(out) or "V"


class Corpus:
    """A built corpus: items plus the folder their audio lives in."""

    def __init__(self, root: Path, items: list[CorpusItem]) -> None:
        self.root = root
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def audio(self, item: CorpusItem):
        import torch

        wave, rate = sf.read(self.root / item.audio, dtype="float32")
        assert rate == SAMPLE_RATE
        return torch.from_numpy(wave)

    @classmethod
    def load(cls, root: str | Path) -> "Corpus":
        root = Path(root)
        items = []
        with open(root / "manifest.jsonl", encoding="utf-8") as f:
            for line in f:
                d = json.loads(line)
                d["word_spans"] = [tuple(s) for s in d["word_spans"]]
                items.append(CorpusItem(**d))
        return cls(root, items)


def corpus_key(sentences: Sequence[str], roles: Sequence[str], voices: Sequence[Voice], seed: int, extra: str = "") -> str:
    h = hashlib.sha256()
    h.update(json.dumps([CORPUS_VERSION, list(sentences), list(roles), [asdict(v) for v in voices], seed, extra,
                         synthesizer_versions(roles, voices)], ensure_ascii=False).encode())
    return h.hexdigest()[:16]


def synthesizer_versions(roles: Sequence[str], voices: Sequence) -> list[str]:
    """The versions of the synthesizers that speak ``roles`` (espeak-ng; the recorded voices among ``voices``;
    Piper), for the corpus key: an upgraded synthesizer is another corpus, never the old one's audio."""
    out = []
    if any(role in roles for role in ("teacher", "hindi", "variant")):
        out.append(versions.espeak_version())
    if "recorded" in roles:
        from leakloss.speech.festival import RecordedVoice, voice_version

        out += [voice_version(v) for v in dict.fromkeys(v for v in voices if isinstance(v, RecordedVoice))]
    if "piper" in roles:
        from leakloss.speech.piper_voice import synthesizer_version

        out.append(synthesizer_version())
    return out


def build_corpus(
    sentences: Sequence[str],
    out_dir: str | Path,
    *,
    roles: Sequence[str] = ("teacher", "hindi"),
    teacher_voices: Sequence[Voice] = TRAIN_TEACHER_VOICES,
    hindi_voices: Sequence[Voice] = TRAIN_HINDI_VOICES,
    readings_per_sentence: int = 1,
    seed: int = 0,
    frontend=None,
    progress: bool = True,
    recorded_voices: Sequence = (),
) -> Corpus:
    """Synthesise every sentence in every role; reuse the cached corpus when the key matches.

    Each (sentence, role) gets ``readings_per_sentence`` readings by voices drawn with the seed.
    ``recorded_voices`` (:class:`leakloss.speech.festival.RecordedVoice`, phone input) serve the
    ``recorded`` role; they enter the cache key only when that role is asked for, so the keys of
    espeak-only corpora do not change.
    The folder is ``out_dir/<key>``; the manifest is written last and atomically, so a corpus
    interrupted half-way is rebuilt, never half-used.
    """
    for role in roles:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; expected one of {ROLES}")
    if isinstance(readings_per_sentence, bool) or not isinstance(readings_per_sentence, int) or readings_per_sentence < 1:
        raise ValueError(f"readings_per_sentence must be a whole number >= 1, got {readings_per_sentence!r}")
    if not sentences:  # an empty corpus was written and cached
        raise ValueError("no sentences to synthesise")
    if "recorded" in roles and not recorded_voices:
        raise ValueError("role 'recorded' needs recorded_voices (leakloss.speech.festival.VOICES with phone input)")
    if "recorded" in roles:
        from leakloss.speech.festival import check_training_voice

        for voice in recorded_voices:  # a training corpus: never the unseen family, whatever the caller built
            check_training_voice(voice)
    extra_voices = list(recorded_voices) if "recorded" in roles else []
    extra = f"n={readings_per_sentence}" + (";piper-joe" if "piper" in roles else "")
    if "recorded" in roles:  # a change of how their segments are labelled is a new corpus
        from leakloss.speech.festival import LABELS_VERSION

        extra += f";labels={LABELS_VERSION}"
    if frontend is None and any(r in roles for r in ("teacher", "recorded", "piper")):
        from leakloss.text.frontend import NepaliFrontend

        frontend = NepaliFrontend()
    if frontend is not None:  # the phones it gives are the corpus: another frontend's cached corpus is stale
        extra += f";frontend={frontend.fingerprint}"
    key = corpus_key(sentences, roles, list(teacher_voices) + list(hindi_voices) + extra_voices, seed, extra=extra)
    root = Path(out_dir) / key
    if (root / "manifest.jsonl").exists():
        return Corpus.load(root)
    (root / "audio").mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    items: list[CorpusItem] = []
    unsayable: list[str] = []
    wordless: list[str] = []
    jobs = [(i, s, role, r) for i, s in enumerate(sentences) for role in roles for r in range(readings_per_sentence)]
    for i, sentence, role, r in tqdm(jobs, desc="synthesising corpus", disable=not progress):
        words = split_text_words(sentence)
        if not words:  # no Devanagari word to say: counted and said, not dropped silently
            if r == 0 and role == roles[0]:
                wordless.append(sentence)
            continue
        if role == "teacher":
            voice = rng.choice(list(teacher_voices))
            reading = teacher_reading(sentence, voice, frontend)
        elif role == "hindi":
            voice = rng.choice(list(hindi_voices))
            reading = speak_text(" ".join(words), voice)
        elif role == "recorded":
            from leakloss.speech import festival

            # a voice's own postlexical rules may change a word too much to label it (SynthesisError):
            # another voice is drawn, at most three times; a sentence no voice can say is counted, not hidden
            reading = None
            for _ in range(3):
                voice = rng.choice(list(recorded_voices))
                try:
                    reading = festival.speak_phones([list(frontend.pronounce(w).phones) for w in words], voice)
                    break
                except festival.SynthesisError:
                    continue
            if reading is None:
                unsayable.append(sentence)
                continue
        elif role == "piper":
            from leakloss.speech import piper_voice

            voice = piper_voice.VOICE
            # no sampling noise: VITS samples inside its graph, unseeded, and the corpus is deterministic
            reading = piper_voice.speak_phones([list(frontend.pronounce(w).phones) for w in words],
                                               noise_scale=0.0, noise_w=0.0)
        else:
            from leakloss.speech._espeak import library

            voice = rng.choice(list(teacher_voices))
            mnemonic_words = [m for m in library().text_to_phonemes(" ".join(words), "ne", ipa=False).split("  ") if m.strip()]
            reading = speak_mnemonics(" ".join(_edit_mnemonics(w, rng) for w in mnemonic_words), voice)
        item_id = f"s{i:05d}-{role}-{r}-{voice.name}"
        rel = f"audio/{item_id}.wav"
        save_audio(root / rel, reading.waveform)
        items.append(_item(item_id, i, sentence, role, voice, rel, words, reading))
    if unsayable:
        print(f"corpus: {len(unsayable)} recorded-role readings skipped: no voice said them phone for phone "
              f"(first: {unsayable[0]!r})")
    if wordless:
        print(f"corpus: {len(wordless)} sentence(s) with no word to say skipped (first: {wordless[0][:40]!r})")
    write_text_atomic(root / "manifest.jsonl", "".join(json.dumps(asdict(item), ensure_ascii=False) + "\n"
                                                        for item in items))
    return Corpus(root, items)


def _item(item_id: str, i: int, text: str, role: str, voice, rel: str, words: list[str], r: Reading) -> CorpusItem:
    return CorpusItem(
        id=item_id, sentence_index=i, text=text, role=role, voice=voice.name, audio=rel, words=words,
        phones=r.phones, phone_starts=[round(x, 5) for x in r.phone_starts], phone_words=r.phone_words,
        word_spans=[(round(a, 5), round(b, 5)) for a, b in r.word_spans], duration=round(r.duration, 5),
        phone_ends=[round(x, 5) for x in r.phone_ends] if r.phone_ends else None,
    )
