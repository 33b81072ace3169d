"""One wal2json ``format-version=2`` line: its record codes, its schema, parsing it and the checks that
need no other line (docs/ingestion.md). Transactions are framed in ``wal2json_framing``."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType, StructField, StructType

from python_jobs.ingest.changeset import (
    ACTION_DELETE,
    ACTION_INSERT,
    ACTION_MESSAGE,
    ACTION_READ,
    ACTION_TRUNCATE,
    ACTION_UPDATE,
    built_once,
    lsn_to_bigint,
)

# wal2json record codes.
CODE_BEGIN = "B"
CODE_COMMIT = "C"
CODE_INSERT = "I"
CODE_UPDATE = "U"
CODE_DELETE = "D"
CODE_TRUNCATE = "T"
CODE_MESSAGE = "M"
# Not wal2json's own: the capture job's initial snapshot writes each table row as an "R" line inside
# one B ... C transaction at the slot's consistent point (docs/capture.md).
CODE_READ = "R"

ACTIONS = {
    CODE_INSERT: ACTION_INSERT,
    CODE_UPDATE: ACTION_UPDATE,
    CODE_DELETE: ACTION_DELETE,
    CODE_TRUNCATE: ACTION_TRUNCATE,
    CODE_MESSAGE: ACTION_MESSAGE,
    CODE_READ: ACTION_READ,
}
CHANGE_CODES = list(ACTIONS)
ROW_CODES = [CODE_INSERT, CODE_UPDATE, CODE_DELETE, CODE_READ]
KNOWN_CODES = [CODE_BEGIN, CODE_COMMIT, *CHANGE_CODES]

REASON_MALFORMED = "malformed JSON"
REASON_EMPTY = "empty line"
REASON_NO_ACTION = "missing action"
REASON_BAD_LSN = "missing or invalid lsn"
REASON_BAD_XID = "missing or invalid xid"
REASON_NO_VALUES = "missing columns (insert/update) or identity (delete)"
REASON_BAD_COLUMNS = "column without a name or with a duplicate name"
REASON_KEY_MISSING = "a key column's value is missing from the change"
# wal2json sends "pk": [] for a table without a key; no "pk" at all means include-pk is off, and then
# the key of a keyed table cannot be told from no key: never keyed (or unkeyed) on a guess.
REASON_NO_PK = "no pk: the key columns of this change cannot be known (wal2json's include-pk is off)"

_COLUMN = StructType(
    [
        StructField("name", StringType()),
        StructField("type", StringType()),
        StructField("value", StringType()),
    ]
)
_KEY = StructType([StructField("name", StringType()), StructField("type", StringType())])
CORRUPT = "_corrupt_record"
RECORD_SCHEMA = StructType(
    [
        StructField("action", StringType()),
        StructField("xid", StringType()),
        StructField("lsn", StringType()),
        StructField("timestamp", StringType()),
        StructField("schema", StringType()),
        StructField("table", StringType()),
        StructField("columns", ArrayType(_COLUMN)),
        StructField("identity", ArrayType(_COLUMN)),
        StructField("pk", ArrayType(_KEY)),
        StructField("transactional", StringType()),
        StructField("prefix", StringType()),
        StructField("content", StringType()),
        StructField(CORRUPT, StringType()),
    ]
)

# Spark's JSON reader turns a JSON float into a double before it becomes text (10.50 -> "10.5",
# a numeric(50,2) loses digits). Quoting every number that is the value of a "value" key first keeps
# its exact text. The look-behind skips a key whose quote is escaped, i.e. text inside a JSON string,
# and the look-ahead keeps an invalid number (1.2.3) invalid. The pattern starts with the literal key
# (the look-behind comes after it), so Java's regex engine skips through a line to each occurrence of
# the key (a Boyer-Moore search) instead of trying the whole pattern at every position: 5x faster.
_NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
_NUMBER_VALUE = r'"value"(?<!\\"value")(\s*:\s*)(' + _NUMBER + r")(?=\s*[,}\]])"
_QUOTED_NUMBER = '"value"$1"$2"'


# Higher-order functions (transform, filter, exists) are interpreted row by row, element by element;
# the helpers below use array and map functions that Spark compiles, and keep a lambda only for the
# rare multi-column key.


def column_names(cols: Column) -> Column:
    return cols["name"]


def values_map(cols: Column) -> Column:
    """Column name -> value text. The names must be known to be present and unique (``columns_ok``)."""
    return F.map_from_arrays(cols["name"], cols["value"])


def types_map(cols: Column) -> Column:
    """Column name -> the type wal2json sent for it (Postgres' ``format_type``, e.g. ``numeric(12,2)``)."""
    return F.map_from_arrays(cols["name"], cols["type"])


def key_text(pk: Column, values: Column) -> Column:
    """The key values in key order as a JSON array of texts; null when any is missing."""
    single = F.element_at(values, F.get(pk["name"], 0))
    texts = F.transform(pk, lambda k: F.element_at(values, k["name"]))
    return F.when(F.size(pk) == 1, F.when(single.isNotNull(), F.to_json(F.array(single)))).otherwise(
        F.when(F.size(F.filter(texts, lambda t: t.isNull())) == 0, F.to_json(texts))
    )


def has_key(pk: Column) -> Column:
    """The table has a primary key (wal2json sends ``"pk": []`` for one without)."""
    return F.coalesce(F.size(pk) > 0, F.lit(False))


def key_present(pk: Column, cols: Column) -> Column:
    """Every key column has a value in ``cols`` (whose names are known to be unique): where
    ``key_text`` over their map is not null, without building the map or the key's JSON. Every
    change that lands is checked: with ``columns_ok``'s one set, the landing pass of 1.07M changes to
    a ``noop`` sink took 12.5–13.2 s against 15.8–18.3 s (AMD, four runs each, alternating)."""
    names, values = column_names(cols), cols["value"]

    def value_of(name: Column) -> Column:
        # array_position is 1-based, 0 when absent: get(-1) is null.
        return F.get(values, (F.array_position(names, name) - 1).cast("int"))

    several = F.transform(pk, lambda k: value_of(k["name"]))
    return F.when(F.size(pk) == 1, value_of(F.get(pk["name"], 0)).isNotNull()).otherwise(
        F.size(F.filter(several, lambda t: t.isNull())) == 0
    )


def columns_ok(cols: Column) -> Column:
    """Every column has a name and no name repeats: taking away the null name and the repeats (one
    hash set, ``array_except``) leaves as many names. Not a sort for the nulls and a distinct for the
    repeats: that took twice as long."""
    found = column_names(cols)
    no_null_name = F.array(F.lit(None).cast(StringType()))
    return found.isNotNull() & (F.size(F.array_except(found, no_null_name)) == F.size(found))


# The fields that frame transactions, read without building a line's column arrays (``json_tuple``
# walks the object once and skips nested values).
FRAMING_FIELDS = ("action", "xid", "lsn", "timestamp", "transactional")


def _non_tx_message(r: Column) -> Column:
    """The record is a logical message sent outside any transaction (null when it has no action)."""
    return (r["action"] == CODE_MESSAGE) & (F.lower(r["transactional"]) == "false")


def _framing_error(line: Column, r: Column, malformed: Column) -> Column:
    """The checks a line's framing fields alone decide (empty, malformed, action, lsn, xid)."""
    code = r["action"]
    non_tx_message = _non_tx_message(r)
    return (
        # Only a line without an action can be empty: no other line is trimmed (a copy of its text).
        F.when(code.isNull() & (F.trim(line) == ""), F.lit(REASON_EMPTY))
        .when(malformed, F.lit(REASON_MALFORMED))
        .when(code.isNull(), F.lit(REASON_NO_ACTION))
        .when(~code.isin(KNOWN_CODES), F.concat(F.lit("unknown action '"), code, F.lit("'")))
        .when(F.col("lsn_value").isNull(), F.lit(REASON_BAD_LSN))
        .when(F.col("xid_value").isNull() & ~non_tx_message, F.lit(REASON_BAD_XID))
    )


def content_error(r: Column) -> Column:
    """The checks of a row change's columns, identity and key (null for any other record)."""
    code = r["action"]
    is_row_change = code.isin(ROW_CODES)
    values_src = F.when(code == CODE_DELETE, r["identity"]).otherwise(r["columns"])
    return (
        F.when(is_row_change & r["pk"].isNull(), F.lit(REASON_NO_PK))
        .when(is_row_change & values_src.isNull(), F.lit(REASON_NO_VALUES))
        .when(is_row_change & ~columns_ok(values_src), F.lit(REASON_BAD_COLUMNS))
        .when(
            (code == CODE_UPDATE) & r["identity"].isNotNull() & ~columns_ok(r["identity"]),
            F.lit(REASON_BAD_COLUMNS),
        )
        # Only reached once the names are known to be unique: a map of them cannot fail.
        # A delete's identity may lack the key (REPLICA IDENTITY USING INDEX): the key is resolved
        # downstream from it, so only an empty one leaves nothing to go on.
        .when((code == CODE_DELETE) & (F.size(values_src) == 0), F.lit(REASON_NO_VALUES))
        .when(
            is_row_change & (code != CODE_DELETE) & has_key(r["pk"]) & ~key_present(r["pk"], values_src),
            F.lit(REASON_KEY_MISSING),
        )
    )


def _with_codes(parsed: DataFrame, line_error: Column) -> DataFrame:
    # Three projections, not a column at a time (each step of a DataFrame is analysed when made):
    # line_error reads the values, code reads line_error.
    values, code = _code_columns()
    return parsed.withColumns(values).withColumn("line_error", line_error).withColumn("code", code)


@built_once
def _code_columns() -> tuple[dict[str, Column], Column]:
    """``_with_codes``' columns: the values the checks read, then the record's code."""
    r = F.col("r")
    values = {
        "lsn_value": lsn_to_bigint(r["lsn"]),
        "xid_value": r["xid"].cast("bigint"),
        "non_tx_message": F.coalesce(_non_tx_message(r), F.lit(False)),
    }
    return values, F.when(F.col("line_error").isNull(), r["action"])


def full_record(line: Column) -> Column:
    """The whole record, numbers in ``value`` kept as their exact text."""
    quoted = F.regexp_replace(line, F.lit(_NUMBER_VALUE), F.lit(_QUOTED_NUMBER))
    return F.from_json(quoted, RECORD_SCHEMA, {"mode": "PERMISSIVE"})


def parse(lines: DataFrame) -> DataFrame:
    """Lines -> lines with the parsed record ``r`` and every per-line check in ``line_error``."""
    record, line_error = _parse_columns()
    return _with_codes(lines.withColumn("r", record), line_error)


@built_once
def _parse_columns() -> tuple[Column, Column]:
    """``parse``'s columns: the whole record, and every check of it."""
    r = F.col("r")
    malformed = r.isNull() | r[CORRUPT].isNotNull()
    framing = _framing_error(F.col("line"), r, malformed)
    return full_record(F.col("line")), F.when(framing.isNotNull(), framing).otherwise(content_error(r))


def parse_framing(lines: DataFrame) -> DataFrame:
    """Lines -> lines with the framing fields in ``r`` (action, xid, lsn, timestamp, transactional) and
    the checks they decide in ``line_error``, without the line's text; what the framing needs, at a
    fraction of a full parse.

    The checks of a row change's content (``content_error``) are left to the full parse of the
    lines that land. ``json_tuple`` gives nulls for a line that is not a JSON object; only such a line
    is parsed in full here, to tell a malformed line from one without an action."""
    fields, record, line_error, kept = _framing_columns()
    tupled = lines.select("*", fields)
    parsed = tupled.withColumn("r", record).drop(*(f"_{name}" for name in FRAMING_FIELDS))
    return _with_codes(parsed, line_error).drop("line").withColumn("r", kept)


@built_once
def _framing_columns() -> tuple[Column, Column, Column, Column]:
    """``parse_framing``'s columns: the fields as ``json_tuple`` reads them, gathered in a record,
    the checks they decide, and what the framing keeps of the record."""
    fields = F.json_tuple(F.col("line"), *FRAMING_FIELDS).alias(*(f"_{name}" for name in FRAMING_FIELDS))
    record = F.struct(*(F.col(f"_{name}").alias(name) for name in FRAMING_FIELDS))
    # One reference to the full parse, under the condition: a second one would let Spark's common
    # subexpression elimination parse every line in full.
    whole = F.from_json(F.col("line"), RECORD_SCHEMA, {"mode": "PERMISSIVE"})
    malformed = F.when(F.col("r.action").isNull(), F.coalesce(whole[CORRUPT].isNotNull(), F.lit(True)))
    # Only what the framing reads is carried (it shuffles and caches these rows): the action, and the
    # time of a commit; not the text.
    r = F.col("r")
    kept = F.struct(
        r["action"].alias("action"), F.when(r["action"] == CODE_COMMIT, r["timestamp"]).alias("timestamp")
    )
    return fields, record, _framing_error(F.col("line"), r, malformed), kept
