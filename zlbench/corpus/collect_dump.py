"""pytest plugin for ``zlbench ops scan``: write what pytest collected as JSON.

Loaded with ``-p`` into the ``pytest --collect-only`` subprocess only. For every item:
node id, file, function, test class and the names of all its marks (function,
class, module and parametrize marks, as ``item.iter_markers()`` yields them); and for
every file that failed to import, its error.
"""

import json
import os

OUT_ENV = "ZL_COLLECT_OUT"
SHIM_ENV = "ZL_COLLECT_DRIVER_SHIM"

_items: list = []
_errors: dict = {}


def pytest_collectreport(report):
    if report.failed:
        text = str(report.longrepr) if report.longrepr is not None else "collection failed"
        lines = [ln for ln in text.splitlines() if ln.startswith("E ")] or text.splitlines()[-1:]
        _errors[report.nodeid or report.fspath] = lines[-1].lstrip("E ").strip() if lines else text


def pytest_collection_finish(session):
    for item in session.items:
        _items.append(
            {
                "nodeid": item.nodeid,
                "file": item.location[0].replace(os.sep, "/"),
                "function": getattr(item, "originalname", None) or item.name,
                "class": item.cls.__name__ if getattr(item, "cls", None) else None,
                "marks": sorted({m.name for m in item.iter_markers()}),
            }
        )


def pytest_sessionfinish(session):
    path = os.environ.get(OUT_ENV)
    if not path:
        return
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(
            {"items": _items, "errors": _errors, "cpu_driver_shim": os.environ.get(SHIM_ENV) == "1"}, fh
        )
