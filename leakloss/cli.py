"""The ``leakloss`` command line (typer). Every user error ends in a clear message and exit code 2."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer
from typer.core import TyperGroup
from rich.console import Console
from rich.markup import escape as escape_markup
from rich.table import Table

from leakloss.constants import DEFAULT_RECOGNIZER
from leakloss.text.normalize import visible
from leakloss.textfile import parse_json, text_lines


def escape(text: str) -> str:
    """Rich markup escaped, and bidi / control characters shown as ``[U+001B]``: a raw ESC in a word, a file name
    or a message drove the terminal, a bidi control reordered the line."""
    return escape_markup(visible(str(text)))


class _OneLineUsageErrors(TyperGroup):
    """Click's usage errors (unknown option, missing argument, bad value) as one ``error:`` line and exit 2,
    like every other user error, instead of a boxed report."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        from typer._click import exceptions as click_errors  # typer 0.29 (pinned) vendors its own click

        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)  # an Exit comes back as its code
        except click_errors.NoArgsIsHelpError as err:  # bare `leakloss`: the help is printed already
            sys.exit(err.exit_code)
        except click_errors.UsageError as err:
            where = f" (see `{err.ctx.command_path} --help`)" if err.ctx else ""
            err_console.print(f"[bold red]error:[/] {escape(err.format_message() + where)}", soft_wrap=True)
            sys.exit(2)
        except click_errors.ClickException as err:
            err_console.print(f"[bold red]error:[/] {escape(err.format_message())}", soft_wrap=True)
            sys.exit(err.exit_code)
        except typer.Abort:
            err_console.print("Aborted!")
            sys.exit(1)
        except OSError as err:  # stdout on a full disk (/dev/full) and the like: a traceback box before
            import errno

            if err.errno == errno.EPIPE:  # the reader went away (| head): nothing to say, as typer does
                sys.exit(1)
            try:
                err_console.print(f"[bold red]error:[/] {escape(os_error_text(err))}", soft_wrap=True)
            except OSError:
                pass
            sys.exit(2)
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:  # typer turns it into a bare exit 130: the user saw nothing at all
            err_console.print("interrupted before it finished: rerun the command to finish", soft_wrap=True)
            raise typer.Exit(130) from None


app = typer.Typer(cls=_OneLineUsageErrors, add_completion=False, no_args_is_help=True,
                  help="Find where Nepali TTS still sounds Hindi.")
console = Console()
err_console = Console(stderr=True)

EXAMPLE_SENTENCE = "आज नेकपा र अरू दलका प्रतिनिधि बैठकमा आए।"


@app.callback()
def _cli_setup() -> None:
    # a library warning is one "warning:" line, not Python's "file.py:205: UserWarning: ..." report
    import warnings

    warnings.showwarning = _show_warning


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    err_console.print(f"[yellow]warning:[/] {escape(str(message))}", soft_wrap=True)


def fail(message: str, code: int = 2) -> None:
    from leakloss.checks import MESSAGE_CHARS, shortened

    # escaped: paths and ids may hold [brackets]; soft-wrapped: paths stay whole for copying; cut: a message that
    # quotes a user's value whole (a 1.2M-phone lexicon line) is not megabytes long
    err_console.print(f"[bold red]error:[/] {escape(shortened(message, MESSAGE_CHARS))}", soft_wrap=True)
    raise typer.Exit(code)


def os_error_text(err: OSError) -> str:
    """``strerror (file)``: which file failed matters as much as why (a disk full, a folder made read-only)."""
    why = err.strerror or str(err)
    return f"{why} ({err.filename})" if err.filename and str(err.filename) not in why else why


def read_text_file(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as err:
        fail(f"cannot read {path}: {err.strerror or err}")
    try:
        return data.decode("utf-8-sig")  # a byte-order mark (Windows editors write one) is not text
    except UnicodeDecodeError as err:
        fail(f"{path} is not valid UTF-8 (byte {err.start}): save it as UTF-8 text")


def _echo_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")


@app.command()
def g2p(
    words: list[str] = typer.Argument(None, help="Devanagari words"),
    file: Optional[Path] = typer.Option(None, "--file", help="a UTF-8 file of words (whitespace-separated)"),
    lexicon: Optional[Path] = typer.Option(
        None, "--lexicon", help="external lexicon TSV: spelling<TAB>phones, Google symbols or IPA, '.' = syllable "
                                "boundary; an entry whose phones do not fit its spelling is an error"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object per line"),
) -> None:
    """Nepali pronunciation of words: phones (IPA), which step decided each inherent vowel (lexicon /
    model / rule) with the model's P(keep), and how sure it is."""
    from leakloss.text.frontend import NepaliFrontend
    from leakloss.text.normalize import TextError, split_words
    from leakloss.text.sites import UNSPOKEN_SKIPS

    text = " ".join(words or [])
    if file is not None:
        text += " " + read_text_file(file)
    try:
        # the same tokenizer as `sites`: a danda or quote attached to a word is split off, not an error
        tokens = split_words(text)
    except TextError as err:
        fail(str(err))
    if not tokens:
        fail("no words given: pass words or --file")
    try:
        frontend = NepaliFrontend(lexicon_path=lexicon)
    except (TextError, OSError) as err:
        fail(str(err))
    skipped = frontend.lexicon_skipped
    if skipped:
        entries = "1 entry" if len(skipped) == 1 else f"{len(skipped)} entries"
        shown = ", ".join(f"line {n} {w!r}" for n, w in skipped[:3]) + (", ..." if len(skipped) > 3 else "")
        err_console.print(f"[yellow]warning:[/] {escape(f'{lexicon}: {entries} with no phones left out ({shown})')}",
                          soft_wrap=True)
    repeated = frontend.lexicon_repeated
    if repeated:
        entries = "1 entry" if len(repeated) == 1 else f"{len(repeated)} entries"
        shown = ", ".join(f"line {n} {w!r} (first on line {f})" for n, w, f in repeated[:3])
        shown += ", ..." if len(repeated) > 3 else ""
        message = f"{lexicon}: {entries} left out: their spelling came earlier with other phones, the first wins ({shown})"
        err_console.print(f"[yellow]warning:[/] {escape(message)}", soft_wrap=True)
    if all(tok.skipped in UNSPOKEN_SKIPS for tok in tokens):  # as `sites`: nothing to pronounce
        reasons = sorted({tok.skipped for tok in tokens})
        fail(f"no Devanagari word to pronounce (all words skipped: {', '.join(reasons)})")
    table = Table("word", "phones", "source", "confidence", "vowels (step, P(keep))")
    status = 0
    for tok in tokens:
        if tok.skipped is not None:
            # punctuation and symbols are shown and skipped; anything else is a word we cannot pronounce
            if tok.skipped not in UNSPOKEN_SKIPS:
                status = 2
            if as_json:
                _echo_json({"word": tok.text, "skipped": tok.skipped}
                           | ({} if tok.skipped in UNSPOKEN_SKIPS else {"error": f"{tok.text!r}: {tok.skipped}"}))
            else:
                style = "dim" if tok.skipped in UNSPOKEN_SKIPS else "red"
                table.add_row(escape(tok.text), f"[{style}]skipped: {escape(tok.skipped)}[/]", "", "", "")
            continue
        try:
            p = frontend.pronounce(tok.text)
        except TextError as err:
            status = 2
            if as_json:
                _echo_json({"word": tok.text, "error": str(err)})
            else:
                table.add_row(escape(tok.text), f"[red]{escape(str(err))}[/]", "", "", "")
            continue
        vowels = [{"unit": v.unit, "letter": v.letter, "kept": v.kept, "step": v.step, "p_keep": v.p_keep}
                  for v in p.vowels]
        if as_json:
            _echo_json({"word": p.word, "phones": list(p.phones), "source": p.source, "confidence": p.confidence,
                        "probability": p.probability, "vowels": vowels})
        else:
            desc = ", ".join(
                f"{v['letter']}:{'keep' if v['kept'] else 'drop' if v['kept'] is not None else '?'} {v['step']}"
                + (f" {v['p_keep']:.2f}" if v["p_keep"] is not None else "") for v in vowels) or "-"
            conf = p.confidence + (f" ({p.probability:.3f})" if p.probability is not None else "")
            table.add_row(escape(p.word), " ".join(p.phones), p.source, conf, escape(desc))
    if not as_json:
        console.print(table)
    if status:
        where = "each has an \"error\" line above" if as_json else "see the table"
        err_console.print(f"[bold red]error:[/] some words could not be pronounced ({where})")
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
    from leakloss.text.sites import CONFIDENCE_ORDER, SiteFinder

    if file is not None and text is not None:
        fail("pass the text or --file, not both")
    if file is not None:
        text = read_text_file(file)
    if text is None:
        text = EXAMPLE_SENTENCE
        err_console.print(f"[dim]no text given; using the example: {escape(text)}[/]")
    if not text.strip():
        fail("the text is empty")
    from leakloss.batch import _unicode_problem

    if bad := _unicode_problem(text):  # a byte that is not UTF-8 in argv: echoed into the JSON, or a traceback
        fail(f"the text {bad}")
    if min_confidence not in CONFIDENCE_ORDER:
        fail(f"--min-confidence must be one of {', '.join(CONFIDENCE_ORDER)}, got {min_confidence!r}")
    try:
        finder = SiteFinder(min_confidence=min_confidence)
        words = finder(text)
    except (TextError, ValueError) as err:
        fail(str(err))
    if not words:  # only invisible characters (ZWJ, ZWNJ, a byte-order mark, a soft hyphen)
        fail("the text has no visible characters")
    if not any(w.skipped is None for w in words):
        reasons = sorted({w.skipped for w in words if w.skipped})
        fail(f"no Devanagari word to analyse (all words skipped: {', '.join(reasons)})")
    if as_json:
        _echo_json({"text": text, "words": [w.to_json() for w in words]})
        return
    table = Table("#", "word", "Nepali", "Hindi (espeak hi)", "conf.", "sites")
    for w in words:
        if w.skipped:
            table.add_row(str(w.index), escape(w.word), "", "", "", f"[dim]skipped: {escape(w.skipped)}[/]")
            continue
        desc = ", ".join(
            f"{'[bold]' if s.testable else '[dim]'}{s.kind} @{s.position} {escape(s.contrast)}{'[/]'}" for s in w.sites
        ) or "-"
        table.add_row(str(w.index), escape(w.word), " ".join(w.nepali), " ".join(w.hindi), w.confidence or "", desc)
    console.print(table)
    n_testable = sum(len(w.testable_sites) for w in words)
    console.print(f"{n_testable} testable site(s) in {sum(1 for w in words if w.testable_sites)} word(s)")


@app.command()
def testset(
    kind: Optional[str] = typer.Option(None, "--kind", help="only key words with a site of this kind: deletion or quality"),
    out: Optional[Path] = typer.Option(None, "--out", help="write the set to this TSV file (default: standard output)"),
) -> None:
    """The shipped contrast test set: sentences to read, their key words and sites (id, text, key_words, sites)."""
    from leakloss.atomic import write_text_atomic
    from leakloss.testset import TestSetError, format_testset, load_testset

    if out is not None:
        _check_paths([("--out", out)])
        _check_output_path(out, "--out")
    try:
        items = load_testset(kind)
    except TestSetError as err:
        fail(f"--kind: {err}")
    text = format_testset(items)
    if out is None:
        sys.stdout.write(text)
        return
    try:
        write_text_atomic(out, text)
    except OSError as err:
        fail(f"cannot write --out {out}: {os_error_text(err)}")
    n_words = sum(len(i.key_words) for i in items)
    err_console.print(f"{len(items)} sentence(s), {n_words} key word(s) written to {escape(str(out))}", soft_wrap=True)


@app.command()
def recognize(
    wav: Path = typer.Argument(..., help="audio file (WAV/FLAC)"),
    recognizer: str = typer.Option(DEFAULT_RECOGNIZER, "--recognizer",
                                   help="embedded wb (the default: a CTC head on the multilingual Whisper base "
                                   "encoder, hears real speech), w (on Whisper tiny.en), a or b (trained on espeak "
                                   "only), a local directory, or a hub id"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Greedy phone string from a CTC phone recognizer."""
    from leakloss.acoustic.recognizer import Recognizer, RecognizerLoadError
    from leakloss.audio import AudioError, load_audio

    try:
        wave, info = load_audio(wav)
        model = Recognizer.load(recognizer)
    except (AudioError, RecognizerLoadError) as err:
        fail(str(err))
    for w in info.warnings:
        err_console.print(f"[yellow]warning:[/] {escape(w)}", soft_wrap=True)
    import torch

    from leakloss.acoustic.recognizer_io import greedy_phones

    with torch.no_grad():
        log_probs, frames = model(wave[None])  # one pass: the frames and the phones (greedy() ran a second)
    phones = greedy_phones(log_probs, frames, model.phoneset)[0]
    if as_json:
        _echo_json({"phones": phones, "frames": int(frames[0]), "recognizer": model.name})  # with its weights hash
    else:
        console.print(" ".join(phones))


@app.command()
def score(
    query: Path = typer.Argument(..., help="the reading to score (WAV/FLAC)"),
    text: str = typer.Option(..., "--text", help="the Nepali text it reads"),
    ref: list[Path] = typer.Option([], "--ref", help="trusted Nepali reference reading(s) of the same text (default: "
                                   "the embedded teacher reads the text in two voices, cached)"),
    reference_free: bool = typer.Option(False, "--reference-free", help="no references: the shipped reference-free "
                                        "head decides each site (labelled so in the result and the report)"),
    json_out: Optional[str] = typer.Option(None, "--json", help="write the JSON result here ('-' = stdout)"),
    html_out: Optional[Path] = typer.Option(None, "--html", help="write a listenable HTML report here"),
    heads: Optional[Path] = typer.Option(None, "--heads", help="folder with deletion/quality heads, or a shipped "
                                         "set by name: wb (the default), w (on Whisper tiny.en), espeak (on A/B)"),
    recognizer_a: Optional[str] = typer.Option(None, help="recognizer of the quality head: embedded a/b/w/wb, a "
                                               "directory or hub id (default: the one the head was trained on)"),
    recognizer_b: Optional[str] = typer.Option(None, help="recognizer of the deletion head (default: the head's own)"),
    check_recognizer: Optional[str] = typer.Option(
        None, "--check-recognizer", help="the word check's recognizer (default: A's; wb when A is the embedded a/b)"),
    asr: Optional[str] = typer.Option(None, "--asr", help="word check by a local transformers ASR model (id or dir) "
                                      "with the seed's CER/WER thresholds, instead of the phone error rate"),
) -> None:
    """Score one reading word by word against trusted Nepali references."""
    # everything that can be checked is checked before the models load and the scoring starts
    _check_paths([("query", query), *(("--ref", r) for r in ref), ("--json", json_out if json_out != "-" else None),
                  ("--html", html_out), ("--heads", heads)])
    outputs = _check_outputs(json_out, html_out, inputs=[query, *ref])
    _check_query(query)
    for r in ref:  # a mistyped path is a usage error; a reference that cannot be used is said in the result
        if not r.exists():
            fail(f"--ref {r}: no such file")
        if r.is_dir():  # score-batch fails such an item; here it went on as an unusable reference
            fail(f"--ref {r}: is a folder; give each reference's audio file")
    _check_text(text)
    if reference_free and ref:
        fail("--reference-free scores without references: give --ref or --reference-free, not both")
    _check_reference_free(reference_free, heads=heads, recognizer_a=recognizer_a, recognizer_b=recognizer_b)
    # absolute, as score-batch records them: a result read from another folder still finds its audio, and a path
    # that began with "-" stays a path
    query, ref = query.absolute(), [r.absolute() for r in ref]
    refs, origin = _references_for(text, ref, reference_free)
    scorer = _scorer(heads, recognizer_a, recognizer_b, check_recognizer)
    if asr is not None:
        from leakloss.acoustic.recognizer import RecognizerLoadError
        from leakloss.scorer import asr_word_check

        try:
            scorer.word_check = asr_word_check(asr)
        except RecognizerLoadError as err:
            fail(str(err))
    if reference_free:
        from leakloss.heads import HeadLoadError
        from leakloss.acoustic.recognizer import RecognizerLoadError

        try:
            result = scorer.score_reference_free(query, text)
        except (HeadLoadError, RecognizerLoadError) as err:
            fail(str(err))
    else:
        result = scorer.score(query, text, refs) | {"reference_origin": origin}
    _emit_result(result, outputs)
    if result["status"] == "failed":
        raise typer.Exit(2)


def _check_reference_free(reference_free: bool, **ignored: object) -> None:
    """Options the reference-free head does not read are refused with it (they were accepted and dropped: the
    shipped reference-free head decided, whatever --heads named)."""
    given = [f"--{name.replace('_', '-')}" for name, value in ignored.items() if value is not None]
    if reference_free and given:
        fail(f"{', '.join(given)} {'has' if len(given) == 1 else 'have'} no effect with --reference-free (the shipped "
             "reference-free head decides each site, on its own recognizer): leave "
             f"{'it' if len(given) == 1 else 'them'} out")


def _references_for(text: str, ref: list[Path], reference_free: bool) -> tuple[list[str], dict | None]:
    """The references to score against and their ``reference_origin``: the given ones, else the embedded
    teacher's synthesised readings (said on stderr), none in reference-free mode."""
    from leakloss.speech.references import (REFERENCE_VOICES, given_origin, reference_origin_detail,
                                            synthesised_origin, synthesised_references)

    if reference_free:
        err_console.print("[yellow]--reference-free: no references; the shipped reference-free head decides each "
                          "site[/]", soft_wrap=True)
        return [], None
    if ref:
        return [str(r) for r in ref], given_origin()
    from leakloss.audio import AudioError
    from leakloss.speech.references import ReferenceSynthesisError

    try:
        paths = synthesised_references(text)
    except (ReferenceSynthesisError, AudioError, OSError) as err:
        fail(f"no --ref given and the references cannot be synthesised: {err}")
    err_console.print(f"[yellow]no --ref given: scoring against references synthesised by the "
                      f"{escape(reference_origin_detail(REFERENCE_VOICES))} (cached in {escape(str(paths[0].parent))})[/]",
                      soft_wrap=True)
    return [str(p) for p in paths], synthesised_origin()


def _check_paths(named, utf8: bool = True) -> None:
    """Every ``(what, path)`` given (None: not given) can be named on this file system (and, with ``utf8``, in a
    result): a name that is not UTF-8 failed writing the result after the scoring, one too long failed
    ``Path.exists()``, a symlink loop raised ``RuntimeError`` in ``Path.resolve()``. Each command checks its
    paths here first (:func:`leakloss.atomic.path_problem`)."""
    from leakloss.atomic import path_problem

    for what, path in named:
        if path is not None and (problem := path_problem(path, utf8)) is not None:
            fail(f"{what} {problem}")


def _check_output_path(path: Path, option: str, suffixes: tuple[str, ...] = ()) -> Path:
    """A file ``path`` can be written: its folder exists and is writable, it is not a folder, device or pipe
    (nor a link to one; a symlink to a file or to nothing is replaced by the output, never written through)."""
    from leakloss.atomic import in_the_way, write_probe_problem

    blocker = in_the_way(path)
    if blocker == "folder":
        fail(f"{option} {path} is a folder: give a file name")
    if blocker is not None:
        fail(f"{option} {path} is not a regular file (a device, pipe or socket): give a file name"
             + (" (--json - writes to standard output)" if option == "--json" else ""))
    given = path
    if suffixes and given.suffix.lower() not in suffixes:
        fail(f"{option} {given} must end in {' or '.join(suffixes)}")
    folder = path.parent
    if not folder.exists():
        # a file in the way counts as "not a folder", like a missing folder
        blocker = next((p for p in folder.parents if p.exists()), None)
        if blocker is not None and not blocker.is_dir():
            fail(f"cannot write {option} {path}: {blocker} is not a folder")
        fail(f"cannot write {option} {path}: folder {folder} does not exist")
    if not folder.is_dir():
        fail(f"cannot write {option} {path}: {folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK) or (path.is_file() and not path.is_symlink()
                                                     and not os.access(path, os.W_OK)):
        fail(f"cannot write {option} {path}: {'the file' if path.exists() else f'folder {folder}'} is not writable")
    if (why := write_probe_problem(folder)) is not None:  # /proc/x: os.access says yes to root
        fail(f"cannot write {option} {path}: nothing can be created in folder {folder} ({why})")
    return given


def _check_output_folder(path: Path, option: str) -> Path:
    """A folder ``path`` exists and is writable, or can be created (its nearest existing parent is a
    writable folder)."""
    from leakloss.atomic import output_folder_problem

    problem = output_folder_problem(path)
    if problem is not None:
        fail(f"{option} {problem}")
    return path


def _check_outputs(json_out: str | None, html_out: Path | None,
                   inputs: list[Path] | tuple[Path, ...] = ()) -> tuple[Path | str | None, Path | None]:
    json_path = None if json_out in (None, "-") else _check_output_path(Path(json_out), "--json")
    html_path = None if html_out is None else _check_output_path(html_out, "--html", (".html", ".htm"))
    if json_path is not None and html_path is not None and json_path.resolve() == html_path.resolve():
        fail(f"--json and --html are the same file ({json_path}): give two names")
    for option, path in (("--json", json_path), ("--html", html_path)):
        if path is not None and any(path.resolve() == Path(i).resolve() for i in inputs):
            fail(f"{option} {path} is one of the input files: writing it would destroy it; give another name")
    return (json_out if json_out == "-" else json_path), html_path


def _check_query(query: Path) -> None:
    from leakloss.audio import AudioError, load_audio

    try:
        load_audio(query)
    except AudioError as err:
        fail(str(err))


def _text_problem(text: str) -> str | None:
    """Why ``text`` cannot be scored (empty, too long, no Devanagari word ...), or None."""
    from leakloss.text.normalize import TextError
    from leakloss.text.sites import SiteFinder

    from leakloss.batch import _unicode_problem

    if not text.strip():
        return "is empty"
    if bad := _unicode_problem(text):  # a byte that is not UTF-8 in argv: the result's write failed after scoring
        return bad
    try:
        words = SiteFinder()(text)
    except (TextError, ValueError) as err:
        return f"cannot be read: {err}"
    if not any(w.skipped is None for w in words):
        from leakloss.text.sites import no_word_reason

        return f"has {no_word_reason(words)}"
    return None


def _check_text(text: str) -> None:
    problem = _text_problem(text)
    if problem is not None:
        fail(f"--text {problem}")


def _scorer(heads, recognizer_a, recognizer_b, check_recognizer=None):
    from leakloss.acoustic.recognizer import RecognizerLoadError
    from leakloss.heads import HeadLoadError
    from leakloss.scorer import Scorer

    try:
        return Scorer(recognizer_a, recognizer_b, heads_dir=heads, check_recognizer=check_recognizer)
    except (RecognizerLoadError, HeadLoadError) as err:
        fail(str(err))


def _emit_result(result: dict, outputs: tuple[Path | str | None, Path | None]) -> None:
    """Write the checked outputs: everything is rendered first, so a problem leaves no half set of files."""
    from leakloss.atomic import write_text_atomic

    json_out, html_out = outputs
    text = json.dumps(result, ensure_ascii=False, indent=1)
    page = None
    if html_out is not None:
        from leakloss.audio import AudioError, load_audio
        from leakloss.report import render_report

        try:
            wave = load_audio(result["query"])[0]
        except AudioError:
            wave = None
        try:
            page = render_report(result, wave)
        except ValueError as err:
            fail(f"cannot render the --html report: {err}")
    if json_out == "-":
        sys.stdout.write(text + "\n")
        for w in _result_warnings(result):
            err_console.print(f"[yellow]warning:[/] {escape(w)}", soft_wrap=True)
    targets = [(p, t) for p, t in ((json_out, text), (html_out, page)) if isinstance(p, Path) and t is not None]
    # all the outputs or none: a file a failed run replaced gets its old content back (it was deleted), a
    # symlink its link (its target was never read nor written)
    before = {p: (os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else None) for p, _ in targets}
    written = []
    try:
        for path, content in targets:
            written.append(write_text_atomic(path, content))
    except OSError as err:
        from leakloss.atomic import write_bytes_atomic

        for path in written:
            if before[path] is None or isinstance(before[path], str):
                path.unlink(missing_ok=True)
                if before[path] is not None:
                    os.symlink(before[path], path)
            else:
                write_bytes_atomic(path, before[path])
        fail(f"cannot write the outputs: {os_error_text(err)}")
    if json_out != "-":
        _print_result(result)


def _result_warnings(result: dict) -> list[str]:
    """A result's warnings and each reference it did not use, with why (a rejected reference was silent): a --ref
    by that name, a reference the embedded teacher synthesised as such (it was no --ref of the user's)."""
    from leakloss.schema import reference_origin, rejected_references

    label = "--ref" if reference_origin(result) == "given" else "synthesised reference"
    return [*result.get("warnings", []), *(f"{label} {r} not used: {why}" for r, why in rejected_references(result))]


def _print_result(result: dict) -> None:
    colors = {"flagged": "bold red", "uncertain": "yellow", "no_change": "green", "unscored": "dim", "not_tested": "dim"}
    console.print(f"[bold]{result['status']}[/] {escape(result.get('reason') or '')}", soft_wrap=True)
    from leakloss.report import reference_source_text

    console.print(escape(reference_source_text(result)), soft_wrap=True)
    for w in _result_warnings(result):
        console.print(f"[yellow]warning:[/] {escape(w)}", soft_wrap=True)
    from leakloss.report import reading_words

    table = Table("#", "word", "decision", "sites (score, refs)")
    for w, text in reading_words(result["words"]):
        sites = ", ".join(f"{s['kind']} {s['nepali']}->{s['hindi'] or '∅'} "
                          f"{'-' if s['score'] is None else format(s['score'], '.2f')} ({s['references_used']})"
                          for s in w["sites"])
        table.add_row(str(w["index"]), escape(text), f"[{colors.get(w['decision'], '')}]{w['decision']}[/]", sites)
    console.print(table)


@app.command("score-batch")
def score_batch_cmd(
    manifest: Path = typer.Argument(..., help='JSONL: {"id", "query", "text"[, "refs": [...]]} per line (no refs: '
                                    "the embedded teacher's readings of the text, synthesised and cached)"),
    out: Path = typer.Option(..., "--out", help="folder for <id>.json results"),
    reference_free: bool = typer.Option(False, "--reference-free", help="no references: the shipped reference-free "
                                        "head decides each site"),
    accelerator: str = typer.Option("cpu"), devices: str = typer.Option("1"), strategy: str = typer.Option("auto"),
    heads: Optional[Path] = typer.Option(None, "--heads"),
    recognizer_a: Optional[str] = typer.Option(None), recognizer_b: Optional[str] = typer.Option(None),
    check_recognizer: Optional[str] = typer.Option(None, "--check-recognizer"),
) -> None:
    """Score many readings (Lightning predict loop; resumable: finished ids are skipped, failed ones retried).

    Exit code 0 when every item was scored, quarantined or unscored; 1 when any item failed (each
    failure is listed, and is retried by the next run); 2 for a bad manifest, folder, option or model.
    """
    from leakloss.acoustic.recognizer import RecognizerLoadError
    from leakloss.batch import BatchError, BatchInterrupted, score_batch
    from leakloss.heads import HeadLoadError

    _check_paths([("manifest", manifest), ("--out", out), ("--heads", heads)], utf8=False)
    _check_reference_free(reference_free, heads=heads, recognizer_a=recognizer_a, recognizer_b=recognizer_b)
    interrupted = None
    try:
        # the progress bar (Lightning's, on stdout) only where a person watches: piped, stdout is the summary's JSON
        summary = score_batch(manifest, out, accelerator=accelerator, devices=devices, strategy=strategy,
                              recognizer_a=recognizer_a, recognizer_b=recognizer_b, heads_dir=heads,
                              check_recognizer=check_recognizer, reference_free=reference_free,
                              progress=sys.stdout.isatty())
    except BatchInterrupted as err:
        interrupted, summary = err, err.summary
    except (BatchError, RecognizerLoadError, HeadLoadError) as err:
        fail(str(err))
    except OSError as err:
        fail(f"score-batch stopped on a file it could not read or write: {os_error_text(err)}")
    failures = summary.pop("failures")
    _echo_json(summary)  # one JSON line a script can read (failures follow on stderr)
    for f in failures:
        err_console.print(f"[red]failed[/] {escape(f['id'])}: {escape(f['reason'])}", soft_wrap=True)
    if interrupted is not None:
        err_console.print(f"interrupted: {summary['not_scored']} of {summary['processed']} item(s) not scored yet; "
                          f"the results written are kept: rerun the same command to score the rest", soft_wrap=True)
        raise typer.Exit(130)
    if failures:
        err_console.print(f"{len(failures)} item(s) failed; rerun the same command to retry them")
        raise typer.Exit(1)


@app.command()
def compare(
    results: list[Path] = typer.Argument(..., help="results folders, one per system (NAME=DIR to name them)"),
    out: Path = typer.Option(Path("comparison"), "--out"),
) -> None:
    """Per system: flagged key words with 95% intervals (Wilson, cluster bootstrap by sentence)."""
    from leakloss.atomic import is_utf8
    from leakloss.eval.compare import compare_results, write_comparison
    from leakloss.schema import ResultError

    _check_paths([("--out", out)], utf8=False)
    _check_output_folder(out, "--out")
    dirs = {}
    for item in results:
        name, _, folder = str(item).partition("=") if "=" in str(item) else (None, "", str(item))
        # before resolve(), which raised on a link loop; UTF-8: the comparison names each results folder
        _check_paths([("results", folder or None)])
        if name is None:  # a bare folder is named by its last part; "." and ".." by the folder they stand for
            name = item.name if item.name not in ("", ".", "..") else item.resolve().name
        if not name or not folder:  # Path("") would be the current folder
            fail(f"{item}: give NAME=DIR with both parts, or a folder")
        if not Path(folder).is_dir():
            hint = f" (a folder named {str(item)!r}: write it as NAME={item})" if Path(str(item)).is_dir() else ""
            fail(f"{folder} is not a folder of results{hint}")
        if name in dirs:
            fail(f"two systems are named {name!r}: name them apart as NAME=DIR")
        if not is_utf8(name):  # a folder named by bytes that are not UTF-8: the comparison could not be written
            fail(f"system name {name!r} is not valid UTF-8: name it as NAME=DIR")
        dirs[name] = Path(folder)
    try:
        result = compare_results(dirs)
    except (ResultError, ValueError) as err:
        fail(str(err))
    try:
        paths = write_comparison(result, out)
    except OSError as err:
        fail(f"cannot write the comparison to {out}: {os_error_text(err)}")
    console.print((out / "comparison.md").read_text(encoding="utf-8"), markup=False)  # names are plain text
    console.print({k: str(v) for k, v in paths.items()})


@app.command()
def evaluate(
    systems: list[str] = typer.Argument(..., help="SYSTEM=FOLDER_OR_METADATA: F5's metadata.csv (audio|text), a folder "
                                        "holding one, or a folder of WAVs named by --testset's ids"),
    out: Path = typer.Option(..., "--out", help="folder for the results (kept: a rerun resumes) and report/"),
    testset: Optional[Path] = typer.Option(None, "--testset", help="test set TSV (id, text, key words): WAVs named by "
                                           "its ids, and the key words counted"),
    reference_free: bool = typer.Option(False, "--reference-free", help="no references: the shipped reference-free "
                                        "head decides each site"),
    accelerator: str = typer.Option("cpu"), devices: str = typer.Option("1"), strategy: str = typer.Option("auto"),
    heads: Optional[Path] = typer.Option(None, "--heads"),
) -> None:
    """Score every reading of one or more TTS systems (no references needed) and write their comparison, word
    reports with players and an index page (OUT/report/index.html). Resumable. Exit status 1 when a reading
    failed or was not scored (each listed; the report is written), 2 on bad input."""
    from leakloss.acoustic.recognizer import RecognizerLoadError
    from leakloss.batch import BatchError
    from leakloss.evaluate import EvaluateError, EvaluateInterrupted, evaluate as run_evaluate, parse_system
    from leakloss.heads import HeadLoadError
    from leakloss.schema import ResultError

    _check_reference_free(reference_free, heads=heads)
    parsed = {}
    try:
        for spec in systems:
            name, path = parse_system(spec)
            if name in parsed:
                fail(f"two systems are named {name!r}: name them apart as NAME=PATH")
            parsed[name] = path
        if testset is not None and testset.is_dir():
            fail(f"--testset {testset}: a folder, not a test set file")
        if testset is not None and not testset.exists():  # a pipe (<(leakloss testset)) is read as a file
            fail(f"--testset {testset}: no such file")
        summary = run_evaluate(parsed, out, testset=testset, reference_free=reference_free, accelerator=accelerator,
                               devices=devices, strategy=strategy, heads_dir=heads)
    except EvaluateInterrupted as err:
        err_console.print(f"interrupted while scoring {escape(err.system)}: the results written are kept; rerun the "
                          "same command to score the rest and write the report", soft_wrap=True)
        raise typer.Exit(130)
    except (EvaluateError, BatchError, RecognizerLoadError, HeadLoadError, ResultError) as err:
        fail(str(err))
    except OSError as err:
        fail(f"evaluate stopped on a file it could not read or write: {os_error_text(err)}")
    for p in summary["problems"]:
        err_console.print(f"[yellow]not scored[/] {escape(p['system'])}: {escape(p['reading'])}: {escape(p['reason'])}",
                          soft_wrap=True)
    for p in summary["without_audio"]:
        err_console.print(f"[yellow]page without audio[/] {escape(p['system'])}: {escape(p['reading'])}: "
                          f"{escape(p['reason'])}", soft_wrap=True)
    console.print((Path(summary["index"]).parent / "comparison" / "comparison.md").read_text(encoding="utf-8"),
                  markup=False)
    console.print(f"report: {escape(str(summary['index']))}", soft_wrap=True)
    # readings whose scoring failed: told one by one and in the exit status, as score-batch does (a rerun retries)
    failures = [(system, f) for system, run in summary["scoring"].items() for f in run.get("failures", [])]
    for system, f in failures:
        err_console.print(f"[red]failed[/] {escape(system)}: {escape(f['id'])}: {escape(f['reason'])}", soft_wrap=True)
    if failures:
        err_console.print(f"{len(failures)} reading(s) failed; rerun the same command to retry them")
    if summary["problems"]:  # a TTS job that lost half its WAVs must not pass a CI step (score-batch: exit 1 too)
        err_console.print(f"{len(summary['problems'])} reading(s) not scored (listed above as 'not scored'); the "
                          "report counts the others")
    if failures or summary["problems"]:
        raise typer.Exit(1)


@app.command()
def listeners(
    labels: Path = typer.Argument(..., help="CSV: word,reading,listener,label[,mos]"),
    results: Path = typer.Argument(..., help="folder of scorer results (<reading>.json)"),
    out: Path = typer.Option(Path("listeners"), "--out"),
) -> None:
    """Scorer vs blind listeners: precision, recall, false alarms (bootstrap over listeners), alpha, rho."""
    from leakloss.eval.listeners import ListenerDataError, listener_agreement, write_listener_report
    from leakloss.schema import ResultError

    _check_paths([("--out", out)], utf8=False)
    _check_paths([("labels", labels), ("results", results)])  # the report names both: UTF-8
    _check_output_folder(out, "--out")
    try:
        result = listener_agreement(labels, results)
    except (ListenerDataError, ResultError, ValueError) as err:
        fail(str(err))
    try:
        write_listener_report(result, out)
    except OSError as err:
        fail(f"cannot write the listener report to {out}: {os_error_text(err)}")
    console.print((out / "listeners.md").read_text(encoding="utf-8"), markup=False)  # reasons may hold [brackets]


@app.command()
def rerank(
    manifest: Path = typer.Argument(..., help='JSONL, one line per text: {"text": "...", "candidates": ["a.wav", ...]}'),
    as_json: bool = typer.Option(False, "--json", help="one JSON line per text instead of the table"),
) -> None:
    """Best-of-N: score each text's candidate readings with the leak reward and keep the best, with the reasons
    (a candidate that fails the word check can never be kept).

    A candidate file that cannot be read is not scored: it is listed with its reason (stderr, and the output's
    ``not_scored``) and the text's other candidates are ranked; a text none of whose files can be read is not
    ranked (``status`` ``failed``). Exit code 0 when every file was read; 1 when any was not (the output is
    whole); 2 for a bad manifest, or when no file at all can be read.
    """
    from leakloss.audio import AudioError, load_audio
    from leakloss.rewards import choose
    from leakloss.rewards import rerank as rerank_readings

    entries = []
    for n, line in enumerate(text_lines(read_text_file(manifest)), 1):
        if not line.strip():
            continue
        try:
            row = parse_json(line)
        except json.JSONDecodeError as err:
            fail(f"{manifest}:{n}: not JSON ({err.msg})")
        if not (isinstance(row, dict) and isinstance(row.get("text"), str) and row["text"].strip()
                and isinstance(row.get("candidates"), list) and row["candidates"]
                and all(isinstance(c, str) and c for c in row["candidates"])):
            fail(f'{manifest}:{n}: need {{"text": "...", "candidates": ["a.wav", ...]}} with at least one path')
        unknown = sorted(set(row) - {"text", "candidates"})
        if unknown:  # a misspelt key vanished without a word (score-batch refuses them too)
            fail(f"{manifest}:{n}: unknown field(s) {', '.join(map(repr, unknown))} (known: 'text', 'candidates')")
        problem = _text_problem(row["text"])
        if problem is not None:
            fail(f"{manifest}:{n}: text {problem}")
        entries.append((n, row["text"], [manifest.parent / c for c in row["candidates"]]))
    if not entries:
        fail(f"{manifest}: no line to rerank")
    # per text: the indices of the candidate files read, {candidate index: why not} of the others. Every file is
    # read (and checked) before any scoring, and read again when its text is scored: one text's waves in memory
    # at a time, not the whole manifest's (1,000 texts x 8 candidates x 10 s were 5 GB)
    read = []
    for n, text, paths in entries:
        waves, unreadable = [], {}
        for i, path in enumerate(paths):
            try:
                _, info = load_audio(path)
            except AudioError as err:  # this candidate, not the whole run (its message names the file)
                unreadable[i] = str(err)
                continue
            waves.append(i)
            for w in info.warnings:  # downmixed, resampled, clipped: said, as by `score`
                err_console.print(f"[yellow]warning:[/] {escape(f'{path}: {w}')}", soft_wrap=True)
        read.append((waves, unreadable))
    if not any(waves for waves, _ in read):
        fail("no candidate file could be read: " + "; ".join(
            f"{manifest}:{n}: {why}" for (n, _, _), (_, unreadable) in zip(entries, read) for why in unreadable.values()))
    for (n, _, paths), (waves, unreadable) in zip(entries, read):
        for i, why in unreadable.items():
            err_console.print(f"[yellow]not scored[/] {escape(f'{manifest}:{n}: candidate {i}: {why}')}", soft_wrap=True)
        if not waves:
            err_console.print(f"[yellow]not ranked[/] {escape(f'{manifest}:{n}: no candidate file could be read')}",
                              soft_wrap=True)
    from leakloss.acoustic.recognizer import RecognizerLoadError
    from leakloss.heads import HeadLoadError
    from leakloss.penalty import LeakPenalty

    try:  # a broken shipped head or recognizer was a traceback with exit 1, which this command means "some files"
        penalty = LeakPenalty.load()
    except (RecognizerLoadError, HeadLoadError) as err:
        fail(str(err))
    choices = []
    for (n, text, paths), (readable, unreadable) in zip(entries, read):
        results = [None] * len(paths)
        waves = {}
        for i in readable:
            try:
                waves[i] = load_audio(paths[i])[0]
            except AudioError as err:  # changed since it was checked: not scored, said
                unreadable[i] = str(err)
                err_console.print(f"[yellow]not scored[/] {escape(f'{manifest}:{n}: candidate {i}: {err}')}",
                                  soft_wrap=True)
        if waves:  # the scored candidates back in their places among the text's candidates
            (ranked,) = rerank_readings([(text, list(waves.values()))], penalty)
            for i, r in zip(waves, ranked.candidates, strict=True):
                results[i] = r
        choices.append(choose(text, results, dict(sorted(unreadable.items()))))
    if as_json:
        for (_, _, paths), c in zip(entries, choices, strict=True):
            status = "scored" if c.best is not None else "failed" if len(c.not_scored) == len(paths) else "unscored"
            _echo_json({"text": c.text, "best": None if c.best is None else str(paths[c.best]),
                        "reward": c.reward, "status": status, "reason": c.reason,
                        # each scored candidate's own reward status (they were only in the prose reason)
                        "candidates": [{"candidate": str(path), "status": r.status, "reward": r.reward,
                                        "phone_error_rate": r.phone_error_rate, "reason": r.reason}
                                       for path, r in zip(paths, c.candidates) if r is not None],
                        "not_scored": [{"candidate": str(paths[i]), "status": "failed", "reason": why}
                                       for i, why in c.not_scored.items()]})
    else:
        table = Table("text", "best", "reward", "reason")
        for (_, _, paths), c in zip(entries, choices, strict=True):
            table.add_row(escape(c.text), "—" if c.best is None else escape(str(paths[c.best])), f"{c.reward:.3f}",
                          escape(c.reason))
        console.print(table)
    failed = sum(len(unreadable) for _, unreadable in read)
    if failed:
        err_console.print(f"{failed} candidate file(s) could not be read: listed as not scored, the rest ranked",
                          soft_wrap=True)
        raise typer.Exit(1)


@app.command("heads")
def heads_cmd(
    folder: Optional[Path] = typer.Option(None, "--dir", help="a folder of exported heads, or a shipped set by "
                                          "name: wb (the default), w, espeak"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Cards of the shipped (or --dir) heads, held-out table included."""
    from dataclasses import asdict

    from leakloss.heads import HeadLoadError, heads_folder, load_head

    _check_paths([("--dir", folder)], utf8=False)
    folder = heads_folder(folder)  # a folder, or a shipped set by name (wb, w, espeak)
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        fail(f"no heads (*.safetensors) in {folder}")
    cards = []
    for f in files:
        try:
            cards.append(asdict(load_head(f)[1]))
        except HeadLoadError as err:
            fail(str(err))
    if as_json:
        for c in cards:
            _echo_json(c)
        return
    for c in cards:
        console.print(f"[bold]{escape(str(c['head']))}[/] " + escape(
            f"recognizer={c['recognizer']} schema={c['feature_schema_version']} thresholds={c['thresholds']} "
            f"arch={c['architecture']}"))
    from train_heads.evaluate import heldout_markdown

    rows, seen = [], set()  # each card's rows, once (the scorer's two cards share theirs); the first card's alone
    for c in cards:        # had dropped the reference-free head's table
        for row in c["heldout"]:
            key = json.dumps(row, sort_keys=True, ensure_ascii=False)
            if key not in seen:
                seen.add(key)
                rows.append(row)
    console.print(heldout_markdown(rows), markup=False)


def _check_overrides(config_name: str, overrides: list[str]) -> None:
    """:func:`leakloss.config.override_problem` as one ``error:`` line (exit 2)."""
    from leakloss.config import override_problem

    problem = override_problem(config_name, overrides)
    if problem is not None:
        fail(problem)


@app.command("train-heads", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def train_heads_cmd(ctx: typer.Context) -> None:
    """Retrain the heads (Hydra overrides pass through, e.g. `experiment=default trainer=gpu`)."""
    _check_overrides("train_heads", ctx.args)
    raise typer.Exit(run_module("train_heads", ctx.args))


@app.command()
def demo(
    out: Path = typer.Option(Path("leakloss_out"), "--out", help="where every artefact goes (cached by content)"),
    retrain: bool = typer.Option(False, "--retrain", help="train the heads here instead of using the shipped ones"),
    sentences: int = typer.Option(16, help="held-out sentences to read and score"),
    f5_steps: int = typer.Option(200, help="updates of each Hindi-base F5 fine-tune"),
) -> None:
    """The whole idea on the embedded default: heads, scored readings, comparison, penalty fine-tune."""
    from leakloss.demo import DemoConfig, run_demo

    try:
        cfg = DemoConfig(out=out, retrain=retrain, sentences=sentences, f5_steps=f5_steps)
    except ValueError as err:
        fail(f"--{str(err).replace('_', '-')}")
    _check_paths([("--out", out)], utf8=False)
    _check_output_folder(out, "--out")
    try:
        run_demo(cfg)
    except OSError as err:  # a full disk, a folder made read-only meanwhile, a file missing from the install
        fail(f"the demo stopped: {os_error_text(err)}")


@app.command("finetune-f5", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def finetune_f5_cmd(ctx: typer.Context) -> None:
    """Fine-tune F5 / IndicF5 on an F5-prepared folder with the leak penalty (Hydra overrides pass through, e.g.
    `f5=embedded data.dir=DATA leak.weight=0.1 steps=50`; several GPUs: `accelerate launch -m
    integrations.finetune_f5 ...`)."""
    _check_overrides("finetune_f5", ctx.args)
    raise typer.Exit(run_module("integrations.finetune_f5", ctx.args))


def run_module(module: str, args: list[str]) -> int:
    """``python -m module *args`` to its end, its exit status returned (128 + N when signal N ended it).

    It runs in a session of its own and every SIGINT, SIGTERM or SIGHUP this process gets is passed on to it
    once, then this process waits for it: a Ctrl-C at the terminal (which signals only the foreground group,
    ours) and a ``kill`` of this pid alike reach the training exactly once, so it stops the way it was written to
    (saved, resumable). ``subprocess.call`` had killed it 0.25 s after a SIGINT, mid-save, and left it training
    on after a SIGTERM. Its standard input is empty (a prompt gets end-of-file instead of waiting on a terminal it
    does not control; run ``python -m MODULE`` itself to debug it); Ctrl-Z stops this process only."""
    import signal
    import subprocess

    child = subprocess.Popen([sys.executable, "-m", module, *args], start_new_session=True, stdin=subprocess.DEVNULL)

    def forward(signum: int, _frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    passed = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, forward) for s in passed}
    try:
        code = child.wait()  # retried after each forwarded signal (PEP 475)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    app()
