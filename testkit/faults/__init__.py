"""Fault injection: kill -9 the pipeline at random points, rerun it, compare with an undisturbed run.

The pipeline is one process that lands the landing zone (the ingestion job) and runs the dbt models
on the same Spark session (``step``). ``inject`` builds a seeded sample landing zone, delivers it in
two rounds, and runs the pipeline twice over it in separate warehouses:

- the reference: each round once, undisturbed (and checked against the sample's expected state),
  on the injector's own Spark session (``Reference``: the test session's under pytest), since
  nothing kills it; the faulted steps then also run on other JIT and code-generation settings than
  the run they must equal (``STEP_JVM_OPTIONS``);
- the faulted run: each round's pipeline is killed with SIGKILL (the whole process group: Python
  and its Spark JVM, as when a machine dies) at random points, then rerun until it completes. Kill
  points are counted in files written under the warehouse since the run started (Delta data
  files and commits of every table, so a point falls before, inside or after any write of the
  ingestion job or of a dbt MERGE), or in seconds (during start-up and reading), or are "mid-merge":
  a model's new data files exist and its Delta commit does not yet. The process that completes
  round 1 stays and is round 2's first run (killed mid-merge): one JVM start fewer. Then every
  landing file is delivered again under a new name and two pipelines are started at once: one
  gives way, the other recovers round 2 and lands the replay.

After every round the faulted warehouse must equal the reference, table by table and row for row
(timestamps of the run itself left out); after the replay, the raw tables' rows of the reference's
batches must equal the reference's and the replay's batches hold only copies. The figures (kills,
rows lost, rows duplicated) end in one summary line. Each step's log (run_<n>.log, the reference's
run_round<n>.log) says how long its parts took (``step:`` lines). ``scripts/faults.sh`` runs many
kills; the test suite runs a few (tests/python/test_faults.py).

One part of it a module:

- ``pipeline``: the step (the process that is killed), its environment and the dump of its tables;
- ``plan``: the kill points, and the delivery of sample files into a landing zone;
- ``runs``: the faulted warehouse (steps run, killed, kept to run again) and the reference;
- ``comparison``: the comparisons with the reference after each round and after the replay, and
  ``Report``, their summary;
- ``injection``: ``inject``, the whole course (the sample, the reference's rounds, the faulted
  rounds, the runs at once);
- ``__main__``: the command line (``python -m testkit.faults step`` and ``... inject``).
"""

from __future__ import annotations

from testkit.faults.comparison import Report, check_replay, compare
from testkit.faults.injection import inject
from testkit.faults.pipeline import STEP_JVM_OPTIONS, STEP_SPARK_CONF, pipeline, step
from testkit.faults.plan import Kill, deliver, plan_kills
from testkit.faults.runs import Reference, Warehouse

__all__ = [
    "STEP_JVM_OPTIONS",
    "STEP_SPARK_CONF",
    "Kill",
    "Reference",
    "Report",
    "Warehouse",
    "check_replay",
    "compare",
    "deliver",
    "inject",
    "pipeline",
    "plan_kills",
    "step",
]
