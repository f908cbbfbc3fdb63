"""The ``zlbench`` command: each subcommand parses, calls one function, prints.

Subcommands live beside the code they drive and are imported only when invoked, so
``zlbench --help`` and every command stay quick to start.
"""

from __future__ import annotations

import importlib

import click

from . import __version__

# name -> ("module:attribute" of a click command, its short help), in the order --help
# lists them. The help is kept here so that --help imports no subcommand (a test checks
# that it matches each command's own).
SUBCOMMANDS = {
    "run": (
        "zlbench.run.command:run_command",
        "Measure one operator: preflight, a private run dir, zlbench's pytest plugins.",
    ),
    "batch": (
        "zlbench.batch.command:batch_command",
        "Measure many operators across devices, surviving hangs, crashes and restarts.",
    ),
    "summary": (
        "zlbench.summary.command:summary_command",
        "Tables from run logs: PATH is a run.log, a run dir or a batch dir.",
    ),
    "report": (
        "zlbench.report.command:report_command",
        "One HTML page for a batch (or run) dir: counts, plots, every row, failures.",
    ),
    "history": (
        "zlbench.history.command:history_group",
        "Nights compared over time: record finished screens, show steps per operator.",
    ),
    "noise": (
        "zlbench.noise:noise_command",
        "This machine's A/A noise floor, recorded for summary --ab.",
    ),
    "ab": (
        "zlbench.ab:ab_command",
        "Compare a build switch: A (ENV=0) records, B (ENV=1) replays A's configs.",
    ),
    "slurm": (
        "zlbench.slurm.command:slurm_group",
        "Run a screen as a Slurm job array, one task per host shard; its status.",
    ),
    "ops": (
        "zlbench.ops.command:ops_group",
        "Operator inventories, curated shape files, the dismiss list, compat guards.",
    ),
    "backends": (
        "zlbench.cli:backends_command",
        "List backends, their aliases and capabilities, and the devices found.",
    ),
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use (click's documented pattern)."""

    def list_commands(self, ctx):
        return list(SUBCOMMANDS)

    def get_command(self, ctx, name):
        ref = SUBCOMMANDS.get(name, (None, None))[0]
        if ref is None:
            return None
        module, attr = ref.split(":")
        return getattr(importlib.import_module(module), attr)

    def resolve_command(self, ctx, args):
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in SUBCOMMANDS:
            from .suggest import close_names

            near = close_names(name, SUBCOMMANDS)
            hint = f" Did you mean {' or '.join(near)}?" if near else ""
            ctx.fail(f"No such command {name!r}.{hint} Commands: {', '.join(SUBCOMMANDS)}")
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx, formatter):
        rows = [(name, SUBCOMMANDS[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(
    cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.version_option(__version__, "--version", prog_name="zlbench")
def main():
    """Run an operator benchmark corpus (FlagGems' benchmark/, or the bundled sample)
    across accelerators, and turn its logs into tables you can trust.

    \b
    Quick start (no GPU, no FlagGems needed):
      zlbench batch                      # the bundled sample corpus, on this machine
      zlbench summary runs/batch-<stamp>   # its tables, and summary.csv
      zlbench noise                      # this machine's A/A floor, for summary --ab
      zlbench run --flaggems-dir ~/FlagGems --op abs --backend cuda
    Every setting is a flag and an environment variable; flags win.
    """


# -- backends ------------------------------------------------------------------
@click.command("backends")
def backends_command():
    """List backends, their aliases and capabilities, and the devices found."""
    import os

    from . import backends

    detected = backends.detect_backend().name
    for backend in backends.BACKENDS.values():
        mark = "*" if backend.name == detected else " "
        click.echo(f"{mark} {backend.name:<7} aliases: {', '.join(backend.aliases) or '-'}")
        click.echo(f"    {backend.description}")
        click.echo(
            f"    visibility: {backend.visible_key or '-'}   graph capture: "
            f"{'yes' if backend.can_graph_capture else 'no'}   timer: {backend.default_timer}   "
            f"compat plugins: {', '.join(backend.compat_plugins) or '-'}"
        )
        if backend.slots_only:
            click.echo("    devices: worker slots (--devices 0,1 gives two)")
        elif backend.present():
            found = backend.devices(os.environ)
            listed = ", ".join(f"{d.index}={d.model}" for d in found) or "none"
            click.echo(f"    devices: {listed}")
        else:
            tool = backend.list_tool[0] if backend.list_tool else "-"
            click.echo(f"    devices: not present ({tool} not found)")
    click.echo(f"* detected: {detected}")


if __name__ == "__main__":
    main()
