"""What a module imports, read from its source: the purity tests of ``fairstream.core``,
``fairstream.wire`` and ``fairstream.analysis`` check these names."""

from __future__ import annotations

import ast
from pathlib import Path


def imported_names(path: Path, package: str, root: Path) -> list[str]:
    """Absolute module names imported by ``path``, a module of ``package`` (whose folder is
    ``root``); relative imports are resolved."""
    here = package + "".join(f".{part}" for part in path.parent.relative_to(root).parts)
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                names.append(f"{base}.{node.module}" if node.module else base)
            else:
                names.append(node.module or "")
    return names
