"""The compiled build of the per-record modules (``fairstream.native``): what runs is what the
run expects, ``FAIRSTREAM_PURE=1`` runs the source, and a stale build is never used."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fairstream import native

# Set by the Makefile: `make test` runs the compiled build, `make test-pure` the source.
EXPECT = os.environ.get("FAIRSTREAM_EXPECT")


def test_the_modules_run_as_the_run_expects() -> None:
    compiled = native.compiled()
    if EXPECT == "compiled":
        assert compiled == list(native.NATIVE), native.describe()
        assert set(native.recorded()) == set(native.NATIVE)  # setup.py compiled the same list
    elif EXPECT == "pure":
        assert compiled == [], native.describe()
    else:  # pytest run by hand: all of them or none (one stale module means none)
        assert compiled in ([], list(native.NATIVE)), native.describe()


def test_the_pure_switch_loads_every_module_from_source() -> None:
    code = "from fairstream import native; print(len(native.compiled()), native.describe())"
    env = {**os.environ, "FAIRSTREAM_PURE": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith("0 pure Python (FAIRSTREAM_PURE=1)")


def _tree(root: Path, monkeypatch: pytest.MonkeyPatch, *, compiled: bool) -> None:
    """A package of NATIVE's sources under ``root``, compiled (an empty file with the
    extension's name beside each) or not, with a manifest of their digests."""
    monkeypatch.setattr(native, "ROOT", root)
    monkeypatch.setattr(native, "MANIFEST", root / "compiled.sha256")
    for name, source in zip(native.NATIVE, native.sources(), strict=True):
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text(f"# {name}\n")
        if compiled:
            stem = source.with_suffix("")
            stem.with_name(stem.name + native.EXTENSION_SUFFIXES[0]).touch()
    native.write_manifest()  # as setup.py does


def test_a_build_is_stale_once_a_source_changes_or_a_module_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(tmp_path, monkeypatch, compiled=True)
    assert native.stale() == []
    edited, removed = native.NATIVE[1], native.NATIVE[-1]
    native.source(edited).write_text("# edited since the build\n")
    assert native.stale() == [edited]
    stem = native.source(removed).with_suffix("")
    stem.with_name(stem.name + native.EXTENSION_SUFFIXES[0]).unlink()
    assert native.stale() == [edited, removed]


def test_without_a_compiled_module_nothing_is_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pure install (pip without FAIRSTREAM_NATIVE) may carry a manifest: no warning.
    _tree(tmp_path, monkeypatch, compiled=False)
    native.source(native.NATIVE[0]).write_text("# edited\n")
    assert native.stale() == []
    native.MANIFEST.unlink()
    assert native.stale() == []


def test_a_stale_build_runs_the_source_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(tmp_path, monkeypatch, compiled=True)
    native.source(native.NATIVE[0]).write_text("# edited since the build\n")
    monkeypatch.delenv("FAIRSTREAM_PURE", raising=False)
    chosen: list[bool] = []
    monkeypatch.setattr(native, "prefer_source", lambda: chosen.append(True))
    with pytest.warns(RuntimeWarning, match="older than their source"):
        native.choose()
    assert chosen == [True]
