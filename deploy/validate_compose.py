"""Validate docker-compose.yml without a Docker engine.

Two checks:

1. the compose-spec JSON schema. No registry we reach serves the current compose-spec schema on
   its own, so it comes from the PyPI package ``docker-compose==1.29.2`` (the last Python
   Compose, May 2021), which ships ``compose/config/compose_spec.json``: downloaded once with
   pip into the tools cache (``~/.cache/fairstream/tools/compose-spec-1.29.2``), never
   committed. That schema predates a few newer keys (top-level ``name``, ``include``,
   healthcheck ``start_interval``, ``develop``); the compose file does without them.
2. references the schema cannot see: every service has an image or a build (whose context
   holds its Dockerfile), every ``depends_on`` target is a service, a ``service_healthy``
   target has a healthcheck, a service outside any profile never depends on one inside a
   profile, named volumes are declared, bind-mounted files exist, and no ``$`` is left for
   Compose to interpolate from the caller's environment (the demo is self-contained).

Usage: python deploy/validate_compose.py [docker-compose.yml ...]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import yaml

COMPOSE_PACKAGE = "docker-compose==1.29.2"
SCHEMA_MEMBER = "compose/config/compose_spec.json"
ROOT = Path(__file__).resolve().parent.parent


def cache_dir() -> Path:
    base = os.environ.get("FAIRSTREAM_CACHE_DIR")
    root = Path(base) if base else Path.home() / ".cache" / "fairstream"
    return root / "tools" / f"compose-spec-{COMPOSE_PACKAGE.split('==')[1]}"


def compose_schema() -> dict[str, Any]:
    """The compose-spec schema, downloaded into the tools cache on first use."""
    target = cache_dir() / "compose_spec.json"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--no-deps",
                    "--only-binary=:all:",
                    "--dest",
                    tmp,
                    COMPOSE_PACKAGE,
                ],
                check=True,
            )
            (wheel,) = Path(tmp).glob("docker_compose-*.whl")
            with zipfile.ZipFile(wheel) as zf:
                data = zf.read(SCHEMA_MEMBER)
        partial = target.with_suffix(".tmp")
        partial.write_bytes(data)
        partial.replace(target)
    schema: dict[str, Any] = json.loads(target.read_text())
    return schema


def schema_errors(doc: Any, schema: dict[str, Any]) -> list[str]:
    import jsonschema

    # The file says draft/2019-09 with an http URL jsonschema does not recognise; it is 2019-09.
    cls = jsonschema.Draft201909Validator
    cls.check_schema(schema)
    validator = cls(schema)
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in errors]


def _strings(node: Any, path: str = "") -> list[tuple[str, str]]:
    if isinstance(node, str):
        return [(path, node)]
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in _strings(v, f"{path}/{k}")]
    if isinstance(node, list):
        return [s for i, v in enumerate(node) for s in _strings(v, f"{path}/{i}")]
    return []


def _depends_on(service: dict[str, Any]) -> dict[str, str]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def reference_errors(doc: dict[str, Any], base: Path) -> list[str]:
    """Problems the JSON schema cannot see; ``base`` is the compose file's directory."""
    errors: list[str] = []
    services: dict[str, Any] = doc.get("services") or {}
    volumes = set((doc.get("volumes") or {}).keys())
    for path, text in _strings(doc):
        if "$" in text.replace("$$", ""):
            errors.append(f"{path}: '$' would be interpolated by Compose; write '$$'")
    for name, service in services.items():
        where = f"services/{name}"
        if "image" not in service and "build" not in service:
            errors.append(f"{where}: neither image nor build")
        build = service.get("build")
        if build is not None:
            context = build if isinstance(build, str) else build.get("context", ".")
            dockerfile = (
                "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
            )
            if not (base / context / dockerfile).is_file():
                errors.append(f"{where}/build: {base / context / dockerfile} does not exist")
        profiles = service.get("profiles") or []
        for target, condition in _depends_on(service).items():
            other = services.get(target)
            if other is None:
                errors.append(f"{where}/depends_on: no service {target!r}")
                continue
            if condition == "service_healthy":
                check = other.get("healthcheck") or {}
                if check.get("disable") or not check.get("test"):
                    errors.append(f"{where}/depends_on: {target!r} has no healthcheck to wait for")
            if not profiles and other.get("profiles"):
                errors.append(f"{where}/depends_on: {target!r} only runs in a profile")
        for mount in service.get("volumes") or []:
            source = mount.split(":", 1)[0] if isinstance(mount, str) else mount.get("source", "")
            if source.startswith((".", "/")):
                if not (base / source).exists():
                    errors.append(f"{where}/volumes: bind source {source} does not exist")
            elif source and source not in volumes:
                errors.append(f"{where}/volumes: named volume {source!r} is not declared")
    return errors


def validate(path: Path, schema: dict[str, Any] | None) -> list[str]:
    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict):
        return [f"{path}: not a mapping"]
    errors = schema_errors(doc, schema) if schema is not None else []
    errors += reference_errors(doc, path.parent)
    return errors


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or [ROOT / "docker-compose.yml"]
    schema = compose_schema()
    failed = False
    for path in paths:
        errors = validate(path, schema)
        if errors:
            failed = True
            print(f"{path}: {len(errors)} problem(s)")
            for error in errors:
                print(f"  {error}")
        else:
            services = yaml.safe_load(path.read_text()).get("services", {})
            print(
                f"{path}: valid (compose-spec schema of {COMPOSE_PACKAGE}; "
                f"{len(services)} services, references checked)"
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
