"""The console's static files: shipped in the wheel, self-contained, no HTML from data."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

from fairstream.scheduler.web.server import CONSOLE_FILES, CONSOLE_HEADERS, console_file

ROOT = Path(__file__).resolve().parents[3]
CONSOLE = ROOT / "fairstream" / "scheduler" / "web" / "console"


def test_every_console_file_is_package_data_and_served():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["fairstream.scheduler.web"]
    files = sorted(p.name for p in CONSOLE.iterdir())
    assert files == sorted(CONSOLE_FILES)
    for name in files:
        assert any(fnmatch.fnmatch(f"console/{name}", g) for g in globs), name
        assert console_file(name) == (CONSOLE / name).read_bytes()


def test_the_console_loads_nothing_from_elsewhere():
    html = console_file("index.html").decode()
    for url in re.findall(r'(?:src|href)="([^"]+)"', html):
        assert "//" not in url, url  # relative: the same origin
        assert not url.startswith("/"), url
    js = console_file("console.js").decode()
    assert "http://" not in js
    assert "https://" not in js
    assert "connect-src 'self'" in CONSOLE_HEADERS["Content-Security-Policy"]


def test_scheduler_data_never_becomes_html():
    # Tenant ids are whatever producers put in the key: text nodes only.
    js = console_file("console.js").decode()
    assert "innerHTML" not in js
    assert "insertAdjacentHTML" not in js
    assert "document.write" not in js
