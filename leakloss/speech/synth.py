"""espeak-ng voices: the Nepali teacher (speaks the frontend's phones) and the Hindi base (reads the text).

Every reading comes back as 16 kHz mono float32 with the phones espeak actually spoke, their start
times and their word, taken from espeak's phoneme events: exact labels for recognizer training and
exact cut points for physical pairs.
"""

from __future__ import annotations

import unicodedata

from dataclasses import dataclass, field

import numpy as np
import torch
import torchaudio.functional as AF

from leakloss.constants import SAMPLE_RATE
from leakloss.speech._espeak import library
from leakloss.text.phones import clean_espeak_ipa, espeak_phoneme_input


@dataclass(frozen=True)
class Voice:
    """One speaker setting: espeak language + variant, speed (words/min), pitch and pitch range (0-100).

    ``noise_draw``: which draw of the breathy variants' breath noise (espeak seeds it per request, so one setting
    says a text one way; another draw is another noise realisation, for pooling several, as a benchmark does)."""

    name: str
    language: str
    variant: str
    rate: int
    pitch: int
    pitch_range: int
    noise_draw: int = 0

    def __post_init__(self) -> None:
        # espeak's own bounds: past 450 words/min its phone times come back out of order, at 0 or below it speaks at
        # its default rate, far above it gives no audio (a raw reshape error)
        for field_name, low, high in (("rate", 80, 450), ("pitch", 0, 100), ("pitch_range", 0, 100),
                                      ("noise_draw", 0, 2**31 - 1)):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"voice {self.name!r}: {field_name} must be a whole number in [{low}, {high}], "
                                 f"got {value!r}")

    @property
    def espeak_name(self) -> str:
        return f"{self.language}+{self.variant}" if self.variant else self.language


def _voices(language: str, prefix: str, settings: list[tuple[str, int, int, int]]) -> tuple[Voice, ...]:
    return tuple(
        Voice(f"{prefix}{i}", language, variant, rate, pitch, rng) for i, (variant, rate, pitch, rng) in enumerate(settings)
    )


#: Teacher (Nepali) speakers used for training data; the last one of each list is held out.
TEACHER_VOICES = _voices(
    "ne", "teacher",
    [("m1", 165, 45, 50), ("f2", 175, 65, 60), ("m3", 150, 35, 40), ("f4", 185, 70, 55), ("m7", 170, 50, 70),
     ("f5", 160, 60, 45)],
)
#: Hindi-base speakers: espeak ``hi`` reading the Devanagari text.
HINDI_VOICES = _voices(
    "hi", "hindi",
    [("m1", 165, 45, 50), ("f2", 175, 65, 60), ("m3", 150, 35, 40), ("f4", 185, 70, 55), ("m7", 170, 50, 70),
     ("f5", 160, 60, 45)],
)
TRAIN_TEACHER_VOICES, HELDOUT_TEACHER_VOICE = TEACHER_VOICES[:-1], TEACHER_VOICES[-1]
TRAIN_HINDI_VOICES, HELDOUT_HINDI_VOICE = HINDI_VOICES[:-1], HINDI_VOICES[-1]


@dataclass
class Reading:
    """A synthesised utterance.

    ``phones[i]`` (cleaned espeak IPA) starts at ``phone_starts[i]`` seconds and belongs to word
    ``phone_words[i]`` (0-based word of the input). ``word_spans[w]`` is (start, end) in seconds.
    ``phone_ends[i]``, when not empty, is where phone i ends (espeak gives only starts).
    """

    waveform: torch.Tensor  # [t] float32, 16 kHz
    phones: list[str]
    phone_starts: list[float]
    phone_words: list[int]
    word_spans: list[tuple[float, float]] = field(default_factory=list)
    phone_ends: list[float] = field(default_factory=list)  # where the synthesizer gives them (Festival, flite)

    @property
    def duration(self) -> float:
        return self.waveform.numel() / SAMPLE_RATE

    def word_phones(self, word: int) -> list[str]:
        return [p for p, w in zip(self.phones, self.phone_words) if w == word]


def _to_reading(audio: np.ndarray, events, native_rate: int, n_words: int | None) -> Reading:
    wave = torch.from_numpy(audio.astype(np.float32) / 32768.0)
    wave = AF.resample(wave, native_rate, SAMPLE_RATE) if native_rate != SAMPLE_RATE else wave
    phones, starts, words = [], [], []
    for event in events:
        ipa = clean_espeak_ipa(event.ipa)
        if not ipa:  # pauses and end markers
            continue
        phones.append(ipa)
        starts.append(event.start_sample / native_rate)
        words.append(max(event.word - 1, 0))
    duration = wave.numel() / SAMPLE_RATE
    count = n_words if n_words is not None else (max(words) + 1 if words else 0)
    spans = []
    for w in range(count):
        idx = [i for i, ww in enumerate(words) if ww == w]
        if not idx:
            spans.append((float("nan"), float("nan")))
            continue
        start = starts[idx[0]]
        nxt = [starts[i] for i in range(idx[-1] + 1, len(starts)) if words[i] > w]
        # a word ends where the next word's first phone starts (pauses go to the word before them), the last at the end
        end = nxt[0] if nxt else duration
        spans.append((start, min(end, duration)))
    return Reading(wave, phones, starts, words, spans)


def speak_phones(words: list[list[str]], voice: Voice) -> Reading:
    """The teacher: speak each word's phones (project IPA) through espeak phoneme input."""
    if not words or not any(words):
        raise ValueError("nothing to speak: no phones given")
    text = " ".join(f"[[{espeak_phoneme_input(w)}]]" for w in words if w)
    lib = library()
    audio, events = lib.synthesize(
        text, voice.espeak_name, rate=voice.rate, pitch=voice.pitch, pitch_range=voice.pitch_range,
        noise_draw=voice.noise_draw, phonemes=True,
    )
    return _to_reading(audio, events, lib.sample_rate, n_words=sum(1 for w in words if w))


def check_speakable(text: str) -> None:
    """``ValueError`` for a text with nothing to say (no letter: empty, spaces, zero-width characters) or with a
    control character (a NUL ended the synthesizer's text there, silently dropping the rest)."""
    if any(unicodedata.category(c) == "Cc" and c not in "\t\n\r" for c in text):
        raise ValueError("the text holds a control character (a NUL cut it short): remove it")
    if not any(c.isalpha() for c in text):
        raise ValueError(f"nothing to speak: no letter in {text[:40]!r}")


def speak_text(text: str, voice: Voice) -> Reading:
    """espeak reading Devanagari text with its own rules (the Hindi base with a ``hi`` voice)."""
    check_speakable(text)
    lib = library()
    audio, events = lib.synthesize(
        text, voice.espeak_name, rate=voice.rate, pitch=voice.pitch, pitch_range=voice.pitch_range,
        noise_draw=voice.noise_draw, phonemes=False,
    )
    return _to_reading(audio, events, lib.sample_rate, n_words=None)


def speak_mnemonics(mnemonics: str, voice: Voice) -> Reading:
    """Raw espeak phoneme input (``[[...]]`` added here), for edits of espeak's own pronunciations."""
    if not mnemonics.split():
        raise ValueError("nothing to speak: no phoneme mnemonics given")
    check_speakable(mnemonics)
    lib = library()
    audio, events = lib.synthesize(
        " ".join(f"[[{w}]]" for w in mnemonics.split()), voice.espeak_name, rate=voice.rate, pitch=voice.pitch,
        pitch_range=voice.pitch_range, noise_draw=voice.noise_draw, phonemes=True,
    )
    return _to_reading(audio, events, lib.sample_rate, n_words=len(mnemonics.split()))
