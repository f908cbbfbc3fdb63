"""The report's history section: the nights of this screen's caliber, from the database."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List, Optional

from zlbench import knobs
from zlbench.history.analysis import OpHistory, analyse, median_change
from zlbench.history.steps import THRESHOLD
from zlbench.history.store import (
    calibers,
    db_exists,
    family_sources,
    op_families,
    open_db,
    recorded,
    screen_calibers,
)
from zlbench.report.model import Column, Table
from zlbench.summary.rows import Summary

# Operators drawn as small pictures: those whose rows stepped most.
MAX_PLOTS = 12


@dataclass
class HistorySection:
    title: str
    notes: List[str] = field(default_factory=list)
    svgs: List[object] = field(default_factory=list)
    steps: Optional[Table] = None


STEP_COLUMNS = [
    Column("op", "operator"),
    Column("family", "family", title="as recorded when the screens were added"),
    Column("dtype", "dtype"),
    Column("shape", "shape"),
    Column("night", "night"),
    Column("before", "before ms", "num", 6),
    Column("after", "after ms", "num", 6),
    Column("change", "change", "pct", 1, "after / before - 1 (positive: slower)", "latency"),
    Column("held", "nights held", "num", 0, "nights at the new level so far"),
]


def _size(o: OpHistory) -> float:
    step = o.biggest()
    return abs(math.log(step.after / step.before)) if step else 0.0


def history_section(summary: Summary, db: Optional[str]) -> Optional[HistorySection]:
    """None when the database is absent or holds fewer than two nights of this caliber."""
    from markupsafe import Markup

    from zlbench.report.plots import history_svg

    if db is not None and db.strip().lower() == "none":
        return None
    path = knobs.history_db_path(db)
    if not db_exists(path):
        return None
    conn = open_db(path, readonly=True)
    try:
        mine = set(screen_calibers(summary))
        cals = [c for c in calibers(conn) if c.key in mine and len(c.nights) >= 2]
        if not cals:
            return None
        cal = max(cals, key=lambda c: len(c.nights))
        night = recorded(conn, summary)
        ops = analyse(conn, cal)
        fams = op_families(conn)
    finally:
        conn.close()
    labels = [n.label for n in cal.nights]
    section = HistorySection(f"{len(labels)} nights of caliber {cal.key}")
    section.notes.append(f"Caliber {cal.key}: {cal.label}. Database: {path}.")
    section.notes.append(
        f"This screen is night '{night.label}'."
        if night
        else f"This screen is not recorded yet: zlbench history add {summary.input}"
    )
    if len(cals) > 1 or len(mine) > 1:
        section.notes.append(
            "Its runs span several calibers; the one with most nights is "
            "drawn (zlbench history show lists all)."
        )
    stepped = sorted((o for o in ops if o.stepped), key=_size, reverse=True)
    section.notes.append(
        f"{len(stepped)} of {len(ops)} operators have rows that stepped beyond the noise "
        f"(at least {THRESHOLD * 100:g}% and beyond the scatter of the nights on either "
        "side); the pictures show the latency of each operator's rows relative to their "
        "own median, dashed lines where rows stepped."
    )
    sources = family_sources(fams, [o.op for o in ops])
    section.notes.append(
        f"Families: {'; '.join(sources)}, as recorded when the screens were added."
        if sources
        else "Families: none recorded in the database (zlbench history add DIR records a screen's, "
        "also for a screen recorded already)."
    )
    for o in stepped[:MAX_PLOTS]:
        marks = [
            (i, f"{len(s)} rows {median_change(s) * 100:+.0f}%") for i, s in sorted(o.step_nights().items())
        ]
        title = f"{o.op} ({fams[o.op].name})" if o.op in fams else o.op
        section.svgs.append(Markup(history_svg(title, labels, [(cal.key, o.index(len(labels)))], marks)))
    rows = []
    for o in stepped:
        for r in o.stepped:
            for s in r.steps:
                rows.append(
                    [
                        o.op,
                        fams[o.op].name if o.op in fams else "",
                        r.key[1].replace("torch.", ""),
                        r.key[2],
                        labels[s.index],
                        s.before,
                        s.after,
                        s.change,
                        s.nights_after,
                    ]
                )
    section.steps = Table(STEP_COLUMNS, rows, "change", descending=True)
    return section
