"""What ``fairstream scheduler`` runs with: the topics and every scheduler setting.

Each field is declared once with ``setting()`` (default, help, limits); the command's
options and their ``FAIRSTREAM_*`` variables are derived from these declarations. Field
order is the order ``--help`` lists the options in.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from fairstream.config.kafka import KafkaConnection
from fairstream.config.setting import SettingsError, check, setting
from fairstream.wire.feedback import DEFAULT_FEEDBACK_TOPIC

DEFAULT_INGEST = "fairstream.ingest"
DEFAULT_EGRESS = "fairstream.egress"
DEFAULT_DLQ = "fairstream.dlq"
DEFAULT_POLICY = "fairstream.policy"
DEFAULT_APP_ID = "fairstream"
DEFAULT_WEB_PORT = 6066
MiB = 1024 * 1024


def default_data_dir() -> Path:
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "fairstream"


@dataclass(frozen=True)
class Topics:
    """The four topics a fairstream deployment uses."""

    ingest: str = setting(
        DEFAULT_INGEST, flag="--ingest-topic", help="Topic producers write, keyed by tenant."
    )
    egress: str = setting(
        DEFAULT_EGRESS, flag="--egress-topic", help="Topic the paid-API workers read."
    )
    dlq: str = setting(
        DEFAULT_DLQ, flag="--dlq-topic", help="Dead-letter topic (reason in headers)."
    )
    policy: str = setting(
        DEFAULT_POLICY,
        flag="--policy-topic",
        help="Compacted topic of tenant policies (fairstream tenants writes it; every "
        "scheduler applies changes live).",
    )

    def __post_init__(self) -> None:
        check(self)


@dataclass(frozen=True)
class Settings:
    """Everything ``fairstream scheduler`` needs; built from flags and environment."""

    kafka: KafkaConnection = field(default_factory=KafkaConnection)
    topics: Topics = field(default_factory=Topics)
    app_id: str = setting(
        DEFAULT_APP_ID,
        help="Consumer group id; also names the internal progress topic "
        "<app-id>-progress and prefixes the transactional ids.",
    )
    rate: float | None = setting(
        None,
        low=0,
        low_open=True,
        help="Egress records per second for the whole group; the instances split it as "
        "--share-by says. [default: unlimited]",
    )
    burst: float | None = setting(
        None,
        low=1,
        help="Records that may go back to back above the rate, for the whole group. "
        "[default: rate/10, at least 1]",
    )
    cost_rate: float | None = setting(
        None,
        low=0,
        low_open=True,
        help="Egress cost units per second for the whole group. [default: unlimited]",
    )
    fairness: str = setting(
        "cost",
        choices=("cost", "dominant"),
        help="What tenants are made equal in when both --rate and --cost-rate are set: cost "
        "(each backlogged tenant gets its weight's share of cost units) or dominant "
        "(dominant-resource fairness: each tenant's larger fraction of --rate and of "
        "--cost-rate, so many cheap requests cannot take the record limit from few costly "
        "ones). Needs both limits.",
    )
    max_concurrency: int | None = setting(
        None,
        low=1,
        help="Requests in flight at once for the whole group: released to egress and not yet "
        "reported settled (ok or dead-lettered) on the feedback topic. Each instance holds "
        "its share by owned ingest partitions, rounded down. [default: unlimited]",
    )
    adaptive_concurrency: bool = setting(
        True,
        help="Without --max-concurrency, find the concurrency the workers and the API sustain "
        "from the feedback (each settled request's time from release to report, and its "
        "call's latency), and release no more: when they are slower than --rate and no 429 "
        "says so, the backlog waits in the scheduler, where fairness is applied, not in the "
        "egress topic or the API's queue. Applies once workers report outcomes with "
        "scheduled_at; dropped (unlimited) after --concurrency-lease, at least 60 s, without "
        "any.",
    )
    egress_group: str | None = setting(
        None,
        empty_is_none=True,
        help="The consumer group that reads egress, for workers that send no feedback (a "
        "plain consumer committing its offsets, a Faust app without the SDK): twenty times "
        "a second its committed offsets and egress's end offsets give its lag, and the "
        "scheduler releases no more while the lag is at its bound, what the group consumes "
        "in about 0.15 s (Little's law, adapting as its throughput changes, at least "
        "a few records), so the backlog waits in the scheduler, where fairness is applied. "
        "Unlimited while the group has committed nothing. [default: none]",
    )
    concurrency_lease: float = setting(
        60.0,
        low=0,
        low_open=True,
        help="Seconds a concurrency slot stays held without news of its request (a lost "
        "completion, a worker killed mid-call); failed attempts and 429s renew it. Set it "
        "above the API's slowest call plus the worker's retries.",
    )
    egress_spread: str = setting(
        "backlogged",
        choices=("key", "backlogged"),
        help="Which egress partition a record goes to. backlogged: a record of a tenant with "
        "other records waiting or not yet settled goes to the partition with the fewest "
        "records outstanding, then the fewest recent releases, so one busy tenant keeps every "
        "worker busy; quiet tenants keep their key's. Only under --rate or --cost-rate, whose "
        "start stamps carry the order (without them every record keeps its key's partition); "
        "a busy tenant's calls then start in order only at workers that pace by the stamp "
        "(the SDK's, the Faust agent: --playout-delay), and a worker's ordering=completion "
        "holds within that worker only. key: its tenant's partition (the key's hash), so a "
        "tenant's records keep one partition's FIFO order for any consumer, and one worker "
        "serves a busy tenant.",
    )
    # None (unlimited) only from Python: the option always has a limit.
    max_backlog: int | None = setting(
        100_000,
        low=1,
        help="Records buffered per tenant before new ones go to the "
        "dead-letter topic as backlog-full.",
    )
    quantum: int = setting(
        1,
        low=1,
        help="Base DRR quantum in cost units (a tenant's quantum is weight x quantum).",
    )
    tenant_group_separator: str | None = setting(
        None,
        empty_is_none=True,
        help="Tenant groups by key: a tenant id holding this text belongs to the tenant group "
        "(organisation) named by what comes before its first occurrence (with /, tenant "
        "acme/alice is in group acme). The egress is shared by weight among groups, then "
        "among a group's members, so splitting one's load over many tenant ids does not "
        "take more than the group's share. A group named in the tenant's policy wins over "
        "this one. [default: none, no groups by key]",
    )
    demote_share: float | None = setting(
        None,
        low=0,
        low_open=True,
        high=1,
        help="Automatic demotion: a tenant taking more than this fraction of the instance's "
        "egress records over the last --demote-window seconds is noisy and scheduled one "
        "priority class below its own, so quiet tenants' records go first; it is promoted "
        "back after --demote-quiet seconds at half this share or less. [default: off]",
    )
    demote_backlog: int | None = setting(
        None,
        low=1,
        help="Automatic demotion: a tenant holding more than this many records waiting is "
        "noisy (see --demote-share); quiet again at half of it or less. [default: off]",
    )
    demote_window: float = setting(
        10.0,
        low=0,
        low_open=True,
        help="Seconds of recent egress --demote-share is measured over (at least twice "
        "--commit-interval: egress is counted as its transactions commit).",
    )
    demote_quiet: float = setting(
        30.0,
        low=0,
        help="Seconds a demoted tenant must stay quiet (under half of --demote-share and of "
        "--demote-backlog) before it is promoted back to its own class.",
    )
    demote_min_egress: int = setting(
        0,
        low=0,
        help="Records the --demote-window must hold before --demote-share counts, so a "
        "tenant trickling into an idle egress is not noisy.",
    )
    max_in_flight: int = setting(
        10_000,
        low=1,
        help="Egress records in one transaction at most (a transaction commits every "
        "--commit-interval, or sooner when it reaches this many).",
    )
    commit_interval: float = setting(
        0.1,
        low=0.01,
        high=60,
        help="Seconds between transaction commits at most; while emission is paced (waits "
        "on the rate, a cap or a hold) a transaction with records commits after a fifth of it. "
        "Egress records become visible to read_committed consumers when their "
        "transaction commits.",
    )
    transaction_timeout: float = setting(
        10.0,
        low=1,
        high=900,
        help="Seconds after which the broker aborts a transaction its instance left open "
        "(a crash): until then a new owner of its partitions waits.",
    )
    buffer_memory: int = setting(  # bytes; the option counts MiB
        512 * MiB,
        low=1,
        unit=MiB,
        help="MiB of buffered payloads held in memory; beyond that records are indexed "
        "without their payload and read back from the ingest topic when their turn comes.",
    )
    index_ahead: float = setting(
        30.0,
        low=0,
        high=3600,
        help="Seconds of emission at the rate a tenant's backlog holds in memory (at least "
        "20,000 records): beyond that, while emission is paced, its next records are passed "
        "over as they are read and read again from the ingest topic when its turn nears, so "
        "a burst does not hold up the records behind it in its partition. 0: every record "
        "is indexed as it is read.",
    )
    park_ranges: int = setting(
        10_000,
        low=16,
        help="Settled ranges a partition may keep above its low-water mark: past this, the "
        "tenant whose record pins the mark (paused, capped or starved) is parked: its "
        "records move to the holding topic <app-id>-holding in the same transaction and "
        "wait there, so the mark moves on and the ingest topic is trimmed.",
    )
    park_span: int = setting(
        200_000,
        low=16,
        help="Offsets a partition may keep between its low-water mark and the last record "
        "read before the tenant pinning the mark is parked (see --park-ranges).",
    )
    min_rate: float | None = setting(
        None,
        low=0,
        low_open=True,
        help="The lowest the egress rate goes when the paid API pushes back (429s "
        "reported on the feedback topic). [default: 1% of --rate]",
    )
    feedback_topic: str | None = setting(
        DEFAULT_FEEDBACK_TOPIC,
        empty_is_none=True,
        help="Topic the workers report outcomes to: 429s adapt the rate between "
        "--min-rate and --rate, measured costs correct the tenants' shares. An empty "
        "value turns feedback off.",
    )
    share_by: str = setting(
        "demand",
        choices=("demand", "partitions"),
        help="How the instances of the group split --rate: by demand (each instance's "
        "backlogged tenants' weights, exchanged through <app-id>-coordination: weighted "
        "max-min fair over the whole group) or statically by owned ingest partitions.",
    )
    trim: bool = setting(
        True,
        help="Delete ingest records below the committed low-water mark (AdminClient "
        "delete_records) once the mark has stood 20 s without an abort and the group's "
        "committed offsets, read back from the coordinator, confirm it, so the ingest topic "
        "holds the backlog and about 20 s more. Turn off when other consumers read the "
        "ingest topic too.",
    )
    replication_factor: int = setting(
        -1,
        low=-1,
        help="Replication factor of the progress and coordination topics the scheduler "
        "creates if `fairstream topics create` did not; -1: the broker's "
        "default.replication.factor (use 3 on a production cluster).",
    )
    session_timeout: float = setting(
        10.0,
        low=6,
        help="Seconds without heartbeats after which the group gives a dead "
        "instance's partitions to the others.",
    )
    revoke_wait: float = setting(
        60.0,
        low=0.1,
        high=3600,
        help="Seconds a revocation waits for the emitter to commit the partitions leaving. "
        "Past that they go anyway, and the emitter aborts what it holds for them (it never "
        "commits them under a later generation).",
    )
    membership: str = setting(
        "static",
        choices=("static", "dynamic"),
        help="Consumer group membership. static: the instance joins under its identity "
        "(--group-instance-id, else the one kept in --data-dir), so a restart on the same "
        "disk within --session-timeout gets its partitions back at once, with no "
        "rebalance; a stopped instance's partitions wait --session-timeout before the "
        "others take them, as a crashed one's do. dynamic: each start is a new member, and "
        "a graceful stop hands its partitions over at once (for instances that come and go, "
        "without a disk of their own).",
    )
    group_instance_id: str | None = setting(
        None,
        empty_is_none=True,
        help="This instance's identity: its static group membership id (group.instance.id, "
        "with --membership static) and transactional id, stable across restarts (the Helm "
        "chart sets the pod name). [default: the identity kept in --data-dir]",
    )
    data_dir: Path = setting(  # noqa: RUF009 - setting() is a dataclasses.field
        factory=default_data_dir,
        path="directory",
        help="State directory: holds this instance's identity (its transactional id and static "
        "membership id) when --group-instance-id is not given, so a restart on the same disk "
        "rejoins the group and fences what its previous run left open at once. One process "
        "per directory: it is locked, and a second scheduler on it exits naming the first. "
        "The default is per user, in slots: a second scheduler on the host takes "
        f"<default>/instance-1, and so on. [default: {default_data_dir()}]",
    )
    web_port: int = setting(
        DEFAULT_WEB_PORT,
        low=0,
        high=65535,
        help="Port of the console (/), /healthz, /readyz, /metrics and /tenants.",
    )
    web_host: str = setting("0.0.0.0", help="Address the web endpoints bind to.")
    console: bool = setting(
        True,
        help="Serve the read-only web console at / on the web port (tenants, shares "
        "against entitlements, dwell, live charts; never payloads).",
    )
    fairness_window: float = setting(
        10.0,
        low=1,
        high=3600,
        help="Seconds per window of the fairness audit: each window sets "
        "fairstream_fairness_jain_index and fairstream_fairness_shortfall_ratio.",
    )
    log_level: str = setting(
        "info", choices=("debug", "info", "warning", "error"), help="Log level."
    )

    def __post_init__(self) -> None:
        check(self)
        if self.replication_factor == 0:
            raise SettingsError("--replication-factor must be -1 (the broker's) or >= 1, got 0")
        if self.min_rate is not None and (self.rate is None or self.min_rate > self.rate):
            raise SettingsError("--min-rate needs a --rate at least as large")
        if self.fairness == "dominant" and (self.rate is None or self.cost_rate is None):
            raise SettingsError(
                "--fairness dominant needs both --rate and --cost-rate: it shares between them"
            )
        self._check_demotion()
        if self.max_concurrency is not None and self.feedback_topic is None:
            raise SettingsError(
                "--max-concurrency needs the feedback topic: completions free the slots"
            )

    def _check_demotion(self) -> None:
        if not self.demotes:
            return
        if self.demote_window < 2 * self.commit_interval:
            raise SettingsError(
                f"--demote-window ({self.demote_window:g} s) must be at least twice "
                f"--commit-interval ({self.commit_interval:g} s): egress is counted per commit"
            )
        if self.demote_min_egress and self.demote_share is None:
            raise SettingsError("--demote-min-egress needs --demote-share: it gates the share")

    @property
    def demotes(self) -> bool:
        """Whether automatic demotion is on (``--demote-share`` or ``--demote-backlog``)."""
        return self.demote_share is not None or self.demote_backlog is not None

    @property
    def bootstrap(self) -> str:
        return self.kafka.bootstrap

    @property
    def effective_burst(self) -> float:
        if self.burst is not None:
            return self.burst
        if self.rate is None:
            return 1.0
        return max(1.0, self.rate / 10)
