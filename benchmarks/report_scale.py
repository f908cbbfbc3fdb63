"""Does `zlbench report` hold a nightly HEAD screen? Time it on ~33,000 rows.

Generates a 1,100-operator batch (and a B with gems 5% faster) as benchmarks/
summary_speed.py does (3 dtypes x 10 shapes per operator), builds the batch page and
the A/B page, then opens each in headless Chromium and times what a person does:
loading the page, sorting by a column (twice), filtering to one operator.

    python benchmarks/report_scale.py [--ops 1100] [--keep DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from report_browser import open_page  # noqa: E402
from summary_speed import make_batch  # noqa: E402

from zlbench.report.command import build_report  # noqa: E402


def _until(page, cond, timeout=60.0) -> float:
    from selenium.webdriver.support.ui import WebDriverWait

    start = time.perf_counter()
    WebDriverWait(page.driver, timeout, poll_frequency=0.01).until(lambda d: cond())
    return time.perf_counter() - start


def browse(html: Path, sort_key: str, op: str) -> None:
    start = time.perf_counter()
    with open_page(html) as page:
        load = time.perf_counter() - start
        total = page.shown_rows("rows-table")
        head = page.table("rows-table").find_element("css selector", f'th[data-key="{sort_key}"]')
        times = []
        for _ in range(2):
            before = head.get_attribute("aria-sort")
            t0 = time.perf_counter()
            head.click()
            _until(page, lambda: head.get_attribute("aria-sort") != before)
            times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        page.type_filter("rows-table", op)
        filtered = time.perf_counter() - t0 - 0.12  # less the filter's typing pause
        shown = page.shown_rows("rows-table")
        dom_rows = len(page.table("rows-table").find_elements("css selector", "tbody tr"))
    print(f"  {html.name}: {total} rows; open+first render {load:.2f} s (incl. browser "
          f"start); sort by {sort_key} {times[0]:.2f} s / {times[1]:.2f} s; filter "
          f"'{op}' -> {shown} rows in {filtered:.2f} s; rows in the DOM: {dom_rows}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=1100)
    parser.add_argument("--keep", type=Path, help="write the batches and pages here and keep them")
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="zlbench-report-scale-"))
    a = make_batch(base / "a", args.ops, seed=1, scale=1.0)
    b = make_batch(base / "b", args.ops, seed=1, scale=0.95)
    for label, ab, out in (("batch", None, base / "batch.html"), ("A/B", b, base / "ab.html")):
        t0 = time.perf_counter()
        line = build_report(str(a), str(ab) if ab else None, out)
        print(f"{label}: {line} in {time.perf_counter() - t0:.1f} s")
    browse(base / "batch.html", "gems_ms", "op0042")
    browse(base / "ab.html", "gain", "op0042")
    if not args.keep:
        shutil.rmtree(base)


if __name__ == "__main__":
    main()
