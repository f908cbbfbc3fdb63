"""The overheads plugin in real pytest processes: collection keeps to the paths the
command line names and collects exactly what plain pytest does; the benchmark's
``yaml.safe_load`` reads a shape file through the C parser into the very objects the
pure-Python parser builds, and a document the C parser refuses falls back to the
pure-Python one (its result, or its error); without a run dir, or without libyaml,
nothing is changed."""

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import yaml

from zlbench.plugins import overheads

HAS_LIBYAML = hasattr(yaml, "CSafeLoader")

SHAPES = textwrap.dedent(
    """
    # like FlagGems' core_shapes.yaml
    BlasBenchmark:
      shapes:
        - [2, 4096, 4096, 4096]
        - [16, 1024, 1024, 1024]
      shape_desc: "B, M, N, K"
    div_tensor:
      shapes: [[1073741824], [4096, 4096], [64, 512, 512]]
    flags: {on: yes, off: no, ratio: 1e-3, when: 2001-12-14, name: ~}
    """
)

BENCH = textwrap.dedent(
    """
    import json, os, yaml

    def test_reads_its_shapes():
        with open("shapes.yaml") as f:
            from_file = yaml.safe_load(f)
        from_text = yaml.safe_load(open("shapes.yaml").read())
        pure = yaml.load(open("shapes.yaml").read(), Loader=yaml.SafeLoader)
        with open(os.environ["SEEN"], "w") as out:
            json.dump({"patched": type(yaml.safe_load).__name__, "equal": from_file == pure == from_text,
                       "repr": repr(from_file) == repr(pure)}, out)
    """
)


def run_bench(tmp_path: Path, run_dir: bool = True):
    (tmp_path / "test_bench.py").write_text(BENCH)
    (tmp_path / "shapes.yaml").write_text(SHAPES)
    seen = tmp_path / "seen.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZL_")}
    env.update(SEEN=str(seen), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    if run_dir:
        (tmp_path / "run").mkdir()
        env["ZL_RUN_DIR"] = str(tmp_path / "run")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-p", "zlbench.plugins.overheads",
         "test_bench.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = tmp_path / "run" / "plugins" / "overheads.json"
    return json.loads(seen.read_text()), (json.loads(report.read_text()) if report.is_file() else None)


@pytest.mark.skipif(not HAS_LIBYAML, reason="this PyYAML was built without libyaml")
def test_the_benchmark_reads_its_shapes_through_libyaml_into_the_same_objects(tmp_path):
    seen, report = run_bench(tmp_path)
    assert seen == {"patched": "SafeLoad", "equal": True, "repr": True}
    assert report.pop("collect_ignored") >= 1  # shapes.yaml, run/
    assert report == {"libyaml": True, "parsed": 2, "fallback": 0}


def test_without_a_run_dir_yaml_is_left_alone(tmp_path):
    seen, report = run_bench(tmp_path, run_dir=False)
    assert seen["patched"] == "function" and seen["equal"] is True
    assert report is None


@pytest.mark.skipif(not HAS_LIBYAML, reason="this PyYAML was built without libyaml")
def test_a_document_the_c_parser_refuses_is_read_by_the_pure_python_one(capsys):
    class Refusing(yaml.CSafeLoader):
        def get_single_data(self):
            raise yaml.YAMLError("refused")

    load = overheads.SafeLoad(yaml, Refusing)
    assert load(SHAPES) == yaml.load(SHAPES, Loader=yaml.SafeLoader)
    assert load.counts == {"parsed": 0, "fallback": 1}
    # Said in the output, once a process: the second refusal is counted only.
    assert load(SHAPES) == yaml.load(SHAPES, Loader=yaml.SafeLoader)
    said = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("zlbench[overheads]")]
    assert said == ["zlbench[overheads] PyYAML's C parser refused a document (refused); "
                    "the pure-Python parser reads it"]
    assert load.counts == {"parsed": 0, "fallback": 2}
    # A document neither parser reads raises the pure-Python parser's error.
    with pytest.raises(yaml.YAMLError) as refused:
        overheads.SafeLoad(yaml, yaml.CSafeLoader)("a: [1, 2")
    with pytest.raises(yaml.YAMLError) as pure:
        yaml.load("a: [1, 2", Loader=yaml.SafeLoader)
    assert str(refused.value) == str(pure.value)


@pytest.mark.skipif(not HAS_LIBYAML, reason="this PyYAML was built without libyaml")
def test_what_a_parser_refuses_from_a_file_is_cited_by_the_files_name(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    load = overheads.SafeLoad(yaml, yaml.CSafeLoader)
    with open(bad) as f, pytest.raises(yaml.YAMLError) as ours:
        load(f)
    with open(bad) as f, pytest.raises(yaml.YAMLError) as pure:
        yaml.load(f, Loader=yaml.SafeLoader)
    assert str(ours.value) == str(pure.value) and str(bad) in str(ours.value)
    with open(bad, "rb") as f, pytest.raises(yaml.YAMLError) as from_bytes:
        load(f)
    assert str(bad) in str(from_bytes.value)
    # What is neither text nor a stream goes to the original as it is, to fail as it would.
    with pytest.raises(AttributeError):
        load(bad)
    assert load.__name__ == "safe_load" and load.__wrapped__ is yaml.safe_load


def test_pytest_7_is_not_narrowed(monkeypatch):
    monkeypatch.setattr(pytest, "__version__", "7.4.4")
    assert overheads.narrows_collection() is False
    monkeypatch.setattr(pytest, "__version__", "8.0.2")
    assert overheads.narrows_collection() is True


def test_a_pyyaml_without_libyaml_is_not_touched():
    def safe_load(stream):
        return "pure"

    fake = types.SimpleNamespace(safe_load=safe_load)
    assert overheads.install_libyaml(fake) is None
    assert fake.safe_load is safe_load


# ---- collection -------------------------------------------------------------------

PACKAGE = {
    # A package like FlagGems' benchmark/: a conftest that registers the marks and an
    # option, many modules, a subpackage, and a collect_ignore of its own.
    "pytest.ini": "[pytest]\nmarkers =\n    abs\n    add\n    sub\n",
    "bench/__init__.py": "",
    "bench/conftest.py": (
        "import os\n"
        "collect_ignore = ['sub/test_skipped.py']\n"
        "def pytest_configure(config):\n"
        "    open(os.environ['CONFTEST_SEEN'], 'w').write('configured')\n"
    ),
    "bench/test_abs.py": "import pytest\n@pytest.mark.abs\ndef test_abs():\n    pass\n"
                         "@pytest.mark.abs\ndef test_abs_other():\n    pass\n",
    "bench/test_add.py": "import pytest\n@pytest.mark.add\ndef test_add():\n    pass\n",
    "bench/test_broken.py": "raise SystemExit('imported: a module the run does not name')\n",
    "bench/sub/__init__.py": "",
    "bench/sub/test_sub.py": "import pytest\n@pytest.mark.sub\ndef test_sub():\n    pass\n",
    "bench/sub/test_skipped.py": "raise SystemExit('collect_ignore did not hold')\n",
    "notes/test_elsewhere.py": "def test_elsewhere():\n    pass\n",
}


def collect(tmp_path: Path, args, run_dir: bool):
    root = tmp_path / "corpus"
    for name, text in PACKAGE.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZL_")}
    env.update(PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", CONFTEST_SEEN=str(tmp_path / "conftest_seen"))
    report = tmp_path / "run" / "plugins" / "overheads.json"
    if run_dir:
        (tmp_path / "run").mkdir(exist_ok=True)
        env["ZL_RUN_DIR"] = str(tmp_path / "run")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-p", "zlbench.plugins.overheads", *args],
        cwd=root, env=env, capture_output=True, text=True, timeout=120,
    )
    ids = sorted(line for line in proc.stdout.splitlines() if "::" in line)
    ignored = json.loads(report.read_text())["collect_ignored"] if run_dir else None
    return proc.returncode, ids, ignored, (tmp_path / "conftest_seen").is_file()


@pytest.mark.parametrize("args", [
    ["bench/test_abs.py", "-m", "abs"],
    ["bench/test_abs.py::test_abs_other"],
    ["bench/sub"],
    ["bench/test_add.py", "bench/sub/test_sub.py"],
])
def test_collection_keeps_to_the_named_paths_and_collects_what_pytest_does(tmp_path, args):
    plain = collect(tmp_path / "plain", args, run_dir=False)
    narrowed = collect(tmp_path / "narrowed", args, run_dir=True)
    assert plain[0] == narrowed[0] == 0
    assert narrowed[1] == plain[1] and narrowed[1]
    assert narrowed[3] is True  # the package's conftest was loaded and configured
    # Turned away before pytest made their nodes: the modules beside the named ones and
    # the directories the run does not name (notes/ always; sub/ unless named).
    assert narrowed[2] >= 2


def test_a_named_file_beside_a_broken_module_is_collected_alone(tmp_path):
    rc, ids, ignored, _ = collect(tmp_path, ["bench/test_add.py"], run_dir=True)
    assert (rc, ids) == (0, ["bench/test_add.py::test_add"])
    # test_abs.py, test_broken.py and sub/ beside it, notes/ at the root; pytest.ini is
    # not a collectable path either way.
    assert ignored >= 4


def test_no_named_path_collects_as_pytest_does(tmp_path):
    plain = collect(tmp_path / "plain", ["bench/sub", "--pyargs"], run_dir=False)
    narrowed = collect(tmp_path / "narrowed", ["bench/sub", "--pyargs"], run_dir=True)
    assert narrowed[:2] == plain[:2] and narrowed[2] is None
