"""The selections the README gives a scheduled run and the daily checks (selectors.yml): a scheduled
build is every seed, model and snapshot with the data tests but the history's; `history`'s tests
are those that read a model growing with the change history; together they are the whole build."""

from __future__ import annotations

from model_helpers import dbt_ls as listed

BUILT = {"model", "seed", "snapshot"}


def test_a_scheduled_build_runs_every_model_and_the_tests_that_do_not_read_the_whole_history():
    everything = listed()
    scheduled = listed("--selector", "scheduled")
    history = listed("--selector", "history")
    history_models = {name for name, node in history.items() if node["resource_type"] == "model"}
    assert history_models == {"stg_wal__events", "int_events_consumable", "sequin_events", "record_history"}

    def kind(nodes: dict, *kinds: str) -> set[str]:
        return {name for name, node in nodes.items() if node["resource_type"] in kinds}

    def reads_history(node: dict) -> bool:
        return any(parent.split(".")[-1] in history_models for parent in node["depends_on"]["nodes"])

    # every seed, model and snapshot; no unit test (CI runs them)
    assert kind(scheduled, *BUILT) == kind(everything, *BUILT)
    assert kind(everything, "unit_test") and not kind(scheduled, "unit_test")
    # the data tests: those of the history apart, the rest in every scheduled run
    history_tests, scheduled_tests = kind(history, "test"), kind(scheduled, "test")
    assert not history_tests & scheduled_tests
    assert history_tests | scheduled_tests == kind(everything, "test")
    assert all(reads_history(history[name]) for name in history_tests)
    assert not any(reads_history(scheduled[name]) for name in scheduled_tests)
    # the independent fold of the whole log, and the uniqueness of every change, wait for the daily run
    assert {"assert_consumer_records_match_sequin_events", "unique_sequin_events_seq"} <= history_tests
    consumer_records_unique = (
        "unique_combination_consumer_records_consumer_name__source_id__source_schema__source_table__record_pk"
    )
    assert consumer_records_unique in scheduled_tests
