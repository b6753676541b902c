"""The configuration reference against the settings' declarations.

docs/configuration.md and README.md hold tables rendered by ``fairstream_dev.configref`` from
``fairstream/config``. These tests fail when the committed text differs from what the
declarations render now: change a setting, then run ``make configref``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fairstream.config import Settings
from fairstream.config.setting import declared
from fairstream.config.settings import default_data_dir
from fairstream_dev import configref

STALE = "{path} is stale: run `make configref` (python -m fairstream_dev.configref --write)"


@pytest.mark.parametrize(
    "block", [configref.FULL_BLOCK, configref.SHORT_BLOCK], ids=lambda block: block.name
)
def test_the_committed_reference_is_what_the_declarations_render(block: configref.Block) -> None:
    committed = block.current(block.path.read_text())
    assert committed == configref.rendered()[block], STALE.format(path=block.path.name)


def test_check_mode_agrees() -> None:
    assert configref.main(["--check"]) == 0


def rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| `--")]


def test_every_setting_has_one_row_with_its_flag_and_variable() -> None:
    full = rows(configref.render_full())
    settings = declared(Settings)
    assert len(full) == len(settings)
    for setting, row in zip(settings, full, strict=True):
        assert row.startswith(f"| `{setting.flag}`"), row
        assert f"| `{setting.env}` |" in row, row


def test_the_short_table_names_settings_in_order() -> None:
    names = [s.field.name for s in declared(Settings)]
    assert set(configref.SHORT) <= set(names)
    short = rows(configref.render_short())
    assert [row.split("`")[1] for row in short] == [
        next(s.flag for s in declared(Settings) if s.field.name == name) for name in configref.SHORT
    ]


def test_defaults_and_limits_come_from_the_declarations() -> None:
    by_flag = {row.split("`")[1]: row for row in rows(configref.render_full())}
    assert "| `100000` |" in by_flag["--max-backlog"]
    assert "| `512` |" in by_flag["--buffer-memory"]  # in MiB, the option's unit
    assert "| unlimited |" in by_flag["--rate"]  # the help's [default: ...] note
    assert "[default:" not in by_flag["--rate"]
    assert by_flag["--rate"].endswith("Above 0. |")
    assert "From 0.01 to 60." in by_flag["--commit-interval"]
    assert "One of `demand`, `partitions`." in by_flag["--share-by"]
    assert by_flag["--trim"].startswith("| `--trim` / `--no-trim` | `FAIRSTREAM_TRIM` | `--trim` |")
    # the help's own backticks are kept, not doubled
    assert "`fairstream topics create`" in by_flag["--replication-factor"]
    assert "`<app-id>-progress`" in by_flag["--app-id"]


def test_the_rendering_does_not_depend_on_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    before = configref.render_full(), configref.render_short()
    assert str(default_data_dir()) not in before[0] + before[1]
    monkeypatch.setenv("HOME", "/elsewhere")
    monkeypatch.setenv("XDG_DATA_HOME", "/data")
    assert (configref.render_full(), configref.render_short()) == before


def test_the_data_dir_default_says_what_the_code_does(monkeypatch: pytest.MonkeyPatch) -> None:
    text = configref.FACTORY_DEFAULTS["data_dir"]
    assert "`$XDG_DATA_HOME/fairstream`" in text
    assert "`~/.local/share/fairstream`" in text
    monkeypatch.setenv("XDG_DATA_HOME", "/xdg")
    assert default_data_dir() == Path("/xdg/fairstream")
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", "/home/someone")
    assert default_data_dir() == Path("/home/someone/.local/share/fairstream")


def test_a_computed_default_without_a_description_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(configref, "FACTORY_DEFAULTS", {})
    with pytest.raises(KeyError, match="--data-dir"):
        configref.render_full()


def test_a_stale_block_is_found_and_rewritten(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("intro\n<!-- t:begin -->\nold table\n<!-- t:end -->\nafter\n")
    block = configref.Block(page, "t")
    text = page.read_text()
    assert block.current(text) == "\nold table\n"
    assert block.replace(text, "\nnew\n") == "intro\n<!-- t:begin -->\nnew\n<!-- t:end -->\nafter\n"
    page.write_text("no markers\n")
    with pytest.raises(ValueError, match="needs one"):
        block.current(page.read_text())
