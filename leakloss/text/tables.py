"""Hashed, packed tables the text frontend's learned parts store in their JSON files: 64-bit hashes of
spellings (:func:`_hash`) and base64 arrays of them, and the error a file that cannot be read raises.

Below every model that stores such tables (:mod:`leakloss.text.retention`, :mod:`leakloss.text.phonotactics`,
:mod:`leakloss.text.morphology`); it imports none of them.
"""

from __future__ import annotations

import base64
import hashlib
from functools import lru_cache
from typing import Sequence

import numpy as np

from leakloss.text.normalize import TextError

__all__ = ["RetentionModelError", "VOCABULARY_HASH"]


class RetentionModelError(TextError):
    """A retention model file that cannot be read or does not fit this code's feature schema."""


VOCABULARY_HASH = "blake2b-64 of the UTF-8 spelling"


def _pack(values: Sequence[int], dtype: str) -> str:
    return base64.b64encode(np.asarray(values, dtype=np.uint64).astype(dtype).tobytes()).decode("ascii")


def _unpack(text: str, dtype: str) -> list[int]:
    return _unpack_array(text, dtype).tolist()


def _unpack_array(text: str, dtype: str) -> np.ndarray:
    """A base64 table of big-endian ``dtype`` values as a native uint64 array."""
    try:
        return np.frombuffer(base64.b64decode(text, validate=True), dtype=dtype).astype(np.uint64)
    except (ValueError, TypeError) as e:  # binascii.Error is a ValueError; a length not a multiple of the width too
        raise RetentionModelError(f"hash table is not base64 of {dtype} values: {e}") from None


@lru_cache(maxsize=1 << 17)  # a word asks for ~40 verb forms of each of its roots: most repeat across words
def _hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")
