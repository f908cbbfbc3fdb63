"""What the rows' own floors (`zlbench noise`) do to verdicts, on batches you have.

Given four or more batch dirs of one build (the same operators, one machine): for each
choice of --train of them, the floors `zlbench noise --from` would record from those
(``zlbench.noise.aa_floors``: the machine's floor per caliber and the rows that keep their
own), and then each pair of a held-out batch with another batch judged as `summary --ab`
judges it, once at the machine's floor alone and once with the rows' own floors:

  aa_real     rows SLOWER or FASTER of an A/A pair (every one is a false alarm)
  slow_found  of the same pairs with B's gems latencies made --slowdown slower, the rows
              SLOWER (what a real change of that size would show)

over the rows compared on device time. Nothing runs on a device: it reads the batches.

Usage:
  python benchmarks/row_floors.py runs/st/warm runs/st/a runs/st/b runs/st/r1 --json rf.json
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import sys
from pathlib import Path
from typing import Dict, List

from zlbench.history.noise import run_calibers
from zlbench.noise import DEFAULT_QUANTILE, aa_floors
from zlbench.summary.ab import NoiseFloor, pair_summaries
from zlbench.summary.rows import Summary, summarize
from zlbench.summary.verdict import DEFAULT_NOISE_FLOOR, FASTER, SLOWER


def slowed(summary: Summary, factor: float) -> Summary:
    """A copy of ``summary`` whose gems latencies are ``factor`` times as long."""
    out = copy.deepcopy(summary)
    for row in out.rows:
        if row.gems_ms:
            row.gems_ms *= factor
    return out


def judge(a: Summary, b: Summary, floors: Dict[str, NoiseFloor]) -> Dict[str, int]:
    """Rows compared on device time, and how many of them are SLOWER and FASTER."""
    by_run = {run_dir: floors[cal] for run_dir, cal in run_calibers(a).items() if cal in floors}
    result = pair_summaries(a, b, DEFAULT_NOISE_FLOOR, "the default", by_run)
    judged = [p for p in result.pairs if p.verdict.threshold is not None]
    return {
        "rows": len(judged),
        "slower": sum(p.verdict.status == SLOWER for p in judged),
        "faster": sum(p.verdict.status == FASTER for p in judged),
    }


def evaluate(dirs: List[Path], train: int, quantile: float, slowdown: float) -> List[dict]:
    summaries = {d: summarize(d) for d in dirs}
    out = []
    for chosen in itertools.combinations(dirs, train):
        held = [d for d in dirs if d not in chosen]
        pairs_aa = [
            pair_summaries(summaries[x], summaries[y], 0.0, "zero (an A/A pairing)")
            for x, y in itertools.combinations(chosen, 2)
        ]
        records = aa_floors(pairs_aa, quantile, "evaluation")
        with_rows = {
            r.caliber: NoiseFloor(r.floor, "zlbench noise", {s: f for s, (f, _) in r.row_floors.items()})
            for r in records
        }
        machine = {cal: NoiseFloor(f.value, f.source) for cal, f in with_rows.items()}
        tests = sorted(
            {tuple(sorted((h, o), key=dirs.index)) for h in held for o in dirs if o != h},
            key=lambda p: (dirs.index(p[0]), dirs.index(p[1])),
        )
        point = {
            "train": [d.name for d in chosen],
            "floors": {r.caliber: r.floor for r in records},
            "rows_with_own_floor": sum(len(r.row_floors) for r in records),
            "pairs": [f"{x.name}-{y.name}" for x, y in tests],
        }
        for name, floors in (("machine", machine), ("rows", with_rows)):
            aa = [judge(summaries[x], summaries[y], floors) for x, y in tests]
            slow = [judge(summaries[x], slowed(summaries[y], 1 + slowdown), floors) for x, y in tests]
            point[name] = {
                "rows": sum(j["rows"] for j in aa),
                "aa_real": sum(j["slower"] + j["faster"] for j in aa),
                "slow_rows": sum(j["rows"] for j in slow),
                "slow_found": sum(j["slower"] for j in slow),
            }
        out.append(point)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dirs", nargs="+", type=Path, help="batch dirs of one build (four or more)")
    parser.add_argument("--train", type=int, default=3, help="batches the floors are taken from")
    parser.add_argument("--quantile", type=float, default=DEFAULT_QUANTILE * 100, help="as zlbench noise's")
    parser.add_argument("--slowdown", type=float, default=0.05, help="the known change, as a fraction")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if len(args.dirs) <= args.train or args.train < 3:
        parser.error(
            f"give more batch dirs than --train ({args.train}), and --train 3 or more "
            "(zlbench noise keeps rows' own floors from three batches)"
        )
    if not 50 <= args.quantile <= 100:
        parser.error(f"--quantile {args.quantile:g}: a percentile from 50 to 100, as zlbench noise's")
    points = evaluate(args.dirs, args.train, args.quantile / 100.0, args.slowdown)
    print(
        f"{'floors from':<28} {'own':>4}  {'A/A real: machine / rows':>25}  "
        f"{f'{args.slowdown:.0%} slower found: machine / rows':>36}"
    )
    for p in points:
        m, r = p["machine"], p["rows"]
        print(
            f"{','.join(p['train']):<28} {p['rows_with_own_floor']:>4}  "
            f"{m['aa_real']:>8} / {r['aa_real']:<6} of {m['rows']:<6}  "
            f"{m['slow_found']:>14} / {r['slow_found']:<6} of {m['slow_rows']}"
        )
    if args.json:
        args.json.write_text(json.dumps(points, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
