"""`zlbench report`: one self-contained HTML page for a batch, or for an A/B of two.

Jinja2 writes the page and matplotlib draws its pictures as inline SVG; both come with
the optional extra ``zlbench[report]`` so that a plain install stays small.
"""

INSTALL = "pip install 'zlbench[report]'"


class ReportUnavailable(Exception):
    """A library the page needs is missing; the message says how to install it."""

    def __init__(self, library: str):
        super().__init__(f"zlbench report needs {library}, which is not installed: {INSTALL}")


def require() -> None:
    """Fail before any work when the page cannot be written."""
    import importlib.util

    for module, name in (("jinja2", "Jinja2"), ("matplotlib", "matplotlib")):
        if importlib.util.find_spec(module) is None:
            raise ReportUnavailable(name)
