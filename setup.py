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

import ast
import hashlib
import os
from pathlib import Path

from setuptools import setup


def native_sources() -> list[str]:
    """The source files of ``fairstream.native.NATIVE``: the modules every record passes
    through (read from that module's text: the package is not importable while it builds)."""
    tree = ast.parse(Path("fairstream/native.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "NATIVE":
            names = ast.literal_eval(node.value)
            return [name.replace(".", "/") + ".py" for name in names]
    raise SystemExit("fairstream/native.py defines no NATIVE")


ext_modules = []
if os.environ.get("FAIRSTREAM_NATIVE") == "1":
    from mypyc.build import mypycify

    NATIVE = native_sources()
    # What the build is made of: a module edited since then runs from source
    # (``fairstream.native.choose``).
    manifest = [
        f"{path[:-3].replace('/', '.')} {hashlib.sha256(Path(path).read_bytes()).hexdigest()}"
        for path in NATIVE
    ]
    Path("fairstream/compiled.sha256").write_text("\n".join(manifest) + "\n")

    # pyproject.toml configures mypy for the whole tree; some of its sections name modules
    # outside these, which mypy would otherwise report as unused (an error to mypyc).
    ext_modules = mypycify(
        ["--no-warn-unused-configs", *NATIVE], opt_level="3", group_name="fairstream.compiled"
    )

setup(ext_modules=ext_modules)
