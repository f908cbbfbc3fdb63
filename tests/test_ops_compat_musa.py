"""zlbench.plugins.compat_musa: order, scope, exact-reason matching, no-op off musa.

Each case runs a real pytest subprocess over a small tree whose conftest imports a
stand-in flag_gems (its vendor_name from FAKE_VENDOR), so the plugin sees flag_gems
the way it does under a real benchmark run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from zlbench.plugins.compat_musa import below_bench_dir

REPO = Path(__file__).resolve().parents[1]

TABLE = {
    "vendor": "mthreads",
    "guards": [
        {"file": "benchmark/test_fft.py", "kind": "skipif", "test": "test_perf_fft",
         "reason": "CUDA is not available", "decision": "remove", "why": "generic ops"},
        {"file": "benchmark/test_topk.py", "kind": "module-skipif", "test": "*",
         "reason": "CUDA device required", "decision": "remove", "why": "generic ops"},
        {"file": "benchmark/test_attn.py", "kind": "skipif", "test": "test_attn",
         "reason": "CUDA is not available", "decision": "keep", "why": "CUDA-only baseline"},
        {"file": "benchmark/test_renamed.py", "kind": "skipif", "test": "test_renamed",
         "reason": "CUDA is not available", "decision": "remove", "why": "upstream reworded it"},
    ],
}

FILES = {
    "src/flag_gems/__init__.py": "import os\nvendor_name = os.environ['FAKE_VENDOR']\n",
    "benchmark/__init__.py": "",
    "benchmark/conftest.py": "import flag_gems  # noqa: F401\n",
    # NO_CUDA stands for `not torch.cuda.is_available()` on an MThreads host
    "benchmark/test_fft.py": """
        import pytest
        NO_CUDA = True

        @pytest.mark.skipif(NO_CUDA, reason="CUDA is not available")
        @pytest.mark.fft
        def test_perf_fft():
            pass

        @pytest.mark.skipif(NO_CUDA, reason="CUDA is not available.")
        def test_other_reason():
            pass

        @pytest.mark.skipif(NO_CUDA, reason="CUDA is not available")
        def test_other_test():
            pass
    """,
    "benchmark/test_attn.py": """
        import pytest

        @pytest.mark.skipif(True, reason="CUDA is not available")
        def test_attn():
            pass
    """,
    "benchmark/test_elsewhere.py": """
        import pytest

        @pytest.mark.skipif(True, reason="CUDA is not available")
        def test_perf_fft():
            pass
    """,
    "benchmark/test_topk.py": """
        import pytest
        pytestmark = pytest.mark.skipif(True, reason="CUDA device required")

        @pytest.mark.parametrize("k", [1, 2])
        def test_topk(k):
            pass
    """,
    "benchmark/test_renamed.py": """
        import pytest

        @pytest.mark.skipif(True, reason="CUDA unavailable")
        def test_renamed():
            pass
    """,
    # A later-registered tryfirst plugin: records the skip reasons it is shown.
    "recorder.py": """
        import json, os
        import pytest

        @pytest.hookimpl(tryfirst=True)
        def pytest_collection_modifyitems(items):
            seen = {i.nodeid: [m.kwargs.get("reason") for m in i.iter_markers("skipif")]
                    for i in items}
            with open(os.environ["RECORD"], "w") as fh:
                json.dump(seen, fh)
    """,
}


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("compat")
    for rel, text in FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    (root / "pytest.ini").write_text("[pytest]\npythonpath = src\n")
    ops = root / "ops" / "compat"
    ops.mkdir(parents=True)
    (ops / "musa_skip_overrides.yaml").write_text(yaml.safe_dump(TABLE))
    return root


def _run(tree, tmp_path, vendor, run_dir=True):
    env = dict(os.environ, FAKE_VENDOR=vendor, ZL_OPS_DIR=str(tree / "ops"),
               RECORD=str(tmp_path / "seen.json"), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
               PYTHONPATH=os.pathsep.join([str(tree), str(REPO)]))
    env.pop("ZL_RUN_DIR", None)
    if run_dir:
        env["ZL_RUN_DIR"] = str(tmp_path / "run")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "benchmark", "-v", "-p", "no:cacheprovider",
         "-p", "zlbench.plugins.compat_musa", "-p", "recorder"],
        cwd=tree, env=env, capture_output=True, text=True, timeout=60)
    seen = json.loads((tmp_path / "seen.json").read_text())
    outcomes = {}
    for line in proc.stdout.splitlines():
        for word in ("PASSED", "SKIPPED"):
            if f" {word}" in line and "::" in line:
                outcomes[line.split(" ")[0]] = word
    return proc, seen, outcomes


def test_on_mthreads_exactly_the_listed_skips_go(tree, tmp_path):
    proc, seen, outcomes = _run(tree, tmp_path, "mthreads")
    assert outcomes == {
        "benchmark/test_fft.py::test_perf_fft": "PASSED",
        "benchmark/test_fft.py::test_other_reason": "SKIPPED",   # reason differs by a period
        "benchmark/test_fft.py::test_other_test": "SKIPPED",     # same reason, other test
        "benchmark/test_attn.py::test_attn": "SKIPPED",          # decision: keep
        "benchmark/test_elsewhere.py::test_perf_fft": "SKIPPED",  # same test name, other file
        "benchmark/test_topk.py::test_topk[1]": "PASSED",        # module pytestmark
        "benchmark/test_topk.py::test_topk[2]": "PASSED",
        "benchmark/test_renamed.py::test_renamed": "SKIPPED",
    }, proc.stdout + proc.stderr
    # order: a tryfirst plugin registered after it already sees the rewritten items
    assert seen["benchmark/test_fft.py::test_perf_fft"] == []
    assert seen["benchmark/test_topk.py::test_topk[1]"] == []
    assert seen["benchmark/test_attn.py::test_attn"] == ["CUDA is not available"]
    # what it removed is printed and recorded; a reworded upstream guard is called out
    assert ('COMPAT_SKIP_REMOVED file=benchmark/test_fft.py test=test_perf_fft '
            'reason="CUDA is not available" items=1') in proc.stdout
    assert "no skip with reason 'CUDA is not available' on benchmark/test_renamed.py" in proc.stdout
    record = json.loads((tmp_path / "run" / "plugins" / "compat_musa.json").read_text())
    assert record["active"] is True
    assert [(r["file"], r["items"]) for r in record["removed"]] == [
        ("benchmark/test_fft.py", 1), ("benchmark/test_topk.py", 2)]


def test_off_mthreads_nothing_changes(tree, tmp_path):
    proc, seen, outcomes = _run(tree, tmp_path, "nvidia")
    assert set(outcomes.values()) == {"SKIPPED"}, proc.stdout
    assert seen["benchmark/test_fft.py::test_perf_fft"] == ["CUDA is not available"]
    assert "COMPAT_SKIP_REMOVED" not in proc.stdout
    record = json.loads((tmp_path / "run" / "plugins" / "compat_musa.json").read_text())
    assert record == {"vendor": "nvidia", "active": False, "removed": []}


def test_a_plain_pytest_run_is_left_alone(tree, tmp_path):
    proc, seen, outcomes = _run(tree, tmp_path, "mthreads", run_dir=False)
    assert set(outcomes.values()) == {"SKIPPED"}, proc.stdout
    assert "COMPAT_SKIP_REMOVED" not in proc.stdout


def test_path_below_the_benchmark_package():
    assert below_bench_dir(Path("/x/FlagGems/benchmark/test_FLA/test_a.py")) == "test_FLA/test_a.py"
    assert below_bench_dir(Path("/site/flaggems_benchmark/test_fft.py")) == "test_fft.py"
    assert below_bench_dir(Path("/x/tests/test_fft.py")) is None


def test_it_runs_first_on_musa_and_nowhere_else():
    from zlbench.backends import BACKENDS, plugin_plan

    assert plugin_plan(BACKENDS["musa"])[0] == "zlbench.plugins.compat_musa"
    for name, backend in BACKENDS.items():
        if name != "musa":
            assert "zlbench.plugins.compat_musa" not in plugin_plan(backend), name
