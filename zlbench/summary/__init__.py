"""Summary: parse run logs into rows, aggregate them, pair two runs (A/B), render.

The public entry points for other parts of zlbench (batch, cli):

- ``summarize(path) -> Summary``: rows and issues of a log, run dir or batch dir
- ``render_csv(summary) -> str``: the text of summary.csv
- ``pair_runs(a_path, b_path) -> ABResult`` / ``pair_summaries(a, b) -> ABResult``
- ``compare_calibers(a_identity, b_identity) -> list[CaliberDiff]``

Nothing here imports torch, triton or flag_gems.
"""

from zlbench.summary.ab import ABResult, pair_runs, pair_summaries
from zlbench.summary.caliber import CaliberDiff, compare_calibers
from zlbench.summary.render import render_csv
from zlbench.summary.rows import Summary, summarize
from zlbench.summary.sources import SummaryInputError

__all__ = [
    "ABResult",
    "CaliberDiff",
    "Summary",
    "SummaryInputError",
    "compare_calibers",
    "pair_runs",
    "pair_summaries",
    "render_csv",
    "summarize",
]
