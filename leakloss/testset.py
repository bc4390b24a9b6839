"""The contrast test set shipped with the package: Nepali sentences for a TTS system to read, each with its key
words and their contrast sites.

No model here was trained or tuned on these sentences, and each key word is a word none of them saw (see the card,
``leakloss/data/testset_ne.card.md``, and ``tests/test_testset.py``, which checks both). A system's share of flagged
key words on this set is the figure ``leakloss evaluate --testset`` reports; ``leakloss testset`` prints the set.

File format (``leakloss/data/testset_ne.tsv``, UTF-8, ``#`` lines are comments): one sentence a line,
``id<TAB>text<TAB>key words<TAB>sites``; the key words are separated by spaces, in text order; the sites are a JSON
object from each key word to its ``[kind, contrast, position]`` triples, as :class:`leakloss.text.sites.SiteFinder`
finds them with the default frontend (``position``: the index of the Nepali phone in the word's phones).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

from leakloss.schema import KINDS
from leakloss.textfile import parse_json, text_lines

TESTSET_FILE = "testset_ne.tsv"
COLUMNS = ("id", "text", "key_words", "sites")


class TestSetError(ValueError):
    """A test-set file that does not parse, or a request for a kind that does not exist."""

    __test__ = False  # not a pytest test class, whatever its name


@dataclass(frozen=True)
class KeySite:
    kind: str  # "deletion" | "quality" (:data:`leakloss.schema.KINDS`)
    contrast: str  # e.g. ``ʌ->∅`` or ``ʌi̯->ɛː`` (:attr:`leakloss.text.sites.Site.contrast`)
    position: int  # index of the Nepali phone in the word's Nepali phones


@dataclass(frozen=True)
class KeyWord:
    word: str
    sites: tuple[KeySite, ...]


@dataclass(frozen=True)
class TestItem:
    """One sentence to read: ``id`` names the reading (``ne-001.wav``), ``key_words`` are the words scored."""

    __test__ = False

    id: str
    text: str
    key_words: tuple[KeyWord, ...]

    def to_line(self) -> str:
        sites = {k.word: [[s.kind, s.contrast, s.position] for s in k.sites] for k in self.key_words}
        return "\t".join((self.id, self.text, " ".join(k.word for k in self.key_words),
                          json.dumps(sites, ensure_ascii=False)))


def check_kind(kind: str | None) -> None:
    if kind is not None and kind not in KINDS:
        raise TestSetError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")


def parse_line(line: str, where: str) -> TestItem:
    """One line of a test-set file (``id``, ``text``, key words, sites JSON) -> its item.

    Raises:
        TestSetError: a malformed line, named by ``where``."""
    cols = line.split("\t")
    if len(cols) != len(COLUMNS):
        raise TestSetError(f"{where}: expected {len(COLUMNS)} tab-separated columns ({', '.join(COLUMNS)}), got {len(cols)}")
    item_id, text, words, sites_json = (c.strip() for c in cols)
    if not item_id or not text or not words:
        raise TestSetError(f"{where}: empty id, text or key words")
    try:
        sites = parse_json(sites_json)
    except json.JSONDecodeError as err:
        raise TestSetError(f"{where}: sites are not JSON ({err.msg})") from None
    names = words.split()
    if not isinstance(sites, dict) or sorted(sites) != sorted(names):
        raise TestSetError(f"{where}: sites must be an object with one entry per key word ({', '.join(names)})")
    from leakloss.text.normalize import split_text_words

    try:
        text_words = set(split_text_words(text))
        key_forms = {name: split_text_words(name) for name in names}
    except ValueError as err:  # a text the normaliser refuses
        raise TestSetError(f"{where}: {err}") from None
    key_words = []
    for name in names:
        # a whole word of the text (a substring took घर in घरमा; a ZWJ spelling was "not in the text")
        if len(key_forms[name]) != 1 or key_forms[name][0] not in text_words:
            raise TestSetError(f"{where}: key word {name!r} is not a word of the text")
        triples = sites[name]
        # a position is a whole number >= 0 (true passed as 1, -1 as the last phone)
        if not triples or not all(isinstance(t, list) and len(t) == 3 and t[0] in KINDS and isinstance(t[1], str)
                                  and isinstance(t[2], int) and not isinstance(t[2], bool) and t[2] >= 0
                                  for t in triples):
            raise TestSetError(f"{where}: key word {name!r} needs [kind, contrast, position] sites, got {triples!r}")
        key_words.append(KeyWord(name, tuple(KeySite(*t) for t in triples)))
    return TestItem(item_id, text, tuple(key_words))


def parse_testset(text: str, source: str = TESTSET_FILE) -> list[TestItem]:
    """Items of a test-set file's text (see the module docstring for the format).

    Raises:
        TestSetError: a malformed line (named by ``source`` and line number) or an id given twice."""
    items: list[TestItem] = []
    first: dict[str, int] = {}
    text = text.removeprefix("\ufeff")  # a BOM (a file saved by a Windows editor) made line 1 "sites are not JSON"
    for lineno, line in enumerate(text_lines(text), 1):
        if not line.strip() or line.startswith("#"):
            continue
        item = parse_line(line, f"{source}:{lineno}")
        if item.id in first:
            raise TestSetError(f"{source}:{lineno}: id {item.id!r} already on line {first[item.id]}")
        first[item.id] = lineno
        items.append(item)
    return items


def select_kind(items: list[TestItem], kind: str | None) -> list[TestItem]:
    """The items with a key word carrying a site of ``kind`` (None: all), each keeping only those key words and
    only their sites of that kind."""
    check_kind(kind)
    if kind is None:
        return list(items)
    out = []
    for item in items:
        kept = tuple(KeyWord(k.word, tuple(s for s in k.sites if s.kind == kind)) for k in item.key_words
                     if any(s.kind == kind for s in k.sites))
        if kept:
            out.append(TestItem(item.id, item.text, kept))
    return out


def load_testset(kind: str | None = None) -> list[TestItem]:
    """The shipped test set, or its items for one contrast ``kind`` (``deletion`` / ``quality``; see
    :func:`select_kind`).

    Raises:
        TestSetError: ``kind`` is not one of :data:`leakloss.schema.KINDS`."""
    check_kind(kind)
    text = resources.files("leakloss.data").joinpath(TESTSET_FILE).read_text(encoding="utf-8")
    return select_kind(parse_testset(text), kind)


def format_testset(items: list[TestItem]) -> str:
    """The file text of ``items`` (the shipped file's format, with its header line)."""
    return "#" + "\t".join(COLUMNS) + "\n" + "".join(item.to_line() + "\n" for item in items)
