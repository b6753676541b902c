"""What identifies a development broker: its constants, its state record, its directories.

``state.json`` in the state directory records what ``up`` started (engine, ports, pid or
container), so that ``up``, ``status`` and ``down`` run from different processes agree on one
broker. Nothing here starts or stops anything.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

KAFKA_VERSION = "4.4.0"
SCALA_VERSION = "2.13"
HOST = "127.0.0.1"
STATE_FILE = "state.json"
BROKER_LOG = "broker.log"
STDOUT_LOG = "stdout.log"
SASL_PASSWORD_FILE = "sasl-password"
SCRAM_MECHANISM = "SCRAM-SHA-256"
DEFAULT_SASL_USER = "fairstream"
# The broker's own identity on its SASL listener (inter-broker), created at format time.
BROKER_SASL_USER = "fairstream-broker"
# Characters that survive StorageTool's --add-scram syntax and a quoted JAAS value unescaped.
SASL_SAFE = re.compile(r"[A-Za-z0-9._~@%+\-]{1,128}")


class BrokerError(Exception):
    """A development-broker operation failed; the message says why and what to do."""


@dataclass
class BrokerState:
    """What ``up`` recorded about a broker it started (``state.json``)."""

    engine: str
    host: str
    port: int
    controller_port: int
    kafka_version: str
    pid: int | None = None
    container_id: str | None = None
    started_at: float = field(default_factory=time.time)
    # SASL_PLAINTEXT with SCRAM-SHA-256 for clients when set; the password is never here
    # (it lives in the state directory's ``sasl-password``, mode 0600).
    sasl_username: str | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def security_protocol(self) -> str:
        return "SASL_PLAINTEXT" if self.sasl_username else "PLAINTEXT"

    @property
    def sasl_mechanism(self) -> str | None:
        return SCRAM_MECHANISM if self.sasl_username else None

    @classmethod
    def load(cls, path: Path) -> BrokerState | None:
        try:
            raw = json.loads(path.read_text())
            return cls(**raw)
        except (OSError, ValueError, TypeError):
            return None

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(path)


def default_cache_dir() -> Path:
    """Where downloaded jars go: ``$FAIRSTREAM_CACHE_DIR``, else the user cache directory."""
    env = os.environ.get("FAIRSTREAM_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "fairstream"


def default_state_dir() -> Path:
    """Where the broker's data and log go: ``$FAIRSTREAM_DEV_KAFKA_DIR``, else the cache."""
    env = os.environ.get("FAIRSTREAM_DEV_KAFKA_DIR")
    if env:
        return Path(env).expanduser()
    return default_cache_dir() / "dev-kafka"


def check_sasl_value(what: str, value: str) -> None:
    """Refuse a SASL user or password that StorageTool or JAAS would misread."""
    if not SASL_SAFE.fullmatch(value):
        raise BrokerError(f"the {what} must be 1 to 128 characters of A-Z a-z 0-9 . _ ~ @ % + -")


def describe(state: BrokerState) -> dict[str, Any]:
    """A JSON-friendly view of a running broker, for ``status --json`` (no password)."""
    return {
        **asdict(state),
        "bootstrap": state.bootstrap,
        "security_protocol": state.security_protocol,
        "sasl_mechanism": state.sasl_mechanism,
    }
