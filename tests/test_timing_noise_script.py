"""benchmarks/timing_noise.py end to end, with a stand-in for `zlbench run`."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "timing_noise.py"

# Writes a FlagGems-format run.log into --run-dir. Graph runs: two rows, the second one
# fell back (marker) and is noisier; kernel runs: 10% apart between rounds.
FAKE_ZLBENCH = textwrap.dedent('''
    import os, sys
    args = sys.argv[1:]
    run_dir = args[args.index("--run-dir") + 1]
    op = args[args.index("--op") + 1]
    rnd = int(run_dir.rsplit("-", 1)[1])
    graph = os.environ["ZL_ENABLE_CUDAGRAPH"] == "1"
    a = 0.001000 if graph else (0.050 if rnd == 1 else 0.055)
    b = (0.2000 if rnd == 1 else 0.2020) if graph else 0.2
    os.makedirs(run_dir, exist_ok=True)
    lines = []
    if graph:
        lines.append('BENCHMARK_DIRECT_NO_CUDAGRAPH phase=capture repeat=1 op=%s '
                     'dtype=torch.float16 shape="[torch.Size([8])]" side=gems reason=x' % op)
    lines += ["", "Operator: %s  Performance Test (dtype=torch.float16, mode=kernel,level=core)" % op,
              "Status       Torch Latency (ms)    Gems Latency (ms)         Gems Speedup          Size Detail",
              "-" * 94]
    for shape, lat in (("[torch.Size([64, 64])]", a), ("[torch.Size([8])]", b)):
        lines.append("%-10s%20.6f%20.6f%20.3f" % ("SUCCESS", lat, lat, 1.0) + " " * 10 + shape)
    lines += ["", "==== 1 passed in 0.10s ===="]
    open(os.path.join(run_dir, "run.log"), "w").write("\\n".join(lines) + "\\n")
    print(run_dir)
''')


def test_noise_script_pairs_rounds_and_separates_fallback_rows(tmp_path):
    fake = tmp_path / "fake_zlbench.py"
    fake.write_text(FAKE_ZLBENCH)
    result = tmp_path / "noise.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--flaggems-dir", "/nowhere", "--ops", "abs,sum",
         "--out", str(tmp_path / "runs"), "--result", str(result),
         "--zlbench", f"{sys.executable} {fake}"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(result.read_text())
    graph, kernel = data["timers"]["graph"], data["timers"]["kernel"]
    assert graph["rows_paired"] == kernel["rows_paired"] == 4
    assert graph["rows_with_fallback_marker"] == 2
    assert graph["graph_timed_rel_diff_pct"] == {"n": 2, "median": 0.0, "p90": 0.0, "max": 0.0}
    assert graph["fallback_rel_diff_pct"]["max"] == 1.0
    assert kernel["gems_rel_diff_pct"]["max"] == 10.0
    assert data["rows_missing_vs_kernel"] == []
    assert data["goal"]["met"] is True
    assert len(data["runs"]) == 8 and {r["timer"] for r in data["runs"]} == {"graph", "kernel"}
