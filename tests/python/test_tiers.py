"""The fast tier (``make check``: ``pytest -m "not slow and not postgres"``) is what conftest.py's
markers make it: no module of SLOW_MODULES and none of SLOW_TESTS, no test that uses the ``postgres``
fixture, and the dbt unit tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import SLOW_MODULES, SLOW_TESTS

PROJECT_DIR = Path(__file__).resolve().parents[2]


def collected(marker_expression: str) -> set[str]:
    """The test ids pytest collects under ``-m marker_expression``, without running anything."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider"]
        + ["-m", marker_expression, "tests/python"],
        cwd=PROJECT_DIR,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {line for line in done.stdout.splitlines() if "::" in line}


def module_of(test: str) -> str:
    return test.split("::")[0].rpartition("/")[2].removesuffix(".py")


def test_the_fast_tier_leaves_out_the_slow_tests_and_the_tests_that_need_postgres():
    fast = collected("not slow and not postgres")
    assert not {module_of(test) for test in fast} & SLOW_MODULES
    assert "test_mirrors_live" not in {module_of(test) for test in fast}  # all use the postgres fixture
    capture = {test.split("::")[1] for test in fast if module_of(test) == "test_capture"}
    assert "test_replay_of_real_fixture_equals_its_expected_state" in capture  # pure Python
    assert "test_landed_lines_equal_what_the_slot_decodes" not in capture  # the postgres fixture
    assert "tests/python/test_dbt_unit.py::test_every_unit_test_passes_on_empty_tables" in fast
    slow = collected("slow")
    assert {module_of(test) for test in slow} >= SLOW_MODULES
    # Each single slow test names one that exists, and only it leaves its module's fast tier.
    single = {test.rpartition("/")[2] for test in slow if module_of(test) not in SLOW_MODULES}
    assert single == SLOW_TESTS
