"""fairstream's optional compiled build: the modules every record passes through, compiled
with mypyc from the same typed source.

Without ``FAIRSTREAM_NATIVE=1`` nothing is compiled and this file adds nothing to
pyproject.toml's metadata: ``pip install fairstream`` is pure Python. With it, the modules
of ``NATIVE`` are compiled to C extensions, which Python loads in preference to the ``.py``
beside them; ``FAIRSTREAM_PURE=1`` at run time loads the ``.py`` instead
(``fairstream.native``). mypy (which ships mypyc) and a C compiler are needed:

    FAIRSTREAM_NATIVE=1 python setup.py build_ext --inplace    # a checkout (make native)
    pip install mypy && FAIRSTREAM_NATIVE=1 pip install --no-build-isolation .
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

from setuptools import setup


def native() -> ModuleType:
    """``fairstream/native.py``, loaded by its path: the one owner of the list of compiled
    modules and of the manifest (the package is not importable while it builds)."""
    path = Path(__file__).resolve().parent / "fairstream" / "native.py"
    spec = importlib.util.spec_from_file_location("fairstream_native", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ext_modules = []
if os.environ.get("FAIRSTREAM_NATIVE") == "1":
    from mypyc.build import mypycify

    build = native()
    # As mypyc names modules: paths relative to this directory.
    here = Path(__file__).resolve().parent
    sources = [str(path.relative_to(here)) for path in build.sources()]
    # What the build is made of: a module edited since then runs from source
    # (``fairstream.native.choose``).
    build.write_manifest()

    # pyproject.toml configures mypy for the whole tree; some of its sections name modules
    # outside these, which mypy would otherwise report as unused (an error to mypyc).
    ext_modules = mypycify(
        ["--no-warn-unused-configs", *sources], opt_level="3", group_name="fairstream.compiled"
    )

setup(ext_modules=ext_modules)
