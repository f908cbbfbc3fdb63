"""Peak memory of `zlbench summary` (every format, and --ab) and `zlbench report` (and
--ab) on a batch whose one operator printed 200,000 rows, one of them with a 10 KB Size
Detail (the A/B pairs the batch with a second one like it).

Each command runs in its own process; its peak resident set comes from wait4's rusage
(ru_maxrss). The processes run under an address-space limit (--limit-gb, 4 by default),
so a reader that does not stream fails with MemoryError instead of taking the machine.

    python benchmarks/summary_memory.py [--rows 200000] [--cell-kb 10] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from summary_logwriter import SESSION_START, identity, session_end, write_run  # noqa: E402

SUMMARY = "from zlbench.summary.command import summary_command; summary_command()"
REPORT = "from zlbench.report.command import report_command; report_command()"


def make_batch(root: Path, rows: int, cell_kb: int) -> Path:
    """One operator, ``rows`` rows over two dtypes, the middle row's shape ``cell_kb`` KB."""
    op = "wide"
    head = (
        f"{'Status':<10} {'Torch Latency (ms)':>20} {'Gems Latency (ms)':>20} "
        f"{'Gems Speedup':>20} {'Size Detail':>20}\n"
    )
    parts = [SESSION_START.format(n=1), f"benchmark/test_{op}.py "]
    per_table = rows // 2
    for t, dtype in enumerate(("torch.float16", "torch.float32")):
        parts.append(f"\nOperator: {op}  Performance Test (dtype={dtype}, mode=kernel,level=core)\n")
        parts += [head, "-" * (len(head) - 1) + "\n"]
        for i in range(per_table):
            shape = f"[torch.Size([{i + 1}, {t + 1}])]"
            if t == 0 and i == per_table // 2:
                shape = "[torch.Size([" + ", ".join(["7"] * (cell_kb * 1024 // 3)) + "])]"
            parts.append(f"{'SUCCESS':<10}{0.05:>20.6f}{0.04:>20.6f}{1.25:>20.3f}" + " " * 10 + shape + "\n")
        parts.append("\n")
    parts.append("." + session_end(1))
    write_run(root / op, "".join(parts), identity(op=op, test_node=f"benchmark/test_{op}.py"))
    (root / "ops_status.csv").write_text(f"operator,status,attempts,reason,run_dir\n{op},ok,1,,{op}\n")
    return root


def peak(entry: str, args, limit_gb: float, cwd: Path):
    """(peak RSS MB, wall s, exit code, last stderr line) of one command."""

    def limit() -> None:
        cap = int(limit_gb * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    start = time.perf_counter()
    with open(os.devnull, "w") as sink, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(
            [sys.executable, "-c", entry, *map(str, args)], stdout=sink, stderr=err, cwd=cwd, preexec_fn=limit
        )
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        lines = err.read().decode("utf-8", "replace").strip().splitlines()
    return usage.ru_maxrss / 1024, time.perf_counter() - start, child.returncode, (lines or [""])[-1][:160]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--cell-kb", type=int, default=10)
    parser.add_argument("--limit-gb", type=float, default=4.0)
    parser.add_argument("--keep", type=Path, help="write the batch here and keep it")
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="zlbench-summary-memory-"))
    batch = make_batch(base / "batch", args.rows, args.cell_kb)
    size = (batch / "wide" / "run.log").stat().st_size
    print(f"batch: 1 operator, {args.rows} rows, one {args.cell_kb} KB shape; run.log {size / 1e6:.1f} MB")
    cases = [(f"summary --format {f}", SUMMARY, [batch, "--format", f]) for f in ("table", "csv", "json", "markdown")]
    other = make_batch(base / "other", args.rows, args.cell_kb)
    cases += [(f"summary --ab --format {f}", SUMMARY, ["--ab", batch, other, "--format", f])
              for f in ("table", "csv", "json", "markdown")]
    cases.append(("report", REPORT, [batch, "-o", base / "report.html", "--history-db", "none"]))
    cases.append(("report --ab", REPORT, [batch, "--ab", other, "-o", base / "ab.html"]))
    for label, entry, cmd in cases:
        mb, wall, rc, last = peak(entry, cmd, args.limit_gb, base)
        print(f"{label:<32} peak RSS {mb:7.0f} MB  {wall:6.1f} s  exit {rc}  {last if rc else ''}")
    if not args.keep:
        shutil.rmtree(base)


if __name__ == "__main__":
    main()
