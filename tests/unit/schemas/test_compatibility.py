"""Every released TenantPolicy and Feedback schema stays readable by the current one
(backward compatibility).

``fairstream/schemas/released/`` keeps a copy of each schema fairstream has shipped; the
policy topic is compacted, so a value written years ago may be read by today's scheduler.
The check resolves data written with each released schema to the current schema with the
avro library (its reader/writer compatibility checker, and a real encode/decode of sample
data), and checks statically that every field added since has a default. The tests at the
end show it fails on deliberately broken copies. Feedback values are not compacted, but
workers of the previous release keep writing v1 while schedulers are upgraded, so the same
holds for them (``fairstream/wire/feedback.py`` decodes both by hand).
"""

from __future__ import annotations

import datetime as dt
import io
import json
from pathlib import Path
from typing import Any

import avro.compatibility
import avro.io
import avro.schema
import pytest

from fairstream.wire.canonical import fingerprint
from fairstream.wire.policy import current_schema_text, released_schema_texts, schema_dir

# The fingerprint of each released schema, pinned: a released schema is never edited, since
# values on the compacted topic carry its fingerprint. Add a line when releasing a new one.
RELEASED = {
    "TenantPolicy.v1.avsc": 0x1975DF0CE7A2013E,
    "TenantPolicy.v2.avsc": 0x84DBB18F51F4503C,
    "TenantPolicy.v3.avsc": 0xCADDE6180798DCD8,
    "TenantPolicy.v4.avsc": 0xDB9161675289E97E,
}
FEEDBACK_RELEASED = {
    "Feedback.v1.avsc": 0xC7C270A52676EEBD,
    "Feedback.v2.avsc": 0x14FB9A5F53378EBC,
}

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_PRIMITIVE_SAMPLES: dict[str, Any] = {
    "null": None,
    "boolean": True,
    "int": 7,
    "long": 1_700_000_000_000,
    "float": 1.5,
    "double": 2.5,
    "bytes": b"sample",
    "string": "sample",
}


def _samples(schema: Any, variant: int) -> Any:
    """A datum of ``schema`` (parsed JSON); ``variant`` picks different union branches."""
    if isinstance(schema, list):
        return _samples(schema[variant % len(schema)], variant)
    if isinstance(schema, str):
        return _PRIMITIVE_SAMPLES[schema]
    kind = schema["type"]
    if isinstance(kind, dict | list):
        return _samples(kind, variant)
    if schema.get("logicalType") in ("timestamp-millis", "timestamp-micros"):
        return _EPOCH + dt.timedelta(milliseconds=1_700_000_000_000 + variant)
    if kind in _PRIMITIVE_SAMPLES:
        return _PRIMITIVE_SAMPLES[kind]
    if kind == "record":
        return {f["name"]: _samples(f["type"], variant) for f in schema["fields"]}
    if kind == "enum":
        return schema["symbols"][variant % len(schema["symbols"])]
    if kind == "array":
        return [_samples(schema["items"], variant)]
    if kind == "map":
        return {"k": _samples(schema["values"], variant)}
    if kind == "fixed":
        return b"\x00" * schema["size"]
    raise AssertionError(f"no sample for {schema!r}")


def compatibility_problems(writer_text: str, reader_text: str) -> list[str]:
    """Why data written with ``writer_text`` cannot be read with ``reader_text`` (empty: it can)."""
    problems: list[str] = []
    writer_json, reader_json = json.loads(writer_text), json.loads(reader_text)
    writer = avro.schema.parse(writer_text)
    reader = avro.schema.parse(reader_text)

    # Static: a reader field the writer lacks needs a default, or old data has no value for it.
    writer_fields = {f["name"] for f in writer_json["fields"]}
    for field in reader_json["fields"]:
        names = {field["name"], *field.get("aliases", [])}
        if not names & writer_fields and "default" not in field:
            problems.append(f"field {field['name']!r} was added without a default")

    # The library's reader/writer compatibility rules (type promotions, unions, names).
    result = avro.compatibility.ReaderWriterCompatibilityChecker().get_compatibility(reader, writer)
    if result.compatibility is not avro.compatibility.SchemaCompatibilityType.compatible:
        problems.append(f"avro compatibility check: {sorted(result.messages)}")

    # Dynamic: encode sample data with the writer schema, resolve it with the reader's.
    for variant in range(2):
        datum = _samples(writer_json, variant)
        buf = io.BytesIO()
        avro.io.DatumWriter(writer).write(datum, avro.io.BinaryEncoder(buf))
        buf.seek(0)
        try:
            avro.io.DatumReader(writer, reader).read(avro.io.BinaryDecoder(buf))
        except Exception as exc:
            problems.append(f"sample {variant} written with the old schema does not resolve: {exc}")
    return problems


def test_released_schemas_are_pinned() -> None:
    released = released_schema_texts()
    assert set(released) == set(RELEASED)
    for name, text in released.items():
        expected = RELEASED[name]
        assert fingerprint(json.loads(text)) == expected, (
            f"released schema {name} was edited: released schemas are immutable, "
            "change fairstream/schemas/TenantPolicy.avsc instead"
        )


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_current_schema_reads_every_released_schema(name: str) -> None:
    old = released_schema_texts()[name]
    assert compatibility_problems(old, current_schema_text()) == []


def test_every_current_field_has_a_default() -> None:
    # So the next schema can read this one's data whatever it adds or drops.
    for field in json.loads(current_schema_text())["fields"]:
        assert "default" in field, f"field {field['name']} has no default"


def _feedback_texts() -> tuple[str, dict[str, str]]:
    """The current Feedback schema and every released one, by file name."""
    released = schema_dir() / "released"
    names = [p.name for p in released.iterdir() if p.name.startswith("Feedback.v")]
    return (
        (schema_dir() / "Feedback.avsc").read_text(encoding="utf-8"),
        {name: (released / name).read_text(encoding="utf-8") for name in names},
    )


def test_released_feedback_schemas_are_pinned() -> None:
    current, released = _feedback_texts()
    assert set(released) == set(FEEDBACK_RELEASED)
    for name, text in released.items():
        assert fingerprint(json.loads(text)) == FEEDBACK_RELEASED[name], (
            f"released schema {name} was edited: released schemas are immutable"
        )
    newest = max(FEEDBACK_RELEASED, key=lambda n: int(n.split(".v")[1].removesuffix(".avsc")))
    assert fingerprint(json.loads(current)) == FEEDBACK_RELEASED[newest]


@pytest.mark.parametrize("name", sorted(FEEDBACK_RELEASED))
def test_current_feedback_schema_reads_every_released_schema(name: str) -> None:
    current, released = _feedback_texts()
    assert compatibility_problems(released[name], current) == []


def test_released_feedback_v1_reads_the_current_schemas_data() -> None:
    # Forward too: a consumer that still holds v1 (the avro library, resolving) reads v2.
    current, released = _feedback_texts()
    assert compatibility_problems(current, released["Feedback.v1.avsc"]) == []


def test_repository_schemas_dir_is_the_package_one() -> None:
    top = Path(__file__).resolve().parents[3] / "schemas"
    assert top.resolve() == Path(str(schema_dir())).resolve()


def _variant(tmp_path: Path, change: Any) -> str:
    schema = json.loads(current_schema_text())
    change(schema["fields"])
    path = tmp_path / "TenantPolicy.avsc"
    path.write_text(json.dumps(schema, indent=2), encoding="utf-8")
    return path.read_text(encoding="utf-8")


def test_check_fails_on_a_field_added_without_a_default(tmp_path: Path) -> None:
    broken = _variant(tmp_path, lambda fields: fields.append({"name": "tier", "type": "int"}))
    problems = compatibility_problems(released_schema_texts()["TenantPolicy.v1.avsc"], broken)
    assert any("'tier' was added without a default" in p for p in problems)
    assert any("does not resolve" in p for p in problems)


def test_check_fails_on_a_type_changed_int_to_string(tmp_path: Path) -> None:
    def to_string(fields: list[dict[str, Any]]) -> None:
        priority = next(f for f in fields if f["name"] == "priority")
        priority.update(type="string", default="0")

    broken = _variant(tmp_path, to_string)
    problems = compatibility_problems(released_schema_texts()["TenantPolicy.v1.avsc"], broken)
    assert any("avro compatibility check" in p for p in problems)
    assert any("does not resolve" in p for p in problems)


def test_check_passes_compatible_evolution(tmp_path: Path) -> None:
    def evolve(fields: list[dict[str, Any]]) -> None:
        fields.append({"name": "tier", "type": ["null", "string"], "default": None})
        priority = next(f for f in fields if f["name"] == "priority")
        priority["type"] = "long"  # int -> long is a promotion Avro resolves
        fields[:] = [f for f in fields if f["name"] != "paused"]  # dropped: readers skip it

    evolved = _variant(tmp_path, evolve)
    assert compatibility_problems(released_schema_texts()["TenantPolicy.v1.avsc"], evolved) == []
