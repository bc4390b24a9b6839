"""Checks of numeric settings, shared by every layer (the functional math, the penalty, the result schema, the
entry points): a NaN weight or limit passes ``<``/``>`` tests silently, so each is checked once, here."""

from __future__ import annotations

import math
import numbers


def is_finite_number(x: object) -> bool:
    """True for a finite int or float: ``bool`` (an int subclass) is never a time, score or setting, NaN/Inf
    neither, nor an int too large for a float (JSON allows 10**400)."""
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


def check_number(value: object, message: str, *, low: float = float("-inf"), low_inclusive: bool = True,
                 high: float = float("inf")) -> float:
    """``value`` as a float, or ``ValueError(f"{message}, got {value!r}")`` unless it is a finite number in
    ``[low, high]`` (``(low, high]`` with ``low_inclusive=False``)."""
    if not is_finite_number(value) or value > high or (value < low if low_inclusive else value <= low):
        raise ValueError(f"{message}, got {value!r}")
    return float(value)


def is_whole(x: object, low: int | None = None) -> bool:
    """True for a whole number (``int`` or numpy integer, never ``bool``: True is not a size of 1) ``>= low``."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool) and (low is None or x >= low)


def check_whole(value: object, name: str, low: int = 1) -> int:
    """``value`` as an int, or ``ValueError(f"{name} must be a whole number >= {low}, got {value!r}")``: a size,
    count or id of 0, -1, 2.5 or True built a broken model or failed deep inside torch."""
    if not is_whole(value, low):
        raise ValueError(f"{name} must be a whole number >= {low}, got {value!r}")
    return int(value)


#: Characters of a user's value an error message quotes: a 1.2M-phone lexicon line made a 4.2 MB ``error:`` line.
ECHO_CHARS = 200
#: The longest error message the command line prints: the cap behind :func:`echoed`, for a message that quotes
#: a user's value whole.
MESSAGE_CHARS = 4000


def echoed(value: object, limit: int = ECHO_CHARS) -> str:
    """``repr(value)`` for an error message, cut to ``limit`` characters with its full length said
    (``'ɡ ʌ r ɡ ʌ ...'... (2400000 characters in all)``): a message quotes what the user gave, never all of it.

    A container shows its first :data:`_ECHO_ITEMS` items, two levels deep, and its length (``['zz', 'zz', ...]
    (1200000 items)``): its whole repr is never built (a YAML file of nested aliases is a few hundred bytes whose
    repr is gigabytes)."""
    import reprlib

    if isinstance(value, (str, bytes)):
        return shortened(repr(value), limit)
    bounded = reprlib.Repr()
    bounded.maxlevel, bounded.maxstring, bounded.maxother, bounded.maxlong = 2, limit, limit, limit
    bounded.maxlist = bounded.maxtuple = bounded.maxset = bounded.maxfrozenset = bounded.maxdict = _ECHO_ITEMS
    text = bounded.repr(value)
    text = text if len(text) <= limit else f"{text[:limit]}..."
    if isinstance(value, (list, tuple, dict, set, frozenset)) and len(value) > _ECHO_ITEMS:
        text += f" ({len(value)} items)"
    return text


#: Items of a container an error message quotes (:func:`echoed`).
_ECHO_ITEMS = 10


def shortened(text: str, limit: int) -> str:
    """``text``, or its first ``limit`` characters and ``... (N characters in all)``."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters in all)"


def first_line(err: BaseException) -> str:
    """The first line of an exception's message ("" when it has none): libraries add context lines (OmegaConf's
    full_key/object_type, safetensors' and torch's detail) that do not belong in a one-line ``error:``."""
    text = str(err).strip()
    return text.splitlines()[0] if text else ""


class PenaltyInputError(ValueError):
    """Penalty input of the wrong rank or with lengths outside the tensor (a caller bug, not bad audio); users import
    it from :mod:`leakloss.penalty`, lower layers (the mel bridge) from here."""


class SettingsError(ValueError):
    """A setting of an entry point's config that cannot work (named with the value given), found before any
    model loads or data is built."""


class ResumeError(ValueError):
    """A checkpoint a run would continue from that cannot be read, or that another run wrote (other data,
    settings or architecture): continuing from it would mix two trainings under one card."""


def check_same_run(record, identity: dict, *, where: str, remedy: str, checkpoint: str | None = None,
                   values: bool = True, hint: str = "") -> None:
    """:class:`ResumeError` unless the JSON file ``record`` says (under ``"run"``) that the checkpoint beside it
    was written by the run ``identity`` describes (``{key: value}``, compared as read back from JSON): the one
    rule of every resume (the head trainings', the recognizer trainings'). A checkpoint of another run continued
    would ship its weights under this run's card; one that recorded no run cannot be told apart from another's.

    The caller decides whether there is a checkpoint to continue; the messages start ``{where}: `` and end with
    ``remedy`` (how to start afresh). ``checkpoint``: the checkpoint named in them; ``values``: a changed key
    shown with its recorded and its new value (the first four), else the changed keys' names only; ``hint``: put
    before ``remedy`` in the message of a mismatch."""
    import json
    from pathlib import Path

    record = Path(record)
    try:
        saved = json.loads(record.read_text(encoding="utf-8")).get("run") if record.is_file() else None
        if saved is not None and not isinstance(saved, dict):
            raise TypeError(f"'run' is a {type(saved).__name__}, not an object")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError, TypeError) as err:
        raise ResumeError(f"{where}: unreadable checkpoint record {record} "
                          f"({first_line(err) or type(err).__name__}); {remedy}") from None
    if saved is None:
        raise ResumeError(f"{where}: {checkpoint or 'the checkpoint'} has no run record ({record.name}: written "
                          "before checkpoints recorded their run), so it cannot be told apart from another run's; "
                          f"{remedy}")
    identity = json.loads(json.dumps(identity))
    changed = sorted(k for k in set(saved) | set(identity) if saved.get(k, _ABSENT) != identity.get(k, _ABSENT))
    if not changed:
        return
    if values:
        shown = ", ".join(f"{k} ({_quoted(saved.get(k, _ABSENT))} -> {_quoted(identity.get(k, _ABSENT))})"
                          for k in changed[:4]) + (f" and {len(changed) - 4} more" if len(changed) > 4 else "")
    else:
        shown = ", ".join(changed)
    subject = f"{checkpoint} was " if checkpoint else ""
    raise ResumeError(f"{where}: {subject}written by a run with other {shown}; {hint}{remedy}")


class _Absent:
    """A key one run recorded and the other did not (:func:`check_same_run`)."""

    def __repr__(self) -> str:
        return "<absent>"


_ABSENT = _Absent()


def _quoted(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class UntrainedError(RuntimeError):
    """A training that took no step, or whose weights hold NaN/Inf: it is never saved (its default output is a
    shipped model, which it would replace)."""


def check_trained(steps: int, tensors, what: str) -> None:
    """Raise :class:`UntrainedError` unless ``steps`` > 0 and every tensor of ``{name: tensor}`` is finite."""
    if steps <= 0:
        raise UntrainedError(f"{what}: no training step ran (a budget too small for one step?): nothing saved")
    bad = nonfinite_tensors(tensors)
    if bad:
        raise UntrainedError(f"{what}: weights {', '.join(bad[:3])} hold NaN/Inf (the training diverged): nothing saved")


def check_choices(cfg, key: str, allowed, *, least: int = 1) -> None:
    """:class:`SettingsError` unless ``cfg[key]`` is a list of at least ``least`` items, each one of ``allowed``."""
    from omegaconf import OmegaConf

    value = OmegaConf.select(cfg, key, default=None)
    items = list(value) if OmegaConf.is_list(value) or isinstance(value, (list, tuple)) else None
    if items is None or len(items) < least or any(v not in allowed for v in items):
        raise SettingsError(f"{key} must be a list of {', '.join(map(str, allowed))} "
                            f"(at least {least}), got {value!r}")


def check_config(cfg, *, whole: dict[str, int | None] | None = None,
                 numbers: dict[str, tuple[float, float, bool]] | None = None,
                 folders: tuple[str, ...] = (), seeds: tuple[str, ...] = (),
                 optional: frozenset[str] = frozenset()) -> None:
    """Check an entry point's settings before it does any work; :class:`SettingsError` names the first bad one.

    ``whole``: ``{key: least value or None}`` for whole numbers; ``numbers``: ``{key: (low, high, low_inclusive)}`` for
    finite numbers in that range; ``folders``: keys of output folders the run must be able to create or write
    (:func:`leakloss.atomic.output_folder_problem`); ``seeds``: keys of random seeds, whole numbers in
    ``[0, SEED_MAX]`` (-1 passed a plain whole-number check and failed in ``seed_everything``, a huge one in
    ``torch.manual_seed``); ``optional``: keys that may be null. Keys are dotted
    (``heads.deletion.max_epochs``); a missing key counts as null."""
    from omegaconf import OmegaConf

    from leakloss.atomic import output_folder_problem
    from leakloss.constants import SEED_MAX

    def value_of(key: str):
        return OmegaConf.select(cfg, key, default=None)

    for key, low in (whole or {}).items():
        value = value_of(key)
        if value is None and key in optional:
            continue
        if not is_whole(value, low):
            bound = "" if low is None else f" >= {low}"
            raise SettingsError(f"{key} must be a whole number{bound}, got {value!r}")
    for key in seeds:
        value = value_of(key)
        if value is None and key in optional:
            continue
        if not is_whole(value, 0) or value > SEED_MAX:
            raise SettingsError(f"{key} must be a whole number in [0, {SEED_MAX}], got {value!r}")
    for key, (low, high, low_inclusive) in (numbers or {}).items():
        value = value_of(key)
        if value is None and key in optional:
            continue
        left, right = "[" if low_inclusive else "(", "]" if high < math.inf else ")"
        try:
            check_number(value, f"{key} must be a finite number in {left}{low:g}, {high:g}{right}", low=low,
                         low_inclusive=low_inclusive, high=high)
        except ValueError as err:
            raise SettingsError(str(err)) from None
    for key in folders:
        value = value_of(key)
        if value is None and key in optional:
            continue
        problem = output_folder_problem(str(value))
        if problem is not None:
            raise SettingsError(f"{key}: {problem}")


def nonfinite_tensors(tensors) -> list[str]:
    """Names of the tensors of ``{name: tensor}`` holding NaN or Inf (a diverged training's weights)."""
    import torch

    return [name for name, t in tensors.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]


def load_finite_safetensors(path, error: type[Exception]) -> dict:
    """The tensors of the safetensors file ``path``; an unreadable file (truncated, foreign) or a floating tensor
    holding NaN/Inf is ``error`` with the file and the cause in one line, never a loader's traceback."""
    import torch
    from safetensors.torch import load_file

    try:
        state = load_file(str(path))
    except Exception as err:  # noqa: BLE001 - SafetensorError (its own kind), OSError: a truncated or foreign file
        raise error(f"{path}: not readable safetensors ({first_line(err) or type(err).__name__})") from None
    bad = [k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise error(f"{path}: weights hold NaN/Inf ({', '.join(bad[:3])})")
    return state
