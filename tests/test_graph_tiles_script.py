"""benchmarks/graph_tiles.py: the timings need a CUDA device; here, that it says so."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "graph_tiles.py"


def test_without_a_cuda_device_it_says_so_and_exits_2():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--trials", "1"], capture_output=True, text=True,
                          timeout=120, env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "needs a CUDA device" in proc.stderr
