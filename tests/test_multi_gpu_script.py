"""benchmarks/multi_gpu.py batch part: real `zlbench batch` runs of the sample corpus on
CPU slots, with a stand-in nvidia-smi whose GPU 1 is busy, to check the figures and the
"busy outside the device set" verdict."""

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "multi_gpu.py"

# GPU 1 holds 2 GiB and one compute process from its first sample on; GPU 0 stays idle.
FAKE_SMI = textwrap.dedent('''\
    #!/bin/sh
    case "$1" in
    --query-gpu=index,uuid) printf '0, GPU-a\\n1, GPU-b\\n' ;;
    --query-gpu=index,memory.used) printf '0, 0\\n1, 0\\n' ;;
    --query-gpu=index,memory.used,utilization.gpu) printf '0, 0, 0\\n1, 2048, 57\\n' ;;
    --query-compute-apps=gpu_uuid,pid) printf 'GPU-b, 4242\\n' ;;
    esac
''')


@pytest.mark.slow
def test_batch_part_reports_makespans_and_gpus_busy_outside_the_set(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("FLAGGEMS_DIR", None)
    out = tmp_path / "mg"
    proc = subprocess.run([sys.executable, str(SCRIPT), "batch", "--backend", "cpu", "--dtypes", "float32",
                           "--ops", "abs,add", "--devices", "1", "--devices", "0", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=300)
    results = json.loads((out / "batch.json").read_text())
    on_1, on_0 = results
    for r in results:
        assert r["exit_code"] == 0 and r["statuses"] == {"ok": 2}, proc.stdout[-3000:]
        assert list(r["makespan_s_per_device"]) == r["devices"]
        assert r["gpus"]["busy_gpus"] == ["1"] and r["gpus"]["per_gpu"]["1"]["peak_mib"] == 2048
    assert on_1["busy_outside_devices"] == []
    assert on_0["busy_outside_devices"] == ["1"]      # the set was 0, yet GPU 1 was busy
    assert proc.returncode == 1                        # which the script's verdict reports
    assert "speedup_vs_one_gpu" not in on_1
