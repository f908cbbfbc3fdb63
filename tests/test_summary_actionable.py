"""Summaries you can act on: UNKNOWN for throttled rows, the A/B gate, zlbench noise's
floor used by summary --ab, the state of an unfinished or all-failed screen, rows
without run-level markers, compact shapes and tables that fit a terminal."""

import csv
import json
import sqlite3

import pytest

from conftest import zlbench
from summary_logwriter import identity, op_log, write_run
from zlbench import rowstats, rundir
from zlbench.summary.tables import compact_shape, text_table

SHAPES = ["[torch.Size([64, 64])]", "[torch.Size([4096, 4096])]"]


def _throttled(op, shape, why="host_slow"):
    return (f'\nDEVICE_THROTTLED op={op} dtype=torch.float16 shape="{shape}" side=gems '
            f'why={why} host_speed=20->15\n')


def _fallback(op, shape):
    return (f'\nBENCHMARK_DIRECT_NO_CUDAGRAPH phase=capture repeat=1 direct=kernels op={op} '
            f'dtype=torch.float16 shape="{shape}" side=gems reason="RuntimeError: sync"\n')


def _batch(root, latency, spread=0.002, throttled=(), ops=("abs", "sum"), no_spread=(), fallback=(),
           torch_latency=None, **ident):
    """A batch-like dir: ops x float16 x SHAPES with row_stats; ``throttled`` lists the
    (op, shape) rows this side measured slowed down, ``fallback`` those the graph timer
    left to the direct timer, ``no_spread`` the ops whose timer recorded no spread;
    ``torch_latency`` as ``latency`` for torch's rows (0.05 ms without one)."""
    for op in ops:
        prefix = "".join(_throttled(o, s) for o, s in throttled if o == op)
        prefix += "".join(_fallback(o, s) for o, s in fallback if o == op)
        prefix += "RUN_PHASE phase=session_start t=1796154807.193\n"
        run_dir = write_run(root / op, op_log(op, ["torch.float16"], SHAPES, latency, prefix, torch_latency),
                            identity(**{"backend": "cpu", "device": {"index": 0, "model": "cpu"}, **ident}))
        for shape in SHAPES:
            for side in ("torch", "gems"):
                rowstats.append(run_dir, {"op": op, "dtype": "torch.float16", "shape": shape,
                                          "side": side, "samples": 200,
                                          "spread": None if op in no_spread else spread})
    return root


def _ms(slower=None, factor=1.0):
    return lambda op, d, s: 0.1 * (factor if (op, s) == slower or op == slower else 1.0)


# -- 1. UNKNOWN for rows measured in a bad state --------------------------------------

def test_a_throttled_row_is_unknown_never_slower_and_counted_apart(tmp_path):
    a = _batch(tmp_path / "a", _ms())
    # Both abs rows 30% slower in B, but B measured the 64x64 one while the host was slow.
    b = _batch(tmp_path / "b", _ms("abs", 1.3), throttled=[("abs", SHAPES[0])])
    doc = json.loads(zlbench("summary", "--ab", a, b, "--format", "json", check=True).stdout)
    verdicts = {(p["op"], p["shape"]): (p["verdict"], p["why"]) for p in doc["pairs"]}
    assert verdicts[("abs", SHAPES[0])] == ("UNKNOWN", "measured throttled (B host_slow)")
    assert verdicts[("abs", SHAPES[1])][0] == "SLOWER"
    assert doc["overall"]["throttled"] == 1 and doc["overall"]["unknown"] == 1
    text = zlbench("summary", "--ab", a, b, check=True).stdout
    assert "Rows: 1 SLOWER, 0 FASTER, 2 SAME, 1 UNKNOWN (measured throttled)" in text
    assert "1 slower, 1 throttled" in text


def test_an_operator_whose_torch_rows_moved_with_it_says_so(tmp_path):
    # B: every abs row 0.6% slower and its torch rows as much (the machine between the
    # runs); sum's gems rows 0.6% slower with its torch rows where they were.
    a = _batch(tmp_path / "a", _ms())
    b = _batch(tmp_path / "b", lambda op, d, s: 0.1006,
               torch_latency=lambda op, d, s: 0.0503 if op == "abs" else 0.05)
    text = zlbench("summary", "--ab", a, b, check=True).stdout
    ranges = {line.split()[0]: line for line in text.split("Ranges per operator")[1].splitlines()[3:6]}
    assert ranges["abs"].rstrip().endswith("torch rows -0.6% too")
    assert "torch rows" not in ranges["sum"]
    assert ("Torch rows moved in 1 operators (abs -0.6%): FlagGems' torch reference runs in the same "
            "process and A and B ran the same torch (2.11.0), so a shift of that size") in text
    # Another torch on B: its own change, not only the machine's.
    other = _batch(tmp_path / "other", lambda op, d, s: 0.1006, torch_latency=lambda op, d, s: 0.0503,
                   versions={"python": "3.11.7", "torch": "2.12.0", "triton": "3.6.0"})
    text = zlbench("summary", "--ab", a, other, "--allow-caliber-mismatch", check=True).stdout
    assert "Torch rows moved in 2 operators" in text
    assert "A ran torch 2.11.0 and B 2.12.0: torch's own change moved them, perhaps the machine too." in text
    doc = json.loads(zlbench("summary", "--ab", a, b, "--format", "json", check=True).stdout)
    by_op = {r["name"]: r for r in doc["by_op"]}
    assert by_op["abs"]["torch_gain"] == pytest.approx(0.05 / 0.0503 - 1)
    assert by_op["sum"]["torch_gain"] == 0.0
    # A row without device time compared (throttled) says nothing of the torch rows.
    c = _batch(tmp_path / "c", lambda op, d, s: 0.1006, torch_latency=lambda op, d, s: 0.0503,
               throttled=[(op, s) for op in ("abs", "sum") for s in SHAPES])
    doc = json.loads(zlbench("summary", "--ab", a, c, "--format", "json", check=True).stdout)
    assert {r["name"]: r["torch_gain"] for r in doc["by_op"]} == {"abs": None, "sum": None}


# -- 6. the gate ------------------------------------------------------------------------

def test_fail_on_slower_exits_1_and_lists_the_rows_but_not_the_throttled_one(tmp_path):
    a = _batch(tmp_path / "a", _ms())
    b = _batch(tmp_path / "b", _ms("abs", 1.3), throttled=[("abs", SHAPES[0])])
    gate = zlbench("summary", "--ab", a, b, "--fail-on", "slower")
    assert gate.returncode == 1, gate.stderr
    assert "GATE: 1 rows tripped it:" in gate.stderr
    assert "SLOWER     abs torch.float16 4096×4096 +30.0% latency" in gate.stderr
    assert "64×64" not in gate.stderr.split("GATE:")[1]
    # The throttled row trips only when UNKNOWN is asked for.
    both = zlbench("summary", "--ab", a, b, "--fail-on", "slower,unknown")
    assert both.returncode == 1 and "GATE: 2 rows tripped it:" in both.stderr
    assert "measured throttled (B host_slow)" in both.stderr
    # FASTER does not trip a slower gate; a clean A/B passes.
    assert zlbench("summary", "--ab", b, a, "--fail-on", "slower").returncode == 0
    passed = zlbench("summary", "--ab", a, a.parent / "a", "--fail-on", "faster,slower")
    assert passed.returncode == 0 and "GATE: passed" in passed.stderr


def test_max_slowdown_trips_only_slower_rows_beyond_it(tmp_path):
    a = _batch(tmp_path / "a", _ms())
    b = _batch(tmp_path / "b", _ms(("abs", SHAPES[1]), 1.08))
    assert zlbench("summary", "--ab", a, b, "--max-slowdown", "10").returncode == 0
    gate = zlbench("summary", "--ab", a, b, "--max-slowdown", "5")
    assert gate.returncode == 1
    assert "SLOWER beyond --max-slowdown 5%" in gate.stderr and "+8.0% latency" in gate.stderr


def test_fail_on_missing_names_rows_b_did_not_measure(tmp_path):
    a = _batch(tmp_path / "a", _ms())
    b = _batch(tmp_path / "b", _ms(), ops=("abs",))
    gate = zlbench("summary", "--ab", a, b, "--fail-on", "missing")
    assert gate.returncode == 1 and gate.stderr.count("only in A") == 2


def test_gate_usage_errors_name_the_flag(tmp_path):
    a = _batch(tmp_path / "a", _ms())
    bad = zlbench("summary", "--ab", a, a, "--fail-on", "slow")
    assert bad.returncode == 2 and "--fail-on" in bad.stderr and "slower" in bad.stderr
    alone = zlbench("summary", a, "--fail-on", "slower")
    assert alone.returncode == 2 and "need --ab" in alone.stderr


# -- 7. the re-check in fresh processes --------------------------------------------------

def test_a_recheck_keeps_the_verdicts_it_reproduces_and_makes_the_others_same(tmp_path):
    a = _batch(tmp_path / "a", _ms())
    # B: abs 30% slower on both shapes, sum 10% slower on one; the re-check pair reads
    # abs 30% slower again but sum alike (its change lay between two processes).
    slow = lambda op, d, s: 0.1 * (1.3 if op == "abs" else 1.1 if s == SHAPES[1] else 1.0)  # noqa: E731
    b = _batch(tmp_path / "b", slow)
    a2 = _batch(tmp_path / "a2", _ms())
    b2 = _batch(tmp_path / "b2", _ms("abs", 1.3))
    first = json.loads(zlbench("summary", "--ab", a, b, "--format", "json", check=True).stdout)
    assert first["overall"]["slower"] == 3
    doc = json.loads(zlbench("summary", "--ab", a, b, "--recheck", a2, b2, "--format", "json",
                             check=True).stdout)
    got = {(p["op"], p["shape"]): (p["verdict"], p["recheck"]) for p in doc["pairs"]}
    for shape in SHAPES:
        assert got[("abs", shape)] == ("SLOWER", "reproduced (SLOWER, +30.00% latency)")
        assert got[("sum", SHAPES[0])] == ("SAME", None)  # SAME at first: not re-checked
    verdict, recheck = got[("sum", SHAPES[1])]
    assert verdict == "SAME" and recheck.startswith("not reproduced (SAME, +0.00% latency)")
    why = next(p["why"] for p in doc["pairs"] if (p["op"], p["shape"]) == ("sum", SHAPES[1]))
    assert why.startswith("SLOWER +10.00% not reproduced in fresh processes")
    assert doc["overall"]["slower"] == 2 and doc["overall"]["same"] == 2
    assert [r["slower"] for r in doc["by_op"]] == [2, 0]  # abs, sum: counted again
    text = zlbench("summary", "--ab", a, b, "--recheck", a2, b2, check=True).stdout
    assert "Re-check in fresh processes of the 3 SLOWER/FASTER rows: 2 reproduced, 1 not reproduced (those 1 now SAME)." in text
    assert "Rows: 2 SLOWER, 0 FASTER, 2 SAME" in text
    # The CSV carries the re-check too, a column of its own.
    out = tmp_path / "ab.csv"
    zlbench("summary", "--ab", a, b, "--recheck", a2, b2, "--out", out, check=True)
    with open(out, newline="") as f:
        rows = {(r["op"], r["shape"]): r for r in csv.DictReader(f)}
    assert rows[("sum", SHAPES[1])]["recheck"].startswith("not reproduced")
    assert rows[("abs", SHAPES[0])]["recheck"].startswith("reproduced") and rows[("sum", SHAPES[0])]["recheck"] == ""
    # The gate trips on what the re-check kept, not on what it did not reproduce.
    gate = zlbench("summary", "--ab", a, b, "--recheck", a2, b2, "--fail-on", "slower")
    assert gate.returncode == 1 and "GATE: 2 rows tripped it:" in gate.stderr
    assert "sum" not in gate.stderr.split("GATE:")[1]


def test_a_recheck_that_could_not_judge_or_lacks_the_row_leaves_the_verdict(tmp_path):
    a = _batch(tmp_path / "a", _ms())
    b = _batch(tmp_path / "b", _ms("abs", 1.3))
    # The re-check measured abs 64x64 throttled (UNKNOWN) and never ran sum or abs 4096.
    a2 = _batch(tmp_path / "a2", _ms(), ops=("abs",))
    b2 = _batch(tmp_path / "b2", _ms("abs", 1.3), ops=("abs",), throttled=[("abs", SHAPES[0])])
    rows = b2 / "abs" / "run.log"
    rows.write_text("\n".join(line for line in rows.read_text().splitlines() if "4096" not in line
                              or "DEVICE_THROTTLED" in line) + "\n")
    doc = json.loads(zlbench("summary", "--ab", a, b, "--recheck", a2, b2, "--format", "json",
                             check=True).stdout)
    got = {(p["op"], p["shape"]): (p["verdict"], p["recheck"]) for p in doc["pairs"]}
    verdict, recheck = got[("abs", SHAPES[0])]
    assert verdict == "SLOWER" and recheck.startswith("inconclusive (UNKNOWN")
    assert "measured throttled (B host_slow)" in recheck
    assert got[("abs", SHAPES[1])] == ("SLOWER", "not re-checked")


def test_a_recheck_measured_otherwise_than_a_is_refused_and_replaying_a_is_no_difference(tmp_path):
    a = _batch(tmp_path / "a", _ms())
    b = _batch(tmp_path / "b", _ms("abs", 1.3))
    # A re-check at another level re-checks nothing: refused, naming the flag and the fix.
    a2 = _batch(tmp_path / "a2", _ms(), level="comprehensive")
    b2 = _batch(tmp_path / "b2", _ms("abs", 1.3), level="comprehensive")
    refused = zlbench("summary", "--ab", a, b, "--recheck", a2, b2)
    assert refused.returncode == 2 and "Refusing the re-check (--recheck)" in refused.stderr
    assert "against A were measured differently" in refused.stderr and "level" in refused.stderr
    allowed = zlbench("summary", "--ab", a, b, "--recheck", a2, b2, "--allow-caliber-mismatch", check=True)
    assert "--recheck" in allowed.stderr and "reproduced (SLOWER" in allowed.stdout
    # Both re-check sides replaying A's autotuned configs (zlbench ab's re-check) is no difference.
    a3 = _batch(tmp_path / "a3", _ms(), autotune_mode="replay")
    b3 = _batch(tmp_path / "b3", _ms("abs", 1.3), autotune_mode="replay")
    replayed = zlbench("summary", "--ab", a, b, "--recheck", a3, b3, check=True)
    assert "Refusing" not in replayed.stderr and "2 reproduced" in replayed.stdout


def test_recheck_needs_ab_and_two_readable_runs(tmp_path):
    a = _batch(tmp_path / "a", _ms())
    alone = zlbench("summary", a, "--recheck", a, a)
    assert alone.returncode == 2 and "--recheck need --ab" in alone.stderr
    missing = zlbench("summary", "--ab", a, a, "--recheck", a, tmp_path / "nope")
    assert missing.returncode == 2 and "nope" in missing.stderr and "Traceback" not in missing.stderr


# -- 3. zlbench noise -------------------------------------------------------------------

def test_noise_refuses_batches_of_two_calibers_with_exit_1(tmp_path):
    a1 = _batch(tmp_path / "a1", _ms())
    a2 = _batch(tmp_path / "a2", _ms(), level="comprehensive")
    noise = zlbench("noise", "--from", a1, "--from", a2, "--db", tmp_path / "h.sqlite")
    assert noise.returncode == 1, noise.stdout + noise.stderr  # the batches ran: not a usage error
    assert "zlbench noise:" in noise.stderr and "Traceback" not in noise.stderr


def test_rows_without_a_spread_say_nothing_about_the_floor(tmp_path):
    # sum's rows differ by 40% but recorded no spread: summary --ab calls them UNKNOWN,
    # so they must not make the floor 40%.
    a1 = _batch(tmp_path / "a1", _ms(), no_spread=("sum",))
    a2 = _batch(tmp_path / "a2", lambda op, d, s: 0.106 if "4096" in s else (0.14 if op == "sum" else 0.1),
                no_spread=("sum",))
    noise = zlbench("noise", "--from", a1, "--from", a2, "--db", tmp_path / "h.sqlite", "--quantile", "100")
    assert noise.returncode == 0, noise.stdout + noise.stderr
    assert "noise floor 5.7% for machine" in noise.stdout  # abs' 6% less hypot(0.2%, 0.2%)
    assert "p100 of 2 A/A rows' change" in noise.stdout and "0 rows measured throttled left out" in noise.stdout
    # ... and the two it left out are said, not dropped.
    assert "2 more with no threshold to judge by (no spread, two clocks, host time)" in noise.stdout


def test_noise_records_a_floor_per_machine_and_caliber_and_summary_ab_uses_it(tmp_path):
    db = tmp_path / "history.sqlite"
    # An A/A pair: the 4096 rows differ by 6% (beyond their 0.2% spreads), the 64 rows
    # agree; a throttled row 40% off is left out of the floor.
    a1 = _batch(tmp_path / "a1", _ms())
    a2 = _batch(tmp_path / "a2", lambda op, d, s: 0.106 if "4096" in s else
                (0.14 if op == "sum" else 0.1), throttled=[("sum", SHAPES[0])])
    noise = zlbench("noise", "--from", a1, "--from", a2, "--db", db, "--quantile", "100")
    assert noise.returncode == 0, noise.stdout + noise.stderr
    assert "noise floor 5.7% for machine" in noise.stdout          # 6% - hypot(0.2%, 0.2%)
    assert ("p100 of 3 A/A rows' change beyond their own spreads (1 pairs of batches); "
            "1 rows measured throttled left out") in noise.stdout
    assert "WARNING: the floor of caliber" in noise.stderr         # 3 rows: a weak floor
    # These batch dirs have no plan.json: the host is this one, and it is said.
    assert "names no host that measured it" in noise.stderr
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM noise_floors").fetchone()[0] == 1
    listed = zlbench("noise", "--list", "--db", db, check=True).stdout
    assert "noise floor 5.7%" in listed

    # Two builds 5% apart: SLOWER at the 2% default, SAME under this machine's floor.
    a = _batch(tmp_path / "a", _ms())
    b = _batch(tmp_path / "b", _ms("abs", 1.05))
    default = json.loads(zlbench("summary", "--ab", a, b, "--format", "json",
                                 "--history-db", "none", check=True).stdout)
    assert {p["verdict"] for p in default["pairs"] if p["op"] == "abs"} == {"SLOWER"}
    used = zlbench("summary", "--ab", a, b, "--history-db", db, check=True).stdout
    assert "Verdicts: A/A noise floor 5.7% (source: zlbench noise of " in used
    assert f"{a1.resolve()} vs {a2.resolve()}" in used
    assert "(A names no host: taken as this one)" in used
    doc = json.loads(zlbench("summary", "--ab", a, b, "--format", "json", "--history-db", db,
                             check=True).stdout)
    assert {p["verdict"] for p in doc["pairs"]} == {"SAME"}
    assert doc["noise_floors"][0]["floor"] == pytest.approx(0.06 - 0.002 * 2 ** 0.5, abs=1e-4)
    # --noise-floor still wins, and says so.
    flag = zlbench("summary", "--ab", a, b, "--history-db", db, "--noise-floor", "1", check=True)
    assert "A/A noise floor 1.0% (source: --noise-floor)" in flag.stdout


def test_noise_pools_every_pair_of_its_batches(tmp_path):
    db = tmp_path / "history.sqlite"
    # Three batches: a3 is 10% off a1 and a2 on the 4096 rows; the pooled p100 sees it.
    dirs = [_batch(tmp_path / "a1", _ms()), _batch(tmp_path / "a2", _ms()),
            _batch(tmp_path / "a3", lambda op, d, s: 0.11 if "4096" in s else 0.1)]
    args = [x for d in dirs for x in ("--from", d)]
    proc = zlbench("noise", *args, "--db", db, "--quantile", "100", check=True)
    assert "noise floor 9.7% for machine" in proc.stdout                 # 10% - 0.28%
    assert "(3 pairs of batches)" in proc.stdout and "12 A/A rows" in proc.stdout
    with sqlite3.connect(db) as conn:
        (batches,) = conn.execute("SELECT batches FROM noise_floors").fetchone()
    assert json.loads(batches) == [str(d.resolve()) for d in dirs]


def test_a_row_that_moves_between_batches_keeps_its_own_floor_and_no_other_row_gets_it(tmp_path):
    db = tmp_path / "history.sqlite"
    big = SHAPES[1]

    def levels(moved, jump):
        # Every row but sum 4096 1% off in ``moved``; sum 4096 sits at another level (+6%).
        return lambda op, d, s: 0.106 if (op, s) == ("sum", big) and jump else (0.101 if moved else 0.1)

    dirs = [_batch(tmp_path / "a1", levels(False, False)), _batch(tmp_path / "a2", levels(True, True)),
            _batch(tmp_path / "a3", levels(False, False))]
    args = [x for d in dirs for x in ("--from", d)]
    noise = zlbench("noise", *args, "--db", db, "--quantile", "80", check=True).stdout
    # The machine's floor is the other rows' 1% less their spreads; sum 4096 moved 6%.
    assert "noise floor 0.7% for machine" in noise
    assert ("1 rows moved beyond it and keep their own floor (1.5 x the largest excess seen), "
            "largest: sum torch.float16 [[4096,4096]] 8.6%") in noise
    with sqlite3.connect(db) as conn:
        ((op, shape, floor, seen),) = conn.execute("SELECT op, shape, floor, seen FROM row_floors").fetchall()
    assert (op, shape) == ("sum", "[[4096,4096]]")
    assert seen == pytest.approx(0.06 - 0.002 * 2 ** 0.5) and floor == pytest.approx(1.5 * seen)

    # B: sum 4096 and abs 4096 both 6% slower. sum 4096 moves that much between batches of
    # one build: SAME at its own floor; abs 4096 does not: SLOWER at the machine's.
    a = _batch(tmp_path / "a", _ms())
    b = _batch(tmp_path / "b", lambda op, d, s: 0.106 if s == big else 0.1)
    doc = json.loads(zlbench("summary", "--ab", a, b, "--format", "json", "--history-db", db,
                             check=True).stdout)
    got = {(p["op"], p["shape"]): (p["verdict"], p["floor"]) for p in doc["pairs"]}
    assert got[("sum", big)] == ("SAME", pytest.approx(floor))
    assert got[("abs", big)][0] == "SLOWER" and got[("abs", big)][1] < 0.01
    assert [(f["per_row"], f["rows"]) for f in doc["noise_floors"]] == [(False, 3), (True, 1)]
    text = zlbench("summary", "--ab", a, b, "--history-db", db, check=True).stdout
    assert "1 rows at their own A/A floors, up to 8.6% (source: the row's own A/A in zlbench noise of" in text
    (line,) = [x for x in text.splitlines() if x.startswith("SAME") and "sum" in x and "4096" in x]
    assert line.rstrip().endswith("own A/A floor 8.6%")
    page = tmp_path / "ab.html"
    zlbench("report", a, "--ab", b, "--history-db", db, "-o", page, check=True)
    html = page.read_text()
    assert "1 rows&#39; own, up to 8.6%" in html and "own A/A floor 8.6%" in html
    # Its own floor does not hide a change beyond it.
    b12 = _batch(tmp_path / "b12", lambda op, d, s: 0.112 if (op, s) == ("sum", big) else 0.1)
    doc = json.loads(zlbench("summary", "--ab", a, b12, "--format", "json", "--history-db", db,
                             check=True).stdout)
    assert {p["verdict"] for p in doc["pairs"] if (p["op"], p["shape"]) == ("sum", big)} == {"SLOWER"}


def test_a_floor_recorded_before_rows_had_their_own_still_serves(tmp_path):
    from zlbench.history.noise import floors_for
    from zlbench.summary.rows import summarize

    db = tmp_path / "history.sqlite"
    dirs = [_batch(tmp_path / "a1", _ms()), _batch(tmp_path / "a2", _ms("sum", 1.06)), _batch(tmp_path / "a3", _ms())]
    # One pair shows each row once: no row keeps a floor of its own from it.
    one = zlbench("noise", "--from", dirs[0], "--from", dirs[1], "--db", db, "--quantile", "50", check=True)
    assert "no row keeps a floor of its own: that takes 3 A/A pairs (three batches) or more" in one.stdout
    zlbench("noise", *[x for d in dirs for x in ("--from", d)], "--db", db, "--quantile", "50", check=True)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM row_floors").fetchone()[0] == 2  # sum's rows
        conn.execute("DROP TABLE row_floors")  # as a database of an older zlbench has it
    (floor,) = set(floors_for(summarize(dirs[0]), str(db)).values())
    # The median of the excess: abs' none in any pair, sum's none in a1-a3.
    assert floor.value == 0.0 and dict(floor.rows) == {}
    assert "noise floor 0.0% for machine" in zlbench("noise", "--list", "--db", db, check=True).stdout


def test_row_floors_script_counts_what_the_rows_own_floors_change(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    # Four batches of one build: sum 4096 sits at 0.100 or 0.106 ms by batch, the rest agree.
    big = SHAPES[1]
    dirs = [_batch(tmp_path / f"a{i}", lambda op, d, s, up=up: 0.106 if up and (op, s) == ("sum", big) else 0.1)
            for i, up in ((1, False), (2, True), (3, False), (4, True))]
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "row_floors.py"
    proc = subprocess.run([sys.executable, str(script), *map(str, dirs), "--quantile", "50",
                           "--json", str(tmp_path / "rf.json")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    first = json.loads((tmp_path / "rf.json").read_text())[0]
    assert first["train"] == ["a1", "a2", "a3"] and first["pairs"] == ["a1-a4", "a2-a4", "a3-a4"]
    assert first["rows_with_own_floor"] == 1
    # At the machine's floor (the median excess: 0) sum 4096 is SLOWER in a1-a4 and
    # a3-a4; at its own 8.6% it is SAME. 5% slower, a2-a4's sum 4096 stays within its floor.
    assert (first["machine"]["aa_real"], first["rows"]["aa_real"]) == (2, 0)
    assert (first["machine"]["slow_found"], first["rows"]["slow_found"]) == (12, 11)
    assert first["machine"]["rows"] == first["rows"]["slow_rows"] == 12
    refused = subprocess.run([sys.executable, str(script), *map(str, dirs[:3])], capture_output=True, text=True)
    assert refused.returncode == 2 and "more batch dirs than --train" in refused.stderr


def test_noise_refuses_the_same_batch_twice_and_an_empty_database(tmp_path):
    a = _batch(tmp_path / "a", _ms())
    same = zlbench("noise", "--from", a, "--from", a, "--db", tmp_path / "db.sqlite")
    assert same.returncode == 1 and "given twice" in same.stderr
    one = zlbench("noise", "--from", a, "--db", tmp_path / "db.sqlite")
    assert one.returncode == 2 and "at least two" in one.stderr
    empty = zlbench("noise", "--list", "--db", tmp_path / "none.sqlite")
    assert empty.returncode == 1 and "run zlbench noise first" in empty.stderr


# -- 4. the state of the screen ---------------------------------------------------------

def _plan(root, ops):
    rundir.write_plan(root, {"ops": [{"op": op, "device": "0"} for op in ops],
                             "sessions": [{"host": "nightly-host"}]})


def test_an_unfinished_batch_says_so_and_names_what_did_not_run(tmp_path):
    root = _batch(tmp_path / "batch", _ms(), ops=("abs",))
    _plan(root, ["abs", "mm", "softmax"])
    rundir.StatusFile(root).update([rundir.status_row("abs", "ok", run_dir="abs")])
    proc = zlbench("summary", root)
    assert proc.returncode == 0
    assert "Operators: 1 ok, 2 not run (of 3)" in proc.stdout
    assert "UNFINISHED: 2 of 3 operators not run: mm, softmax" in proc.stdout
    assert "(2 rows, 2 issues; UNFINISHED: 2 operators not run)" in proc.stderr
    assert proc.stdout.count("op_not_run") == 2
    doc = json.loads(zlbench("summary", root, "--format", "json", check=True).stdout)
    assert doc["screen"] == {"operators": {"ok": 1, "not run": 2}, "finished": False,
                             "not_run": ["mm", "softmax"]}
    refused = zlbench("history", "add", root, "--db", tmp_path / "h.sqlite")
    assert refused.returncode == 2 and "2 operators not run" in refused.stderr


def test_a_screen_with_a_shard_missing_is_unfinished(tmp_path):
    shard = _batch(tmp_path / "screen" / "shard-0-of-2", _ms(), ops=("abs",))
    _plan(shard, ["abs"])
    rundir.StatusFile(shard).update([rundir.status_row("abs", "ok", run_dir="abs")])
    proc = zlbench("summary", tmp_path / "screen")
    assert proc.returncode == 0, proc.stderr
    assert "UNFINISHED: a shard is missing or unfinished (see Issues); continue with the same " \
        "zlbench batch --shard K/N command" in proc.stdout
    assert "shard-1-of-2 is missing" in proc.stdout
    assert "UNFINISHED: a shard is missing or unfinished)" in proc.stderr


def test_a_batch_whose_every_operator_failed_still_has_its_failure_table(tmp_path):
    root = tmp_path / "batch"
    root.mkdir()
    _plan(root, ["abs", "mm"])
    rundir.StatusFile(root).update([
        rundir.status_row("abs", "failed", attempts=2, reason="ImportError: no module x"),
        rundir.status_row("mm", "timeout", attempts=1, reason="timeout_compiling"),
    ])
    proc = zlbench("summary", root)
    assert proc.returncode == 0, proc.stderr
    assert "Operators: 1 failed, 1 timeout (of 2)" in proc.stdout
    assert "No table rows in" in proc.stdout and "op_failed" in proc.stdout
    assert "ImportError: no module x" in proc.stdout and "op_timeout" in proc.stdout
    assert "(0 rows, 2 issues)" in proc.stderr
    refused = zlbench("history", "add", root, "--db", tmp_path / "h.sqlite")
    assert refused.returncode == 1 and "no table rows (1 failed, 1 timeout)" in refused.stderr


# -- 5. markers are about rows ------------------------------------------------------------

def test_run_phase_lines_are_no_row_markers(tmp_path):
    a = _batch(tmp_path / "a", _ms())
    zlbench("summary", a, check=True)
    text = (a / "summary.csv").read_text()
    assert "RUN_PHASE" not in text
    assert "unattached_marker" not in zlbench("summary", a, check=True).stdout


# -- 7. tables a person reads -------------------------------------------------------------

@pytest.mark.parametrize("printed,shown", [
    ("[torch.Size([64, 512, 512]), -0.5, 0.5]", "64×512×512, -0.5, 0.5"),
    ("([torch.Size([1024, 1024])], {'dim': -1})", "1024×1024, dim=-1"),
    ("[torch.Size([64, 64]), torch.Size([64, 64])]", "64×64, 64×64"),
    ("[torch.Size([])]", "scalar"),
    ("not a shape", "not a shape"),
])
def test_compact_shapes(printed, shown):
    assert compact_shape(printed) == shown


def test_text_tables_fit_the_width_by_cutting_text_never_numbers():
    rows = [("abs", "x" * 300, "0.123456"), ("mm", "short", "12.000000")]
    out = text_table(("op", "markers", "ms"), rows, (False, False, True), width=60)
    assert max(len(line) for line in out.splitlines()) <= 60
    assert "x…" in out and "0.123456" in out and "12.000000" in out
    wide = text_table(("op", "markers", "ms"), rows, (False, False, True), width=400)
    assert "x" * 300 in wide


def test_summary_table_fits_columns_and_csv_keeps_the_full_text(tmp_path):
    a = _batch(tmp_path / "a", _ms(), throttled=[("abs", SHAPES[0])])
    proc = zlbench("summary", a, env={"COLUMNS": "100"}, check=True)
    table = proc.stdout.split("By dtype")[0]
    assert max(len(line) for line in table.splitlines()) <= 100
    assert "DEVICE_THROTTLED side=gems why=host_slow host_speed=20->15" in (a / "summary.csv").read_text()
    assert "DEVICE_THROTTLED side=g…" in table            # cut to fit, the rest in the CSV
    # Wide enough, the table names what happened; the clock readings stay in the CSV.
    wide = zlbench("summary", a, env={"COLUMNS": "200"}, check=True).stdout.split("By dtype")[0]
    assert "DEVICE_THROTTLED side=gems why=host_slow" in wide and "host_speed" not in wide
