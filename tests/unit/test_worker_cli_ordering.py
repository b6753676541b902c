"""``fairstream worker --ordering`` and ``FAIRSTREAM_WORKER_ORDERING``, parsed without starting
a worker: the default, the flag, the variable, and an unknown name refused."""

from __future__ import annotations

import click
import pytest

from fairstream.cli.worker import worker


def ordering(args: list[str]) -> str:
    with worker.make_context("worker", ["--handler", "m:f", *args]) as ctx:
        value = ctx.params["ordering"]
    assert isinstance(value, str)
    return value


def test_default_flag_and_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAIRSTREAM_WORKER_ORDERING", raising=False)
    assert ordering([]) == "start"
    assert ordering(["--ordering", "completion"]) == "completion"
    monkeypatch.setenv("FAIRSTREAM_WORKER_ORDERING", "completion")
    assert ordering([]) == "completion"
    assert ordering(["--ordering", "start"]) == "start"  # the flag wins over the variable


def test_unknown_ordering_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAIRSTREAM_WORKER_ORDERING", raising=False)
    with pytest.raises(click.BadParameter, match="per-tenant"):
        ordering(["--ordering", "per-tenant"])
    assert "FAIRSTREAM_WORKER_ORDERING" in worker.get_help(click.Context(worker))
