"""Render a report Page to one HTML file with Jinja2 (styles, script and SVG inline)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

from zlbench import __version__
from zlbench.report import ReportUnavailable
from zlbench.report.model import Page
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


def render_page(page: Page, history: Optional[Any] = None) -> str:
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
    return env.get_template("report.html.j2").render(
        page=page,
        history=history,
        version=__version__,
        generated=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        distribution_svg=markup(svg),
        css=markup((static / "report.css").read_text(encoding="utf-8")),
        js=markup((static / "report.js").read_text(encoding="utf-8")),
    )
