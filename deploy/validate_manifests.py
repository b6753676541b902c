"""Validate rendered Kubernetes manifests offline, in strict mode, with kubernetes-validate.

Reads the multi-document YAML files given (``helm template`` output) and checks every
object against the Kubernetes OpenAPI schemas that the kubernetes-validate package bundles,
rejecting unknown fields (strict). Custom resources have no schema there: the kinds in
``CUSTOM_KINDS`` (Prometheus Operator's ServiceMonitor and PodMonitor, KEDA's ScaledObject and
TriggerAuthentication) are skipped and named in the output; any other kind without a schema
is an error, so that a new custom resource is never skipped silently.

Usage: python deploy/validate_manifests.py [-k 1.29 -k 1.37] FILE...
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

# (apiVersion, kind) of custom resources that have no schema in kubernetes-validate.
CUSTOM_KINDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("keda.sh/v1alpha1", "ScaledObject"),
    ("keda.sh/v1alpha1", "TriggerAuthentication"),
}


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def validate_file(path: Path, versions: list[str]) -> tuple[int, list[str], list[str]]:
    """(objects validated, errors, skipped) for one file."""
    from kubernetes_validate import utils

    errors: list[str] = []
    skipped: list[str] = []
    checked = 0
    for doc in documents(path):
        name = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        if (doc.get("apiVersion"), doc.get("kind")) in CUSTOM_KINDS:
            skipped.append(f"{name} ({doc['apiVersion']}: custom resource, no schema)")
            continue
        checked += 1
        for version in versions:
            try:
                utils.validate(doc, version, strict=True)
            except utils.ValidationError as exc:
                where = "/".join(str(p) for p in exc.path) or "(root)"
                errors.append(f"{name} [k8s {version}] {where}: {exc.message}")
            except utils.SchemaNotFoundError as exc:
                errors.append(f"{name} [k8s {version}]: {exc.message}")
    return checked, errors, skipped


def main(argv: list[str]) -> int:
    import kubernetes_validate
    from kubernetes_validate import utils

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument(
        "-k",
        "--kubernetes-version",
        action="append",
        dest="versions",
        help="Kubernetes version(s) to validate against [default: the newest bundled]",
    )
    args = parser.parse_args(argv)
    versions = args.versions or [utils.latest_version()]
    print(
        f"kubernetes-validate {kubernetes_validate.__version__}: schemas of Kubernetes "
        f"{utils.all_versions()[0]} to {utils.latest_version()}; validating against "
        f"{', '.join(versions)}, strict"
    )
    failed = False
    for path in args.files:
        checked, errors, skipped = validate_file(path, versions)
        for item in skipped:
            print(f"{path}: skipped {item}")
        if errors:
            failed = True
            print(f"{path}: {len(errors)} error(s) in {checked} objects")
            for error in errors:
                print(f"  {error}")
        else:
            print(f"{path}: {checked} objects valid")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
