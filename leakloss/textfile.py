"""Lines of the text files leakloss reads (JSONL manifests and caches, lexicons, sentence lists), and its JSON cards.

``str.splitlines`` also breaks at U+2028, U+2029, U+0085, U+000B/C and U+001C-E: characters a JSON string or a
sentence may hold, so one valid JSONL line became two invalid ones (and every later line number was off).
"""

from __future__ import annotations

import json


def text_lines(text: str) -> list[str]:
    """``text`` split at ``\\n`` only, each line without its ``\\r`` (CRLF files); no empty last line for a
    final newline. Line ``k`` of the result is line ``k + 1`` of the file, as an editor counts it."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def parse_json(text: str | bytes):
    """``json.loads(text)``; a document nested too deeply (a ``RecursionError`` past ~1,000 levels) or holding an
    integer of more digits than Python converts (a bare ``ValueError``) is a ``json.JSONDecodeError`` too, so that
    every reader's error for bad JSON catches it (both were tracebacks)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", "", 0) from None
    except ValueError as err:  # "Exceeds the limit (4300 digits) for integer string conversion"
        raise json.JSONDecodeError(str(err).split("\n")[0], "", 0) from None


def read_json_object(path, what: str) -> dict:
    """The JSON object in file ``path`` (a model card); ``ValueError`` naming the file and ``what`` it should be when
    it cannot be read, is not JSON, or holds another JSON value."""
    from leakloss.checks import first_line

    try:
        value = parse_json(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a readable {what} ({first_line(err)})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: a {what} is a JSON object, got {type(value).__name__}")
    return value
