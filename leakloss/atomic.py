"""Atomic file writes: a temporary file in the destination folder, then ``os.replace``.

A reader never sees a half-written file, and a failed write leaves no file behind (an existing file is
kept as it was). Every artefact leakloss writes (audio, heads, recognizers, caches, manifests, reports) goes through here.
A symlink at a file's name is replaced, never written through: an output never lands outside its folder.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


#: Longest file-name part (bytes) the file systems leakloss writes to allow (Linux ext4/xfs/tmpfs: 255).
NAME_MAX = 255
#: Bytes of a name kept in a temporary name (``.NAME.<8 random>.tmp`` must fit in :data:`NAME_MAX`).
_TEMP_NAME_BYTES = NAME_MAX - 20


def is_utf8(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8: False for a lone surrogate, which a JSON ``"\ud800"`` or a file name
    that is not UTF-8 (Latin-1 bytes on a Linux disk, decoded with ``surrogateescape``) leaves in a str."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def file_name_problem(path: str | Path, utf8: bool = True) -> str | None:
    """Why ``path`` cannot be a file name leakloss reads or writes, or None: a part longer than :data:`NAME_MAX`
    bytes (``Path.exists()`` raised ENAMETOOLONG), a lone surrogate (``os.fsencode`` raised UnicodeEncodeError) or,
    with ``utf8``, a byte that is not UTF-8 (a Latin-1 name on a Linux disk is read fine, but a result naming it
    could not be written, after the scoring)."""
    text = str(path)
    if utf8 and not is_utf8(text):
        return f"{text!r}: its name is not valid UTF-8; rename it"  # repr: the message itself stays printable
    try:
        encoded = [os.fsencode(part) for part in Path(text).parts]
    except UnicodeEncodeError:  # a lone surrogate (a JSON "\ud800"): no file system name holds it
        return f"{text!r}: its name holds a lone surrogate (not valid Unicode); no file can be named so"
    long = next((part for part in encoded if len(part) > NAME_MAX), None)
    if long is not None:
        return f"{text[:40]}...: a file name longer than {NAME_MAX} bytes ({len(long)})"
    return None


def path_problem(path: str | Path, utf8: bool = True) -> str | None:
    """Why ``path`` cannot name a file or folder leakloss reads or writes, or None: :func:`file_name_problem`'s
    reasons, or a symbolic link that loops (``a -> b -> a``, or one on the way: ``Path.resolve()`` raised
    ``RuntimeError: Symlink loop`` past every check). The one path check of every entry point's paths and
    manifest entries, before any work."""
    if (problem := file_name_problem(path, utf8)) is not None:
        return problem
    try:
        os.stat(path)
    except OSError as err:
        if err.errno == errno.ELOOP:
            return f"{path}: a symbolic link that loops (it leads back to itself); give a real file or folder"
    except ValueError:  # a NUL byte in the name
        return f"{str(path)!r}: a file name with a NUL character"
    return None


def _temp_prefix(name: str) -> str:
    """``.NAME.`` cut to fit a temporary name in :data:`NAME_MAX` bytes (a legal 245-byte name failed after the
    work, its temporary name being too long)."""
    return f".{os.fsdecode(os.fsencode(name)[:_TEMP_NAME_BYTES])}."


def output_folder_problem(path: str | Path) -> str | None:
    """Why a run could not write into folder ``path`` (``None``: it is a writable folder, or it can be created
    because its nearest existing parent is one). Checked before a run starts, so a path under a regular file
    or in a read-only folder is one clear message, not an ``OSError`` after minutes of work."""
    if (problem := path_problem(path, utf8=False)) is not None:
        return problem
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            return f"{path} is a file: give a folder"
        if not os.access(path, os.W_OK | os.X_OK):
            return f"{path} is a folder that is not writable"
        if (why := write_probe_problem(path)) is not None:  # /proc: os.access says yes to root
            return f"{path} is a folder where nothing can be created: {why}"
        return None
    parent = next((p for p in path.parents if p.exists()), Path("."))
    if not parent.is_dir():
        return f"{path} cannot be created: {parent} is not a folder"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{path} cannot be created: folder {parent} is not writable"
    if (why := write_probe_problem(parent)) is not None:
        return f"{path} cannot be created in {parent}: {why}"
    return None


def write_probe_problem(folder: str | Path) -> str | None:
    """Why nothing can be created in ``folder`` (None: a probe file was created and removed there). ``os.access``
    says yes to root everywhere (``/proc``): only a real write tells, before minutes of work, not after."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".leakloss-probe.", dir=folder)
    except OSError as err:
        return err.strerror or type(err).__name__
    os.close(fd)
    os.unlink(probe)
    return None


def write_bytes_atomic(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` via a temporary file in the same folder and ``os.replace``.

    A reader never sees a half-written file and a failure leaves no file behind (an
    existing file is kept as it was).

    A symlink at ``path`` is replaced by the new file, never written through (a link planted in an output
    folder had a result overwrite a file outside it); a folder, device, pipe or socket in the way, or a link to
    one, is refused, never replaced by a regular file (``--json /dev/null`` replaced /dev/null).

    Raises:
        OSError: the folder does not exist, ``path`` is not a regular file (each named in the message), or the
            write fails.
    """
    return write_files_atomic({path: data})[0]


def in_the_way(path: str | Path) -> str | None:
    """What at ``path`` an output file must not replace: ``"folder"`` or ``"device, pipe or socket"`` (also
    behind a symlink: ``/dev/stdout`` is one); None for nothing, a regular file, or a symlink to one, to nothing
    or to itself (such a link is replaced by the output, its target never touched)."""
    try:
        mode = os.stat(path).st_mode  # follows a link: what it names decides
    except (OSError, ValueError):  # absent, a dangling or looping link, or a name the write itself will refuse
        return None
    if stat.S_ISDIR(mode):
        return "folder"
    return None if stat.S_ISREG(mode) else "device, pipe or socket"


def _file_target(path: str | Path) -> Path:
    """``path`` checked to be absent, a regular file or a replaceable symlink (:func:`in_the_way`) in an
    existing folder; never resolved: the file written is the name given, not a link's target."""
    p = Path(path)
    blocker = in_the_way(p)
    if blocker == "folder":
        raise IsADirectoryError(errno.EISDIR, "is a folder, not a file", str(p))
    if blocker is not None:
        raise FileExistsError(errno.EEXIST, "is not a regular file (a device, pipe or socket)", str(p))
    folder = p.parent if str(p.parent) else Path(".")
    if not folder.is_dir():
        raise FileNotFoundError(f"cannot write '{p}': folder '{folder}' does not exist")
    return p


def write_files_atomic(files: dict[str | Path, bytes]) -> list[Path]:
    """Write several files as one unit (as :func:`write_bytes_atomic` each): every target is checked and every
    temporary file written before the first ``os.replace``, so a failure (a folder in the way of the second
    file, a full disk) leaves all of them as they were, never new weights beside an old card."""
    targets = [_file_target(p) for p in files]
    mask = os.umask(0)
    os.umask(mask)
    temps: list[str] = []
    try:
        for p, data in zip(targets, files.values()):
            fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(p.name), suffix=".tmp", dir=p.parent)
            temps.append(tmp)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.chmod(tmp, 0o666 & ~mask)  # mkstemp makes the file private; give it what a plain open() would
        for tmp, p in zip(temps, targets):
            os.replace(tmp, p)
    except BaseException:
        for tmp in temps:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        raise
    return targets


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` as UTF-8 with :func:`write_bytes_atomic`."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def foreign_entries(path: str | Path, owned: Sequence[str]) -> list[str]:
    """The names in folder ``path`` that match none of the ``owned`` patterns (``fnmatch``, e.g. ``*.json``; a
    pattern ending in ``/`` matches a folder, the others files only): what replacing the folder with a new output
    would delete although the output never wrote it."""
    p = Path(path)
    if not p.is_dir():
        return []

    def ours(entry: Path) -> bool:
        folder = entry.is_dir() and not entry.is_symlink()
        return any(pattern.endswith("/") == folder and fnmatch.fnmatchcase(entry.name, pattern.rstrip("/"))
                   for pattern in owned)

    return sorted(e.name for e in p.iterdir() if not ours(e))


def replace_problem(path: str | Path, owned: Sequence[str]) -> str | None:
    """Why an output folder ``path`` must not be replaced (None: absent, empty, or holding only ``owned``
    files, e.g. an earlier run's output): a mistaken ``out_dir=.`` would delete the folder's other files; a file
    there is not replaced either (:func:`atomic_directory` refuses it, after the work)."""
    if Path(path).exists() and not Path(path).is_dir():
        return f"{path} is a file, not a folder: it is not replaced"
    foreign = foreign_entries(path, owned)
    if not foreign:
        return None
    shown = ", ".join(repr(n) for n in foreign[:5]) + (" ..." if len(foreign) > 5 else "")
    return (f"{path} holds {shown}, which this output does not write; it replaces the whole folder: give an "
            "empty or new folder, or an earlier output")


def outermost_missing(path: str | Path) -> Path | None:
    """The outermost folder on the way to ``path`` (``path`` or a parent) that does not exist yet, or None:
    what creating ``path`` makes, and so what to remove when the output then fails."""
    p = Path(path).absolute()
    if p.exists():
        return None
    while not p.parent.exists():
        p = p.parent
    return p


@contextmanager
def created_folder(path: str | Path) -> Iterator[Path]:
    """Create folder ``path`` (and its parents) for a block that writes into it; when the block fails, remove
    what this call created, so a failed output leaves no empty folder behind (a folder there before is kept)."""
    created = outermost_missing(path)
    try:
        Path(path).mkdir(parents=True, exist_ok=True)  # inside: parents made before a failing last part go too
        yield Path(path)
    except BaseException:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise


class FolderNotOursError(FileExistsError):
    """An output folder holds files the output does not own (:func:`replace_problem`): it is not replaced."""


def _open_permissions(folder: Path, mask: int) -> None:
    """Give every file under ``folder`` at least the read/write bits a plain ``open()`` would under ``mask``."""
    for root, _, files in os.walk(folder):
        for name in files:
            f = Path(root) / name
            if not f.is_symlink():
                os.chmod(f, (f.stat().st_mode & 0o777) | (0o666 & ~mask))


@contextmanager
def atomic_directory(path: str | Path, owned: Sequence[str] | None = None) -> Iterator[Path]:
    """``with atomic_directory(out) as tmp: <write files into tmp>``: ``out`` appears whole or not at all.

    The files are written into a fresh temporary folder beside ``out``; on success it takes ``out``'s
    place (an existing ``out`` folder is replaced), on any error it is removed and ``out`` is left as it was.

    ``owned``: the output's file-name patterns; an existing ``out`` holding anything else is refused.

    A symlink ``out`` is written through (the folder it points to is replaced, the link stays: replacing the link
    put the output on the wrong disk), and the files written get the permissions a plain ``open()`` would
    (safetensors writes weights private: a retrained shipped model failed to load for other users).

    Raises:
        NotADirectoryError: ``out`` exists and is not a folder (a file there was deleted and replaced), before
            anything is written.
        FolderNotOursError: ``owned`` is given and ``out`` holds other files, before anything is written.
    """
    p = Path(path)
    if p.is_symlink():
        p = Path(os.path.realpath(p))
    if p.exists() and not p.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "is a file, not a folder: it is not replaced", str(p))
    if owned is not None and (problem := replace_problem(p, owned)) is not None:
        raise FolderNotOursError(errno.EEXIST, problem)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=_temp_prefix(p.name), suffix=".tmp", dir=p.parent))
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o777 & ~mask)  # mkdtemp makes it private; give it what a plain mkdir would
        yield tmp
        _open_permissions(tmp, mask)
        old = None
        if p.exists():  # a folder cannot be replaced by rename while it has files: move it aside first
            old = Path(tempfile.mkdtemp(prefix=_temp_prefix(p.name), suffix=".old", dir=p.parent))
            os.replace(p, old / p.name)
        os.replace(tmp, p)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
