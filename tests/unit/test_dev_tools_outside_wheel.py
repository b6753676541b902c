"""The runtime wheel holds fairstream and nothing else: developer tools live in dev/.

The development broker and the test and benchmark harness are the ``fairstream-dev``
distribution (dev/pyproject.toml); ``pip install fairstream`` and the image get neither.
"""

from __future__ import annotations

import ast
import importlib.util
import tomllib
from pathlib import Path

from setuptools import find_packages

ROOT = Path(__file__).resolve().parents[2]
# What the runtime package must never import: developer tools and test-only packages.
DEV_ONLY = ("fairstream_dev", "tests", "testcontainers", "docker")


def runtime_packages() -> list[str]:
    """The packages the root pyproject.toml puts in the wheel, found as setuptools finds them."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    find = config["tool"]["setuptools"]["packages"]["find"]
    return find_packages(where=str(ROOT), include=find["include"], exclude=find.get("exclude", ()))


def test_the_wheel_holds_exactly_the_fairstream_package() -> None:
    packages = runtime_packages()
    assert "fairstream" in packages
    strays = [p for p in packages if p != "fairstream" and not p.startswith("fairstream.")]
    assert strays == [], f"outside the fairstream package, yet in the wheel: {strays}"
    dev = [p for p in packages if "devkafka" in p or "harness" in p]
    assert dev == [], f"developer tools in the wheel: {dev}"


def test_the_developer_tools_are_a_distribution_of_their_own() -> None:
    config = tomllib.loads((ROOT / "dev" / "pyproject.toml").read_text())
    assert config["project"]["name"] == "fairstream-dev"
    assert config["project"]["scripts"]["fairstream-dev"] == "fairstream_dev.cli:main"
    packages = find_packages(where=str(ROOT / "dev"), include=["fairstream_dev*"])
    assert {"fairstream_dev", "fairstream_dev.kafka", "fairstream_dev.harness"} <= set(packages)
    assert "fairstream_dev" not in runtime_packages()


def test_no_development_broker_inside_fairstream() -> None:
    assert importlib.util.find_spec("fairstream.devkafka") is None
    assert not (ROOT / "fairstream" / "devkafka").exists()


def test_the_runtime_imports_no_developer_tool() -> None:
    offenders = []
    for path in sorted((ROOT / "fairstream").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                if name.split(".")[0] in DEV_ONLY:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
    assert offenders == []


def test_the_image_builds_from_the_runtime_package_only() -> None:
    copies = [
        line.split()[1:]
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if line.startswith("COPY") and "--from=" not in line
    ]
    sources = {source for args in copies for source in args[:-1]}
    assert sources == {"pyproject.toml", "README.md", "fairstream"}, sources
