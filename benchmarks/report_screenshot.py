"""Build the HTML report of a batch dir (or an A/B of two) and save a screenshot of it.

    python benchmarks/report_screenshot.py DIR [--ab B] -o out.png [--html out.html]
        [--history-db FILE]

Opens the page from a file:// URL in headless Chromium (Debian's chromium and
chromium-driver; selenium from the `test` extra), waits for the table to fill, and
saves a full-page PNG. Prints the page's row count and plot sizes so the picture can be
checked against the batch. Works on any batch dir, e.g. an H200 screen copied back.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from report_browser import open_page  # noqa: E402

from zlbench.report.command import build_report  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", help="batch dir (A with --ab)")
    parser.add_argument("--ab", help="second batch dir: the page compares B with A")
    parser.add_argument("-o", "--out", required=True, help="PNG to write")
    parser.add_argument("--html", help="keep the HTML here (default: a temp file)")
    parser.add_argument("--width", type=int, default=1500)
    parser.add_argument("--allow-caliber-mismatch", action="store_true")
    parser.add_argument("--history-db", help="history database for the nights section "
                        "(default: as zlbench history; 'none' leaves it out)")
    args = parser.parse_args()
    html = Path(args.html) if args.html else Path(tempfile.mkdtemp()) / "report.html"
    print(build_report(args.dir, args.ab, html, args.allow_caliber_mismatch,
                       args.history_db))
    with open_page(html, width=args.width) as page:
        print(f"table shows {page.shown_rows('rows-table')} rows; drawn plots (w x h px): "
              + ", ".join(f"{w}x{h}" for w, h in page.plot_sizes()))
        page.screenshot(Path(args.out))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
