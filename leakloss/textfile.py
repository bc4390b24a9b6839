"""Lines of the text files leakloss reads (JSONL manifests and caches, lexicons, sentence lists), and its JSON cards.

``str.splitlines`` also breaks at U+2028, U+2029, U+0085, U+000B/C and U+001C-E: characters a JSON string or a
sentence may hold, so one valid JSONL line became two invalid ones (and every later line number was off).
"""

from __future__ import annotations


def text_lines(text: str) -> list[str]:
    """``text`` split at ``\\n`` only, each line without its ``\\r`` (CRLF files); no empty last line for a
    final newline. Line ``k`` of the result is line ``k + 1`` of the file, as an editor counts it."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_json_object(path, what: str) -> dict:
    """The JSON object in file ``path`` (a model card); ``ValueError`` naming the file and ``what`` it should be when
    it cannot be read, is not JSON, or holds another JSON value."""
    import json

    from leakloss.checks import first_line

    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a readable {what} ({first_line(err)})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: a {what} is a JSON object, got {type(value).__name__}")
    return value
