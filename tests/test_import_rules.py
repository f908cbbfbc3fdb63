"""The module map's rules (docs/design.md, "Who owns what"), checked by reading the
source with ast. A failure names the file, the line and the rule it breaks."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, List, Tuple

from zlbench import backends, benchenv, knobs, rundir

PACKAGE = Path(__file__).resolve().parents[1] / "zlbench"

# The run and batch files whose names only zlbench/rundir.py may spell.
RUN_FILES = {rundir.RUN_LOG, rundir.IDENTITY, rundir.COMPLETE, rundir.SHAPES, rundir.RECORDS_DIR,
             rundir.STATUS_FILE, rundir.JOURNAL_FILE, rundir.PLAN_FILE, rundir.SET_ASIDE_DIR,
             rundir.BATCH_LOG, rundir.DRIVER_LOCK, rundir.DRIVER_INFO, rundir.SUMMARY_CSV,
             rundir.AB_JSON, rundir.SHARD_LOG, rundir.ROW_STATS, rundir.FG_SUMMARY,
             rundir.FG_PERF_RESULT}
# Names only a reader of FlagGems files uses (its shape file, its base modules), and
# words of the table it prints (in a pattern or a comparison).
FLAGGEMS_NAMES = {"core_shapes.yaml", "performance_utils", "performance_utils.py",
                  "benchmark.performance_utils"}
FLAGGEMS_TEXT = ("Performance Test", "Size Detail", "Operator: ")
HEAVY = ("torch", "triton", "flag_gems")
# Modules that run inside the benchmark process (or its collect-only subprocess), where
# torch is expected: everything else is the orchestrator.
BENCHMARK_SIDE = ("plugins/", "sample_corpus/", "cpu_timer.py", "timing.py",
                  "corpus/cpu_collect_driver.py", "corpus/collect_dump.py")
# Who may not import whom: a module under the key never imports one under a value.
_ABOVE_RUNDIR = ("zlbench.batch", "zlbench.run", "zlbench.summary", "zlbench.plugins",
                 "zlbench.corpus", "zlbench.report", "zlbench.ab", "zlbench.history",
                 "zlbench.slurm", "zlbench.cli", "zlbench.noise", "zlbench.ops",
                 "zlbench.knobs", "zlbench.rowstats", "zlbench.runlog")
LAYERS = {
    "zlbench/proc.py": ("zlbench.",),
    "zlbench/atomic.py": ("zlbench.",),
    "zlbench/rundir.py": _ABOVE_RUNDIR,
    # The row record and the run.log reader sit just above the run-dir contract: run,
    # the plugins and summary all use them.
    "zlbench/rowstats.py": tuple(n for n in _ABOVE_RUNDIR if n != "zlbench.rowstats"),
    "zlbench/runlog.py": tuple(n for n in _ABOVE_RUNDIR if n not in ("zlbench.runlog", "zlbench.corpus")),
    "zlbench/backends/": ("zlbench.batch", "zlbench.run", "zlbench.summary", "zlbench.plugins",
                          "zlbench.corpus", "zlbench.report", "zlbench.knobs", "zlbench.rundir"),
    "zlbench/corpus/": ("zlbench.batch", "zlbench.run", "zlbench.summary", "zlbench.plugins",
                        "zlbench.report", "zlbench.ops", "zlbench.providers", "zlbench.ab",
                        "zlbench.cli"),
    "zlbench/plugins/": ("zlbench.batch", "zlbench.run", "zlbench.summary", "zlbench.report",
                         "zlbench.ops", "zlbench.providers", "zlbench.ab", "zlbench.cli"),
    # One operator's run: below the batch and every reader of its files.
    "zlbench/run/": ("zlbench.cli", "zlbench.batch", "zlbench.summary", "zlbench.report",
                     "zlbench.history", "zlbench.slurm", "zlbench.ab", "zlbench.noise"),
    "zlbench/batch/": ("zlbench.cli", "zlbench.summary", "zlbench.report", "zlbench.history",
                       "zlbench.slurm", "zlbench.ab", "zlbench.noise"),
    # The readers take the status vocabulary from zlbench/rundir.py, not from batch.
    "zlbench/summary/": ("zlbench.batch.driver", "zlbench.batch.execute", "zlbench.batch.classify",
                         "zlbench.run", "zlbench.plugins", "zlbench.report", "zlbench.slurm",
                         "zlbench.cli"),
    "zlbench/report/": ("zlbench.batch.driver", "zlbench.batch.execute", "zlbench.batch.classify",
                        "zlbench.run", "zlbench.plugins", "zlbench.slurm", "zlbench.cli"),
    # The report shows history (report/history.py); history never reaches up into it.
    "zlbench/history/": ("zlbench.report", "zlbench.batch", "zlbench.run", "zlbench.plugins",
                         "zlbench.slurm", "zlbench.cli"),
    # slurm submits batches (batch.command) but reads their plans through rundir.
    "zlbench/slurm/": ("zlbench.batch.driver", "zlbench.batch.execute", "zlbench.batch.classify",
                       "zlbench.run", "zlbench.plugins", "zlbench.cli"),
}
# Names of the run-dir contract only zlbench/rundir.py defines: the exit codes of
# `zlbench run`, ops_status.csv's statuses, the documents' formats.
RUNDIR_NAMES = {"EXIT_OK", "EXIT_FAILED", "EXIT_PREFLIGHT", "EXIT_NO_TESTS", "STATUSES", "BAD",
                "NOT_RUN", "PLAN_FORMAT", "IDENTITY_FORMAT", "ROW_STATS_FORMAT", "STATUS_FORMAT"}
BAD_STATUSES = {rundir.FAILED, rundir.TIMEOUT, rundir.CRASHED}


def vendor_names() -> List[str]:
    """Vendor packages and tools, as the backend modules list them."""
    generic = {backends.base.TRITON_TIMER[0], "zlbench.cpu_timer"}
    names = set()
    for backend in backends.BACKENDS.values():
        names.update(backend.torch_extensions)
        names.update(module for module, _ in backend.timer_targets if module not in generic)
        if backend.list_tool:
            names.add(backend.list_tool[0])
    return sorted(names)


def sources() -> Iterator[Tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        if "/sample_corpus/" in rel:
            continue
        yield rel, ast.parse(path.read_text(encoding="utf-8"), filename=rel)


def docstrings(tree: ast.Module) -> set:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def strings(tree: ast.Module) -> Iterator[Tuple[int, str]]:
    """String constants in code (docstrings left out: they may name anything)."""
    skip = docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            yield node.lineno, node.value


def imports(rel: str, tree: ast.Module) -> Iterator[Tuple[int, str]]:
    """Dotted names imported anywhere in the module, relative imports made absolute."""
    package = rel[:-3].replace("/", ".")
    if not rel.endswith("__init__.py"):
        package = package.rpartition(".")[0]
    else:
        package = package[: -len(".__init__")]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            yield node.lineno, prefix
            for alias in node.names:
                yield node.lineno, f"{prefix}.{alias.name}"


def under(rel: str, prefix: str) -> bool:
    return rel == prefix or (prefix.endswith("/") and rel.startswith(prefix))


def broken(found: List[str]) -> str:
    return "\n".join(["the module map's rules are broken (docs/design.md):", *found])


def test_only_rundir_spells_the_files_a_run_leaves():
    found = [f"{rel}:{line}: spells {text!r}; only zlbench/rundir.py names run files "
             f"(use its constant or function)"
             for rel, tree in sources() if rel != "zlbench/rundir.py"
             for line, text in strings(tree) if text in RUN_FILES]
    assert not found, broken(found)


def test_only_corpus_reads_flaggems_files():
    found = []
    for rel, tree in sources():
        if rel.startswith("zlbench/corpus/"):
            continue
        for line, text in strings(tree):
            hit = text if text in FLAGGEMS_NAMES else next((t for t in FLAGGEMS_TEXT if t in text), None)
            if hit:
                found.append(f"{rel}:{line}: matches FlagGems text {hit!r}; only zlbench/corpus/ "
                             "parses FlagGems files")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "parse" and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "ast"):
                found.append(f"{rel}:{node.lineno}: calls ast.parse; only zlbench/corpus/ "
                             "parses FlagGems files")
    assert not found, broken(found)


def test_the_orchestrator_never_imports_torch_triton_or_flag_gems():
    found = []
    for rel, tree in sources():
        inside = rel[len("zlbench/"):]
        if inside.startswith(BENCHMARK_SIDE) or rel.startswith("zlbench/backends/"):
            continue
        for line, name in imports(rel, tree):
            if name.split(".")[0] in HEAVY:
                found.append(f"{rel}:{line}: imports {name}; the orchestrator never imports "
                             f"{', '.join(HEAVY)}")
    assert not found, broken(found)


def test_backend_probes_import_torch_only_inside_functions():
    # A probe runs in the benchmark process; the registry itself stays light.
    found = [f"{rel}:{node.lineno}: imports {alias.name} at module level; backends import "
             "torch only inside a probe"
             for rel, tree in sources() if rel.startswith("zlbench/backends/")
             for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
             for alias in node.names
             if (getattr(node, "module", None) or alias.name).split(".")[0] in HEAVY]
    assert not found, broken(found)


def test_only_backends_name_a_vendor_package():
    vendors = vendor_names()
    assert "torch_musa" in vendors and "nvidia-smi" in vendors
    found = []
    for rel, tree in sources():
        if rel.startswith("zlbench/backends/"):
            continue
        for line, text in strings(tree):
            hit = next((v for v in vendors if v in text), None)
            if hit:
                found.append(f"{rel}:{line}: names vendor package {hit!r}; that belongs in "
                             "zlbench/backends/<vendor>.py")
        for line, name in imports(rel, tree):
            if any(name == v or name.startswith(v + ".") for v in vendors):
                found.append(f"{rel}:{line}: imports vendor package {name}; that belongs in "
                             "zlbench/backends/<vendor>.py")
    assert not found, broken(found)


def test_only_proc_starts_and_kills_children():
    found = []
    for rel, tree in sources():
        if rel == "zlbench/proc.py":
            continue
        for node in ast.walk(tree):
            func = node.func if isinstance(node, ast.Call) else None
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and (
                    (func.value.id, func.attr) in (("subprocess", "Popen"), ("os", "killpg"))):
                found.append(f"{rel}:{node.lineno}: calls {func.value.id}.{func.attr}; children "
                             "start and stop through zlbench/proc.py (one grace/SIGKILL rule)")
    assert not found, broken(found)


def test_layers_import_only_downwards():
    found = []
    for rel, tree in sources():
        for owner, banned in LAYERS.items():
            if not under(rel, owner):
                continue
            for line, name in imports(rel, tree):
                if any(name == b or name.startswith(b.rstrip(".") + ".") for b in banned) \
                        and not (owner.endswith("/") and name.startswith(owner[:-1].replace("/", "."))):
                    found.append(f"{rel}:{line}: imports {name}; {owner} may not import "
                                 f"{', '.join(banned)}")
    assert not found, broken(found)


def test_the_run_dir_vocabulary_has_one_home():
    found = []
    for rel, tree in sources():
        if rel == "zlbench/rundir.py":
            continue
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, ast.AnnAssign) else [])
            names = [n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)]
            for name in names:
                if name.lstrip("_") in RUNDIR_NAMES:
                    found.append(f"{rel}:{node.lineno}: defines {name}; exit codes, statuses and "
                                 "document formats are zlbench/rundir.py's (import them)")
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                words = {e.value for e in node.elts if isinstance(e, ast.Constant)}
                if BAD_STATUSES <= words:
                    found.append(f"{rel}:{node.lineno}: spells the bad statuses "
                                 f"{sorted(BAD_STATUSES)}; use rundir.BAD")
    assert not found, broken(found)


def test_the_rules_see_a_violation():
    # The checker itself: a module spelling a run file and importing torch is caught.
    tree = ast.parse('import torch\nPATH = "run_identity.json"\n')
    assert [text for _, text in strings(tree) if text in RUN_FILES] == ["run_identity.json"]
    assert [name for _, name in imports("zlbench/x.py", tree)] == ["torch"]
    # An import running back up is named by file, line and rule.
    upward = ast.parse("x = 1\nfrom zlbench.cli import main\n")
    banned = LAYERS["zlbench/run/"]
    assert [(line, name) for line, name in imports("zlbench/run/worker.py", upward)
            if any(name == b or name.startswith(b + ".") for b in banned)] == [
        (2, "zlbench.cli"), (2, "zlbench.cli.main")]
    spelt = ast.parse('env = {"ZL_RUN_DIR": "/r"}\n')
    assert [text for _, text in strings(spelt) if text in settings_variables()] == ["ZL_RUN_DIR"]


# The benchmark process' variables (what `zlbench run` hands to pytest) and every
# knob's variable: spelled by the settings table and the benchmark environment only.
SETTINGS_HOMES = ("zlbench/knobs.py", "zlbench/benchenv.py")


def settings_variables() -> set:
    return set(benchenv.variables()) | {k.env for k in knobs.BY_NAME.values() if k.env}


def test_only_the_settings_modules_spell_the_benchmark_variables():
    names = settings_variables()
    assert {"ZL_RUN_DIR", "REPLAY_FROM", "ZL_AUTOTUNE_MODE", "ZL_STALL_TIMEOUT"} <= names
    found = [f"{rel}:{line}: spells {text!r}; only {' and '.join(SETTINGS_HOMES)} name the "
             "settings' and the benchmark process' variables (use knobs.BY_NAME[...].env, "
             "knobs.env_value or a zlbench.benchenv reader)"
             for rel, tree in sources() if rel not in SETTINGS_HOMES
             for line, text in strings(tree) if text in names]
    assert not found, broken(found)
