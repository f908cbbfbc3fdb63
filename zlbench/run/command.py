"""``zlbench run``: its flags (generated from the knobs table) and the click command.

It lives beside run/ so that the warm worker (run/worker.py) parses an attempt's argv
with the same command without importing the top-level cli.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .. import knobs
from ..clihelp import GroupedCommand

# cli.SUBCOMMANDS lists the same text (tests/test_cli.py checks that they agree).
RUN_HELP = "Measure one operator: preflight, a private run dir, zlbench's pytest plugins."

_RUN_COMMON = [
    "op",
    "op_file",
    "test_node",
    "flaggems_dir",
    "provider",
    "backend",
    "device",
    "out",
    "run_dir",
]
RUN_OPTION_GROUPS = [
    ("Common options", _RUN_COMMON),
    (
        "Measurement caliber (recorded in run_identity.json; see docs/cli.md)",
        [k.name for k in knobs.KNOBS if k.caliber and k.name not in _RUN_COMMON],
    ),
    (
        "The benchmark process",
        [*knobs.BENCHMARK_PROCESS_KNOBS, "echo"],
    ),
]


@click.command(
    "run",
    cls=GroupedCommand,
    option_groups=RUN_OPTION_GROUPS,
    short_help=RUN_HELP,
    context_settings={"show_default": False},
)
@knobs.knob_options([k.name for k in knobs.KNOBS])
@click.option(
    "--run-dir",
    "run_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Measure into exactly this dir (the batch uses <batch>/<op>) "
    "instead of a fresh <out>/<timestamp>_<op>.",
)
@click.option(
    "--echo/--no-echo",
    "echo",
    default=True,
    help="Copy the benchmark's output to stdout as well as run.log. The batch "
    "passes --no-echo: each operator's output is stored once, in run.log.",
)
def run_command(run_dir, echo, **flags):
    """Measure one operator: preflight, a private run dir, pytest with zlbench's plugins.

    \b
    Exit codes: 0 all measured, 1 a benchmark failed, 3 preflight failed (a broken
    environment, not a broken operator); pytest's own 2/4/5 pass through.
    The last line printed is the run dir.
    """
    from . import run_from_flags

    sys.exit(run_from_flags(flags, run_dir=run_dir, echo=echo))
