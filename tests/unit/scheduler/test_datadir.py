"""The data directory's lock and the default directory's slots (``datadir``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fairstream.scheduler import datadir


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
