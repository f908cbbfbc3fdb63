"""``zlbench ops``: operator inventories, shape files, the dismiss list, compat guards."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import click

from .. import knobs
from ..corpus import guards as guards_mod
from ..corpus import inventory as inv
from ..corpus import shapes as shapes_mod
from ..corpus.collect import format_comparison
from ..corpus.tree import BenchTree
from ..opsdata import OpsDataError, inventory_path
from . import dismiss as dismiss_mod


class _OpsError(click.ClickException):
    exit_code = 1


def _repo_arg(text: str) -> Tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise click.BadParameter(f"{text!r}: give NAME=DIR, e.g. flaggems=~/FlagGems", param_hint="--repo")
    root = Path(path).expanduser()
    if not root.is_dir():
        raise click.BadParameter(f"{root} is not a directory", param_hint="--repo")
    return name, root


def _warn_unparsed(root, errors: Dict[str, str], left_out: str) -> None:
    """A file that does not parse drops out of every scan: never silently."""
    for rel, why in sorted(errors.items()):
        click.echo(f"warning: {root}: {rel} does not parse; its {left_out} are left out: {why}", err=True)


def _bench_tree(root: Path) -> BenchTree:
    try:
        return BenchTree(root)
    except OpsDataError as exc:
        raise _OpsError(str(exc)) from exc


@click.group("ops")
def ops_group():
    """Operator inventories, curated shape files, the dismiss list, compat guards."""


@ops_group.command("scan")
@click.option(
    "--repo",
    "repos",
    multiple=True,
    metavar="NAME=DIR",
    help="Checkout to scan and the inventory name to write (ops/inventory/NAME.yaml); "
    "repeatable, e.g. flaggems=~/FlagGems flaggems-vllm=~/FlagGems-vllm. "
    "Default: flaggems=$FLAGGEMS_DIR.",
)
@click.option(
    "--verify/--no-verify",
    default=True,
    show_default=True,
    help="Check the scan against pytest --collect-only of the same tree.",
)
@click.option(
    "--python",
    default=sys.executable,
    show_default=True,
    help="Interpreter for the collect-only run (one that can import flag_gems).",
)
@click.option(
    "--ref",
    "refs",
    multiple=True,
    metavar="NAME=REF",
    help="Where NAME's tree came from, recorded in its inventory; repeatable "
    "(default: git rev-parse of the checkout).",
)
@click.option(
    "--out-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write inventories here instead of ops/inventory/.",
)
def scan_command(repos, verify, python, refs, out_dir):
    """Scan FlagGems checkouts by AST and write their operator inventories.

    Exit 1 when pytest collected something the scan disagrees with (the inventory is
    still written, with the mismatches in its `verified:` block).
    """
    if not repos:
        env_dir = knobs.env_value("flaggems_dir")
        if not env_dir:
            raise click.UsageError("give --repo NAME=DIR (or set FLAGGEMS_DIR)")
        repos = (f"flaggems={env_dir}",)
    ref_of = {}
    for text in refs:
        name, sep, ref = text.partition("=")
        if not sep or not ref:
            raise click.BadParameter(f"{text!r}: give NAME=REF", param_hint="--ref")
        ref_of[name] = ref
    parsed = [_repo_arg(text) for text in repos]
    unknown = sorted(set(ref_of) - {name for name, _ in parsed})
    if unknown:
        raise click.BadParameter(f"no --repo named {', '.join(unknown)}", param_hint="--ref")
    failed = False
    for name, root in parsed:
        try:
            inventory, cmp = inv.inventory_from_tree(
                root, name, verify=verify, python=python, ref=ref_of.get(name)
            )
        except (OpsDataError, OSError) as exc:
            raise _OpsError(str(exc)) from exc
        _warn_unparsed(root, inventory["verified"].get("unparsed_files", {}), "tests")
        path = (out_dir / f"{name}.yaml") if out_dir else inventory_path(name)
        inv.write_inventory(inventory, path)
        counts = inventory["counts"]
        click.echo(
            f"{name}: {counts['test_functions']} test functions, {counts['operators']} "
            f"operators ({inventory['layout']} layout) -> {path}"
        )
        if cmp is not None:
            for line in format_comparison(cmp):
                click.echo(line)
            failed |= cmp.verified and not cmp.clean
        else:
            click.echo("  not verified (--no-verify)")
    if failed:
        sys.exit(1)


@ops_group.command("diff")
@click.argument("old")
@click.argument("new", required=False)
@click.option(
    "--tree",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="Scan this checkout (no collect) and diff it against OLD instead of NEW.",
)
def diff_command(old, new, tree):
    """What changed between two inventories (names such as flaggems, or .yaml paths)."""
    if (new is None) == (tree is None):
        raise click.UsageError("give NEW or --tree DIR (one of them)")
    try:
        before = inv.load_inventory(old)
        if tree is not None:
            after, _ = inv.inventory_from_tree(tree, before.get("repo", "flaggems"), verify=False)
            _warn_unparsed(tree, after["verified"].get("unparsed_files", {}), "tests")
            new = str(tree)
        else:
            after = inv.load_inventory(new)
    except OpsDataError as exc:
        raise _OpsError(str(exc)) from exc
    for line in inv.format_diff(inv.diff_inventories(before, after), old, new):
        click.echo(line)


@ops_group.command("show")
@click.argument("op")
@click.option("--inventory", "inventory_name", default="flaggems", show_default=True)
def show_command(op, inventory_name):
    """How an operator is selected: nodes, -m mark, shared and duplicate nodes."""
    try:
        inventory = inv.load_inventory(inventory_name)
        selection = inv.select_op(inventory, op)
    except (OpsDataError, inv.UnknownOperator) as exc:
        raise _OpsError(str(exc)) from exc
    record = inventory["ops"][op]
    click.echo("pytest " + " ".join(selection.pytest_args))
    for test in record["tests"]:
        key = test.get("shape_key") or test.get("shapes_from") or "-"
        click.echo(
            f"  {test['node']}: prints {', '.join(test['op_names']) or '?'}; "
            f"class chain {' > '.join(test['class_chain']) or '?'}; shapes {key}"
        )
    for node, others in record.get("shared", {}).items():
        click.echo(f"  shared: {node} also measures {', '.join(others)}")
    for dup in selection.duplicates:
        click.echo(f"  left out (re-measures the same operator): {dup}")


@ops_group.command("check")
@click.option(
    "--inventory",
    "inventory_name",
    default="flaggems",
    show_default=True,
    help="Inventory the dismiss list must name operators from.",
)
@click.option(
    "--dismiss",
    "dismiss_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Dismiss list (default ops/dismiss.yaml).",
)
@click.option(
    "--tree",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="Also check that every torch.cuda guard in this checkout is decided in "
    "ops/compat/musa_skip_overrides.yaml, and no entry there is stale.",
)
def check_command(inventory_name, dismiss_file, tree):
    """Validate ops/ data: the dismiss list and the compat decision tables."""
    problems: List[str] = []
    try:
        inventory = inv.load_inventory(inventory_name)
        dismissed = dismiss_mod.load_dismiss(dismiss_file)
        problems += dismiss_mod.check_against_inventory(dismissed, inventory)
        table = guards_mod.load_table("musa")
    except OpsDataError as exc:
        raise _OpsError(str(exc)) from exc
    if tree is not None:
        bench = _bench_tree(tree)
        undecided, stale = guards_mod.coverage(table, guards_mod.find_guards(bench), tree)
        _warn_unparsed(tree, bench.parse_errors, "guards")
        problems += [
            f"undecided guard {g.file}:{g.line} ({g.kind} "
            f"{g.test or g.where}, reason {g.reason!r}): add it to "
            "ops/compat/musa_skip_overrides.yaml"
            for g in undecided
        ]
        problems += [
            f"stale entry {e['file']}::{e.get('test') or e.get('where')} "
            f"(reason {e.get('reason')!r}): no such guard in {tree}"
            for e in stale
        ]
    for line in problems:
        click.echo(line, err=True)
    if problems:
        raise _OpsError(f"{len(problems)} problem(s) in ops/ data")
    click.echo(
        f"ok: {len(dismissed)} dismissed operator(s), {len(guards_mod.removals(table))} musa skip override(s)"
    )


@ops_group.command("guards")
@click.argument("tree", type=click.Path(file_okay=False, exists=True, path_type=Path))
def guards_command(tree):
    """List the torch.cuda.is_available() guards of a checkout and their musa decision."""
    try:
        table = guards_mod.load_table("musa")
    except OpsDataError as exc:
        raise _OpsError(str(exc)) from exc
    decided = {guards_mod.entry_key(e): e["decision"] for e in table["guards"]}
    bench = _bench_tree(tree)
    found = guards_mod.find_guards(bench)
    _warn_unparsed(tree, bench.parse_errors, "guards")
    for g in found:
        decision = decided.get(g.key, "UNDECIDED")
        what = g.test if g.kind in guards_mod.MARKER_KINDS else g.where
        reason = f" reason={g.reason!r}" if g.reason else ""
        click.echo(f"{decision:9} {g.kind:13} {g.file}:{g.line} {what}{reason}")
    click.echo(f"{len(found)} guards in {len({g.file for g in found})} files")


@ops_group.group("shapes")
def shapes_group():
    """Curated shape files (ops/shapes/)."""


@shapes_group.command("check")
@click.argument("file", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option(
    "--upstream",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="Upstream core_shapes.yaml, or a checkout holding benchmark/core_shapes.yaml "
    "(default: the class keys recorded in the inventory).",
)
@click.option("--inventory", "inventory_name", default="flaggems", show_default=True)
def shapes_check_command(file, upstream, inventory_name):
    """Fail when FILE lacks a class key upstream core_shapes.yaml has."""
    try:
        inventory = _optional_inventory(inventory_name, required=upstream is None)
        if upstream is not None:
            upstream_file = shapes_mod.upstream_shapes_path(upstream)
            keys = shapes_mod.class_keys(shapes_mod.load_shape_file(upstream_file))
        else:
            keys = inventory.get("shape_class_keys")
            if keys is None:
                raise _OpsError(
                    f"the {inventory_name} inventory records no shape_class_keys; give --upstream"
                )
        known = _known_keys(inventory) if inventory else None
        result = shapes_mod.check_shape_file(file, keys, known)
    except OpsDataError as exc:
        raise _OpsError(str(exc)) from exc
    for key in result.unknown_keys:
        click.echo(f"warning: {file}: key {key!r} is neither an operator nor a class key", err=True)
    if not result.ok:
        raise _OpsError(
            f"{file} lacks class keys upstream has: {', '.join(result.missing_class_keys)}; "
            "FlagGems then falls back to 1-D shapes for that family "
            f"(fix: zlbench ops shapes merge {file} --upstream DIR)"
        )
    click.echo(f"ok: {file} has all {len(keys)} upstream class keys")


@shapes_group.command("merge")
@click.argument("file", type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option(
    "--upstream",
    type=click.Path(exists=True, path_type=Path),
    required=True,
    help="Upstream core_shapes.yaml, or a checkout holding benchmark/core_shapes.yaml.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the merged file here (default: FILE, in place).",
)
def shapes_merge_command(file, upstream, output):
    """Add the class keys FILE lacks, with upstream's shapes."""
    try:
        upstream_data = shapes_mod.load_shape_file(shapes_mod.upstream_shapes_path(upstream))
        added = shapes_mod.merge_class_keys(file, upstream_data, output)
    except OpsDataError as exc:
        raise _OpsError(str(exc)) from exc
    target = output or file
    if added:
        click.echo(f"{target}: added {', '.join(added)}")
    else:
        click.echo(f"{target}: already has every upstream class key")


def _optional_inventory(name: str, required: bool) -> Optional[dict]:
    try:
        return inv.load_inventory(name)
    except OpsDataError as exc:
        if required:
            raise
        # Not fatal with --upstream, but the check it feeds must not vanish unseen.
        click.echo(
            f"warning: unknown-key check skipped, the {name} inventory cannot be read: {exc}", err=True
        )
        return None


def _known_keys(inventory: dict) -> List[str]:
    names = set(inventory["ops"])
    for record in inventory["ops"].values():
        for test in record["tests"]:
            names.update(test["op_names"])
            names.update(test["class_chain"])
    return sorted(names)
