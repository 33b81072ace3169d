"""The Connect schema a Debezium 2.x Postgres connector writes for a table's columns (JSON converter,
``schemas.enable=true``), for the renderings of Debezium events the tests and the sample write.

Connector settings it stands for: ``decimal.handling.mode=string``, the default
``time.precision.mode``, and ``column.propagate.source.type=.*`` (each field's ``parameters`` name
the Postgres type it was read as, with a numeric's precision and scale).
"""

from __future__ import annotations

from testkit.oracle import base_type

SOURCE_TYPE = "__debezium.source.column.type"
SOURCE_LENGTH = "__debezium.source.column.length"
SOURCE_SCALE = "__debezium.source.column.scale"

# Postgres type -> (Connect type, semantic name, the type name Debezium propagates).
CONNECT_TYPES = {
    "smallint": ("int16", None, "INT2"),
    "integer": ("int32", None, "INT4"),
    "bigint": ("int64", None, "INT8"),
    "real": ("float32", None, "FLOAT4"),
    "double precision": ("float64", None, "FLOAT8"),
    "numeric": ("string", None, "NUMERIC"),  # decimal.handling.mode=string
    "boolean": ("boolean", None, "BOOL"),
    "text": ("string", None, "TEXT"),
    "timestamp with time zone": ("string", "io.debezium.time.ZonedTimestamp", "TIMESTAMPTZ"),
    "date": ("int32", "io.debezium.time.Date", "DATE"),
    "json": ("string", "io.debezium.data.Json", "JSON"),
    "jsonb": ("string", "io.debezium.data.Json", "JSONB"),
}


def connect_field(name: str, pg_type: str, optional: bool = True) -> dict:
    """A column's field in a row's Connect schema; its precision and scale propagated for a numeric.
    An array (one dimension: Debezium's only) is Connect's ``array`` of its element's schema, its
    propagated type Postgres' name for the array type (``_INT4``, ``_JSONB``)."""
    kind = base_type(pg_type)
    if kind.endswith("[]"):
        element = connect_field(name, kind[:-2])
        items = {key: value for key, value in element.items() if key not in ("field", "parameters")}
        parameters = {SOURCE_TYPE: "_" + element["parameters"][SOURCE_TYPE]}
        return {
            "type": "array",
            "optional": optional,
            "field": name,
            "items": items,
            "parameters": parameters,
        }
    if kind not in CONNECT_TYPES:
        raise ValueError(f"no Debezium rendering for the Postgres type {pg_type!r} (column {name})")
    connect, semantic, source_type = CONNECT_TYPES[kind]
    parameters = {SOURCE_TYPE: source_type}
    dims = pg_type[len(kind) :].strip("()").split(",") if kind == "numeric" and "(" in pg_type else []
    if dims:
        parameters[SOURCE_LENGTH] = dims[0].strip()
    if len(dims) > 1:
        parameters[SOURCE_SCALE] = dims[1].strip()
    schema = {"type": connect, "optional": optional, "field": name, "parameters": parameters}
    return schema | ({"name": semantic, "version": 1} if semantic else {})


def connect_type(pg_type: str) -> str:
    """What the ingestion records as the type of a column rendered from ``pg_type``
    (``debezium_envelope.connect_type``): ``string (NUMERIC(12,2))``, ``io.debezium.time.Date (DATE)``."""
    field = connect_field("c", pg_type)
    if field["type"] == "array":
        items = field["items"]
        element = items.get("name", items["type"])
        return f"array<{element}> ({field['parameters'][SOURCE_TYPE]})"
    parameters = field["parameters"]
    source_type = parameters[SOURCE_TYPE]
    if SOURCE_LENGTH in parameters:
        dims = [parameters[SOURCE_LENGTH]] + (
            [parameters[SOURCE_SCALE]] if SOURCE_SCALE in parameters else []
        )
        source_type += "(" + ",".join(dims) + ")"
    return f"{field.get('name', field['type'])} ({source_type})"
