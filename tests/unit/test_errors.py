"""Every exception fairstream raises on purpose derives from ``fairstream.Error``."""

from __future__ import annotations

import pytest

import fairstream
from fairstream.adapters.admin import KafkaAuthenticationError, TopicError
from fairstream.adapters.policy_store import PolicyStoreError
from fairstream.scheduler.emitter.transaction import Aborted
from fairstream.scheduler.progress import ProgressFormatError
from fairstream.scheduler.recovery import RecoveryError
from fairstream.scheduler.supervise import FatalError
from fairstream.sdk.producer import DeliveryError
from fairstream.sdk.worker.handler import RateLimited
from fairstream.sdk.worker.metrics import MetricsPortError
from fairstream.wire.feedback import FeedbackError
from fairstream.wire.policy import SchemaError


@pytest.mark.parametrize(
    "error",
    [
        Aborted,
        DeliveryError,
        FatalError,
        FeedbackError,
        KafkaAuthenticationError,
        MetricsPortError,
        PolicyStoreError,
        ProgressFormatError,
        RateLimited,
        RecoveryError,
        SchemaError,
        TopicError,
    ],
)
def test_every_error_derives_from_fairstream_error(error: type[Exception]) -> None:
    assert issubclass(error, fairstream.Error)


def test_errors_keep_their_standard_bases() -> None:
    assert issubclass(SchemaError, ValueError)
    assert issubclass(FeedbackError, ValueError)
    assert issubclass(ProgressFormatError, ValueError)
    assert issubclass(MetricsPortError, OSError)
    assert issubclass(KafkaAuthenticationError, TopicError)
