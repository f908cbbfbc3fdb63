"""benchmarks/screen_throughput.py: the stratified sample's rule, and a CPU smoke run over
the bundled sample whose figures agree with the batches' own records."""

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_script

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "screen_throughput.py"


def test_the_sample_is_the_smallest_hashes_of_the_largest_kinds_every_time(tmp_path):
    st = load_script("screen_throughput")
    conf = tmp_path / "conf"
    conf.mkdir()
    ops = [{"id": f"m{i}", "kind": ["Math"], "labels": ["pointwise"]} for i in range(9)]
    ops += [{"id": f"t{i}", "kind": ["Tensor"]} for i in range(5)]
    ops += [{"id": "b0", "kind": "BLAS"}, {"id": "no_kind"}]
    (conf / "operators.yaml").write_text(json.dumps({"ops": ops}))  # JSON is YAML
    kinds = st.operator_kinds(str(tmp_path))
    assert kinds["m0"] == {"kind": "Math", "pointwise": True} and kinds["b0"]["kind"] == "BLAS"
    assert "no_kind" not in kinds
    corpus = [o["id"] for o in ops] + ["unlisted"]
    picked = st.sample(corpus, kinds, 2, 3)
    assert len(picked) == 6 and {kinds[o]["kind"] for o in picked} == {"Math", "Tensor"}
    maths = sorted((o for o in corpus if o.startswith("m")), key=st.stable_hash)[:3]
    assert picked[:3] == maths  # the smallest SHA-1 names of the largest kind, in order
    assert st.sample(list(reversed(corpus)), kinds, 2, 3) == picked  # the corpus' order does not matter


def test_the_time_limit_is_shared_by_the_passes_and_the_pass_limit_caps_each():
    import argparse
    import time

    st = load_script("screen_throughput")
    now = time.monotonic()
    args = argparse.Namespace(pass_limit=None, time_limit=None, deadline=None)
    assert st.pass_seconds(args) is None  # no limit: a pass runs to its end
    args.pass_limit = 300.0
    assert st.pass_seconds(args) == 300.0 and "--pass-limit" in st.limit_reached(args)
    args.time_limit, args.deadline = 500.0, now + 120  # 380 s of the run's 500 already spent
    assert 110 < st.pass_seconds(args) <= 120
    args.deadline = now - 5
    assert st.pass_seconds(args) == 0.0 and "--time-limit 500 s reached" in st.limit_reached(args)


def test_a_run_whose_time_limit_is_spent_starts_no_pass_and_says_how_to_go_on(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "FLAGGEMS_DIR"}
    run = subprocess.run([sys.executable, str(SCRIPT), "--backend", "cpu", "--ops", "abs", "--passes", "a,report",
                          "--time-limit", "0", "--out", str(tmp_path / "st")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 3, run.stdout + run.stderr
    assert "pass a not started: --time-limit 0 s reached" in run.stdout
    assert not (tmp_path / "st" / "a").exists()  # no batch began


def test_kernel_mode_takes_one_operator_of_each_kind_first():
    st = load_script("screen_throughput")
    kinds = {f"{k}{i}": {"kind": k} for k in ("Math", "Tensor", "BLAS") for i in range(3)}
    ops = list(kinds)  # the sample's order: a kind's operators together
    assert st.kernel_operators(ops, kinds, 4) == ["Math0", "Tensor0", "BLAS0", "Math1"]
    assert st.kernel_operators(ops, kinds, 20) == [f"{k}{i}" for i in range(3) for k in ("Math", "Tensor", "BLAS")]
    # Without kinds (the bundled sample on CPU), the sample's first.
    assert st.kernel_operators(["abs", "add", "mul"], {}, 2) == ["abs", "add"]


def test_the_weights_split_the_projection_by_any_per_operator_figure():
    st = load_script("screen_throughput")
    kinds = {"m0": {"kind": "Math"}, "m1": {"kind": "Math"}, "t0": {"kind": "Tensor"}, "x": {}}
    counts = {"Math": 450, "Tensor": 152, "BLAS": 43, "(no kind)": 6}
    walls = {"m0": 7.6, "m1": 3.6, "t0": 12.2, "x": 5.0}
    hours, _ = st.projection(walls, counts, kinds)
    w = st.weights(list(walls), counts, kinds)
    # BLAS and the kindless six are outside the sample: each sampled operator carries a
    # fourth of them; Math's 450 go to its two operators, Tensor's 152 to t0.
    assert w["m0"] == pytest.approx(450 / 2 + 49 / 4) and w["t0"] == pytest.approx(152 + 49 / 4)
    assert w["x"] == pytest.approx(49 / 4) and sum(w.values()) == pytest.approx(sum(counts.values()))
    assert sum(w[op] * walls[op] for op in walls) / 3600 == pytest.approx(hours)
    # The phases of each operator's wall split the same hours.
    figures = {op: {"startup_s": 0.3, "collect_s": 0.2, "first_call_s": 0.5, "measure_s": wall - 1.5,
                    "overhead_s": 0.8, "steps_s": {"graph replay": wall / 2, "gap": 0.1}} for op, wall in walls.items()}
    phases, steps = st.projected_parts(figures, w)
    assert set(phases) == {"startup", "collect", "first_call", "measure", "teardown"}
    assert sum(phases.values()) == pytest.approx(hours, abs=0.0005)
    assert list(steps) == ["graph replay", "gap"] and steps["graph replay"] == pytest.approx(hours / 2, abs=0.001)
    # Two passes' parts average key by key, a step one pass lacks at 0.
    assert st.mean_parts([{"gap": 0.2, "graph replay": 0.4}, {"gap": 0.1, "direct timed": 0.3}]) == {
        "graph replay": 0.2, "direct timed": 0.15, "gap": 0.15}
    assert st.mean_parts([]) == {}


def test_a_session_opener_pays_the_library_import_once_not_once_per_operator(tmp_path):
    st = load_script("screen_throughput")
    batch = tmp_path / "a"
    batch.mkdir()
    events = [{"event": "session"}, {"event": "attempt", "op": "abs"}, {"event": "attempt", "op": "add"},
              {"event": "attempt", "op": "sum"}, {"event": "session"}, {"event": "attempt", "op": "max"},
              {"event": "attempt", "op": "min"}]
    (batch / "attempts.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events) + "not json\n")
    assert st.session_openers(batch) == ["abs", "max"]
    figures = {op: {"wall_s": 5.0 + up, "startup_s": up, "overhead_s": up + 0.2}
               for op, up in (("abs", 4.3), ("add", 0.3), ("sum", 0.4), ("max", 2.3), ("min", 0.35))}
    cut, seconds = st.once_per_session(figures, st.session_openers(batch))
    # Each opener at the others' median start-up (0.35 s); what that took off counts once.
    assert cut["abs"] == {"wall_s": pytest.approx(5.35), "startup_s": 0.35, "overhead_s": pytest.approx(0.55)}
    assert cut["max"]["wall_s"] == pytest.approx(5.35) and cut["add"] == figures["add"]
    assert seconds == pytest.approx(3.95 + 1.95)
    # An opener no slower than the rest is left as it is.
    assert st.once_per_session(figures, ["add"]) == (figures, 0.0)
    assert st.session_openers(tmp_path / "none") == []


def test_the_operator_shifts_split_the_aa_into_whole_processes_and_what_is_left_within():
    from types import SimpleNamespace

    st = load_script("screen_throughput")

    def pair(op, gain, threshold=0.01, shape="[64]"):
        key = (op, "torch.float16", shape)
        return SimpleNamespace(key=key, gain=gain, verdict=SimpleNamespace(threshold=threshold))

    # lstsq's rows all 0.6% off (its process), within 0.02% of that; add's rows about
    # zero; max has too few rows for a shift of its own; host-time rows do not count.
    pairs = ([pair("lstsq", g, shape=f"[{i}]") for i, g in enumerate((0.0058, 0.006, 0.0062, 0.0061))]
             + [pair("add", g, shape=f"[{i}]") for i, g in enumerate((-0.0003, 0.0001, 0.0004))]
             + [pair("max", 0.01), pair("max", 0.01), pair("add", 0.2, threshold=None), pair("add", None)])
    got = st.operator_shifts(pairs, top=1)
    assert got["operators"] == 2
    assert got["median_abs_shift_pct"] == pytest.approx(100 * (0.00605 + 0.0001) / 2)
    within = sorted([0.00025, 0.00005, 0.00015, 0.00005, 0.0004, 0.0, 0.0003])
    assert got["median_abs_gain_pct_within"] == pytest.approx(100 * within[3])
    assert got["largest"] == [{"op": "lstsq", "shift_pct": 0.605, "rows": 4}]
    assert got["by_operator"] == {"add": 0.01, "lstsq": 0.605}
    assert st.operator_shifts([]) == {"operators": 0, "median_abs_shift_pct": None,
                                          "median_abs_gain_pct_within": None, "largest": [], "by_operator": {}}


def test_the_aa_by_latency_puts_each_compared_row_in_its_class():
    from types import SimpleNamespace

    st = load_script("screen_throughput")

    def pair(ms, gain, threshold=0.01):
        return SimpleNamespace(gain=gain, a=SimpleNamespace(gems_ms=ms), verdict=SimpleNamespace(threshold=threshold))

    pairs = [pair(0.002, 0.005), pair(0.004, -0.007), pair(0.0099, 0.006),  # microseconds: moved most
             pair(0.01, 0.001), pair(2.5, -0.0002), pair(1.0, 0.0004),
             pair(0.003, 0.5, threshold=None), pair(0.003, None), pair(None, 0.2)]  # not compared
    got = st.by_latency(pairs)
    assert got == {"<10us": {"rows": 3, "median_abs_gain_pct": 0.6},
                   "10-100us": {"rows": 1, "median_abs_gain_pct": 0.1},
                   "0.1-1ms": {"rows": 0, "median_abs_gain_pct": None},
                   ">=1ms": {"rows": 2, "median_abs_gain_pct": 0.03}}


def test_the_aa_medians_interval_resamples_whole_operators():
    st = load_script("screen_throughput")
    # Every operator's rows alike: the interval is the median itself.
    assert st.median_ci({"a": [0.001] * 5, "b": [-0.001] * 5}) == [0.001, 0.001]
    # One operator's whole process 0.7% off: resampling operators (not rows) lets the
    # median move by up to that operator's share of the rows.
    by_op = {f"op{i}": [0.0002, -0.0003, 0.0004] for i in range(9)}
    by_op["lstsq"] = [0.007] * 20
    lo, hi = st.median_ci(by_op)
    whole = sorted(abs(v) for g in by_op.values() for v in g)
    assert lo <= st.statistics.median(whole) <= hi and lo == 0.0003 and hi == 0.007
    assert st.median_ci(by_op) == [lo, hi]  # the same every time (a fixed seed)
    assert st.median_ci({"a": [0.001]}) is None and st.median_ci({}) is None


def test_the_repeat_pass_sets_each_process_shift_beside_its_torch_rows(tmp_path):
    from summary_logwriter import SESSION_START, identity, session_end, table_text, write_run

    from zlbench import rowstats

    st = load_script("screen_throughput")
    shapes = [f"[torch.Size([{n}])]" for n in (64, 128, 256, 512)]

    def batch(name, lstsq_gems=1.0, lstsq_torch=1.0, lstsq_mhz=None):
        # lstsq: four rows; add: three rows; max: two rows, too few for a shift.
        for op, n, gems, torch in (("lstsq", 4, 0.1 * lstsq_gems, 0.2 * lstsq_torch),
                                   ("add", 3, 0.01, 0.02), ("max", 2, 0.05, 0.05)):
            rows = [{"shape": shape, "torch_ms": torch, "gems_ms": gems} for shape in shapes[:n]]
            text = (SESSION_START.format(n=1) + f"benchmark/test_{op}.py "
                    + table_text(op, "torch.float16", rows) + "." + session_end(1))
            run_dir = write_run(tmp_path / name / op, text, identity())
            for i, shape in enumerate(shapes[:n]):
                for side in ("torch", "gems"):
                    record = {"op": op, "dtype": "torch.float16", "shape": shape, "side": side,
                              "timer": "graph", "samples": 200, "spread": 0.002}
                    if op == "lstsq" and lstsq_mhz and side == "gems":
                        # NVML's SM clock samples over the row: two; the first row's
                        # second one a step lower.
                        low = lstsq_mhz - (15 if i == 0 else 0)
                        record["device"] = {"after": {"sm_mhz": 1980, "sm_mhz_window": {
                            "n": 2, "min": low, "median": (low + lstsq_mhz) / 2}}}
                    rowstats.append(run_dir, record)
        return tmp_path / name

    # r1: lstsq's process 0.6% slower, its torch rows 0.5% slower with it; r2: lstsq's
    # FlagGems rows 0.3% faster, its torch rows as in a.
    a, r1, r2 = batch("a", lstsq_mhz=1980), batch("r1", 1.006, 1.005, lstsq_mhz=1965), batch("r2", 0.997)
    got = st.process_shifts([a, r1, r2])
    assert got["batches"] == ["a", "r1", "r2"]
    points = {(p["op"], p["batch"]): p for p in got["points"]}
    assert set(points) == {("lstsq", "r1"), ("lstsq", "r2"), ("add", "r1"), ("add", "r2")}
    slow = points[("lstsq", "r1")]
    assert slow["rows"] == 4 and slow["gems_pct"] == pytest.approx(0.6) and slow["torch_pct"] == pytest.approx(0.5)
    assert slow["after_torch_pct"] == pytest.approx(100 * (1.006 / 1.005 - 1), abs=1e-3)
    assert points[("add", "r2")] == {"op": "add", "batch": "r2", "rows": 3, "gems_pct": 0.0, "torch_pct": 0.0,
                                     "after_torch_pct": 0.0, "sm_mhz": [None, None]}
    # The SM clock NVML sampled while each process's gems rows ran: the slow process ran
    # a step lower; a batch without samples has none.
    assert slow["sm_mhz"] == [{"median": 1980, "min": 1965, "samples": 8},
                              {"median": 1965, "min": 1950, "samples": 8}]
    assert points[("lstsq", "r2")]["sm_mhz"] == [slow["sm_mhz"][0], None]
    assert points[("lstsq", "r2")]["gems_pct"] == pytest.approx(-0.3)
    assert points[("lstsq", "r2")]["after_torch_pct"] == pytest.approx(-0.3)
    # Over the points (0.6, 0.3, 0, 0): the median of |gems| is 0.15; the torch rows take
    # most of r1's out (0.1, 0.3, 0, 0: 0.05).
    assert got["median_abs_pct"]["gems_pct"] == pytest.approx(0.15)
    assert got["median_abs_pct"]["after_torch_pct"] == pytest.approx(0.05, abs=1e-3)
    # The repeat pass's batches in the order they ran (r10 after r2).
    for name in ("b", "r10", "rx"):
        (tmp_path / name).mkdir()
    assert [p.name for p in st.repeat_batches(tmp_path)] == ["a", "b", "r1", "r2", "r10"]
    assert st.process_shifts([a]) == {"batches": ["a"], "points": [], "median_abs_pct": {}}


@pytest.mark.slow
def test_a_cpu_smoke_run_reports_walls_budgets_and_the_aa_of_its_two_passes(tmp_path):
    env = {**os.environ}
    env.pop("FLAGGEMS_DIR", None)
    out = tmp_path / "st"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--backend", "cpu", "--ops", "abs,add",
                           "--passes", "a,b,repeat,report", "--repeats", "1", "--out", str(out),
                           "--json", str(tmp_path / "st.json")],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    figures = json.loads((tmp_path / "st.json").read_text())
    # The repeat pass's batch r1 is a third process per operator, set against a's.
    shifts = figures["process_shifts"]
    assert shifts["batches"] == ["a", "b", "r1"]
    # A row timed while this host ran slow is UNKNOWN, not compared, so an operator left
    # with fewer than three compared rows in a batch has no point there.
    assert {(p["op"], p["batch"]) for p in shifts["points"]} <= {(op, b) for op in ("abs", "add") for b in ("b", "r1")}
    assert all(set(p) == {"op", "batch", "rows", "gems_pct", "torch_pct", "after_torch_pct", "sm_mhz"}
               and p["rows"] >= 3 and p["sm_mhz"] == [None, None]  # the cpu backend reads no NVML
               for p in shifts["points"])
    # What the report wrote is what process_shifts makes of the batches it left.
    st = load_script("screen_throughput")
    assert shifts == json.loads(json.dumps(st.process_shifts(st.repeat_batches(out))))
    assert "whole processes against pass a (b, r1)" in proc.stdout
    assert figures["ok_in_every_pass"] == 2 and figures["corpus_operators"] == 11
    # The host beside the projection (half of a night's wall is host time), as each pass
    # recorded it where it ran: a report run elsewhere reads it from the pass dirs.
    host = figures["host"]
    assert set(host) == {"a", "b"} and all(h["cpus"] == os.cpu_count() and h["host_speed"] > 0
                                           for h in host.values()), host
    assert f"{'host':<32} {host}" in proc.stdout
    assert load_script("screen_throughput").pass_host(tmp_path) is None  # a pass dir without one
    with open(out / "a" / "ops_status.csv", newline="") as f:
        status = {r["operator"]: r for r in csv.DictReader(f)}
    for op in ("abs", "add"):
        mine = figures["per_operator"][op]["a"]
        assert mine["wall_s"] == pytest.approx(float(status[op]["duration_s"]))
        records = (out / "a" / status[op]["run_dir"] / "row_stats.jsonl").read_text().splitlines()
        assert mine["timings"] == len(records) and mine["budget_s"] > 0
        assert mine["efficiency"] == pytest.approx(mine["measure_s"] / mine["budget_s"], abs=0.01)
    # Every corpus operator at its kind's mean wall (the sample has no kinds: its mean),
    # the session's first operator at the other's start-up, the start-up that cuts once.
    # The projection is the mean of the two passes', each there too.
    once = figures["session_start_s_by_pass"]
    assert set(once) == {"a", "b"} and all(v >= 0 for v in once.values())
    by_pass = {p: (11 * (sum(figures["per_operator"][op][p]["wall_s"] for op in ("abs", "add")) - once[p]) / 2
                   + once[p]) / 3600 for p in ("a", "b")}
    assert figures["projected_corpus_h_by_pass"] == pytest.approx(by_pass, abs=0.001)
    assert figures["projected_corpus_s"] == pytest.approx(3600 * (by_pass["a"] + by_pass["b"]) / 2, rel=0.01)
    # The phases of the walls split the projection; the timers' steps are there, per timer.
    assert 3600 * sum(figures["projected_by_phase_h"].values()) == pytest.approx(figures["projected_corpus_s"], abs=1.0)
    assert figures["projected_by_step_h"] and all(
        k == "gap" or k.split()[0] in ("graph", "direct") for k in figures["projected_by_step_h"])
    aa = figures["aa"]
    assert aa["pairs"] > 0
    assert 0 <= aa["unexplained"] <= len(aa["not_same"])
    assert aa["same_or_explained_share"] == pytest.approx(1 - aa["unexplained"] / aa["pairs"], abs=1e-4)
    assert figures["unfinished"] == []  # every operator finished: the projection is no lower bound
    assert set(figures["measure_efficiency_median_by_pass"]) == {"a", "b"}
    assert "measure_efficiency_median" in proc.stdout
    assert figures["projected_cold_corpus_h"] is None and aa["compared"] <= aa["pairs"]
    # A warm pass is the cold one: pass a standing in for it, its walls project alike, and
    # an operator whose attempt was interrupted there is left out.
    shutil.copytree(out / "a", out / "warm")
    with open(out / "warm" / "attempts.jsonl", "a") as f:
        f.write(json.dumps({"event": "result", "op": "add", "status": "error", "interrupted": True}) + "\n")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--backend", "cpu", "--ops", "abs,add",
                           "--passes", "report", "--out", str(out), "--json", str(tmp_path / "st.json")],
                          env=env, capture_output=True, text=True, timeout=300)
    cold = json.loads((tmp_path / "st.json").read_text())
    assert cold["cold_wall_s"] == {"abs": figures["per_operator"]["abs"]["a"]["wall_s"]}, proc.stdout
    assert cold["projected_cold_corpus_h"] == pytest.approx(11 * cold["cold_wall_s"]["abs"] / 3600, abs=0.01)
    # Kernel mode against each operator's wall with the import once a session (the
    # session opener's start-up cut as in the projection), the raw walls' ratio beside it.
    (out / "kernel").mkdir()
    (out / "kernel" / "kernel_mode.json").write_text(json.dumps({"abs": {"wall_s": 40.0}, "add": {"wall_s": 0.5}}))
    proc = subprocess.run([sys.executable, str(SCRIPT), "--backend", "cpu", "--ops", "abs,add",
                           "--passes", "report", "--out", str(out), "--json", str(tmp_path / "st.json")],
                          env=env, capture_output=True, text=True, timeout=300)
    got = json.loads((tmp_path / "st.json").read_text())
    st = load_script("screen_throughput")
    night = {op: [st.once_per_session(st.op_figures(out / p), st.session_openers(out / p))[0][op]["wall_s"]
                  for p in ("a", "b")] for op in ("abs", "add")}
    raw = {op: [figures["per_operator"][op][p]["wall_s"] for p in ("a", "b")] for op in ("abs", "add")}
    for op, kernel_s in (("abs", 40.0), ("add", 0.5)):
        assert got["kernel_over_zlbench"][op] == pytest.approx(kernel_s / (sum(night[op]) / 2), abs=0.01)
        assert got["kernel_over_zlbench_raw"][op] == pytest.approx(kernel_s / (sum(raw[op]) / 2), abs=0.01)
    # A session opener slower to start than the rest is set against a shorter wall.
    assert all(sum(night[op]) <= sum(raw[op]) for op in night)
    if any(v > 0 for v in got["session_start_s_by_pass"].values()):
        assert any(sum(night[op]) < sum(raw[op]) for op in night)
    assert got["kernel_at_goal_ops"] == sum(v >= 4 for v in got["kernel_over_zlbench"].values())
    assert "operators kernel mode takes >= 4x as long for >= 6: NOT MET" in proc.stdout


def test_the_aa_counts_a_throttled_row_explained_and_a_bare_change_not(tmp_path):
    from test_summary_actionable import SHAPES, _batch

    st = load_script("screen_throughput")
    a = _batch(tmp_path / "a", lambda op, d, s: 0.1)
    # B: abs 4096 rows 6% slower with 0.2% spreads and nothing to say why; sum's first row
    # 40% off but measured throttled (a DEVICE_THROTTLED marker).
    b = _batch(tmp_path / "b", lambda op, d, s: 0.106 if (op == "abs" and "4096" in s) else
               (0.14 if (op, s) == ("sum", SHAPES[0]) else 0.1), throttled=[("sum", SHAPES[0])])
    got = st.aa(a, b)
    assert got["pairs"] == 4 and got["verdicts"] == {"SAME": 2, "SLOWER": 1, "UNKNOWN": 1}
    assert got["unexplained"] == 1 and got["same_or_explained_share"] == 0.75
    assert got["same_share"] == 0.5
    # No direct-timer fallback here: all four rows count as the main timer's.
    assert got["by_timer"]["graph"]["pairs"] == 4 and got["by_timer"]["direct"]["pairs"] == 0
    assert got["by_timer"]["graph"]["unexplained"] == 1 and got["by_timer"]["host"]["pairs"] == 0
    # The same bare 6% change on rows the direct timer took: the fallback explains nothing.
    fell = _batch(tmp_path / "fell", lambda op, d, s: 0.106 if (op == "abs" and "4096" in s) else 0.1,
                  fallback=[("abs", SHAPES[1])])
    got = st.aa(a, fell)
    moved = [o for o in got["not_same"] if o["verdict"] == "SLOWER"]
    assert len(moved) == 1 and moved[0]["fallback"] and got["unexplained"] == 1
    assert got["by_timer"]["direct"] == {"pairs": 1, "same_share": 0.0, "unexplained": 1,
                                         "median_abs_gain_pct": pytest.approx(100 * (1 - 1 / 1.06), abs=0.01)}


def test_the_aa_counts_a_change_its_recheck_did_not_reproduce_as_same_and_keeps_the_first_count(tmp_path):
    from test_summary_actionable import _batch

    st = load_script("screen_throughput")
    a = _batch(tmp_path / "a", lambda op, d, s: 0.1)
    # B: abs 4096 6% slower with nothing to say why; the re-check pair reads it alike.
    b = _batch(tmp_path / "b", lambda op, d, s: 0.106 if (op == "abs" and "4096" in s) else 0.1)
    a2 = _batch(tmp_path / "a2", lambda op, d, s: 0.1, ops=("abs",))
    b2 = _batch(tmp_path / "b2", lambda op, d, s: 0.1, ops=("abs",))
    assert st.aa(a, b)["unexplained"] == 1
    got = st.aa(a, b, (a2, b2))
    assert got["verdicts"] == {"SAME": 4} and got["unexplained"] == 0
    assert got["recheck"] == {"verdicts_before": {"SAME": 3, "SLOWER": 1}, "same_share_before": 0.75,
                              "rechecked": 1, "outcomes": {"reproduced": 0, "not reproduced": 1,
                                                           "inconclusive": 0, "not re-checked": 0}}
    (row,) = got["not_same"]
    assert row["explained"] and row["recheck"].startswith("not reproduced (SAME")
    # A change the re-check reads again stands, unexplained.
    b3 = _batch(tmp_path / "b3", lambda op, d, s: 0.106 if "4096" in s else 0.1, ops=("abs",))
    again = st.aa(a, b, (a2, b3))
    assert again["verdicts"]["SLOWER"] == 1 and again["unexplained"] == 1
    assert again["recheck"]["outcomes"]["reproduced"] == 1


def test_the_layout_figure_predicts_the_aa_from_the_placements_spreads(tmp_path):
    from test_summary_actionable import SHAPES, _batch

    from zlbench import rowstats

    st = load_script("screen_throughput")
    a = _batch(tmp_path / "a", lambda op, d, s: 0.1)
    # B: abs's rows 0.3% and 0.1% slower; sum's rows as printed in A.
    b = _batch(tmp_path / "b", lambda op, d, s: {SHAPES[0]: 0.1003, SHAPES[1]: 0.1001}[s] if op == "abs" else 0.1)
    for root, spreads in ((a, (0.004, 0.002)), (b, (0.003, 0.0))):
        for shape, spread in zip(SHAPES, spreads):  # abs's gems timings, at 8 placements
            rowstats.append(root / "abs", {"op": "abs", "dtype": "torch.float16", "shape": shape, "side": "gems",
                                           "cost_ms": {"placement_spread": spread}})
    got = st.aa(a, b)["layout"]
    # Only abs's rows have a placements' spread on both sides; sum's print alike in A and B.
    assert got["rows"] == 2 and got["rows_equal_as_printed"] == 2
    # A row timed with all placements in one graph on both sides is a class of its own.
    for root in (a, b):
        rowstats.append(root / "sum", {"op": "sum", "dtype": "torch.float16", "shape": SHAPES[0], "side": "gems",
                                       "cost_ms": {"interleaved": True}})
    timers = st.aa(a, b)["by_timer"]
    assert timers["graph interleaved"]["pairs"] == 1 and timers["graph"]["pairs"] == 3
    gains = sorted(abs(0.1 / m - 1) for m in (0.1003, 0.1001))
    assert got["median_abs_gain_pct"] == pytest.approx(100 * sum(gains) / 2, abs=1e-4)
    predicted = sorted(0.6745 * (x * x + y * y) ** 0.5 / 1.96 for x, y in ((0.004, 0.003), (0.002, 0.0)))
    assert got["predicted_median_abs_gain_pct"] == pytest.approx(100 * sum(predicted) / 2, abs=1e-4)


@pytest.mark.slow
def test_a_script_stopped_by_sigterm_stops_its_batch_too(tmp_path):
    """As cold_warm.py: SIGTERM to the script (`timeout`) interrupts its batch, which runs
    in a session of its own, and says so; the pass is resumed by the next run."""
    import signal
    import time

    from zlbench import proc

    out = tmp_path / "st"
    env = {k: v for k, v in os.environ.items() if k != "FLAGGEMS_DIR"}
    script = subprocess.Popen([sys.executable, str(SCRIPT), "--backend", "cpu", "--ops", "abs,add",
                               "--passes", "a", "--out", str(out)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not proc.tagged_processes("ZL_BATCH_DIR", str(out / "a")):
        assert script.poll() is None and time.monotonic() < deadline, "the batch never started"
        time.sleep(0.05)
    script.send_signal(signal.SIGTERM)
    output, _ = script.communicate(timeout=120)
    assert script.returncode != 0
    assert proc.tagged_processes("ZL_BATCH_DIR", str(out / "a")) == {}
    assert "stopped, batch interrupted" in (out / "a" / "screen_throughput.log").read_text()
