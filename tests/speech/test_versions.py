"""leakloss.speech.versions: the synthesizers' versions in the cache keys, read once per process, never an error."""

from __future__ import annotations

import subprocess

from leakloss.speech import versions


def test_a_version_that_cannot_be_read_is_unknown_never_an_error(monkeypatch):
    assert versions.command_output(("leakloss-no-such-synthesizer", "--version")) == versions.UNKNOWN
    assert versions.package_version("leakloss-no-such-distribution") == versions.UNKNOWN
    assert versions.debian_package_version("leakloss-no-such-package") == versions.UNKNOWN

    def hangs(*args, **kwargs):
        raise subprocess.TimeoutExpired(args[0], 1)

    monkeypatch.setattr(subprocess, "run", hangs)
    assert versions.command_output(("festival", "--version")) == versions.UNKNOWN


def test_a_version_is_read_once_per_process(monkeypatch):
    calls = []

    def run(args, **kwargs):
        calls.append(args)
        return subprocess.CompletedProcess(args, 1, stdout="  version: flite-9.9\n", stderr="")

    versions.flite_version.cache_clear()
    monkeypatch.setattr(subprocess, "run", run)
    try:
        assert versions.flite_version() == versions.flite_version() == "version: flite-9.9"  # its exit status ignored
        assert calls == [["flite", "--version"]]
    finally:
        versions.flite_version.cache_clear()  # the real one for later tests


def test_espeak_version_names_the_library_and_its_wheel():
    version = versions.espeak_version()
    assert version.startswith("espeak-ng ") and "; espeakng-loader " in version
    assert versions.UNKNOWN not in version  # the wheel is a dependency: both are readable here
    assert versions.espeak_version() == version


def test_the_espeak_key_says_seeded_only_where_the_library_seeds(monkeypatch):
    # a library without espeak_ng_SetRandSeed reads unseeded: its readings must not be cached as seeded ones
    monkeypatch.setattr(versions, "_espeak_seeds", lambda: False)
    versions.espeak_version.cache_clear()
    try:
        assert not versions.espeak_version().endswith("; seeded")
        monkeypatch.setattr(versions, "_espeak_seeds", lambda: True)
        versions.espeak_version.cache_clear()
        assert versions.espeak_version().endswith("; seeded")
    finally:
        versions.espeak_version.cache_clear()
