"""The ``leakloss`` command line (typer). Every user error ends in a clear message and exit code 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Find where Nepali TTS still sounds Hindi.")
console = Console()
err_console = Console(stderr=True)

EXAMPLE_SENTENCE = "आज नेकपा र अरू दलका प्रतिनिधि बैठकमा आए।"


def fail(message: str, code: int = 2) -> None:
    err_console.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(code)


def read_text_file(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as err:
        fail(f"cannot read {path}: {err.strerror or err}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        fail(f"{path} is not valid UTF-8 (byte {err.start}): save it as UTF-8 text")


def _echo_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")


@app.command()
def g2p(
    words: list[str] = typer.Argument(None, help="Devanagari words"),
    file: Optional[Path] = typer.Option(None, "--file", help="a UTF-8 file of words (whitespace-separated)"),
    lexicon: Optional[Path] = typer.Option(None, "--lexicon", help="external lexicon TSV (Google format or IPA)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object per line"),
) -> None:
    """Nepali pronunciation of words: phones (IPA), which step decided, and how sure it is."""
    from leakloss.text.g2p import NepaliFrontend
    from leakloss.text.normalize import TextError

    items = list(words or [])
    if file is not None:
        items += read_text_file(file).split()
    if not items:
        fail("no words given: pass words or --file")
    try:
        frontend = NepaliFrontend(lexicon_path=lexicon)
    except (TextError, OSError) as err:
        fail(str(err))
    table = Table("word", "phones", "source", "confidence")
    status = 0
    for word in items:
        try:
            p = frontend.pronounce(word)
        except TextError as err:
            status = 2
            if as_json:
                _echo_json({"word": word, "error": str(err)})
            else:
                table.add_row(word, f"[red]{err}[/]", "", "")
            continue
        if as_json:
            _echo_json({"word": p.word, "phones": list(p.phones), "source": p.source, "confidence": p.confidence})
        else:
            table.add_row(p.word, " ".join(p.phones), p.source, p.confidence)
    if not as_json:
        console.print(table)
    raise typer.Exit(status)


@app.command()
def sites(
    text: Optional[str] = typer.Argument(None, help="Nepali text (default: a built-in example)"),
    file: Optional[Path] = typer.Option(None, "--file", help="read the text from a UTF-8 file"),
    as_json: bool = typer.Option(False, "--json"),
    min_confidence: str = typer.Option("medium", help="lowest Nepali confidence whose sites are testable"),
) -> None:
    """Contrast sites of a sentence: where Nepali and Hindi-style readings differ in a vowel."""
    from leakloss.text.normalize import TextError
    from leakloss.text.sites import SiteFinder

    if file is not None:
        text = read_text_file(file)
    if text is None:
        text = EXAMPLE_SENTENCE
        err_console.print(f"[dim]no text given; using the example: {text}[/]")
    if not text.strip():
        fail("the text is empty")
    try:
        finder = SiteFinder(min_confidence=min_confidence)
        words = finder(text)
    except (TextError, ValueError) as err:
        fail(str(err))
    if not any(w.skipped is None for w in words):
        reasons = sorted({w.skipped for w in words if w.skipped})
        fail(f"no Devanagari word to analyse (all words skipped: {', '.join(reasons)})")
    if as_json:
        _echo_json({"text": text, "words": [w.to_json() for w in words]})
        return
    table = Table("#", "word", "Nepali", "Hindi (espeak hi)", "conf.", "sites")
    for w in words:
        if w.skipped:
            table.add_row(str(w.index), w.word, "", "", "", f"[dim]skipped: {w.skipped}[/]")
            continue
        desc = ", ".join(
            f"{'[bold]' if s.testable else '[dim]'}{s.kind} @{s.position} {s.contrast}{'[/]'}" for s in w.sites
        ) or "-"
        table.add_row(str(w.index), w.word, " ".join(w.nepali), " ".join(w.hindi), w.confidence or "", desc)
    console.print(table)
    n_testable = sum(len(w.testable_sites) for w in words)
    console.print(f"{n_testable} testable site(s) in {sum(1 for w in words if w.testable_sites)} word(s)")


@app.command()
def recognize(
    wav: Path = typer.Argument(..., help="audio file (WAV/FLAC)"),
    recognizer: str = typer.Option("a", "--recognizer", help="embedded a|b, a local directory, or a hub id"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Greedy phone string from a CTC phone recognizer."""
    from leakloss.acoustic.recognizer import Recognizer, RecognizerNotFoundError
    from leakloss.audio import AudioError, load_audio

    try:
        wave, _ = load_audio(wav)
        model = Recognizer.load(recognizer)
    except (AudioError, RecognizerNotFoundError) as err:
        fail(str(err))
    log_probs, frames = model(wave[None])
    phones = model.greedy(wave[None])[0]
    if as_json:
        _echo_json({"phones": phones, "frames": int(frames[0]), "recognizer": recognizer})
    else:
        console.print(" ".join(phones))


if __name__ == "__main__":
    app()
