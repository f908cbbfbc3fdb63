"""The job script of a sharded screen: one Slurm array task per host shard.

Written to be read: what it runs, where it writes, how to run it again. Every batch
option is spelled out on its own line; nothing depends on the submitting shell except
what a person would expect sbatch to pass on (PATH, the corpus' own variables).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import List, Sequence, Tuple

from zlbench.rundir import SLURM_DIR, SLURM_TASK_LOG


def pair_options(args: Sequence[str]) -> List[Tuple[str, ...]]:
    """``--flag value`` pairs and lone flags, for one per line."""
    out: List[Tuple[str, ...]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        nxt = args[i + 1] if i + 1 < len(args) else None
        if arg.startswith("--") and "=" not in arg and nxt is not None and not nxt.startswith("--"):
            out.append((arg, nxt))
            i += 2
        else:
            out.append((arg,))
            i += 1
    return out


def array_spec(indices: Sequence[int], max_parallel: int = 0) -> str:
    """``0-2`` for a run of indices, ``1,4`` otherwise; ``%M`` caps tasks running at once."""
    ordered = sorted(set(indices))
    if ordered and ordered == list(range(ordered[0], ordered[-1] + 1)) and len(ordered) > 1:
        spec = f"{ordered[0]}-{ordered[-1]}"
    else:
        spec = ",".join(map(str, ordered))
    return f"{spec}%{max_parallel}" if max_parallel else spec


def render_script(
    screen: Path,
    shards: int,
    batch_args: Sequence[str],
    from_env: Sequence[Tuple[str, str, Tuple[str, ...]]],
    sbatch_args: Sequence[str],
    python: str,
    cwd: Path,
    written: str,
    max_parallel: int = 0,
) -> str:
    """The text of array.sbatch.

    batch_args   the batch options as given to ``zlbench slurm submit``
    from_env     (variable, value, command-line words) of the settings taken from the
                 submitting environment: spelled out as flags so every task measures alike
    sbatch_args  the user's ``--sbatch-arg`` values, one ``#SBATCH`` line each
    """
    logs = screen / SLURM_DIR
    lines = [
        "#!/bin/bash",
        f"# zlbench screen in {shards} host shards: array task K runs shard K of {shards}",
        "# (`zlbench batch --shard auto`, K from SLURM_ARRAY_TASK_ID) into",
        f"# {screen}/shard-K-of-{shards}/.",
        f"# Written by `zlbench slurm submit` on {written}. Submit again with the same",
        "# command to resume: finished shards are left out of --array, the others pick up",
        "# where they stopped. The screen dir must be on a file system every node mounts",
        "# at the same path.",
        f"#SBATCH --job-name={shlex.quote('zlbench-' + screen.name)}",
        f"#SBATCH --array={array_spec(range(shards), max_parallel)}",
        f"#SBATCH --output={logs / SLURM_TASK_LOG}",
        "#SBATCH --open-mode=append",
    ]
    lines += [f"#SBATCH {arg}" for arg in sbatch_args]
    lines += ["", "set -euo pipefail", f"cd {shlex.quote(str(cwd))}"]
    if from_env:
        lines.append(
            "# From the submitting environment: "
            + ", ".join(f"{var}={shlex.quote(value)}" for var, value, _ in from_env)
        )
    options: List[Tuple[str, ...]] = [("--shard", "auto"), ("--shards", str(shards)), ("--out", str(screen))]
    options += pair_options(batch_args)
    options += [tuple(words) for _, _, words in from_env]
    if not any(o[0] == "--progress" or o[0].startswith("--progress=") for o in options):
        options.append(("--progress", "plain"))
    body = [" ".join(shlex.quote(part) for part in option) for option in options]
    lines.append(f"exec {shlex.quote(python)} -m zlbench batch \\")
    lines += [f"    {text} \\" for text in body[:-1]] + [f"    {body[-1]}", ""]
    return "\n".join(lines)
