"""The libyaml plugin: in a real pytest process the benchmark's ``yaml.safe_load`` reads a
shape file through the C parser into the very objects the pure-Python parser builds; a
document the C parser refuses falls back to the pure-Python one (its result, or its
error); without a run dir, or without libyaml, yaml is left as it is."""

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import yaml

from zlbench.plugins import libyaml

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
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-p", "zlbench.plugins.libyaml",
         "test_bench.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = tmp_path / "run" / "plugins" / "libyaml.json"
    return json.loads(seen.read_text()), (json.loads(report.read_text()) if report.is_file() else None)


@pytest.mark.skipif(not HAS_LIBYAML, reason="this PyYAML was built without libyaml")
def test_the_benchmark_reads_its_shapes_through_libyaml_into_the_same_objects(tmp_path):
    seen, report = run_bench(tmp_path)
    assert seen == {"patched": "SafeLoad", "equal": True, "repr": True}
    assert report == {"libyaml": True, "parsed": 2, "fallback": 0}


def test_without_a_run_dir_yaml_is_left_alone(tmp_path):
    seen, report = run_bench(tmp_path, run_dir=False)
    assert seen["patched"] == "function" and seen["equal"] is True
    assert report is None


@pytest.mark.skipif(not HAS_LIBYAML, reason="this PyYAML was built without libyaml")
def test_a_document_the_c_parser_refuses_is_read_by_the_pure_python_one():
    class Refusing(yaml.CSafeLoader):
        def get_single_data(self):
            raise yaml.YAMLError("refused")

    load = libyaml.SafeLoad(yaml, Refusing)
    assert load(SHAPES) == yaml.load(SHAPES, Loader=yaml.SafeLoader)
    assert load.counts == {"parsed": 0, "fallback": 1}
    # A document neither parser reads raises the pure-Python parser's error.
    with pytest.raises(yaml.YAMLError) as refused:
        libyaml.SafeLoad(yaml, yaml.CSafeLoader)("a: [1, 2")
    with pytest.raises(yaml.YAMLError) as pure:
        yaml.load("a: [1, 2", Loader=yaml.SafeLoader)
    assert str(refused.value) == str(pure.value)


def test_a_pyyaml_without_libyaml_is_not_touched():
    def safe_load(stream):
        return "pure"

    fake = types.SimpleNamespace(safe_load=safe_load)
    assert libyaml.install(fake) is None
    assert fake.safe_load is safe_load
