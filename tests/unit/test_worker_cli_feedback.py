"""``fairstream worker``'s feedback options: --feedback-topic, FAIRSTREAM_FEEDBACK_TOPIC,
--no-feedback, and an empty name, resolved without starting a worker."""

from __future__ import annotations

import click
import pytest

from fairstream.cli.worker import resolve_feedback_topic, worker
from fairstream.wire.feedback import DEFAULT_FEEDBACK_TOPIC


def resolved(args: list[str]) -> str | None:
    ctx = worker.make_context("worker", ["--handler", "m:f", *args])
    with ctx:
        return resolve_feedback_topic(ctx.params["feedback_topic"], ctx.params["no_feedback"])


@pytest.fixture(autouse=True)
def no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FAIRSTREAM_FEEDBACK_TOPIC", "FAIRSTREAM_WORKER_NO_FEEDBACK"):
        monkeypatch.delenv(name, raising=False)


def test_default_topic() -> None:
    assert resolved([]) == DEFAULT_FEEDBACK_TOPIC == "fairstream.feedback"


def test_flag_and_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolved(["--feedback-topic", "acme.feedback"]) == "acme.feedback"
    monkeypatch.setenv("FAIRSTREAM_FEEDBACK_TOPIC", "env.feedback")
    assert resolved([]) == "env.feedback"
    assert resolved(["--feedback-topic", "flag.feedback"]) == "flag.feedback"


def test_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolved(["--no-feedback"]) is None
    assert resolved(["--feedback-topic", ""]) is None
    monkeypatch.setenv("FAIRSTREAM_FEEDBACK_TOPIC", "")  # set but empty: off
    assert resolved([]) is None
    monkeypatch.setenv("FAIRSTREAM_FEEDBACK_TOPIC", "env.feedback")
    assert resolved(["--no-feedback"]) is None  # the flag wins over the variable
    monkeypatch.delenv("FAIRSTREAM_FEEDBACK_TOPIC")
    monkeypatch.setenv("FAIRSTREAM_WORKER_NO_FEEDBACK", "1")
    assert resolved([]) is None


def test_no_feedback_with_a_topic_on_the_command_line_is_a_contradiction() -> None:
    with pytest.raises(click.UsageError, match="contradict"):
        resolved(["--no-feedback", "--feedback-topic", "acme.feedback"])
