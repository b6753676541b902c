"""``--weights`` of ``fairstream simulate`` and ``fairstream audit``: tenant weights from
``tenant=w,...`` or from a file (a JSON object, or ``tenant=w`` lines).

Errors are ``click.BadParameter`` naming ``--weights`` and, for a file, the line.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import click


def _parse_weight(tenant: str, text: object, where: str) -> tuple[str, float]:
    if not tenant:
        raise click.BadParameter(f"{where}: empty tenant name", param_hint="'--weights'")
    weight: object = text
    if isinstance(text, str):
        try:
            weight = float(text)
        except ValueError:
            weight = text
    if isinstance(weight, bool) or not isinstance(weight, int | float):
        raise click.BadParameter(
            f"{where}: weight of {tenant!r} must be a number, got {text!r}",
            param_hint="'--weights'",
        )
    if not math.isfinite(weight) or weight <= 0:
        raise click.BadParameter(
            f"{where}: weight of {tenant!r} must be a positive number, got {text!r}",
            param_hint="'--weights'",
        )
    return tenant, float(weight)


def parse_weights(value: str | None) -> dict[str, float]:
    """Weights from ``tenant=w,...`` or from a file: a JSON object, or ``tenant=w`` lines.

    A value naming an existing file is read as a file; otherwise it must contain ``=``.
    """
    if value is None or not value.strip():
        return {}
    path = Path(value)
    if path.is_file():
        text = path.read_text(encoding="utf-8")
        if text.lstrip().startswith("{"):
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise click.BadParameter(
                    f"{value}: not valid JSON ({exc.msg})", param_hint="'--weights'"
                ) from None
            if not isinstance(obj, dict):
                raise click.BadParameter(
                    f"{value}: expected a JSON object of tenant: weight",
                    param_hint="'--weights'",
                )
            return dict(_parse_weight(str(k), v, value) for k, v in obj.items())
        entries = [
            (f"{value} line {n}", line.strip())
            for n, line in enumerate(text.splitlines(), start=1)
            if line.strip() and not line.lstrip().startswith("#")
        ]
    elif "=" in value:
        entries = [("--weights", part.strip()) for part in value.split(",") if part.strip()]
    else:
        raise click.BadParameter(
            f"{value!r} is neither a file nor tenant=weight pairs (e.g. acme=2,globex=1)",
            param_hint="'--weights'",
        )
    weights: dict[str, float] = {}
    for where, entry in entries:
        tenant, sep, text = entry.partition("=")
        if not sep:
            raise click.BadParameter(
                f"{where}: expected tenant=weight, got {entry!r}", param_hint="'--weights'"
            )
        name, weight = _parse_weight(tenant.strip(), text.strip(), where)
        weights[name] = weight
    return weights
