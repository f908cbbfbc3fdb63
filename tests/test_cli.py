"""The top-level `zlbench` group: lazy subcommands and their listed help."""

import subprocess
import sys

import click

from zlbench.cli import SUBCOMMANDS, main


def test_listed_help_is_each_commands_own():
    ctx = click.Context(main)
    for name, (_, listed) in SUBCOMMANDS.items():
        assert main.get_command(ctx, name).get_short_help_str(limit=200) == listed, name


def test_help_imports_no_subcommand():
    probe = ("import sys; from click.testing import CliRunner; from zlbench.cli import main; "
             "r = CliRunner().invoke(main, ['--help']); assert r.exit_code == 0, r.output; "
             "print(sorted(m for m in sys.modules if m.startswith('zlbench.')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    loaded = eval(out)
    assert "zlbench.cli" in loaded
    assert not [m for m in loaded if m.split(".")[1] in ("batch", "run", "summary", "ab", "ops")], loaded
