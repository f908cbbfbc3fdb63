"""zlbench ab: side environments, the liveness check on kept caches, and a real CPU A/B."""

import json
import os
from pathlib import Path

import click
import pytest

from conftest import zlbench
from test_tuner_cache_liveness import put
from zlbench import ab

REPO = Path(__file__).resolve().parents[1]

def test_side_envs_toggle_the_switch_and_keep_caches():
    a, b = ab.side_envs("MY_PASS", {"X": "1"}, {})
    assert a == {"MY_PASS": "0", "X": "1", ab.KEEP_TRITON_CACHE_ENV: "1"}
    assert b == {"MY_PASS": "1", ab.KEEP_TRITON_CACHE_ENV: "1"}


def test_identical_sides_and_knob_switches_are_refused():
    with pytest.raises(click.UsageError, match="identically"):
        ab.side_envs(None, {"X": "1"}, {"X": "1"})
    with pytest.raises(click.UsageError, match="USE_FLAGTUNE is a zlbench knob"):
        ab.side_envs("USE_FLAGTUNE", {}, {})


def _side(tmp_path, side, op, block, ptx="mov.u32"):
    cache_root = tmp_path / "tmp" / f"zlbench-tuner-{side}-{op}"
    put(cache_root / "triton", "H0", f"{op}_kernel", block, ptx=ptx)
    run_dir = tmp_path / side / op
    run_dir.mkdir(parents=True)
    (run_dir / "run_identity.json").write_text(json.dumps({"triton_cache_dir": str(cache_root / "triton")}))
    return cache_root


def test_liveness_identical_is_loud_and_caches_are_dropped(tmp_path):
    roots = [_side(tmp_path, "A", "mm", 64), _side(tmp_path, "B", "mm", 64)]
    verdict, reports, lines = ab.check_liveness(tmp_path / "A", tmp_path / "B")
    assert verdict == "identical" and set(reports) == {"mm"} and lines
    assert "IDENTICAL" in ab.liveness_banner(verdict, "MY_PASS=1", 1)
    assert not any(r.exists() for r in roots)


def test_liveness_live_when_one_operator_compiled_differently(tmp_path):
    _side(tmp_path, "A", "mm", 64, ptx="mov.u32")
    _side(tmp_path, "B", "mm", 64, ptx="mad.lo.s32")
    _side(tmp_path, "A", "addmm", 32)
    _side(tmp_path, "B", "addmm", 32)
    verdict, reports, _ = ab.check_liveness(tmp_path / "A", tmp_path / "B")
    assert verdict == "live" and reports["mm"]["verdict"] == "live"
    assert reports["addmm"]["verdict"] == "identical"


def test_liveness_is_identical_only_when_every_operator_is(tmp_path):
    _side(tmp_path, "A", "mm", 64)
    _side(tmp_path, "B", "mm", 64)
    _side(tmp_path, "A", "addmm", 32)
    _side(tmp_path, "B", "addmm", 32, ptx="mov.u32")
    # B's addmm kernel came from a front end A never compiled: that cannot be judged.
    put(tmp_path / "tmp" / "zlbench-tuner-B-addmm" / "triton", "H1", "other_kernel", 16)
    verdict, reports, _ = ab.check_liveness(tmp_path / "A", tmp_path / "B")
    assert reports["mm"]["verdict"] == "identical" and reports["addmm"]["verdict"] == "inconclusive"
    assert verdict == "inconclusive" and "inconclusive" in ab.liveness_banner(verdict, "X=1", 2)
    assert [ab.overall_verdict(v) for v in ([], ["empty"], ["identical", "empty"], ["identical"])] == [
        "empty", "empty", "empty", "identical"]


def test_caches_kept_by_set_aside_attempts_are_dropped_too(tmp_path):
    kept = [_side(tmp_path, "A", "mm", 64), _side(tmp_path, "B", "mm", 64)]
    retried = tmp_path / "A" / "set-aside" / "mm" / "attempt-1"
    retried.mkdir(parents=True)
    cache_root = tmp_path / "tmp" / "zlbench-tuner-A-mm-attempt-1"
    put(cache_root / "triton", "H0", "mm_kernel", 32)
    (retried / "run_identity.json").write_text(json.dumps({"triton_cache_dir": str(cache_root / "triton")}))
    verdict, reports, _ = ab.check_liveness(tmp_path / "A", tmp_path / "B")
    assert set(reports) == {"mm"} and verdict == "identical"   # the set-aside run is not compared
    assert not any(r.exists() for r in [*kept, cache_root])


def test_ab_that_cannot_start_exits_2_without_a_traceback(tmp_path):
    proc = zlbench("ab", "--switch", "ZL_SAMPLE_SWITCH", "--ops", "abs", "--backend", "no-such-vendor",
                   "--out", tmp_path / "ab", timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "zlbench ab:" in proc.stderr and "Traceback" not in proc.stderr


def test_ab_on_the_sample_corpus(tmp_path):
    out = tmp_path / "ab"
    proc = zlbench("ab", "--switch", "ZL_SAMPLE_SWITCH", "--ops", "abs", "--dtypes", "float32",
                   "--backend", "cpu", "--out", out, timeout=300)
    # Measured and paired, but the switch was not shown live: not a pass.
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "could not be shown live (default-shapes: empty)" in proc.stderr
    assert "--allow-unverified-switch" in proc.stderr
    record = json.loads((out / "ab.json").read_text())
    (shape_set,) = record["shape_sets"]
    assert shape_set["a"]["env"]["ZL_SAMPLE_SWITCH"] == "0"
    assert shape_set["b"]["env"]["ZL_SAMPLE_SWITCH"] == "1"
    # No triton on a CPU machine: the axis cannot be proven live, and the output says so.
    assert shape_set["liveness"] == "empty" and "could not be checked" in proc.stdout
    assert "Paired 3 rows" in proc.stdout
    for side in ("A", "B"):
        ident = json.loads((out / side / "abs" / "run_identity.json").read_text())
        assert ident["tuner_cache"] == "isolated"
        assert not Path(ident["triton_cache_dir"]).exists(), "kept caches are dropped after the check"


def test_ab_rechecks_its_slower_rows_in_fresh_processes_on_the_sample_corpus(tmp_path):
    """B's abs made twice as slow by real work in its benchmark process
    (benchmarks/slowdown_plugin.py, on side B and its re-check alike): the re-check runs
    abs again on both sides and reproduces the verdict."""
    out = tmp_path / "ab"
    slow = [f"--b-env={k}={v}" for k, v in (
        ("PYTEST_ADDOPTS", "-p slowdown_plugin"), ("ZL_SLOW_OP", "abs"), ("ZL_SLOW_PCT", "100"),
        ("PYTHONPATH", os.pathsep.join([str(REPO / "benchmarks"), os.environ.get("PYTHONPATH", "")])))]
    proc = zlbench("ab", "--a-env", "ZL_SAMPLE_SWITCH=0", *slow, "--ops", "abs", "--dtypes", "float32",
                   "--backend", "cpu", "--out", out, "--allow-unverified-switch", "--format", "json",
                   timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if "re-check of" not in proc.stdout:
        # A loaded 2-core VM can mark every row of a side host_slow (UNKNOWN): then no row
        # is SLOWER and nothing needs a re-check (test_run_recheck_* covers the runs).
        doc = json.loads(proc.stdout[proc.stdout.index("{"):proc.stdout.rindex("}") + 1])
        assert all(p["measured_throttled"] for p in doc["pairs"]), doc["pairs"]
        pytest.skip("every abs row was measured throttled on this machine: no SLOWER row to re-check")
    assert "re-check of 1 operators with SLOWER/FASTER rows: abs" in proc.stdout
    (shape_set,) = json.loads((out / "ab.json").read_text())["shape_sets"]
    assert [Path(side["dir"]).name for side in shape_set["recheck"]] == ["A-recheck", "B-recheck"]
    doc = json.loads(proc.stdout[proc.stdout.index("{"):proc.stdout.rindex("}") + 1])
    outcomes = {p["shape"]: p["recheck"] for p in doc["pairs"] if p["verdict"] == "SLOWER"}
    # What each row was judged and re-checked as, and the slowdown each B process achieved:
    # what a failure here needs to be told apart (a miscalibrated slowdown, a lost row).
    achieved = {side: (out / side / "abs" / "slowdown.jsonl").read_text()
                if (out / side / "abs" / "slowdown.jsonl").is_file() else None for side in ("B", "B-recheck")}
    judged = [{k: p.get(k) for k in ("shape", "a_ms", "b_ms", "verdict", "change", "why", "recheck")}
              for p in doc["pairs"]]
    assert outcomes, (judged, achieved)
    # Each SLOWER row is read slower again, or the re-check measured it throttled (this
    # VM marks rows host_slow at random): never "not reproduced", which would make it SAME.
    assert all(o.startswith("reproduced (SLOWER") or (o.startswith("inconclusive (UNKNOWN")
                                                      and "measured throttled" in o)
               for o in outcomes.values()), outcomes
    if not any(o.startswith("reproduced") for o in outcomes.values()):
        pytest.skip(f"every re-checked row was measured throttled on this machine: {outcomes}")
    for side in ("A-recheck", "B-recheck"):
        ident = json.loads((out / side / "abs" / "run_identity.json").read_text())
        assert ident["tuner_cache"] == "isolated"
        assert not Path(ident["triton_cache_dir"]).exists(), "kept caches are dropped after the re-check"


def test_run_recheck_runs_the_operators_with_real_verdicts_on_both_sides_in_fresh_batches(tmp_path):
    """ab.run_recheck on a recorded A/B whose abs rows are 30% slower in B: it runs abs
    (not sum) again on the sample corpus as A (side A's environment) and as B, each
    replaying A's configs, and drops the Triton caches they kept."""
    from test_summary_actionable import _batch

    from zlbench import knobs

    root = tmp_path / "ab"
    _batch(root / "A", lambda op, d, s: 0.1)
    _batch(root / "B", lambda op, d, s: 0.13 if op == "abs" else 0.1)
    settings = knobs.resolve({"backend": "cpu", "dtypes": "float32", "isolate_tuner_cache": True},
                             {}, names=knobs.MEASURE_KNOBS)
    env_a, env_b = ab.side_envs("ZL_SAMPLE_SWITCH", {}, {})

    def shape_set(where):
        return ab.ShapeSetResult("s", ab.SideResult("A", where / "A", env_a, 0),
                                 ab.SideResult("B", where / "B", env_b, 0))

    sides = ab.run_recheck(shape_set(root), settings, {"ops": None, "devices": None})
    assert sides is not None
    assert [(s.name, s.batch_dir.name, s.exit_code) for s in sides] == [("A", "A-recheck", 0), ("B", "B-recheck", 0)]
    for side, switch in zip(sides, ("0", "1")):
        assert [p.name for p in side.batch_dir.iterdir() if (p / "run.log").is_file()] == ["abs"]
        ident = json.loads((side.batch_dir / "abs" / "run_identity.json").read_text())
        assert ident["tuner_cache"] == "isolated" and side.env["ZL_SAMPLE_SWITCH"] == switch
        assert not Path(ident["triton_cache_dir"]).exists(), "kept caches are dropped after the re-check"
    # Nothing to re-check when no row is SLOWER or FASTER.
    same = tmp_path / "same"
    _batch(same / "A", lambda op, d, s: 0.1)
    _batch(same / "B", lambda op, d, s: 0.1)
    assert ab.run_recheck(shape_set(same), settings, {"ops": None, "devices": None}) is None
    assert not (same / "A-recheck").exists()


@pytest.mark.parametrize("verdict,allow,code", [
    ("live", False, 0), ("identical", False, 4), ("inconclusive", False, 4),
    ("empty", True, 0), ("identical", True, 0),
])
def test_ab_exit_code_follows_the_liveness_of_the_switch(monkeypatch, tmp_path, verdict, allow, code):
    from click.testing import CliRunner

    from zlbench import ab

    side = lambda name: ab.SideResult(name, tmp_path / name, {}, 0)  # noqa: E731
    monkeypatch.setattr(ab, "run_ab", lambda *a, **k: [ab.ShapeSetResult("s", side("A"), side("B"), {}, verdict)])
    monkeypatch.setattr(ab, "print_pairing", lambda *a, **k: True)
    args = ["--switch", "X", "--ops", "abs", "--backend", "cpu", "--out", str(tmp_path)]
    result = CliRunner().invoke(ab.ab_command, args + (["--allow-unverified-switch"] if allow else []))
    assert result.exit_code == code, result.output
    assert ("could not be shown live" in result.output) == (code == 4)
