"""What every kind of recognizer shares (wav2vec2 in :mod:`leakloss.acoustic.recognizer`, a CTC head on a Whisper
encoder in :mod:`leakloss.acoustic.whisper_recognizer`): the errors a load raises, a saved folder's
``vocab.json`` and ``card.json``, and greedy CTC decoding. Below both; it imports neither.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import Tensor

from leakloss.text.phoneset import PhoneSet

__all__ = ["RecognizerInputError", "RecognizerLoadError", "RecognizerNotFoundError", "check_finite_waves",
           "greedy_phones", "read_word_check_limits"]


class RecognizerLoadError(ValueError):
    """A recognizer that cannot be loaded: pickle weights, missing or corrupt files, a bad vocabulary."""


class RecognizerNotFoundError(RecognizerLoadError, FileNotFoundError):
    """A recognizer name that is neither embedded, a local directory, nor in the local hub cache."""


class RecognizerInputError(ValueError):
    """Audio a recognizer cannot hear: NaN/Inf among an item's valid samples (it decoded to nothing, silently)."""


def check_finite_waves(waves: Tensor, lengths: Tensor | None = None) -> None:
    """:class:`RecognizerInputError` when an item of ``waves [b, t]`` holds NaN/Inf among its ``lengths [b]`` valid
    samples (the padding past them is not heard)."""
    finite = torch.isfinite(waves)
    if lengths is not None:
        finite |= torch.arange(waves.shape[-1], device=waves.device)[None, :] >= lengths.to(waves.device)[:, None]
    if not bool(finite.all()):
        bad = (~finite.all(-1)).nonzero().flatten().tolist()
        raise RecognizerInputError(f"audio item(s) {bad[:5]} hold NaN/Inf samples: nothing to recognize")


def greedy_phones(log_probs: Tensor, frames: Tensor, phoneset: PhoneSet) -> list[list[str]]:
    """``log_probs [b, f, v]``, ``frames [b]`` -> greedy CTC phone strings (blanks, repeats and specials dropped)."""
    out = []
    for row, n in zip(log_probs.argmax(-1), frames):
        ids = torch.unique_consecutive(row[: int(n)]).tolist()
        out.append([phoneset.id_to_token[i] for i in ids if i != phoneset.blank and
                    phoneset.id_to_token[i] not in PhoneSet.SPECIAL])
    return out


def read_word_check_limits(folder: Path) -> tuple[float, float] | None:
    """``card.json``'s calibrated word-check limits ``(query_max_per, reference_max_per)`` (written by
    ``python -m train_recognizers.calibrate``); None when the folder has no card or its card has none (the
    scorer then uses recognizer A's limits).

    Raises:
        RecognizerLoadError: the card cannot be read, or its limits are not finite positive numbers (a NaN
            limit passes nothing, a negative one quarantines every reading).
    """
    from leakloss.checks import check_number
    from leakloss.textfile import read_json_object

    path = folder / "card.json"
    if not path.is_file():
        return None
    try:
        card = read_json_object(path, "recognizer card")
    except ValueError as err:
        raise RecognizerLoadError(str(err)) from None
    if "word_check" not in card:
        return None
    wc = card["word_check"]
    limits = []
    for key in ("query_max_per", "reference_max_per"):
        value = wc.get(key) if isinstance(wc, dict) else None
        try:
            limits.append(check_number(value, f"{path}: word_check.{key} must be a finite number above 0",
                                       low=0.0, low_inclusive=False))
        except ValueError as err:
            raise RecognizerLoadError(f"{err} (rerun python -m train_recognizers.calibrate on this folder)") from None
    return limits[0], limits[1]


def _read_vocab(folder: Path) -> dict[str, int]:
    """``vocab.json``: token -> id.

    Raises:
        RecognizerLoadError: missing, not JSON, or not an object of token -> non-negative integer id.
    """
    path = folder / "vocab.json"
    if not path.is_file():
        raise RecognizerLoadError(f"{folder}: no vocab.json (the recognizer's token -> id vocabulary)")
    try:
        vocab = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise RecognizerLoadError(f"{path}: cannot be read ({err})") from err
    except json.JSONDecodeError as err:
        raise RecognizerLoadError(f"{path}: not valid JSON ({err.msg}, line {err.lineno})") from err
    if not (isinstance(vocab, dict) and vocab and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in vocab.values())):
        raise RecognizerLoadError(f"{path}: must be a JSON object of token -> id (a non-negative integer)")
    return vocab


def _check_vocab_fits(vocab: dict[str, int], outputs: int, folder: Path) -> None:
    """The vocabulary and the model's output layer must match one to one: every id names an output, and every
    output (``0 .. n_outputs - 1``) has a token, since greedy decoding can pick any output.

    Raises:
        RecognizerLoadError: an id at or beyond the model's outputs, or outputs that no token maps to.
    """
    too_big = max(vocab.values())
    if too_big >= outputs:
        token = next(t for t, i in vocab.items() if i == too_big)
        raise RecognizerLoadError(f"{folder / 'vocab.json'}: token {token!r} has id {too_big}, but the model has "
                                  f"only {outputs} outputs: the vocabulary belongs to another model")
    unmapped = sorted(set(range(outputs)) - set(vocab.values()))
    if unmapped:
        shown = ", ".join(map(str, unmapped[:8])) + (", ..." if len(unmapped) > 8 else "")
        raise RecognizerLoadError(f"{folder / 'vocab.json'}: {len(unmapped)} of the model's {outputs} outputs have no "
                                  f"token (ids {shown}): the vocabulary must map every id 0..{outputs - 1}; "
                                  "it belongs to another model or is incomplete")
