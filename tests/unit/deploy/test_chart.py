"""The Helm chart's values schema, checked with jsonschema (no helm needed).

deploy/check.sh also runs helm lint and template with every ci/ values file and validates
the rendered manifests; these tests keep the schema honest on any machine.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

import fairstream

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "helm" / "fairstream"

# FAIRSTREAM_* variables the chart sets: each must be an option some fairstream command reads.
CHART_ENV_VARS = {
    "FAIRSTREAM_BOOTSTRAP",
    "FAIRSTREAM_SECURITY_PROTOCOL",
    "FAIRSTREAM_SASL_MECHANISM",
    "FAIRSTREAM_SASL_USERNAME",
    "FAIRSTREAM_SASL_PASSWORD",
    "FAIRSTREAM_SSL_CA_LOCATION",
    "FAIRSTREAM_GROUP_INSTANCE_ID",
}


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's coalescing of a values file over values.yaml (maps merge, the rest replaces)."""
    result = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merge(result[key], value)
        else:
            result[key] = value
    return result


@pytest.fixture(scope="module")
def validator() -> Any:
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


@pytest.fixture(scope="module")
def defaults() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def errors(validator: Any, values: dict[str, Any]) -> list[str]:
    return [e.message for e in validator.iter_errors(values)]


@pytest.mark.parametrize("values_file", sorted((CHART / "ci").glob("*.yaml")), ids=lambda p: p.name)
def test_defaults_and_every_ci_values_file_are_valid(validator, defaults, values_file):
    override = yaml.safe_load(values_file.read_text()) or {}
    assert errors(validator, merge(defaults, override)) == []


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"scheduler": {"rtae": 5}}, "'rtae' was unexpected"),
        ({"workers": {"enabled": True}}, "'workers' was unexpected"),
        ({"kafka": {"sasl": {"user": "x"}}}, "'user' was unexpected"),
        ({"kafka": {"securityProtocol": "TLS"}}, "'TLS' is not one of"),
        ({"kafka": {"sasl": {"mechanism": "GSSAPI"}}}, "'GSSAPI' is not one of"),
        ({"worker": {"enabled": True}}, "does not match"),
        ({"worker": {"enabled": True, "handler": "no_function"}}, "does not match"),
        ({"scheduler": {"rate": 0}}, "less than or equal to the minimum"),
        ({"topics": {"partitions": "12"}}, "is not of type 'integer'"),
        ({"serviceMonitor": {"interval": "30"}}, "does not match"),
        ({"image": {"repository": ""}}, "make image-push IMAGE="),
        ({"topics": {"replicationFactor": 0}}, "should not be valid"),
        ({"topics": {"config": ["egres:x=1"]}}, "does not match"),
        ({"scheduler": {"shareBy": "static"}}, "'static' is not one of"),
        ({"worker": {"podMonitor": {"enable": True}}}, "'enable' was unexpected"),
    ],
)
def test_schema_rejects_typos_and_bad_values(validator, defaults, override, message):
    found = errors(validator, merge(defaults, override))
    assert any(message in e for e in found), found


def test_the_bare_defaults_are_refused_with_how_to_build_and_push_the_image(validator, defaults):
    assert defaults["image"]["repository"] == ""
    (message,) = errors(validator, defaults)
    assert "image.repository is required" in message
    assert "make image-push IMAGE=" in message


def test_chart_app_version_is_the_package_version():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == fairstream.__version__


def test_chart_sets_only_variables_that_fairstream_reads(known_env_vars):
    text = "\n".join(p.read_text() for p in (CHART / "templates").iterdir())
    used = set(re.findall(r"\bFAIRSTREAM_[A-Z_]+[A-Z]\b", text))
    assert used >= CHART_ENV_VARS
    unknown = used - known_env_vars
    # The connection and static-membership options are an agreed interface; a
    # checkout where they have not landed yet may lack them, any other unknown name is a typo.
    assert unknown <= CHART_ENV_VARS, sorted(unknown - CHART_ENV_VARS)
