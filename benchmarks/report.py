"""The report a run prints: its command and variant, the main zone, a table of stages, the goals'
verdicts and the checks; and the one summary line it ends with.

A stage's "vs parse" is its seconds as a multiple of the raw parse's, for the stages on the whole
main zone; "peak MB" the driver's peak resident set over the stage (benchmarks/memory.py). A goal's
verdict is MET or NOT MET, or "info" for a ratio with no goal. The run exits 1 when a check failed;
a goal not met only shows in the report.
"""

from __future__ import annotations

from benchmarks.results import Results, short


def report(results: Results, parse_seconds: float | None) -> str:
    """The report's text, ``parse_seconds`` the raw parse's (None where it did not run)."""
    out = [f"command: {results.command}", f"variant: {results.variant}"]
    main = results.generated.get(short(results.changes))
    if main:
        out.append(
            f"main zone (increment included): {main['changes']:,} changes, "
            f"{main['bytes'] / 2**20:,.0f} MB in {main['files']} files + {main['copies']} copies; "
            f"{main['inserts']:,} inserts, {main['updates']:,} updates ({main['key_moves']:,} key moves, "
            f"{main['omitted']:,} without doc), {main['deletes']:,} deletes; {main['live']:,} live records"
        )
    out.append("")
    out.append(
        f"{'stage':<58} {'seconds':>8} {'changes':>11} {'changes/s':>11} {'vs parse':>8} {'peak MB':>8}"
    )
    out.append("-" * 109)
    for st in results.stages:
        vs = f"{st.seconds / parse_seconds:.2f}x" if parse_seconds and st.changes >= results.changes else ""
        model = f" (model {st.model_seconds:.1f}s)" if st.model_seconds is not None else ""
        out.append(
            f"{st.name:<58} {st.seconds:>8.1f} {st.changes:>11,} {st.rate:>11,.0f} {vs:>8} "
            f"{st.peak_mb:>8,.0f}{model}"
        )
    out += ["", "goals:"]
    for goal, measured, met in results.goals:
        verdict = "info   " if goal.startswith("(info)") else "MET    " if met else "NOT MET"
        out.append(f"  {verdict}  {goal:<62} {measured}")
    out += ["", "checks:"]
    for what, ok, detail in results.checks:
        out.append(f"  {'ok    ' if ok else 'FAILED'}  {what}: {detail}")
    return "\n".join(out)


def summary(results: Results, wide: bool, seconds: float) -> str:
    """The last line: the size, the variant's shape, the goals met and the checks failed."""
    failed = [c for c in results.checks if not c[1]]
    met = sum(1 for g in results.goals if g[2] and not g[0].startswith("(info)"))
    goals = sum(1 for g in results.goals if not g[0].startswith("(info)"))
    shape = "wide" if wide else "narrow"
    return (
        f"\nbench: {short(results.changes)} changes ({shape}), {goals} goals, {met} met, "
        f"{len(failed)} checks failed, {seconds:.0f}s in all"
    )
