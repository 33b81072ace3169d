"""The landing zone: listing its files, probing their format, reading them as numbered lines.

Paths go through Hadoop's FileSystem API (via the Spark session's JVM), so the landing zone can be
anything Spark reads: a local directory, ``s3a://``, ``abfss://``. Names starting with ``.`` or ``_``
are skipped, as Spark itself skips them: a writer can fill ``.part`` or ``_tmp`` files and rename them
into place once complete.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from python_jobs.ingest.changeset import FORMAT_DEBEZIUM, FORMAT_WAL2JSON
from python_jobs.ingest.errors import first_line

# How far into a file format detection looks for its first parsable line.
PROBE_LINES = 100
_DEBEZIUM_KEYS = {"payload", "schema", "op", "before", "after", "source", "key", "value", "status"}


class LandingError(RuntimeError):
    """The landing zone or one of its files cannot be used; the message is one line for the user."""


@dataclass(frozen=True)
class LandingFile:
    source_id: str
    path: str
    size: int
    modified_ms: int


def _fs(spark: SparkSession, path: str):
    jvm = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    return hpath, hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())


def _hidden(name: str) -> bool:
    return name.startswith((".", "_"))


def list_files(spark: SparkSession, landing: str, sources: list[str] | None) -> list[LandingFile]:
    """Every visible file under ``landing/<source_id>/`` (recursively), sorted by source and path."""
    root, fs = _fs(spark, landing)
    try:
        if not fs.exists(root) or not fs.getFileStatus(root).isDirectory():
            raise LandingError(f"landing path not found or not a directory: {landing}")
        folders = {st.getPath().getName(): st.getPath() for st in fs.listStatus(root) if st.isDirectory()}
    except LandingError:
        raise
    except Exception as exc:  # py4j wraps the JVM's IOException
        raise LandingError(f"cannot list landing path {landing}: {first_line(exc)}") from exc
    wanted = sources if sources else sorted(name for name in folders if not _hidden(name))
    missing = [s for s in wanted if s not in folders]
    if missing:
        raise LandingError(f"no folder for source '{missing[0]}' under landing path {landing}")
    found: list[LandingFile] = []
    for source_id in wanted:
        for st in _visible_files(fs, folders[source_id]):
            found.append(
                LandingFile(source_id, st.getPath().toString(), st.getLen(), st.getModificationTime())
            )
    return sorted(found, key=lambda f: (f.source_id, f.path))


def _visible_files(fs, folder) -> list:
    """The files under ``folder`` whose path has no hidden part, walked one folder at a time.

    A hidden name is dropped before anything else is asked of it: a writer's temporary file may be
    renamed or removed at any moment, and Hadoop's recursive listing asks each file's permissions
    (through ``ls`` on a local disk), which fails on a file that has just gone."""
    files, folders = [], [folder]
    while folders:
        for st in fs.listStatus(folders.pop()):
            if _hidden(st.getPath().getName()):
                continue
            if st.isDirectory():
                folders.append(st.getPath())
            else:
                files.append(st)
    return files


def detect_format(line: str) -> str | None:
    """The format of one JSON line, or None when it is not a JSON object of a known format."""
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    if "action" in obj:
        return FORMAT_WAL2JSON
    if _DEBEZIUM_KEYS & obj.keys():
        return FORMAT_DEBEZIUM
    return "unknown"


def probe(spark: SparkSession, path: str, detect: bool) -> str | None:
    """Open ``path`` (decompressing by its extension) and, when ``detect``, return the format of its
    first parsable line (None if no line in the first ``PROBE_LINES`` parses). Raises LandingError
    when the file cannot be read or its first JSON line is of no known format."""
    jvm = spark.sparkContext._jvm
    hpath, fs = _fs(spark, path)
    try:
        stream = fs.open(hpath)
        codec = jvm.org.apache.hadoop.io.compress.CompressionCodecFactory(
            spark.sparkContext._jsc.hadoopConfiguration()
        ).getCodec(hpath)
        if codec is not None:
            stream = codec.createInputStream(stream)
        reader = jvm.java.io.BufferedReader(jvm.java.io.InputStreamReader(stream, "UTF-8"))
        try:
            for _ in range(PROBE_LINES if detect else 1):
                line = reader.readLine()
                if line is None or not detect:
                    return None
                fmt = detect_format(line)
                if fmt == "unknown":
                    raise LandingError(
                        f"cannot detect the format of {path}: its first JSON line is neither wal2json "
                        "nor Debezium (pass --format)"
                    )
                if fmt is not None:
                    return fmt
            return None
        finally:
            reader.close()
    except LandingError:
        raise
    except Exception as exc:
        raise LandingError(f"cannot read landing file {path}: {first_line(exc)}") from exc


# Characters Hadoop's glob reads as a pattern; Spark globs every path it is given to read.
_GLOB_CHARS = frozenset("{}[]*?\\")


def _readable(paths: list[str]) -> list[str]:
    """The paths as Spark's reader takes them literally: glob characters escaped."""
    return ["".join("\\" + c if c in _GLOB_CHARS else c for c in path) for path in paths]


def _landing_path(url: Column) -> Column:
    """The file a row was read from (its ``_metadata.file_path``), named as ``list_files`` names it.

    Spark gives the file's URL (``land%20ing/50%25/a%23b``) where Hadoop's listing gives the path as
    it is (``land ing/50%/a#b``). ``url_decode`` is form decoding, which reads ``+`` as a space: a
    ``+`` in a URL is a literal ``+``, so it is escaped first."""
    return F.url_decode(F.replace(url, F.lit("+"), F.lit("%2B")))


def _blocks(spark: SparkSession, read: DataFrame, plan: DataFrame) -> tuple[DataFrame, dict[str, int]]:
    """Per block of a file as Spark split it (its URL, its byte offset, the id of its first line): the
    number of that first line in its file, from the line counts of the file's blocks before it, and
    the file's row of ``plan``; and per file (named as listed), the lines counted in it.

    One row per block comes to the driver (a handful per file); the lines are numbered where they are
    read, without a window over them, and matched to their planned file by one broadcast join."""
    counted = (
        read.groupBy("_url", "_block")
        .agg(F.min("_id").alias("_first_id"), F.count(F.lit(1)).alias("_lines"))
        .withColumn("landing_file", _landing_path(F.col("_url")))
    )
    starts, next_line = [], {}
    for row in sorted(counted.collect(), key=lambda r: (r["_url"], r["_block"])):
        first = next_line.get(row["_url"], 1)
        starts.append((row["_url"], row["_block"], row["_first_id"], first, row["landing_file"]))
        next_line[row["_url"]] = first + row["_lines"]
    blocks = spark.createDataFrame(
        starts, "_url string, _block bigint, _first_id bigint, _first_line bigint, landing_file string"
    )
    names = {url: name for url, _, _, _, name in starts}
    counted = {names[url]: last - 1 for url, last in next_line.items()}
    return blocks.join(plan, on="landing_file", how="inner"), counted


def read_lines(spark: SparkSession, plan: DataFrame, paths: list[str]) -> tuple[DataFrame, dict[str, int]]:
    """The planned files as numbered lines: (source_id, landing_file, file_no, landing_line, line,
    source_format); and per file, the lines counted in it when its blocks were numbered (what the
    batch's outcomes must reach: ``accounting.check_lines_counted``).

    ``plan`` has (landing_file, file_no, source_id, source_format, from_line); only lines from
    ``from_line`` on are kept. Lines end at ``\\n`` alone (a trailing one does not make an extra empty
    line) and ``\\r\\n`` endings lose their ``\\r``.

    Spark's line reader splits a large file in blocks read by several tasks (a gzip file is one
    block). Within a task, ``monotonically_increasing_id`` numbers the lines of a block in order and
    without gaps, so a line's number is its block's first line number (``_blocks``, one small
    aggregate) plus its distance from the block's first id. The ids are the same in every action
    over these lines: they depend only on how the files are split, which their sizes and the split
    settings fix. The settings include the cores Spark sees, which can change between the actions of
    a batch on a cluster: the job pins them for each batch (``job.SPLIT_SETTINGS``), and checks that
    every file's outcomes reach the lines counted here, so a scan split otherwise fails the batch
    instead of dropping lines.
    """
    read = (
        spark.read.option("lineSep", "\n")
        .text(_readable(paths))
        .select(
            F.col("_metadata.file_path").alias("_url"),
            F.col("_metadata.file_block_start").alias("_block"),
            F.monotonically_increasing_id().alias("_id"),
            "value",
        )
    )
    blocks, counted = _blocks(spark, read.drop("value"), plan)
    landing_line = (F.col("_first_line") + F.col("_id") - F.col("_first_id")).cast("bigint")
    value = F.col("value")
    lines = (
        read.join(F.broadcast(blocks), on=["_url", "_block"], how="inner")
        .withColumn("landing_line", landing_line)
        .where(F.col("landing_line") >= F.col("from_line"))
        .select(
            "source_id",
            "landing_file",
            "file_no",
            "landing_line",
            # A test, not a regex: a regex is tried at every position of the line.
            F.when(value.endswith("\r"), F.expr("substring(value, 1, length(value) - 1)"))
            .otherwise(value)
            .alias("line"),
            "source_format",
        )
    )
    return lines, counted
