"""Render a report Page to one HTML file with Jinja2 (styles, script and SVG inline)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator, Optional

from zlbench import __version__
from zlbench.report import ReportUnavailable
from zlbench.report.model import Page, Table
from zlbench.report.plots import distribution_svg

HERE = Path(__file__).resolve().parent


def _environment():
    try:
        import jinja2
    except ImportError:
        raise ReportUnavailable("Jinja2") from None
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(HERE / "templates")),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    # Compact, and NaN never reaches the page's JSON.parse.
    env.policies["json.dumps_kwargs"] = {"sort_keys": False, "allow_nan": False, "separators": (",", ":")}
    from markupsafe import Markup  # Jinja2's own dependency

    return env, Markup


def json_pieces(table: Table) -> Iterator[Any]:
    """A table's blob as the page's JSON, a row at a time, escaped as Jinja2's tojson
    escapes (no "</script>" can close the data early)."""
    from jinja2.utils import htmlsafe_json_dumps
    from markupsafe import Markup

    def dumps(value: Any) -> str:
        return str(htmlsafe_json_dumps(value, allow_nan=False, separators=(",", ":")))

    head = {k: v for k, v in table.blob().items() if k != "rows"}
    yield Markup(dumps(head)[:-1] + ',"rows":[')
    for i, row in enumerate(table.rows):
        yield Markup(("," if i else "") + dumps(row))
    yield Markup("]}")


def render_page(page: Page, history: Optional[Any] = None) -> str:
    return "".join(page_chunks(page, history))


def page_chunks(page: Page, history: Optional[Any] = None) -> Iterator[str]:
    """The page's HTML in the pieces Jinja2 makes it in: write them as they come."""
    env, markup = _environment()
    if page.kind == "ab":
        svg = distribution_svg(
            page.distribution,
            "latency ratio A ms / B ms (log; right of 1: B faster)",
            "no change",
            page.distribution_verdicts,
        )
    else:
        svg = distribution_svg(page.distribution, "speedup torch ms / gems ms (log)", "parity with torch")
    static = HERE / "static"
    return env.get_template("report.html.j2").generate(
        page=page,
        history=history,
        version=__version__,
        generated=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        distribution_svg=markup(svg),
        css=markup((static / "report.css").read_text(encoding="utf-8")),
        js=markup((static / "report.js").read_text(encoding="utf-8")),
        json_pieces=json_pieces,
    )
