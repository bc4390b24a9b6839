"""References when the user has none: the embedded teacher reads the same text, in two voices.

One path for every teacher reading of a text the scorer compares against: the demo's references and
the ones ``score`` / ``score-batch`` / ``evaluate`` synthesise when no ``--ref`` is given. The teacher speaks
the frontend's Nepali phones (:func:`teacher_reading`); :func:`synthesised_references` caches the two
readings by text (and voice, and frontend) under :func:`leakloss.paths.cache_path`, written atomically,
so a text read by several systems is synthesised once.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from leakloss.speech import versions
from leakloss.speech.synth import TRAIN_TEACHER_VOICES, Reading, Voice, speak_phones

#: The two teacher voices of synthesised references (training voices: the held-out teacher voice stays
#: free to stand for a system under test, as in the demo).
REFERENCE_VOICES: tuple[Voice, ...] = (TRAIN_TEACHER_VOICES[0], TRAIN_TEACHER_VOICES[2])
#: Bumped when a synthesised reference of the same text, voice and frontend would sound different.
REFERENCE_CACHE_VERSION = "1"
CACHE_FOLDER = "references"


class ReferenceSynthesisError(ValueError):
    """A text the embedded teacher cannot read (no Devanagari word the frontend pronounces)."""


def teacher_reading(text: str, voice: Voice, finder=None) -> Reading:
    """The embedded teacher reading ``text``: the frontend's Nepali phones of every word it reads, spoken by
    ``voice`` (skipped words -- punctuation, Latin, numbers -- are not spoken).

    Raises:
        ReferenceSynthesisError: no word to speak.
    """
    from leakloss.text.sites import SiteFinder, no_word_reason

    all_words = (finder or SiteFinder())(text)
    words = [w.nepali for w in all_words if w.skipped is None]
    if not any(words):
        raise ReferenceSynthesisError(f"the teacher cannot read {text!r:.60}: it has {no_word_reason(all_words)}")
    return speak_phones(words, voice)


def reference_origin_detail(voices: tuple[Voice, ...] = REFERENCE_VOICES) -> str:
    """How a result names synthesised references: ``embedded teacher voices teacher0, teacher2``."""
    return "embedded teacher voices " + ", ".join(v.name for v in voices)


def given_origin() -> dict:
    """``reference_origin`` of a result whose references the user gave."""
    return {"origin": "given", "detail": "given by the user"}


def synthesised_origin(voices: tuple[Voice, ...] = REFERENCE_VOICES) -> dict:
    """``reference_origin`` of a result scored against :func:`synthesised_references`."""
    return {"origin": "synthesised", "detail": reference_origin_detail(voices)}


def synthesised_references(text: str, voices: tuple[Voice, ...] = REFERENCE_VOICES, *,
                           cache_dir: str | Path | None = None, finder=None) -> list[Path]:
    """Paths of the teacher's readings of ``text``, one per voice, synthesised on first use and cached.

    The file name is a hash of the text, the voice, the frontend's fingerprint, espeak-ng's version
    (:func:`leakloss.speech.versions.espeak_version`) and :data:`REFERENCE_CACHE_VERSION`: another lexicon,
    frontend or synthesizer is another reference. Files are written
    atomically (:func:`leakloss.audio.save_audio`), so an interrupted run never leaves a partial reference.

    Raises:
        ReferenceSynthesisError: ``text`` has no word the teacher can read.
        leakloss.audio.AudioError: the cache folder cannot be written.
    """
    from leakloss.audio import save_audio
    from leakloss.paths import cache_path
    from leakloss.text.sites import SiteFinder

    finder = finder or SiteFinder()
    folder = Path(cache_dir) if cache_dir is not None else cache_path(CACHE_FOLDER)
    out = []
    for voice in voices:
        # the synthesizer's version: an upgraded espeak-ng reused the old one's references
        key = hashlib.sha256("|".join([REFERENCE_CACHE_VERSION, repr(voice), finder.fingerprint, text,
                                       versions.espeak_version()]).encode()).hexdigest()[:24]
        path = folder / f"{voice.name}-{key}.wav"
        if not path.is_file():
            folder.mkdir(parents=True, exist_ok=True)
            save_audio(path, teacher_reading(text, voice, finder).waveform)
        out.append(path)
    return out
