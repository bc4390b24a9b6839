"""The versions of the synthesizers, for the keys of cached synthesized speech.

A cache of readings keyed by what was asked alone (text, phones, voice) served the readings of the old
synthesizer after an upgrade of espeak-ng, Festival, flite, a voice package or Piper: stale audio, silently.
Each cache key takes the version of the synthesizer that made its audio. The versions are read once per process
(:func:`functools.lru_cache`; a subprocess or a library load, never per reading) and are never an error: a version
that cannot be read is :data:`UNKNOWN` (a stable key; the synthesis itself says what is missing).
"""

from __future__ import annotations

import subprocess
from functools import cache, lru_cache

#: The version of a synthesizer or package that cannot be read (not installed, no version output).
UNKNOWN = "unknown"
#: Characters of a version output a key keeps (Festival's is one line, flite's two).
_MAX_CHARS = 200
_TIMEOUT_S = 20


def _one_line(text: str) -> str:
    return " ".join(text.split())[:_MAX_CHARS] or UNKNOWN


def command_output(args: tuple[str, ...]) -> str:
    """The output (stdout and stderr, whitespace collapsed) of a version command, or :data:`UNKNOWN`; its exit
    status is ignored (``flite --version`` exits 1 after printing its version)."""
    try:
        proc = subprocess.run(list(args), check=False, capture_output=True, text=True, timeout=_TIMEOUT_S,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError, ValueError):  # not installed, hung, not runnable
        return UNKNOWN
    return _one_line(f"{proc.stdout or ''} {proc.stderr or ''}")


@cache
def package_version(distribution: str) -> str:
    """The installed version of the Python distribution ``distribution`` (``piper-tts``), or :data:`UNKNOWN`."""
    from importlib import metadata

    try:
        return _one_line(metadata.version(distribution) or "")
    except Exception:  # noqa: BLE001 - PackageNotFoundError, a broken install's metadata: a key never fails
        return UNKNOWN


@cache
def debian_package_version(package: str) -> str:
    """The installed version of the Debian package ``package`` (a Festival voice, flite), or :data:`UNKNOWN`
    (not installed, no dpkg)."""
    try:
        proc = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], check=False, capture_output=True,
                              text=True, timeout=_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError, ValueError):
        return UNKNOWN
    return _one_line(proc.stdout or "") if proc.returncode == 0 else UNKNOWN


@lru_cache(maxsize=1)
def festival_version() -> str:
    """``festival --version`` (``festival: Festival Speech Synthesis System: 2.5.0:release December 2017``)."""
    return command_output(("festival", "--version"))


@lru_cache(maxsize=1)
def flite_version() -> str:
    """``flite --version`` (``... version: flite-2.2-current Sep 2018 ...``)."""
    return command_output(("flite", "--version"))


@lru_cache(maxsize=1)
def espeak_version() -> str:
    """The espeak-ng that speaks the embedded voices: the version of the library ``espeakng-loader`` ships
    (``espeak_Info``, read without initialising it) and of that wheel (its voice data); ``seeded``: the breath
    noise is seeded per request since 2026-12-07 (:mod:`leakloss.speech._espeak`), so readings cached before are
    not served."""
    seeded = "; seeded" if _espeak_seeds() else ""
    return f"espeak-ng {_espeak_library_version()}; espeakng-loader {package_version('espeakng-loader')}{seeded}"


def _espeak_library():
    """The library ``espeakng-loader`` ships, loaded without initialising it, or None (no wheel, no library)."""
    try:
        import ctypes

        import espeakng_loader

        return ctypes.CDLL(espeakng_loader.get_library_path())
    except Exception:  # noqa: BLE001 - a key never fails
        return None


def _espeak_seeds() -> bool:
    """Whether the library has the seed function the synthesis seeds its noise with (espeak-ng >= 1.52)."""
    from leakloss.speech._espeak import SEED_FUNCTION

    return hasattr(_espeak_library(), SEED_FUNCTION)


def _espeak_library_version() -> str:
    try:
        import ctypes

        info = _espeak_library().espeak_Info
        info.restype, info.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
        return _one_line((info(None) or b"").decode("utf-8", "replace"))
    except Exception:  # noqa: BLE001 - no wheel, no library, no symbol: a key never fails
        return UNKNOWN
