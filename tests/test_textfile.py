"""leakloss.textfile: lines split at newlines only."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

import pytest

from leakloss.textfile import parse_json, text_lines


def test_json_strings_with_unicode_line_separators_stay_one_line():
    rows = [{"text": "नेकपा\u2028हैन\u0085\x0c"}, {"text": "तरकारी\u2029"}]
    text = "\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n"
    assert len(text.splitlines()) > 2  # what the readers used
    assert [json.loads(line) for line in text_lines(text)] == rows


def test_crlf_and_a_missing_final_newline():
    assert text_lines("a\r\nb\r\n") == ["a", "b"] and text_lines("a\nb") == ["a", "b"] and text_lines("") == []
    assert text_lines("a\n\nb\n") == ["a", "", "b"]  # blank lines keep their numbers


@given(st.lists(st.text(alphabet=st.characters(blacklist_characters="\n\r")), max_size=6))
def test_the_lines_written_are_the_lines_read(lines):
    assert text_lines("".join(f"{line}\n" for line in lines)) == lines
    assert text_lines("".join(f"{line}\r\n" for line in lines)) == lines


@pytest.mark.parametrize("text", ["[" * 5000 + "]" * 5000, '{"a": ' + "9" * 5000 + "}"])
def test_json_too_deep_or_with_too_long_a_number_is_a_decode_error(text):
    # a RecursionError and a bare ValueError: tracebacks from rerank, score-batch, compare, listeners and heads
    with pytest.raises(json.JSONDecodeError):
        parse_json(text)
    assert parse_json('{"a": [1, 2]}') == {"a": [1, 2]}
