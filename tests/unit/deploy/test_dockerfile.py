"""The Dockerfile's invariants, checked without a Docker engine (CI also runs hadolint on it).

Multi-stage (a builder whose virtualenv the runtime copies), a fixed non-root numeric user that
the Helm chart's securityContext matches, a HEALTHCHECK on /healthz without curl, the
``fairstream`` entrypoint running the scheduler by default, the web port and the data volume
that fairstream's own defaults and the chart expect.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from fairstream.config import DEFAULT_WEB_PORT

ROOT = Path(__file__).resolve().parents[3]
DATA_DIR = "/var/lib/fairstream"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined and comments dropped."""
    result: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        result.append((word.upper(), rest.strip()))
    return result


@pytest.fixture(scope="module")
def dockerfile() -> list[tuple[str, str]]:
    return instructions((ROOT / "Dockerfile").read_text())


def stages(dockerfile: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for instruction in dockerfile:
        if instruction[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(instruction)
    return result


def args_defaults(dockerfile: list[tuple[str, str]]) -> dict[str, str]:
    defaults = {}
    for word, rest in dockerfile:
        if word == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            defaults[name] = value
    return defaults


def expand(text: str, defaults: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: defaults[m.group(1) or m.group(2)], text)


def final(dockerfile: list[tuple[str, str]], word: str) -> str:
    found = [rest for w, rest in stages(dockerfile)[-1] if w == word]
    assert found, f"the runtime stage has no {word}"
    return found[-1]


def test_multi_stage_copies_the_builders_virtualenv(dockerfile):
    all_stages = stages(dockerfile)
    assert len(all_stages) >= 2
    builder_from = all_stages[0][0][1]
    assert re.search(r"\bAS builder$", builder_from, re.IGNORECASE)
    runtime_copies = [rest for w, rest in all_stages[-1] if w == "COPY"]
    assert any(c.startswith("--from=builder ") for c in runtime_copies)
    # Same base in both stages: the copied virtualenv's interpreter path must exist.
    bases = {stage[0][1].split()[0] for stage in all_stages}
    assert len(bases) == 1
    base = expand(next(iter(bases)), args_defaults(dockerfile))
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", base), base


def test_runs_as_a_fixed_non_root_uid_that_the_chart_matches(dockerfile):
    user = expand(final(dockerfile, "USER"), args_defaults(dockerfile))
    uid, _, gid = user.partition(":")
    assert uid.isdigit(), "a numeric uid lets Kubernetes' runAsNonRoot verify it"
    assert int(uid) != 0
    assert gid != "0"
    values = yaml.safe_load((ROOT / "helm" / "fairstream" / "values.yaml").read_text())
    assert values["podSecurityContext"]["runAsUser"] == int(uid)
    assert values["podSecurityContext"]["fsGroup"] == int(gid or uid)


def test_healthcheck_hits_healthz_without_curl(dockerfile):
    check = final(dockerfile, "HEALTHCHECK")
    assert "CMD" in check
    assert "/healthz" in check
    assert "urllib" in check
    assert "curl" not in check
    assert "wget" not in check


def test_entrypoint_is_fairstream_and_the_default_command_the_scheduler(dockerfile):
    assert json.loads(final(dockerfile, "ENTRYPOINT")) == ["fairstream"]
    assert json.loads(final(dockerfile, "CMD")) == ["scheduler"]
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^fairstream = "fairstream\.cli:main"$', pyproject, re.MULTILINE)


def test_web_port_and_data_volume(dockerfile):
    assert final(dockerfile, "EXPOSE").split() == [str(DEFAULT_WEB_PORT)]
    assert json.loads(final(dockerfile, "VOLUME")) == [DATA_DIR]
    env = " ".join(rest for w, rest in stages(dockerfile)[-1] if w == "ENV")
    assert f"FAIRSTREAM_DATA_DIR={DATA_DIR}" in env.split()
    assert f"FAIRSTREAM_WEB_PORT={DEFAULT_WEB_PORT}" in env.split()


def test_dockerignore_lets_in_exactly_what_the_builder_copies(dockerfile):
    lines = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", "exclude everything by default"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    copied = set()
    for word, rest in stages(dockerfile)[0]:
        if word == "COPY" and not rest.startswith("--from"):
            copied.update(p.rstrip("/") for p in rest.split()[:-1])
    assert copied == allowed
    for path in copied:
        assert (ROOT / path).exists(), path
