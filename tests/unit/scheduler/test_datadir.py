"""The data directory's lock, its identity and the default directory's slots (``datadir``),
and the identity as the static membership id (``run.with_identity``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fairstream.scheduler import datadir
from fairstream.scheduler.ingest.member import consumer_config
from fairstream.scheduler.run import with_identity
from fairstream.scheduler.service import transactional_id
from tests.unit.test_config import settings_of


def test_a_locked_directory_is_refused_naming_the_holder(tmp_path: Path) -> None:
    held = datadir.lock(tmp_path / "d", app_id="app", web_port=6066)
    info = json.loads((tmp_path / "d" / "lock").read_text())
    assert info["pid"] == os.getpid()
    with pytest.raises(datadir.DataDirInUse) as refused:
        datadir.lock(tmp_path / "d", app_id="app", web_port=6067)
    message = str(refused.value)
    assert f"the data directory {tmp_path / 'd'} is in use" in message
    assert f"pid {os.getpid()} on host " in message
    assert "web port 6066" in message
    # The refusal leaves the holder's details in place.
    assert json.loads((tmp_path / "d" / "lock").read_text()) == info
    held.release()
    again = datadir.lock(tmp_path / "d", app_id="app", web_port=6067)
    assert json.loads((tmp_path / "d" / "lock").read_text())["web_port"] == 6067
    again.release()


def test_the_default_directory_hands_out_the_lowest_free_slot(tmp_path: Path) -> None:
    first = datadir.lock_default(tmp_path, app_id="app", web_port=1)
    second = datadir.lock_default(tmp_path, app_id="app", web_port=2)
    assert first.directory == tmp_path
    assert second.directory == tmp_path / "instance-1"
    assert len(datadir.holders(tmp_path)) == 2
    first.release()
    third = datadir.lock_default(tmp_path, app_id="app", web_port=3)
    assert third.directory == tmp_path  # slot 0 again, with its identity
    assert [h.split(":")[0] for h in datadir.holders(tmp_path)] == [
        str(tmp_path),
        str(tmp_path / "instance-1"),
    ]
    second.release()
    third.release()
    assert datadir.holders(tmp_path) == []


def test_an_unreadable_lock_file_still_names_a_holder(tmp_path: Path) -> None:
    (tmp_path / "lock").write_text("not json")
    assert "another process" in datadir.describe_holder(tmp_path)


def test_the_identity_is_made_once_and_kept(tmp_path: Path) -> None:
    first = datadir.identity(tmp_path / "d")
    assert len(first) == 16
    int(first, 16)  # hex digits
    assert datadir.identity(tmp_path / "d") == first
    assert (tmp_path / "d" / datadir.IDENTITY_FILE).read_text() == first + "\n"
    assert datadir.identity(tmp_path / "other") != first


def test_static_membership_by_default_joins_as_the_data_directorys_identity(
    tmp_path: Path,
) -> None:
    # A restart on the same disk rejoins as the same member (no rebalance, no wait for the
    # dead run's session to time out) and fences what it left open: one identity for both.
    settings = settings_of(["--data-dir", str(tmp_path)])
    resolved = with_identity(settings)
    ident = datadir.identity(tmp_path)
    assert resolved.group_instance_id == ident
    assert consumer_config(resolved)["group.instance.id"] == ident
    assert transactional_id(resolved) == transactional_id(settings) == f"{settings.app_id}-{ident}"
    assert with_identity(settings_of(["--data-dir", str(tmp_path)])) == resolved  # a restart


def test_a_given_instance_id_wins_and_dynamic_membership_sends_none(tmp_path: Path) -> None:
    given = with_identity(settings_of(["--data-dir", str(tmp_path), "--group-instance-id", "p-0"]))
    assert consumer_config(given)["group.instance.id"] == "p-0"
    assert transactional_id(given) == f"{given.app_id}-p-0"
    dynamic = with_identity(settings_of(["--data-dir", str(tmp_path), "--membership", "dynamic"]))
    assert dynamic.group_instance_id is None
    assert "group.instance.id" not in consumer_config(dynamic)
    assert transactional_id(dynamic) == f"{dynamic.app_id}-{datadir.identity(tmp_path)}"
    named = settings_of(
        ["--data-dir", str(tmp_path), "--membership", "dynamic", "--group-instance-id", "p-0"]
    )
    assert "group.instance.id" not in consumer_config(with_identity(named))
    assert transactional_id(with_identity(named)) == f"{named.app_id}-p-0"
