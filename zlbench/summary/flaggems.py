"""A FlagGems tools/run_tests.py output dir read as a summary input.

Such a dir holds ``summary.json`` and ``<op>/performance_result.json`` (the benchmark's
``--record json``), no run.log: its rows come from those files (zlbench/corpus/results.py
reads them), each operator's status from summary.json. Its runs carry a stand-in
identity (level, FlagGems' own timer, the device model from its env), so that an A/B
against a zlbench batch shows, and refuses without --allow-caliber-mismatch, that the
two sides were timed differently.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, List

from zlbench import rundir
from zlbench.corpus import results as fg
from zlbench.runlog import Issue, Row, value_problem
from zlbench.summary.sources import RunLog, SummaryInputError

FORMAT = "flaggems"
# FlagGems' kernel mode: triton's do_bench per side, its L2 flush, no graph.
TIMER = "flaggems do_bench"
# run_tests.py's performance status -> zlbench's operator status.
STATUS = {
    fg.PASSED: "ok",
    fg.FAILED: "failed",
    fg.TIMEOUT: "timeout",
    fg.SKIPPED: "skipped",
    fg.NOT_FOUND: "skipped",
    fg.ERROR: "failed",
}


def is_results_dir(path: Path) -> bool:
    """A run_tests.py output dir: its summary.json, and none of a zlbench batch's files
    (a zlbench batch writes a summary.json too, beside its ops_status.csv)."""
    path = Path(path)
    return (
        path.is_dir()
        and rundir.fg_summary_path(path).is_file()
        and not os.path.lexists(rundir.status_path(path))
        and not os.path.lexists(rundir.plan_path(path))
        and not any(rundir.SHARD_DIR_RE.match(p.name) for p in path.iterdir())
    )


def _identity(doc: dict, op: str, level: str) -> dict:
    env = doc.get("env") if isinstance(doc.get("env"), dict) else {}
    torch_env = env.get("torch") if isinstance(env.get("torch"), dict) else {}
    gems = env.get("flag_gems") if isinstance(env.get("flag_gems"), dict) else {}
    identity: Dict[str, Any] = {"op": op, "timer": TIMER, "source": "FlagGems tools/run_tests.py"}
    stamp = doc.get("timestamp")
    if isinstance(stamp, str) and stamp:
        # run_tests.py writes its end time as "%Y-%m-%d %H:%M:%S" (local time).
        identity["started"] = stamp.replace(" ", "T", 1)
    if level:
        identity["level"] = level
    if torch_env.get("device_name"):
        identity["device"] = {"model": torch_env["device_name"]}
    if gems.get("version"):
        identity["versions"] = {"flag_gems": gems["version"]}
    return identity


def read_results(path: Path):
    """(runs, rows, issues, statuses) of a run_tests.py output dir."""
    path = Path(path)
    try:
        doc, ops, problems = fg.read_results_dir(path)
    except fg.ResultFileError as e:
        raise SummaryInputError(f"{e}: pass a run_tests.py output dir, a run dir or a batch dir") from None
    issues: List[Issue] = [Issue("bad_result_file", p, source=str(path)) for p in problems]
    runs: List[RunLog] = []
    rows: List[Row] = []
    statuses: Dict[str, Dict[str, Any]] = {}
    # summary.json's own data does not say the level: the dir's records do.
    levels = {r.level for result in ops for r in result.rows if r.level}
    dir_level = next(iter(levels)) if len(levels) == 1 else ""
    for result in ops:
        status = STATUS.get(result.status, "failed")
        statuses[result.op] = rundir.status_row(
            result.op,
            status,
            exit_code=result.exit_code,
            total_s=result.duration_s,
            reason=result.reason.splitlines()[0] if result.reason else "",
            run_dir=result.op,
        )
        if status != "ok":
            why = f": {result.reason.splitlines()[0]}" if result.reason else ""
            issues.append(
                Issue(
                    f"op_{status}",
                    f"run_tests.py status {result.status}{why}",
                    op=result.op,
                    source=result.source,
                )
            )
        level = next((r.level for r in result.rows if r.level), dir_level)
        run_dir = path / result.op
        run = RunLog(Path(result.source), run_dir, result.op, _identity(doc, result.op, level), True)
        runs.append(run)
        for n, rec in enumerate(result.rows, 1):
            row = Row(rec.op, rec.dtype, rec.mode, rec.level, rec.shape, "SUCCESS", n, "")
            row.torch_ms, row.gems_ms, row.speedup = rec.torch_ms, rec.gems_ms, rec.speedup
            row.torch_gbps, row.gems_gbps, row.tflops = rec.torch_gbps, rec.gems_gbps, rec.tflops
            row.key = (rec.op, rec.dtype, fg.canonical_shape(rec.shape))
            row.run_dir = str(run_dir)
            row.timer = TIMER
            if rec.error or rec.gems_ms is None:
                row.status = "FAILED"
            row.problem = value_problem(row)
            if row.problem:
                issues.append(Issue("bad_value", row.problem, rec.op, rec.dtype, n, result.source))
            rows.append(row)
    # summary.json's own data does not say the mode and level: the dir's records do.
    for attr in ("mode", "level"):
        seen = {getattr(r, attr) for r in rows if getattr(r, attr)}
        if len(seen) == 1:
            for r in rows:
                setattr(r, attr, getattr(r, attr) or next(iter(seen)))
    if not runs:
        raise SummaryInputError(f"{rundir.fg_summary_path(path)} lists no operator")
    return runs, rows, issues, statuses
