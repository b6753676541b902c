"""``create_topics`` against a fake AdminClient: what it asks the broker to create, and what
it refuses before creating anything (the real broker's side is tests/integration/test_topics.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fairstream.adapters import admin
from fairstream.config import Topics

TOPICS = Topics("t.ingest", "t.egress", "t.dlq", "t.policy")
ROOM = str(admin.KAFKA_DEFAULT_MAX_MESSAGE_BYTES + admin.HEADER_HEADROOM)


class Done:
    def __init__(self, value: object = None) -> None:
        self.value = value

    def result(self, timeout: float | None = None) -> object:
        return self.value


class FakeAdmin:
    """Topics by partition count; every config read answers ``configs`` of the topic."""

    def __init__(self, existing: dict[str, int], configs: dict[str, dict[str, str]]) -> None:
        self.existing = dict(existing)
        self.configs = configs
        self.created: list[tuple[str, int, int, dict[str, str]]] = []
        self.validated = 0

    def list_topics(self, topic: str | None = None, timeout: float | None = None):
        topics = {
            name: SimpleNamespace(partitions=dict.fromkeys(range(count)), error=None)
            for name, count in self.existing.items()
        }
        return SimpleNamespace(topics=topics, brokers={})

    def describe_configs(self, resources):
        (resource,) = resources
        values = self.configs.get(resource.name, {})
        return {resource: Done({k: SimpleNamespace(value=v) for k, v in values.items()})}

    def create_topics(self, new_topics, operation_timeout=None, validate_only=False):
        if validate_only:
            self.validated += 1
        else:
            for t in new_topics:
                self.created.append((t.topic, t.num_partitions, t.replication_factor, t.config))
                self.existing[t.topic] = t.num_partitions
        return {t.topic: Done() for t in new_topics}


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch):
    def make(existing: dict[str, int] | None = None) -> FakeAdmin:
        fake = FakeAdmin(existing or {}, {"t.policy": {"cleanup.policy": "compact"}})
        monkeypatch.setattr(admin, "admin_client", lambda kafka: fake)
        return fake

    return make


def test_every_topic_is_created_with_fairstreams_configs_and_the_operators(broker):
    fake = broker()
    statuses = admin.create_topics(
        None,
        TOPICS,
        6,
        "app",
        3,
        feedback_topic="t.feedback",
        min_insync_replicas=2,
        configs={"egress": {"compression.type": "zstd"}},
    )
    isr = {"min.insync.replicas": "2"}
    assert fake.created == [
        ("t.ingest", 6, 3, {"retention.ms": "-1", "retention.bytes": "-1", **isr}),
        ("t.egress", 6, 3, {"max.message.bytes": ROOM, **isr, "compression.type": "zstd"}),
        ("t.dlq", 6, 3, {"max.message.bytes": ROOM, **isr}),
        ("t.policy", 1, 3, {"cleanup.policy": "compact", **isr}),
        ("t.feedback", 6, 3, isr),
        (
            "app-progress",
            6,
            3,
            {
                "cleanup.policy": "compact",
                "min.compaction.lag.ms": "60000",
                "max.message.bytes": str(admin.PROGRESS_TOPIC_BYTES),
                **isr,
            },
        ),
        # The holding topic takes neither the operator's min ISR nor configs: no kind of its own.
        (
            "app-holding",
            6,
            3,
            {
                "retention.ms": "-1",
                "retention.bytes": "-1",
                "max.message.bytes": str(admin.BROKER_DEFAULT_BYTES + admin.HOLDING_HEADROOM),
            },
        ),
        ("app-coordination", 1, 3, {"cleanup.policy": "compact", "segment.ms": "600000", **isr}),
    ]
    assert fake.validated == 1
    assert [(s.name, s.created) for s in statuses] == [(t[0], True) for t in fake.created]


def test_existing_topics_are_left_as_they_are(broker):
    fake = broker({"t.ingest": 6, "t.egress": 2, "app-coordination": 1})
    statuses = admin.create_topics(None, TOPICS, 6, "app")
    assert [t[0] for t in fake.created] == ["t.dlq", "t.policy", "app-progress", "app-holding"]
    assert (statuses[1].name, statuses[1].partitions, statuses[1].created) == ("t.egress", 2, False)
    assert statuses[-1].created is False


@pytest.mark.parametrize(
    ("existing", "message"),
    [
        ({"t.ingest": 4}, "exists with 4 partitions but --partitions is 6"),
        ({"app-progress": 4}, "app-progress of app 'app' has 4 partitions"),
        ({"app-holding": 4}, "app-holding of app 'app' has 4 partitions"),
    ],
)
def test_a_partition_count_that_breaks_co_partitioning_creates_nothing(broker, existing, message):
    fake = broker(existing)
    with pytest.raises(admin.TopicError, match=message):
        admin.create_topics(None, TOPICS, 6, "app")
    assert fake.created == []
    assert fake.validated == 0
