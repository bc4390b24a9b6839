"""leakloss.atomic: which output folders a run can write, checked before it starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leakloss.atomic import output_folder_problem


def test_a_writable_or_creatable_folder_has_no_problem(tmp_path):
    assert output_folder_problem(tmp_path) is None
    assert output_folder_problem(tmp_path / "new" / "deeper") is None  # created by the run


def test_a_file_or_a_folder_under_a_file_is_a_problem(tmp_path):
    (tmp_path / "f").write_text("x")
    assert output_folder_problem(tmp_path / "f") == f"{tmp_path / 'f'} is a file: give a folder"
    assert output_folder_problem(tmp_path / "f" / "a" / "b") == \
        f"{tmp_path / 'f' / 'a' / 'b'} cannot be created: {tmp_path / 'f'} is not a folder"


@pytest.mark.skipif(not Path("/proc/self").is_dir() or os.geteuid() != 0,
                    reason="needs Linux /proc and root (whom os.access lets write anywhere)")
def test_an_existing_folder_nothing_can_be_created_in_is_a_problem():
    # os.access says yes to root in /proc; only the parent of a missing folder was probed
    assert "/proc is a folder where nothing can be created" in output_folder_problem("/proc")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_a_read_only_folder_is_a_problem(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        assert "is a folder that is not writable" in output_folder_problem(ro)
        assert "folder" in output_folder_problem(ro / "new") and "not writable" in output_folder_problem(ro / "new")
    finally:
        ro.chmod(0o700)


@pytest.mark.parametrize("plant", ["file", "dangling", "loop", "relative"])
def test_a_symlink_at_the_name_is_replaced_never_written_through(tmp_path, plant):
    """res/a2.json -> victim.txt: a result overwrote a file outside the output folder (issue 43, defect 5)."""
    from leakloss.atomic import write_files_atomic, write_text_atomic

    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    victim = outside / "victim.txt"
    if plant in ("file", "relative"):
        victim.write_text("old")
    link = out / "link.json"
    link.symlink_to({"loop": link, "relative": Path("..") / "outside" / "victim.txt"}.get(plant, victim))
    write_text_atomic(link, "new")
    assert not link.is_symlink() and link.read_text() == "new"
    assert sorted(p.name for p in outside.iterdir()) == ([] if plant in ("dangling", "loop") else ["victim.txt"])
    if victim.exists():
        assert victim.read_text() == "old"
    (out / "second.json").symlink_to(victim)
    write_files_atomic({out / "second.json": b"2", out / "third.json": b"3"})
    assert not (out / "second.json").is_symlink() and sorted(p.name for p in out.iterdir()) == [
        "link.json", "second.json", "third.json"]


def test_a_symlink_to_a_folder_or_a_device_is_refused_and_kept(tmp_path):
    from leakloss.atomic import write_text_atomic

    (tmp_path / "folder").mkdir()
    (tmp_path / "to-folder").symlink_to(tmp_path / "folder")
    (tmp_path / "to-null").symlink_to("/dev/null")
    with pytest.raises(IsADirectoryError) as err:
        write_text_atomic(tmp_path / "to-folder", "x")
    assert err.value.filename == str(tmp_path / "to-folder")
    with pytest.raises(FileExistsError, match="not a regular file"):
        write_text_atomic(tmp_path / "to-null", "x")
    assert (tmp_path / "to-folder").is_symlink() and (tmp_path / "to-null").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "to-folder", "to-null"]


def test_a_pipe_or_a_folder_in_the_way_is_refused_not_replaced(tmp_path):
    from leakloss.atomic import write_text_atomic

    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(FileExistsError, match="not a regular file") as err:
        write_text_atomic(tmp_path / "pipe", "x")
    assert err.value.filename == str(tmp_path / "pipe")
    assert not (tmp_path / "pipe").is_file()  # still the pipe (was replaced by a regular file)
    (tmp_path / "r.json").mkdir()
    with pytest.raises(IsADirectoryError) as err:  # named the temporary file, not the folder
        write_text_atomic(tmp_path / "r.json", "x")
    assert err.value.filename == str(tmp_path / "r.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe", "r.json"]  # no temporary file left


def test_atomic_directory_refuses_to_replace_a_file_and_makes_a_normal_folder(tmp_path):
    from leakloss.atomic import atomic_directory

    (tmp_path / "out").write_text("keep me")
    with pytest.raises(NotADirectoryError):  # the file was deleted and replaced by a folder
        with atomic_directory(tmp_path / "out") as tmp:
            (tmp / "x").write_text("x")
    assert (tmp_path / "out").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    mask = os.umask(0)
    os.umask(mask)
    with atomic_directory(tmp_path / "made") as tmp:
        (tmp / "x").write_text("x")
    assert (tmp_path / "made").stat().st_mode & 0o777 == 0o777 & ~mask  # was 0700 (mkdtemp's)


def test_an_output_folder_holding_other_files_is_refused_not_emptied(tmp_path):
    """A recognizer saved into out_dir=. replaced the whole folder: every other file in it was deleted."""
    from leakloss.atomic import FolderNotOursError, atomic_directory, foreign_entries, replace_problem

    out = tmp_path / "out"
    out.mkdir()
    (out / "card.json").write_text("{}")
    (out / "notes.txt").write_text("mine")
    (out / "sub").mkdir()
    owned = ("card.json", "*.safetensors")
    assert foreign_entries(out, owned) == ["notes.txt", "sub"]
    assert "holds 'notes.txt', 'sub'" in replace_problem(out, owned)
    with pytest.raises(FolderNotOursError, match="notes.txt"):
        with atomic_directory(out, owned=owned) as tmp:
            pytest.fail(f"written into {tmp}")
    assert (out / "notes.txt").read_text() == "mine" and not list(tmp_path.glob(".out.*"))
    (out / "notes.txt").unlink()
    (out / "sub").rmdir()
    with atomic_directory(out, owned=owned) as tmp:  # an earlier output of the same kind is replaced
        (tmp / "m.safetensors").write_bytes(b"x")
    assert sorted(p.name for p in out.iterdir()) == ["m.safetensors"]
    assert replace_problem(tmp_path / "absent", owned) is None


def test_an_owned_folder_pattern_matches_folders_only(tmp_path):
    # evaluate's report/ holds its own comparison/ and reports/ folders: every rerun was refused after scoring
    from leakloss.atomic import foreign_entries

    out = tmp_path / "report"
    for folder in ("reports", "other"):
        (out / folder).mkdir(parents=True)
    (out / "comparison").write_text("a file where the output writes a folder")
    (out / "index.html").mkdir()  # a folder where the output writes a file
    (out / "linked").symlink_to(out / "other", target_is_directory=True)
    owned = ("index.html", "comparison/", "reports/", "linked/")
    assert foreign_entries(out, owned) == ["comparison", "index.html", "linked", "other"]


def test_atomic_directory_writes_through_a_symlink_and_keeps_it(tmp_path):
    """An export_dir linked to a data disk: the link was replaced by a real folder, the disk never written."""
    from leakloss.atomic import atomic_directory

    (tmp_path / "disk").mkdir()
    (tmp_path / "disk" / "old.json").write_text("old")
    (tmp_path / "link").symlink_to(tmp_path / "disk")
    with atomic_directory(tmp_path / "link", owned=("*.json",)) as tmp:
        (tmp / "new.json").write_text("new")
    assert (tmp_path / "link").is_symlink()
    assert sorted(p.name for p in (tmp_path / "disk").iterdir()) == ["new.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["disk", "link"]  # nothing left beside them


def test_atomic_directory_files_get_the_permissions_of_a_plain_open(tmp_path):
    """safetensors writes its files 0600: weights retrained into a shared install failed to load for others."""
    from safetensors.torch import save_file

    from leakloss.atomic import atomic_directory

    mask = os.umask(0o022)
    try:
        with atomic_directory(tmp_path / "out") as tmp:
            save_file({"a": torch.zeros(2)}, str(tmp / "model.safetensors"))
            (tmp / "sub").mkdir()
            (tmp / "sub" / "run.sh").write_text("#!/bin/sh\n")
            os.chmod(tmp / "sub" / "run.sh", 0o700)
    finally:
        os.umask(mask)
    assert (tmp_path / "out" / "model.safetensors").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "out" / "sub" / "run.sh").stat().st_mode & 0o777 == 0o744  # its own bits are kept


def test_write_files_atomic_writes_all_or_none(tmp_path):
    """A vocoder's weights and card: a failure on the card left new weights beside the old card."""
    from leakloss.atomic import write_files_atomic

    (tmp_path / "v.safetensors").write_bytes(b"old weights")
    (tmp_path / "v.json").mkdir()  # in the way of the card
    with pytest.raises(IsADirectoryError):
        write_files_atomic({tmp_path / "v.safetensors": b"new weights", tmp_path / "v.json": b"{}"})
    assert (tmp_path / "v.safetensors").read_bytes() == b"old weights"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.json", "v.safetensors"]  # no temporary file left
    (tmp_path / "v.json").rmdir()
    write_files_atomic({tmp_path / "v.safetensors": b"new weights", tmp_path / "v.json": b"{}"})
    assert (tmp_path / "v.safetensors").read_bytes() == b"new weights" and (tmp_path / "v.json").read_text() == "{}"


def test_a_name_near_the_limit_can_be_written_atomically(tmp_path):
    """A legal 245-byte --html name failed after the scoring: its temporary name '.NAME.xxxx.tmp' was too long."""
    from leakloss.atomic import NAME_MAX, atomic_directory, file_name_problem, write_text_atomic

    name = "b" * 240 + ".html"
    assert file_name_problem(tmp_path / name) is None
    write_text_atomic(tmp_path / name, "page")
    with atomic_directory(tmp_path / ("d" * NAME_MAX)) as tmp:
        (tmp / "x").write_text("x")
    assert sorted(len(p.name) for p in tmp_path.iterdir()) == [245, NAME_MAX]  # no temporary left


def test_file_name_problem_names_non_utf8_and_too_long_names():
    from leakloss.atomic import file_name_problem

    bad = os.fsdecode(b"clips/bad\xff.wav")
    assert file_name_problem(bad) == "'clips/bad\\udcff.wav': its name is not valid UTF-8; rename it"
    assert "a file name longer than 255 bytes (304)" in file_name_problem("x/" + "a" * 300 + ".wav")
    assert file_name_problem("नेपाली/" + "न" * 83 + ".wav") is None  # 253 bytes: the limit is in bytes, per part
    assert file_name_problem("नेपाली/" + "न" * 85 + ".wav") is not None  # 259 bytes in 89 characters


# --- property: whatever sits at an output's name, nothing is written outside the output folder ------------------

_NAMES = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"), min_size=1,
                 max_size=90).filter(lambda n: n not in (".", ".."))
_PLANTS = st.sampled_from(["none", "file", "link-to-outside-file", "link-dangling-outside", "loop",
                           "link-to-outside-folder", "link-to-device"])


def _snapshot(folder: Path) -> dict:
    return {p: (p.is_symlink(), None if p.is_symlink() or p.is_dir() else p.read_bytes())
            for p in sorted(folder.rglob("*"))}


def _plant(out: Path, outside: Path, name: str, plant: str) -> None:
    where = out / name
    try:
        if plant == "file":
            where.write_bytes(b"earlier output")
        elif plant != "none":
            where.symlink_to({"link-to-outside-file": outside / "victim.txt", "loop": where,
                              "link-dangling-outside": outside / "absent" / "x", "link-to-device": Path("/dev/null"),
                              "link-to-outside-folder": outside}[plant])
    except OSError:  # a name too long for the file system: nothing planted, the write must still fail cleanly
        pass


def _fresh(tmp_path: Path) -> tuple[Path, Path]:
    import tempfile

    root = Path(tempfile.mkdtemp(dir=tmp_path))
    out, outside = root / "out", root / "outside"
    out.mkdir()
    outside.mkdir()
    (outside / "victim.txt").write_bytes(b"precious")
    return out, outside


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(_NAMES, min_size=1, max_size=3, unique=True), plants=st.lists(_PLANTS, min_size=3, max_size=3))
def test_any_output_name_is_a_clean_write_or_a_clear_error_and_never_lands_outside(tmp_path, names, plants):
    """Issue 43, defect 5: symlinks to outside, dangling ones, loops, links to folders or devices, unicode and
    names past the file system's limit at the output names of the atomic helpers."""
    from leakloss.atomic import write_files_atomic, write_text_atomic

    out, outside = _fresh(tmp_path)
    for name, plant in zip(names, plants):
        _plant(out, outside, name, plant)
    before = _snapshot(outside)
    before_out = {p.name for p in out.iterdir()}
    writes = [lambda: write_text_atomic(out / names[0], "result"),
              lambda: write_files_atomic({out / n: n.encode("utf-8", "surrogatepass") for n in names})]
    for write in writes:
        try:
            written = write()
        except OSError as err:  # a clear error names the file
            assert err.filename or err.strerror or str(err)
        else:
            for p in written if isinstance(written, list) else [written]:
                assert p.parent == out and not p.is_symlink() and p.is_file()
        assert _snapshot(outside) == before
        assert {p.name for p in out.iterdir()} <= before_out | set(names)  # no temporary file left
        assert not any(p.name.endswith(".tmp") for p in out.iterdir())


@pytest.mark.filterwarnings("ignore:Glyph .* missing from font")  # control characters in a system name
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plants=st.lists(_PLANTS, min_size=3, max_size=3), system=_NAMES)
def test_compare_writes_into_its_folder_whatever_is_planted_there(tmp_path, plants, system):
    """``compare``'s writer (comparison.md/.json/.png) with anything planted at its names and any system name."""
    import json as _json

    from leakloss.eval.compare import compare_results, write_comparison

    out, outside = _fresh(tmp_path)
    res = out.parent / "res"
    res.mkdir()
    word = {"index": 0, "word": "नेकपा", "start": 0.0, "end": 0.1, "decision": "flagged", "key": True,
            "sites": [{"kind": "deletion", "nepali": "ʌ", "hindi": None, "score": 0.9, "decision": "flagged",
                       "references_used": 1}]}
    (res / "r.json").write_text(_json.dumps({"query": "q.wav", "text": "नेकपा", "status": "scored", "words": [word],
                                             "references": ["r.wav"], "sentence_id": "s1"}), encoding="utf-8")
    for name, plant in zip(("comparison.md", "comparison.json", "comparison.png"), plants):
        _plant(out, outside, name, plant)
    before = _snapshot(outside)
    try:
        result = compare_results({system: res})
    except ValueError as err:  # a blank name ("\r") is a clear error before anything is written
        assert "system names" in str(err)
        return
    try:
        paths = write_comparison(result, out)
    except OSError as err:
        assert err.filename or str(err)
        assert any(p in ("link-to-outside-folder", "link-to-device") for p in plants)
    else:
        assert all(p.parent == out and not p.is_symlink() and p.is_file() for p in paths.values())
        md = paths["md"].read_text(encoding="utf-8")
        assert "<" not in md and ">" not in md
    assert _snapshot(outside) == before
    assert not any(p.name.endswith(".tmp") for p in out.iterdir())
