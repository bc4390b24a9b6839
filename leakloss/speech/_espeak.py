"""ctypes binding to the libespeak-ng that ``espeakng-loader`` ships.

No system espeak-ng is needed: the library and its data come from the wheel. espeak-ng keeps global
state (one voice, one callback), so every call goes through a process-wide lock.

Synthesis also keeps state that no call resets: the pitch-flutter phase (a ``static`` counter in espeak's
wavegen) runs on from one utterance to the next, so the same text and voice came out different (pitch, and
length by a few ms) depending on what the process had said before. Each synthesis therefore runs in a freshly
loaded copy of the library (:func:`_fresh_library`; about 3 ms a call on an idle machine): a reading no longer
depends on the process's history. Text-to-phonemes keeps one loaded instance (no audio, no flutter).

The breathy variants (``f2``, ``f5``) draw their breath noise from espeak's own random generator, whose state at
load differed from process to process: the same reading came out another way in every run (until 2026-12-07).
Each synthesis now seeds it (``espeak_ng_SetRandSeed``) from what is asked (:func:`_noise_seed`: text, voice,
rate, pitch, range; a voice's ``noise_draw`` picks another), so a reading is the same in any process and
different readings keep different noise.
"""

from __future__ import annotations

import ctypes
import shutil
import threading
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: the library's seed of its own random generator (espeak-ng >= 1.52), which draws the breathy variants' noise
SEED_FUNCTION = "espeak_ng_SetRandSeed"
# enum values from speak_lib.h
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_INIT_PHONEME_EVENTS = 0x0001
_INIT_PHONEME_IPA = 0x0002
_INIT_DONT_EXIT = 0x8000
_CHARS_UTF8 = 1
_PHONEMES = 0x100
_EVENT_WORD = 1
_EVENT_PHONEME = 7
_EVENT_LIST_TERMINATED = 0
PARAM_RATE, PARAM_VOLUME, PARAM_PITCH, PARAM_RANGE = 1, 2, 3, 4


class _EventId(ctypes.Union):
    _fields_ = [("number", ctypes.c_int), ("name", ctypes.c_char_p), ("string", ctypes.c_char * 8)]


class _Event(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", _EventId),
    ]


_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event))


@dataclass(frozen=True)
class PhonemeEvent:
    """One phoneme espeak spoke: its IPA and where it starts in the output (samples at ``sample_rate``).

    ``word`` counts the word events seen before it (0 before the first word), so phonemes group by word.
    """

    ipa: str
    start_sample: int
    word: int


class EspeakLibrary:
    """Process-wide handle on libespeak-ng; use :func:`library` to get it."""

    def __init__(self, path: str | None = None) -> None:
        import espeakng_loader

        self._lib = ctypes.CDLL(path or espeakng_loader.get_library_path())
        lib = self._lib
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_Synth.argtypes = [
            ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int, ctypes.c_uint, ctypes.c_uint,
            ctypes.c_void_p, ctypes.c_void_p,
        ]
        lib.espeak_TextToPhonemes.restype = ctypes.c_char_p
        self._seed = getattr(lib, SEED_FUNCTION, None)  # espeak-ng >= 1.52
        if self._seed is not None:
            self._seed.argtypes, self._seed.restype = [ctypes.c_long], None
        lib.espeak_TextToPhonemes.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int]
        data = espeakng_loader.get_data_path().encode()
        rate = lib.espeak_Initialize(
            _AUDIO_OUTPUT_SYNCHRONOUS, 0, data, _INIT_PHONEME_EVENTS | _INIT_PHONEME_IPA | _INIT_DONT_EXIT
        )
        if rate <= 0:
            raise RuntimeError(f"espeak-ng failed to initialise with data at {data.decode()}")
        self.sample_rate = int(rate)
        self.lock = threading.RLock()
        self._chunks: list[np.ndarray] = []
        self._events: list[PhonemeEvent] = []
        self._words = 0
        self._callback = _CALLBACK(self._on_audio)  # keep a reference: ctypes does not
        lib.espeak_SetSynthCallback(self._callback)
        self._voice: str | None = None

    def _on_audio(self, wav, num_samples, events) -> int:
        if num_samples > 0:
            self._chunks.append(np.ctypeslib.as_array(wav, shape=(num_samples,)).copy())
        i = 0
        while events[i].type != _EVENT_LIST_TERMINATED:
            event = events[i]
            if event.type == _EVENT_WORD:
                self._words += 1
            elif event.type == _EVENT_PHONEME:
                ipa = bytes(event.id.string).split(b"\0", 1)[0].decode("utf-8", "replace")
                self._events.append(PhonemeEvent(ipa=ipa, start_sample=int(event.sample), word=self._words))
            i += 1
        return 0

    def set_voice(self, name: str) -> None:
        if name != self._voice:
            if self._lib.espeak_SetVoiceByName(name.encode()) != 0:
                raise ValueError(f"espeak-ng has no voice {name!r}")
            self._voice = name

    def synthesize(
        self, text: str, voice: str, *, rate: int, pitch: int, pitch_range: int, phonemes: bool, noise_draw: int = 0
    ) -> tuple[np.ndarray, list[PhonemeEvent]]:
        """Speak ``text`` (or ``[[mnemonics]]`` when ``phonemes``); int16 samples at ``sample_rate``, the same
        whatever was spoken before (a freshly loaded library speaks it: see the module's note); ``noise_draw``
        picks another seed of the breath noise."""
        with self.lock, _fresh_library() as fresh:
            return fresh.synthesize_here(text, voice, rate=rate, pitch=pitch, pitch_range=pitch_range,
                                         phonemes=phonemes, noise_draw=noise_draw)

    def synthesize_here(
        self, text: str, voice: str, *, rate: int, pitch: int, pitch_range: int, phonemes: bool, noise_draw: int = 0
    ) -> tuple[np.ndarray, list[PhonemeEvent]]:
        """:meth:`synthesize` on this loaded instance, whose flutter phase is wherever its last call left it."""
        with self.lock:
            self.set_voice(voice)
            self._lib.espeak_SetParameter(PARAM_RATE, int(rate), 0)
            self._lib.espeak_SetParameter(PARAM_PITCH, int(pitch), 0)
            self._lib.espeak_SetParameter(PARAM_RANGE, int(pitch_range), 0)
            self._chunks, self._events, self._words = [], [], 0
            if self._seed is not None:  # the breath noise: the same for the same request, in any process
                self._seed(_noise_seed(text, voice, rate, pitch, pitch_range, phonemes, noise_draw))
            data = text.encode("utf-8") + b"\0"
            flags = _CHARS_UTF8 | (_PHONEMES if phonemes else 0)
            err = self._lib.espeak_Synth(data, len(data), 0, 1, 0, flags, None, None)
            if err != 0:
                raise RuntimeError(f"espeak-ng synthesis failed with code {err}")
            self._lib.espeak_Synchronize()
            audio = np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.int16)
            return audio, list(self._events)

    def text_to_phonemes(self, text: str, voice: str, *, ipa: bool) -> str:
        """espeak's own pronunciation of ``text``: IPA (or ascii mnemonics), phonemes space-separated."""
        with self.lock:
            self.set_voice(voice)
            buf = ctypes.create_string_buffer(text.encode("utf-8"))
            ptr = ctypes.c_void_p(ctypes.addressof(buf))
            mode = (ord(" ") << 8) | (0x10 if ipa else 0)
            parts = []
            while ptr.value:
                out = self._lib.espeak_TextToPhonemes(ctypes.byref(ptr), _CHARS_UTF8, mode)
                if out:
                    parts.append(out.decode("utf-8", "replace"))
            return " ".join(parts)

    def close(self) -> None:
        """Terminate espeak and unload this instance (its handle must not be used after)."""
        import _ctypes

        self._lib.espeak_Terminate()
        handle, self._lib = self._lib._handle, None
        _ctypes.dlclose(handle)


def _noise_seed(text: str, voice: str, rate: int, pitch: int, pitch_range: int, phonemes: bool,
                noise_draw: int = 0) -> int:
    """A stable seed for espeak's random generator from a synthesis request and its draw (CRC-32: the same in every
    process, unlike ``hash``)."""
    import zlib

    draw = f"|draw{int(noise_draw)}" if noise_draw else ""
    return zlib.crc32(f"{voice}|{int(rate)}|{int(pitch)}|{int(pitch_range)}|{bool(phonemes)}|{text}{draw}".encode())


_LIBRARY: EspeakLibrary | None = None
_LIBRARY_LOCK = threading.Lock()
#: serialises the fresh instances: they all load one private copy of the library
_FRESH_LOCK = threading.RLock()
_PRIVATE_COPY: Path | None = None


def _private_copy() -> Path:
    """A copy of the library file for the fresh instances, in the cache (``leakloss.paths.cache_path``, one per
    library build, written atomically: no folder is left behind by a process that never exits normally). It must be
    another file: :func:`library` keeps the wheel's file loaded, and unloading a file that is still loaded elsewhere
    would keep its state."""
    global _PRIVATE_COPY
    import hashlib
    import os

    import espeakng_loader

    from leakloss.paths import cache_path

    if _PRIVATE_COPY is None or not _PRIVATE_COPY.exists():
        source = Path(espeakng_loader.get_library_path())
        target = cache_path("espeak") / hashlib.sha256(source.read_bytes()).hexdigest()[:16] / source.name
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            part = target.with_name(f".{source.name}.{os.getpid()}.part")
            shutil.copy2(source, part)
            os.replace(part, target)
        _PRIVATE_COPY = target
    return _PRIVATE_COPY


_FALLBACK_SAID = False


@contextmanager
def _fresh_library():
    """A newly loaded espeak instance (its static state as at load), unloaded on exit."""
    global _FALLBACK_SAID
    with _FRESH_LOCK:
        try:
            fresh = EspeakLibrary(str(_private_copy()))
        except (OSError, RuntimeError) as err:  # no writable cache, a noexec mount: speak as before, and say so once
            if not _FALLBACK_SAID:
                _FALLBACK_SAID = True
                warnings.warn(f"espeak-ng: no fresh library copy ({err}); readings depend on what the process "
                              "said before", RuntimeWarning, stacklevel=3)
            yield library()
            return
        try:
            yield fresh
        finally:
            fresh.close()


def library() -> EspeakLibrary:
    global _LIBRARY
    with _LIBRARY_LOCK:
        if _LIBRARY is None:
            _LIBRARY = EspeakLibrary()
        return _LIBRARY
