"""The gc_freeze plugin in a real pytest process: what collection left is frozen, a row's
own garbage (cycles included) is still freed, and ZL_GC_FREEZE=0 leaves the process as
plain pytest has it."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path


BENCH = textwrap.dedent(
    """
    import gc, json, os, weakref

    LONG_LIVED = [[i] for i in range(50_000)]  # stands in for the library's objects


    class Row:
        pass


    def test_row():
        row = Row()
        row.self = row  # a cycle: only the collector frees it, as FlagGems' gc.collect() does
        freed = []
        weakref.finalize(row, freed.append, True)
        del row
        gc.collect()
        with open(os.environ["SEEN"], "w") as f:
            json.dump({"freeze_count": gc.get_freeze_count(), "cycle_freed": freed == [True]}, f)
    """
)


def run_bench(tmp_path: Path, **env_extra):
    (tmp_path / "test_bench.py").write_text(BENCH)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    seen = tmp_path / "seen.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZL_")}
    env.update(ZL_RUN_DIR=str(run_dir), SEEN=str(seen), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", **env_extra)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-p", "zlbench.plugins.gc_freeze",
         "test_bench.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((run_dir / "plugins" / "gc_freeze.json").read_text())
    return json.loads(seen.read_text()), report, proc.stdout


def test_collection_survivors_are_frozen_and_a_rows_cycles_still_go(tmp_path):
    seen, report, _ = run_bench(tmp_path)
    assert report["enabled"] is True
    assert seen["freeze_count"] >= 50_000 and report["frozen"] >= seen["freeze_count"]
    assert seen["cycle_freed"] is True
    # A full collection after freezing visits only what is new: far shorter.
    assert report["collect_ms_after"] < report["collect_ms_before"]


def test_off_leaves_the_collector_alone(tmp_path):
    seen, report, _ = run_bench(tmp_path, ZL_GC_FREEZE="0")
    assert report == {"enabled": False}
    assert seen["freeze_count"] == 0 and seen["cycle_freed"] is True


def test_a_bad_value_is_named_and_nothing_is_frozen(tmp_path):
    seen, report, stdout = run_bench(tmp_path, ZL_GC_FREEZE="maybe")
    assert "ZL_GC_FREEZE" in stdout and "not freezing" in stdout
    assert seen["freeze_count"] == 0
    assert report["enabled"] is False and "ZL_GC_FREEZE" in report["error"]


def test_the_knob_reaches_the_benchmark_process_and_is_not_caliber():
    from zlbench import knobs

    knob = knobs.BY_NAME["gc_freeze"]
    assert knob.child and not knob.caliber and knob.default is True
