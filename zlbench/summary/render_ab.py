"""Write an A/B result: caliber warnings first, ranges, rows, what did not pair, noise."""

from __future__ import annotations

from typing import Iterator, List, Optional

from zlbench.summary.ab import (
    NOT_REPRODUCED,
    SAME_RUN_WARNING,
    ABResult,
    GainRange,
    NoiseFloor,
    PairedRow,
    autotune_changes,
    cap_clocks,
    cap_mhz,
    capped_alone,
    recheck_counts,
    shared_placement_level,
    throttle_reasons,
    torch_versions,
)
from zlbench.summary.caliber import CaliberReport
from zlbench.summary.render import (
    csv_records,
    issue_chunks,
    issue_record,
    json_object_chunks,
    screen_state,
    unfinished_what,
)
from zlbench.summary.tables import Cells, compact_shape, fmt, fmt_pct, heading, table, table_lines
from zlbench.summary.verdict import UNKNOWN

GAIN_NOTE = "gain = A gems ms / B gems ms - 1 (positive: B faster)"
VERDICT_NOTE = (
    "verdict: SLOWER/FASTER when |B/A - 1| > floor + sqrt(spread_A^2 + "
    "spread_B^2), else SAME; SAME without a threshold where neither side ran device "
    "work (host time, not compared); UNKNOWN without spreads, or when either side was "
    "measured throttled or one side only was timed at the power cap (zlbench.summary.verdict)"
)


def caliber_lines(report: CaliberReport) -> List[str]:
    """The caliber differences, loudest first; empty when the calibers match."""
    lines = []
    if report.mismatch:
        lines.append("CALIBER MISMATCH: A and B were not measured the same way.")
        lines += [f"  {d}" for d in report.common]
        for rel, diffs in sorted(report.per_run.items()):
            lines += [f"  [{rel}] {d}" for d in diffs]
    lines += [f"Caliber note: {n}" for n in report.notes]
    return lines


def _noise_line(result: ABResult) -> str:
    if result.same_run:
        return same_run_warning(result)
    median = fmt_pct(result.noise_median, sign=False) or "n/a"
    p95 = fmt_pct(result.noise_p95, sign=False) or "n/a"
    return (
        f"Spread of the gains: median |gain| {median}, p95 |gain| {p95} over {len(result.pairs)} "
        "rows (no verdict rests on these; for an A/A pair, `zlbench noise` records the floor)."
    )


def _counts_line(result: ABResult) -> str:
    return (
        f"Paired {len(result.pairs)} rows (A has {len(result.a.rows)}, B has "
        f"{len(result.b.rows)}); only in A: {len(result.only_a)}; only in B: "
        f"{len(result.only_b)}; not comparable (failed or no latency): "
        f"{len(result.not_comparable)}"
        + (
            f"; keys printed more than once (A and B): {result.duplicate_keys}"
            if result.duplicate_keys
            else ""
        )
    )


def verdict_lines(result: ABResult) -> List[str]:
    """What the verdicts rest on, and why some could not be given."""
    used = result.floors_used()
    lines = []
    for i, (floor, n) in enumerate(used):
        if floor.per_row:
            what = (
                f"{n} rows at their own A/A floors, up to {fmt_pct(floor.value, sign=False)} "
                f"(source: {floor.source})"
            )
        else:
            what = f"A/A noise floor {fmt_pct(floor.value, sign=False)} (source: {floor.source})"
            if len(used) > 1:
                what += f" ({n} rows)"
        lines.append(
            ("Verdicts: " if i == 0 else "          ")
            + what
            + ("; " + VERDICT_NOTE if i == len(used) - 1 else "")
        )
    if result.same_run:
        lines.append("A and B are the same run: no verdict can be given (every row UNKNOWN).")
        return lines
    throttled = [p for p in result.pairs if p.verdict.throttled]
    if throttled:
        lines.append(
            f"{len(throttled)} of {len(result.pairs)} rows UNKNOWN, measured throttled or at the power "
            f"cap on one side only (first: {slowed_why(throttled[0].verdict.why)}): their change is the "
            "machine's state, not the build's."
        )
    rechecked = [p for p in result.pairs if p.recheck]
    if rechecked:
        counts = recheck_counts(result)
        lines.append(
            f"Re-check in fresh processes of the {len(rechecked)} SLOWER/FASTER rows: "
            + ", ".join(f"{n} {w}" for w, n in counts.items() if n)
            + (f" (those {counts[NOT_REPRODUCED]} now SAME)" if counts[NOT_REPRODUCED] else "")
            + "."
        )
    leveled = [p for p in result.pairs if shared_placement_level(p)]
    if leveled:
        first = leveled[0]
        lines.append(
            f"{len(leveled)} {'row' if len(leveled) == 1 else 'rows'} judged SLOWER or FASTER read a "
            f"placement level both sides share (first: {first.a.op} {first.a.dtype}, "
            f"{shared_placement_level(first)}): where the inputs lay may have moved "
            + (
                "them, not the build."
                if rechecked
                else "them, not the build; a re-check in fresh processes tells (--recheck)."
            )
        )
    unknown = [p for p in result.pairs if p.verdict.status == UNKNOWN and not p.verdict.throttled]
    if unknown:
        lines.append(
            f"{len(unknown)} of {len(result.pairs)} rows have no verdict (UNKNOWN): "
            f"{unknown[0].verdict.why} and the like; runs measured before spreads "
            "were recorded, or with ZL_DIRECT_TIMER=do_bench and one repeat, carry none."
        )
    moved = sorted((r for r in result.by_op if torch_moved(r)), key=lambda r: -abs(r.torch_gain or 0.0))
    if moved:
        lines.append(
            f"Torch rows moved in {len(moved)} operators ("
            + ", ".join(f"{r.name} {fmt_pct(r.torch_gain)}" for r in moved[:4])
            + (", ..." if len(moved) > 4 else "")
            + "): "
            + _torch_reading(torch_versions(result.a), torch_versions(result.b))
        )
    return lines


def _torch_reading(a: List[str], b: List[str]) -> str:
    """What the torch rows' shift says, by the torch versions A's and B's runs recorded."""
    if a and a == b and len(a) == 1:
        return (
            f"FlagGems' torch reference runs in the same process and A and B ran the same torch "
            f"({a[0]}), so a shift of that size in those operators is the machine between the runs, "
            "not the build."
        )
    if a and b and a != b:
        return (
            f"A ran torch {', '.join(a)} and B {', '.join(b)}: torch's own change moved them, "
            "perhaps the machine too."
        )
    return (
        "FlagGems' torch reference runs in the same process and, where A and B ran the same torch, "
        "is the same code, so a shift of that size in those operators is the machine between the "
        "runs, not the build."
    )


def verdict_counts_line(result: ABResult) -> str:
    """The one count every view shows: rows per verdict, throttled UNKNOWN apart."""
    r = result.overall
    if r is None:
        return "Verdicts: no rows paired"
    other = r.other_unknown
    return (
        f"Rows: {r.slower} SLOWER, {r.faster} FASTER, {r.same} SAME, {r.throttled} UNKNOWN "
        f"(measured throttled), {other} UNKNOWN (other reasons), of {r.count} paired"
    )


def _verdict_counts(r: GainRange) -> str:
    parts = [
        f"{n} {name}"
        for n, name in (
            (r.slower, "slower"),
            (r.faster, "faster"),
            (r.same, "same"),
            (r.throttled, "throttled"),
            (r.other_unknown, "unknown"),
        )
        if n
    ]
    return ", ".join(parts)


# An operator whose torch rows moved this much (median) is noted: on an H100 two batches
# of one build moved whole operators by up to 0.7%, their torch rows by as much.
TORCH_MOVED = 0.0025


def torch_moved(r: GainRange) -> str:
    """``torch rows -0.7% too`` where the operator's torch rows moved (TORCH_MOVED), else ""."""
    if r.torch_gain is None or abs(r.torch_gain) < TORCH_MOVED:
        return ""
    return f"torch rows {fmt_pct(r.torch_gain)} too"


def _range_row(r: GainRange) -> tuple:
    # The torch rows' shift first: the column is cut at the table's width.
    notes = [
        torch_moved(r),
        f"{r.fallback_rows} rows direct-timer fallback (different regime)" if r.fallback_rows else "",
    ]
    note = "; ".join(n for n in notes if n)
    return (
        r.name,
        str(r.count),
        fmt_pct(r.min),
        fmt_pct(r.median),
        fmt_pct(r.max),
        fmt_pct(r.geomean),
        _verdict_counts(r),
        note,
    )


def _spread(value) -> str:
    return "" if value is None else f"{value * 100:.2f}%"


def slowed_why(why: str) -> str:
    """A throttled verdict's reason without its ``measured throttled (...)`` wrapping."""
    prefix = "measured throttled ("
    return why[len(prefix) : -1] if why.startswith(prefix) and why.endswith(")") else why


def throttled_sides(p: PairedRow) -> str:
    """ "A", "B", "A+B" or "": the sides measured while the device (or the host's CPU)
    was slowed down (DEVICE_THROTTLED), and "A(cap)"/"B(cap)" for the one side whose gems
    figure is a power-cap window where the other's is not: such a row's verdict is UNKNOWN."""
    sides = list(throttle_reasons(p))
    capped = capped_alone(p)
    if capped and capped not in sides:
        sides.append(f"{capped}(cap)")
    return "+".join(sorted(sides))


def own_floor_note(floor: Optional[NoiseFloor], p: PairedRow) -> str:
    """``own A/A floor 8.6%`` where ``floor`` (``ABResult.floor_for`` of ``p``) is the
    row's own and judged it."""
    if floor is None or not floor.per_row or p.verdict.threshold is None:
        return ""
    return f"own A/A floor {fmt_pct(floor.value, sign=False)}"


def _level_note(p: PairedRow) -> str:
    level = shared_placement_level(p)
    return f"a placement level both read ({level})" if level else ""


def _pair_row(p: PairedRow, floor: Optional[NoiseFloor] = None) -> tuple:
    notes = [
        "direct fallback" if p.fallback else "",
        p.verdict.why if p.verdict.status == UNKNOWN or p.verdict.threshold is None else "",
        own_floor_note(floor, p),
        cap_clocks(p),
        "autotune picked other configs" if autotune_changes(p) else "",
        _level_note(p),
        f"re-check: {p.recheck}" if p.recheck else "",
    ]
    return (
        p.verdict.status,
        p.a.op,
        p.a.dtype,
        compact_shape(p.a.shape),
        fmt(p.a.gems_ms),
        _spread(p.a.gems_spread),
        fmt(p.b.gems_ms),
        _spread(p.b.gems_spread),
        fmt_pct(p.gain),
        "; ".join(n for n in notes if n),
    )


def _screen_lines(result: ABResult) -> list:
    out = []
    for side, summary in (("A", result.a), ("B", result.b)):
        state = screen_state(summary)
        if not state["finished"]:
            out.append(f"UNFINISHED {side}: {unfinished_what(state)} ({summary.input})")
    return out


def same_run_warning(result: ABResult) -> str:
    return SAME_RUN_WARNING.format(path=result.a.input)


def render_ab_text(result: ABResult, style: str) -> str:
    """``style``: "table" or "markdown" (pasteable into a pull request)."""
    return "".join(ab_text_chunks(result, style))


def ab_text_chunks(result: ABResult, style: str) -> Iterator[str]:
    """The text of render_ab_text a piece at a time (the rows a line at a time)."""
    out = caliber_lines(result.caliber)
    if result.same_run:
        out.append(same_run_warning(result))
    if out:
        out.append("")
    out += [
        heading(style, "A/B: " + GAIN_NOTE),
        f"A: {result.a.input}",
        f"B: {result.b.input}",
        _counts_line(result),
        *verdict_lines(result),
        verdict_counts_line(result),
        *_screen_lines(result),
        "",
    ]
    ranges = result.by_op + ([result.overall] if result.overall else [])
    out += [
        heading(style, "Ranges per operator"),
        table(
            style,
            ("operator", "rows", "min", "median", "max", "geomean", "verdicts", "note"),
            [_range_row(r) for r in ranges],
            (False,) + (True,) * 5 + (False, False),
        ),
        "",
    ]
    out.append(heading(style, "Rows (real changes first)"))
    yield "\n".join(out)
    for line in table_lines(
        style,
        ("verdict", "operator", "dtype", "shape", "A ms", "A ±", "B ms", "B ±", "gain", "note"),
        Cells(result.pairs, lambda p: _pair_row(p, result.floor_for(p))),
        (False, False, False, False, True, True, True, True, True, False),
    ):
        yield "\n" + line
    unpaired = (
        [("only in A", r.op, r.dtype, compact_shape(r.shape)) for r in result.only_a]
        + [("only in B", r.op, r.dtype, compact_shape(r.shape)) for r in result.only_b]
        + [
            (f"not comparable: {n.reason}", n.a.op, n.a.dtype, compact_shape(n.a.shape))
            for n in result.not_comparable
        ]
    )
    if unpaired:
        yield "\n\n" + heading(style, f"Not in the ranges ({len(unpaired)} rows)")
        for line in table_lines(style, ("why", "operator", "dtype", "shape"), unpaired, (False,) * 4):
            yield "\n" + line
    yield from issue_chunks(style, result.a.issues, "Issues in A")
    yield from issue_chunks(style, result.b.issues, "Issues in B")
    yield "\n\n" + _noise_line(result) + "\n"


def render_ab_csv(result: ABResult) -> str:
    return "".join(ab_csv_lines(result))


def ab_csv_lines(result: ABResult) -> Iterator[str]:
    """The A/B CSV, a record at a time."""
    return csv_records(_ab_csv_records(result))


def _ab_csv_records(result: ABResult) -> Iterator[tuple]:
    yield (
        (
            "pairing",
            "op",
            "dtype",
            "shape",
            "a_gems_ms",
            "b_gems_ms",
            "gain",
            "a_timer",
            "b_timer",
            "fallback",
            "reason",
            "verdict",
            "change",
            "threshold",
            "a_spread",
            "b_spread",
            "a_samples",
            "b_samples",
            "recheck",
        )
    )
    for p in result.pairs:
        v = p.verdict
        yield (
            (
                "paired",
                p.a.op,
                p.a.dtype,
                p.a.shape,
                p.a.gems_ms,
                p.b.gems_ms,
                f"{p.gain:.6f}",
                p.a.timer,
                p.b.timer,
                int(p.fallback),
                v.why,
                v.status,
                _num(v.change),
                _num(v.threshold),
                _num(p.a.gems_spread),
                _num(p.b.gems_spread),
                p.a.gems_samples,
                p.b.gems_samples,
                p.recheck or "",
            )
        )
    for n in result.not_comparable:
        yield (
            (
                "not_comparable",
                n.a.op,
                n.a.dtype,
                n.a.shape,
                n.a.gems_ms,
                n.b.gems_ms,
                "",
                n.a.timer,
                n.b.timer,
                "",
                n.reason,
            )
            + ("",) * 8
        )
    for side, rows in (("only_a", result.only_a), ("only_b", result.only_b)):
        for r in rows:
            a_ms, b_ms = (r.gems_ms, "") if side == "only_a" else ("", r.gems_ms)
            yield ((side, r.op, r.dtype, r.shape, a_ms, b_ms) + ("",) * 13)


def _num(value) -> str:
    return "" if value is None else f"{value:.6f}"


def render_ab_json(result: ABResult) -> str:
    return "".join(ab_json_chunks(result))


def ab_json_chunks(result: ABResult) -> Iterator[str]:
    """The A/B JSON document, a pair at a time."""
    c = result.caliber
    doc = {
        "a": str(result.a.input),
        "b": str(result.b.input),
        "gain": GAIN_NOTE,
        "caliber": {
            "mismatch": c.mismatch,
            "common": [vars(d) for d in c.common],
            "per_run": {k: [vars(d) for d in v] for k, v in c.per_run.items()},
            "notes": c.notes,
        },
        "overall": vars(result.overall) if result.overall else None,
        "by_op": [vars(r) for r in result.by_op],
        "noise_floor": result.noise_floor,
        "noise_floors": [
            {"floor": f.value, "source": f.source, "rows": n, "per_row": f.per_row}
            for f, n in result.floors_used()
        ],
        "same_run": result.same_run,
        "screen_a": screen_state(result.a),
        "screen_b": screen_state(result.b),
        "pairs": (
            {
                "op": p.a.op,
                "dtype": p.a.dtype,
                "shape": p.a.shape,
                "a_ms": p.a.gems_ms,
                "b_ms": p.b.gems_ms,
                "gain": p.gain,
                "fallback": p.fallback,
                "verdict": p.verdict.status,
                "change": p.verdict.change,
                "threshold": p.verdict.threshold,
                "why": p.verdict.why,
                "measured_throttled": p.verdict.throttled,
                "power_cap_mhz": cap_mhz(p),
                "floor": result.floor_for(p).value,
                "a_spread": p.a.gems_spread,
                "b_spread": p.b.gems_spread,
                "a_samples": p.a.gems_samples,
                "b_samples": p.b.gems_samples,
                "throttled": throttled_sides(p),
                "autotune_changes": autotune_changes(p),
                "placement_level": shared_placement_level(p),
                "recheck": p.recheck,
            }
            for p in result.pairs
        ),
        "only_a": (list(r.key) for r in result.only_a),
        "only_b": (list(r.key) for r in result.only_b),
        "not_comparable": [{"key": list(n.a.key), "reason": n.reason} for n in result.not_comparable],
        "duplicate_keys": result.duplicate_keys,
        "noise": {"median_abs_gain": result.noise_median, "p95_abs_gain": result.noise_p95},
        "issues_a": map(issue_record, result.a.issues),
        "issues_b": map(issue_record, result.b.issues),
    }
    return json_object_chunks(doc.items())


def ab_chunks(result: ABResult, fmt_name: str) -> Iterator[str]:
    """What ``summary --ab --format fmt_name`` prints, in pieces to write as they come."""
    if fmt_name == "csv":
        return ab_csv_lines(result)
    if fmt_name == "json":
        return ab_json_chunks(result)
    return ab_text_chunks(result, fmt_name)


def render_ab(result: ABResult, fmt_name: str) -> str:
    return "".join(ab_chunks(result, fmt_name))
