"""Parsing Canonical Form and CRC-64-AVRO against the Avro specification's test vectors.

The vectors are share/test/data/schema-tests.txt of apache/avro (cases 000-033), which the
Java implementation cross-checks with a slow direct implementation of the fingerprint.
"""

from __future__ import annotations

import json

import avro.schema
import pytest

from fairstream.wire.canonical import canonical_form, crc64_avro, fingerprint
from fairstream.wire.policy import current_schema_text

# (input, canonical form, fingerprint as the spec prints it: a signed Java long, or None)
SPEC_VECTORS = [
    ('"null"', '"null"', 7195948357588979594),
    ('{"type":"null"}', '"null"', None),
    ('"boolean"', '"boolean"', -6970731678124411036),
    ('{"type":"boolean"}', '"boolean"', None),
    ('"int"', '"int"', 8247732601305521295),
    ('{"type":"int"}', '"int"', None),
    ('"long"', '"long"', -3434872931120570953),
    ('{"type":"long"}', '"long"', None),
    ('"float"', '"float"', 5583340709985441680),
    ('{"type":"float"}', '"float"', None),
    ('"double"', '"double"', -8181574048448539266),
    ('{"type":"double"}', '"double"', None),
    ('"bytes"', '"bytes"', 5746618253357095269),
    ('{"type":"bytes"}', '"bytes"', None),
    ('"string"', '"string"', -8142146995180207161),
    ('{"type":"string"}', '"string"', None),
    ("[  ]", "[]", -1241056759729112623),
    ('[ "int"  ]', '["int"]', -5232228896498058493),
    ('[ "int" , {"type":"boolean"} ]', '["int","boolean"]', 5392556393470105090),
    (
        '{"fields":[], "type":"record", "name":"foo"}',
        '{"name":"foo","type":"record","fields":[]}',
        -4824392279771201922,
    ),
    (
        '{"fields":[], "type":"record", "name":"foo", "namespace":"x.y"}',
        '{"name":"x.y.foo","type":"record","fields":[]}',
        5916914534497305771,
    ),
    (
        '{"fields":[], "type":"record", "name":"a.b.foo", "namespace":"x.y"}',
        '{"name":"a.b.foo","type":"record","fields":[]}',
        -4616218487480524110,
    ),
    (
        '{"fields":[], "type":"record", "name":"foo", "doc":"Useful info"}',
        '{"name":"foo","type":"record","fields":[]}',
        -4824392279771201922,
    ),
    (
        '{"fields":[], "type":"record", "name":"foo", "aliases":["foo","bar"]}',
        '{"name":"foo","type":"record","fields":[]}',
        -4824392279771201922,
    ),
    (
        '{"fields":[{"type":{"type":"boolean"}, "name":"f1"}], "type":"record", "name":"foo"}',
        '{"name":"foo","type":"record","fields":[{"name":"f1","type":"boolean"}]}',
        7843277075252814651,
    ),
    (
        '{ "fields":[{"type":"boolean", "aliases":[], "name":"f1", "default":"true"},\n'
        '  {"order":"descending","name":"f2","doc":"Hello","type":"int"}],\n'
        '  "type":"record", "name":"foo"}',
        '{"name":"foo","type":"record","fields":[{"name":"f1","type":"boolean"},'
        '{"name":"f2","type":"int"}]}',
        -4860222112080293046,
    ),
    (
        '{"type":"enum", "name":"foo", "symbols":["A1"]}',
        '{"name":"foo","type":"enum","symbols":["A1"]}',
        -6342190197741309591,
    ),
    (
        '{"namespace":"x.y.z", "type":"enum", "name":"foo", "doc":"foo bar", '
        '"symbols":["A1", "A2"]}',
        '{"name":"x.y.z.foo","type":"enum","symbols":["A1","A2"]}',
        -4448647247586288245,
    ),
    (
        '{"name":"foo","type":"fixed","size":15}',
        '{"name":"foo","type":"fixed","size":15}',
        1756455273707447556,
    ),
    (
        '{"namespace":"x.y.z", "type":"fixed", "name":"foo", "doc":"foo bar", "size":32}',
        '{"name":"x.y.z.foo","type":"fixed","size":32}',
        -3064184465700546786,
    ),
    (
        '{ "items":{"type":"null"}, "type":"array"}',
        '{"type":"array","items":"null"}',
        -589620603366471059,
    ),
    (
        '{ "values":"string", "type":"map"}',
        '{"type":"map","values":"string"}',
        -8732877298790414990,
    ),
    (
        '{"name":"PigValue","type":"record",'
        '"fields":[{"name":"value", "type":["null", "int", "long", "PigValue"]}]}',
        '{"name":"PigValue","type":"record","fields":[{"name":"value",'
        '"type":["null","int","long","PigValue"]}]}',
        -1759257747318642341,
    ),
]


@pytest.mark.parametrize(("schema", "canonical", "expected"), SPEC_VECTORS)
def test_spec_vectors(schema: str, canonical: str, expected: int | None) -> None:
    assert canonical_form(schema) == canonical
    if expected is not None:
        assert fingerprint(schema) == expected % (1 << 64)


def test_int_fingerprint_on_the_wire() -> None:
    # 0x7275d51a3f395c8f, little-endian: what a single-object header of an "int" carries.
    assert fingerprint('"int"') == 0x7275D51A3F395C8F
    assert fingerprint('"int"').to_bytes(8, "little") == bytes.fromhex("8f5c393f1ad57572")


def test_crc_matches_the_avro_library_on_the_same_bytes() -> None:
    text = canonical_form(current_schema_text()).encode()
    assert crc64_avro(text).to_bytes(8, "little") == avro.schema._crc_64_fingerprint(text)


def test_logical_types_are_stripped_to_their_primitive() -> None:
    # [PRIMITIVES] and [STRIP]: a timestamp-millis long is "long", as Java writes it
    # (the avro library writes {"type":"long"}, which fingerprints differently).
    assert canonical_form('{"type":"long","logicalType":"timestamp-millis"}') == '"long"'
    schema = json.loads(current_schema_text())
    assert '"logicalType"' not in canonical_form(schema)
    assert '"doc"' not in canonical_form(schema)
    assert '"default"' not in canonical_form(schema)


def test_named_types_nested_take_the_enclosing_namespace() -> None:
    schema = {
        "type": "record",
        "name": "Outer",
        "namespace": "a.b",
        "fields": [
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X"]}},
            {"name": "again", "type": "E"},
        ],
    }
    assert canonical_form(schema) == (
        '{"name":"a.b.Outer","type":"record","fields":['
        '{"name":"e","type":{"name":"a.b.E","type":"enum","symbols":["X"]}},'
        '{"name":"again","type":"a.b.E"}]}'
    )
