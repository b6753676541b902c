"""Which of fairstream's modules run compiled, and the switch back to their source.

A build with ``FAIRSTREAM_NATIVE=1`` (``make install`` does it; see setup.py) compiles the
modules every record passes through with mypyc, from the same typed source, and records a
digest of each source (``MANIFEST``). Python loads a compiled module in preference to the
``.py`` beside it. The package's ``__init__`` calls ``choose`` before any of them is
imported, and every ``.py`` is loaded instead (``prefer_source``):

- with ``FAIRSTREAM_PURE=1`` in the environment: the fallback CI runs the unit suite on, and
  a way to rule the compiled build out when something looks wrong;
- when a source changed since the build (a checkout edited, not rebuilt), with a warning:
  compiled modules call each other directly, so one stale module means none is used.

The one owner of the list and the manifest: setup.py loads this file by its path (the package
is not importable while it builds) for ``sources`` and ``write_manifest``, and the Makefile
runs it (``python fairstream/native.py`` prints the sources) for what the build depends on.
Standard library only, for both.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

EXTENSION_SUFFIXES = tuple(importlib.machinery.EXTENSION_SUFFIXES)

# The modules setup.py compiles (its NATIVE list, as module names).
NATIVE = (
    "fairstream.core.admission",
    "fairstream.core.deficit",
    "fairstream.core.emission",
    "fairstream.core.hierarchy",
    "fairstream.core.ratelimit",
    "fairstream.core.rings",
    "fairstream.scheduler.emitter.backlog",
    "fairstream.scheduler.emitter.checkpoint",
    "fairstream.scheduler.emitter.egress",
    "fairstream.scheduler.emitter.holding",
    "fairstream.scheduler.emitter.send",
    "fairstream.scheduler.ingest.member",
    "fairstream.scheduler.parsing",
    "fairstream.scheduler.progress",
    "fairstream.scheduler.records",
    "fairstream.scheduler.tallies",
    "fairstream.wire.verdicts",
)


ROOT = Path(__file__).parent  # the package's directory
MANIFEST = ROOT / "compiled.sha256"  # "module digest" lines, written by setup.py


def pure_requested() -> bool:
    """Whether ``FAIRSTREAM_PURE=1`` asks for the source of every module."""
    return os.environ.get("FAIRSTREAM_PURE") == "1"


def is_compiled(module: ModuleType) -> bool:
    """Whether ``module`` was loaded from a C extension (compiled), not from source."""
    file = getattr(module, "__file__", None) or ""
    return file.endswith(EXTENSION_SUFFIXES)


def compiled() -> list[str]:
    """The modules of ``NATIVE`` that run compiled (each imported to find out)."""
    return [name for name in NATIVE if is_compiled(importlib.import_module(name))]


def describe() -> str:
    """One line for the start-up log: how many of the per-record modules run compiled."""
    done = compiled()
    if pure_requested():
        return f"pure Python (FAIRSTREAM_PURE=1): {len(done)} of {len(NATIVE)} modules compiled"
    if not done and any(built(name) for name in NATIVE):
        return "pure Python: the compiled modules are older than their source (make native)"
    if not done:
        return "pure Python: no compiled build (make install, or FAIRSTREAM_NATIVE=1 at install)"
    return f"{len(done)} of {len(NATIVE)} per-record modules compiled (mypyc)"


def source(name: str) -> Path:
    """The ``.py`` of fairstream module ``name``."""
    *package, leaf = name.split(".")[1:]
    return ROOT.joinpath(*package, f"{leaf}.py")


def built(name: str) -> bool:
    """Whether a compiled ``name`` sits beside its source (found without importing it)."""
    stem = source(name).with_suffix("")
    return any(stem.with_name(stem.name + suffix).is_file() for suffix in EXTENSION_SUFFIXES)


def sources() -> list[Path]:
    """The ``.py`` of each module of ``NATIVE``: what the build compiles."""
    return [source(name) for name in NATIVE]


def write_manifest() -> None:
    """Record the digest of each source of ``NATIVE`` (``MANIFEST``): what the build is made
    of. Caller: setup.py, as it compiles them."""
    MANIFEST.write_text("".join(f"{name} {digest(name)}\n" for name in NATIVE))


def digest(name: str) -> str:
    """The sha256 of ``name``'s source, as the manifest records it."""
    return hashlib.sha256(source(name).read_bytes()).hexdigest()


def recorded() -> dict[str, str]:
    """The manifest's digests by module (empty without one)."""
    try:
        lines = MANIFEST.read_text().splitlines()
    except FileNotFoundError:
        return {}
    return dict(line.split(" ", 1) for line in lines if " " in line)


def stale() -> list[str]:
    """The modules of ``NATIVE`` whose compiled form is missing or older than their source,
    where some are compiled (none compiled: nothing is stale, the build is pure)."""
    if not any(built(name) for name in NATIVE):
        return []
    digests = recorded()
    return [n for n in NATIVE if not built(n) or digests.get(n) != digest(n)]


def choose() -> None:
    """Before any of ``NATIVE`` is imported: their source, if asked for or if the compiled
    build is stale (with a warning that says why); else whatever Python finds first."""
    if pure_requested():
        prefer_source()
        return
    old = stale()
    if old:
        prefer_source()
        warnings.warn(
            f"fairstream's compiled modules are older than their source ({', '.join(old)}): "
            "running the source instead; `make native` rebuilds them",
            RuntimeWarning,
            stacklevel=2,
        )


class SourceFirst(importlib.abc.MetaPathFinder):
    """Finds fairstream's modules as ``.py`` files where a compiled one sits beside them."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("fairstream.") or not path:
            return None  # not ours, or a top-level module: the usual finders
        leaf = fullname.rpartition(".")[2]
        for entry in path:
            source = Path(entry) / f"{leaf}.py"
            if source.is_file():
                return importlib.util.spec_from_file_location(fullname, source)
        return None  # a package, or nothing: the usual finders


def prefer_source() -> None:
    """Load fairstream's modules from their source from now on (idempotent)."""
    if not any(isinstance(finder, SourceFirst) for finder in sys.meta_path):
        sys.meta_path.insert(0, SourceFirst())


if __name__ == "__main__":  # the Makefile: the sources a compiled build depends on
    print("\n".join(str(path.relative_to(ROOT.parent)) for path in sources()))
