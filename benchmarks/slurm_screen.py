"""A real sharded screen on a one-node Slurm started here (the tests' cluster): the
bundled sample corpus (or --corpus DIR, a FlagGems-format tree) in --shards N array
tasks, through `zlbench slurm submit`. Prints `zlbench slurm status` while it runs and
once finished, then the merged `zlbench summary`. Needs root, slurm-wlm and munge.

    python benchmarks/slurm_screen.py --shards 3 --out /tmp/screen [--corpus DIR]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from slurm_cluster import SlurmCluster, missing_binaries  # noqa: E402


def zl(env, *args):
    return subprocess.run([sys.executable, "-m", "zlbench", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=600)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True, help="the screen dir (must not exist)")
    parser.add_argument("--corpus", type=Path, default=None,
                        help="a FlagGems-format tree (default: the bundled sample corpus)")
    parser.add_argument("batch_args", nargs="*", help="more zlbench batch options (after --)")
    args = parser.parse_args()
    if missing_binaries():
        print(f"missing: {', '.join(missing_binaries())}: apt-get install -y slurm-wlm munge")
        return 2
    cluster = SlurmCluster(Path(tempfile.mkdtemp(prefix="zlbench-slurm-")))
    cluster.start()
    try:
        env = cluster.env
        batch = ["--backend", "cpu", "--dismiss", "none", *args.batch_args]
        if args.corpus:
            batch += ["--flaggems-dir", args.corpus]
        started = time.monotonic()
        submit = zl(env, "slurm", "submit", "--shards", args.shards, "--out", args.out, *batch)
        print(f"$ zlbench slurm submit --shards {args.shards} --out {args.out} {' '.join(map(str, batch))}")
        print(submit.stdout + submit.stderr)
        if submit.returncode != 0:
            return submit.returncode
        shown_running = False
        while True:
            status = zl(env, "slurm", "status", args.out)
            if status.returncode == 3 and not shown_running and "RUNNING" in status.stdout:
                print(f"$ zlbench slurm status {args.out}   # while it runs, "
                      f"{time.monotonic() - started:.0f} s in\n{status.stdout}")
                shown_running = True
            if status.returncode != 3:
                break
            time.sleep(2)
        print(f"$ zlbench slurm status {args.out}   # exit {status.returncode}, "
              f"{time.monotonic() - started:.0f} s after submitting\n{status.stdout}")
        summary = zl(env, "summary", args.out)
        print(f"$ zlbench summary {args.out}\n{summary.stdout}{summary.stderr}")
        return status.returncode
    finally:
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
