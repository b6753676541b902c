"""Check the Grafana dashboard ConfigMap in rendered chart manifests (``helm template``).

Usage: python deploy/validate_dashboard.py --expect present|absent FILE...

With ``present``, every file must hold exactly one ConfigMap carrying the sidecar's label
(``grafana_dashboard: "1"``) whose ``fairstream.json`` is the chart's
``dashboards/fairstream.json``, byte for byte as JSON; with ``absent``, none may.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

DASHBOARD = Path(__file__).resolve().parents[1] / "helm" / "fairstream" / "dashboards"


def dashboards(path: Path) -> list[dict[str, object]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return [
        d
        for d in docs
        if d.get("kind") == "ConfigMap"
        and (d.get("metadata", {}).get("labels") or {}).get("grafana_dashboard") is not None
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--expect", choices=("present", "absent"), required=True)
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    shipped = json.loads((DASHBOARD / "fairstream.json").read_text())
    failed = False
    for path in args.files:
        found = dashboards(path)
        if args.expect == "absent":
            if found:
                print(f"{path}: a dashboard ConfigMap rendered though it is off by default")
                failed = True
            else:
                print(f"{path}: no dashboard ConfigMap (off by default)")
            continue
        if len(found) != 1:
            print(f"{path}: expected one dashboard ConfigMap, found {len(found)}")
            failed = True
            continue
        cm = found[0]
        meta = cm["metadata"]
        assert isinstance(meta, dict)
        data = cm.get("data")
        assert isinstance(data, dict)
        if meta["labels"].get("grafana_dashboard") != "1":
            print(f"{path}: label grafana_dashboard is {meta['labels']['grafana_dashboard']!r}")
            failed = True
        try:
            embedded = json.loads(data["fairstream.json"])
        except (KeyError, ValueError) as exc:
            print(f"{path}: fairstream.json is not valid JSON: {exc}")
            failed = True
            continue
        if embedded != shipped:
            print(f"{path}: the embedded dashboard differs from dashboards/fairstream.json")
            failed = True
            continue
        panels = len(shipped["panels"])
        print(f"{path}: ConfigMap/{meta['name']} holds the dashboard ({panels} panels)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
