"""``recovery.watermarks``: a partition's offsets asked again while the broker answers with a
retriable error (a topic just created has no leader yet), until the deadline."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from fairstream.scheduler.recovery import RecoveryError, watermarks


class Consumer:
    """Answers with each of ``answers`` in turn: an error code to raise, or offsets."""

    def __init__(self, *answers: int | tuple[int, int]) -> None:
        self.answers = list(answers)
        self.asked = 0

    def get_watermark_offsets(self, tp: TopicPartition, **_: Any) -> tuple[int, int]:
        self.asked += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, int):
            raise KafkaException(KafkaError(answer))
        return answer


TP = TopicPartition("ingest", 2)


def test_no_leader_yet_is_asked_again_until_it_answers() -> None:
    consumer = Consumer(
        KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, (3, 9)
    )
    assert watermarks(consumer, TP, time.monotonic() + 30) == (3, 9)  # type: ignore[arg-type]
    assert consumer.asked == 3


def test_a_leader_moving_to_another_node_is_asked_again() -> None:
    # librdkafka's local answer while its metadata has not caught up with the move.
    consumer = Consumer(KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_PARTITION, (0, 4))
    assert watermarks(consumer, TP, time.monotonic() + 30) == (0, 4)  # type: ignore[arg-type]
    assert consumer.asked == 3


def test_a_partition_that_never_gets_a_leader_fails_at_the_deadline() -> None:
    consumer = Consumer(KafkaError.NOT_LEADER_FOR_PARTITION)
    with pytest.raises(RecoveryError, match=r"offsets of ingest \[2\]"):
        watermarks(consumer, TP, time.monotonic())  # type: ignore[arg-type]
    assert consumer.asked == 1


def test_an_error_that_will_not_pass_fails_at_once() -> None:
    consumer = Consumer(KafkaError.TOPIC_AUTHORIZATION_FAILED, (0, 1))
    with pytest.raises(RecoveryError, match="offsets of ingest"):
        watermarks(consumer, TP, time.monotonic() + 30)  # type: ignore[arg-type]
    assert consumer.asked == 1
