"""The Hindi side: espeak-ng's ``hi`` pronunciation of Devanagari words, through phonemizer and the
libespeak-ng that ``espeakng-loader`` ships (no system espeak-ng)."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence

from leakloss.text.phones import clean_espeak_ipa, unprolonged


@functools.lru_cache(maxsize=4)
def _backend(language: str):
    import espeakng_loader
    from phonemizer.backend.espeak.wrapper import EspeakWrapper

    EspeakWrapper.set_library(espeakng_loader.get_library_path())
    os.environ["ESPEAK_DATA_PATH"] = espeakng_loader.get_data_path()
    from phonemizer.backend import EspeakBackend

    return EspeakBackend(language, preserve_punctuation=False, with_stress=False, language_switch="remove-flags")


def espeak_phonemes(words: Sequence[str], language: str = "hi") -> list[list[str]]:
    """espeak's pronunciation of each word (one phonemizer call for all), as cleaned IPA phones."""
    if not words:
        return []
    from phonemizer.separator import Separator

    out = _backend(language).phonemize(list(words), separator=Separator(phone=" ", word=" | "), strip=True)
    # unprolonged: an unknown ʌː read as a consonant made the aligner report a deletion Hindi never makes (लऽ)
    return [[unprolonged(clean_espeak_ipa(p)) for p in o.replace("|", " ").split() if clean_espeak_ipa(p)]
            for o in out]

