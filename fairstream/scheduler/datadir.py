"""One process per data directory: the lock, the identity it keeps, and the default
directory's slots.

The data directory holds the instance's identity (``identity``): a uuid made at its first
use, which names the transactional id (``service.transactional_id``) and, with static
membership (the default), the group instance id, so that a restart on the same disk rejoins
the group as the same member and fences what its previous run left open.

Two live processes with one identity fence each other, so a scheduler locks its data
directory for its whole life: ``fcntl.flock`` on ``<dir>/lock``, which the kernel releases
when the process ends, however it ends (kill -9 too), so a restart never finds a stale lock.
The lock file says who holds it (pid, host, start time, app id, web port); a second process
on the same directory exits at once naming the first.

An explicit ``--data-dir`` is exactly that directory. The default one (per user) is a set of
slots instead, so that two schedulers started by hand on one host, both with the defaults,
both work: slot 0 is the default directory itself (where earlier versions kept the
identity), slot ``n`` is ``<default>/instance-<n>``; a process takes the lowest slot it can
lock. Each slot keeps its identity, and only one live process can hold a slot, so a
transactional id is never used by two live processes at once. After a restart an instance
takes the lowest free slot again; two that restart in the other order swap identities,
which is harmless: whoever takes an identity fences (aborts) what its previous holder left
open, exactly as a restart does.

Caller: ``fairstream.scheduler.run`` (before anything talks to Kafka).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from fairstream.errors import Error

LOCK_FILE = "lock"
IDENTITY_FILE = "instance-id"
MAX_SLOTS = 64  # default-directory slots tried before giving up


class DataDirInUse(Error, RuntimeError):
    """Another live process holds the data directory's lock."""


@dataclass
class DataDirLock:
    """A held lock: keep the object (its file) open for the process's lifetime."""

    directory: Path
    file: IO[str]

    def release(self) -> None:
        fcntl.flock(self.file.fileno(), fcntl.LOCK_UN)
        self.file.close()


def describe_holder(directory: Path) -> str:
    """Who holds ``directory``'s lock, from what it wrote into the lock file."""
    try:
        info: dict[str, Any] = json.loads((directory / LOCK_FILE).read_text() or "{}")
    except (OSError, ValueError):
        info = {}
    if not info.get("pid"):
        return "another process (its lock file does not say which)"
    started = info.get("started")
    when = (
        time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started))
        if isinstance(started, int | float)
        else "an unknown time"
    )
    extra = ""
    if info.get("app_id") is not None:
        extra = f", app id {info['app_id']}, web port {info.get('web_port')}"
    return f"pid {info['pid']} on host {info.get('host', '?')}, started {when}{extra}"


def lock(directory: Path, *, app_id: str, web_port: int) -> DataDirLock:
    """Lock ``directory`` (created if missing) for this process, or raise ``DataDirInUse``
    naming the process that holds it."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_FILE
    # Opened without truncating: the holder's details stay readable until we hold it.
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    file = os.fdopen(fd, "r+")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        file.close()
        raise DataDirInUse(
            f"the data directory {directory} is in use by another fairstream scheduler: "
            f"{describe_holder(directory)}. Two processes with one data directory share one "
            "transactional id and fence each other; give each instance its own --data-dir "
            "(or its own --group-instance-id and --data-dir)."
        ) from None
    except BaseException:
        file.close()
        raise
    info = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": int(time.time()),
        "app_id": app_id,
        "web_port": web_port,
    }
    file.seek(0)
    file.truncate()
    file.write(json.dumps(info) + "\n")
    file.flush()
    return DataDirLock(directory, file)


def identity(directory: Path) -> str:
    """The identity kept in ``directory`` (made and written there at its first use): 16 hex
    digits. Caller: the process holding the directory's lock."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / IDENTITY_FILE
    try:
        ident = path.read_text().strip()
    except FileNotFoundError:
        ident = ""
    if not ident:
        ident = uuid.uuid4().hex[:16]
        path.write_text(ident + "\n")
    return ident


def slot(default: Path, n: int) -> Path:
    """The ``n``-th slot of the default data directory (0: the directory itself)."""
    return default if n == 0 else default / f"instance-{n}"


def lock_default(default: Path, *, app_id: str, web_port: int) -> DataDirLock:
    """Lock the lowest free slot of the default data directory."""
    for n in range(MAX_SLOTS):
        try:
            return lock(slot(default, n), app_id=app_id, web_port=web_port)
        except DataDirInUse:
            continue
    raise DataDirInUse(
        f"all {MAX_SLOTS} slots of the default data directory {default} are in use; "
        "give this instance a --data-dir of its own"
    )


def holders(default: Path) -> list[str]:
    """The processes holding slots of the default data directory now (for messages)."""
    found = []
    for n in range(MAX_SLOTS):
        directory = slot(default, n)
        if not (directory / LOCK_FILE).exists():
            if n:
                break
            continue
        try:
            with open(directory / LOCK_FILE) as file:
                try:
                    fcntl.flock(file.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    found.append(f"{directory}: {describe_holder(directory)}")
                else:
                    fcntl.flock(file.fileno(), fcntl.LOCK_UN)
        except OSError:
            continue
    return found
