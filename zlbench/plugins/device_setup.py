"""pytest plugin: tell FlagGems its vendor before it is imported.

Without GEMS_VENDOR, ``import flag_gems`` probes torch extensions and then runs every
vendor's smi tool in threads with no timeout; a hung tool hangs the import. pytest
imports ``-p`` plugins before any conftest, so setting the variables when this module
is imported is early enough. A value the user already set is kept when FlagGems would
accept it (v5.0.2 ignores anything outside its list; HEAD also reads FLAGGEMS_VENDOR).
What was set is recorded in ``$ZL_RUN_DIR/plugins/device_setup.json``.
"""

from __future__ import annotations

import os
from typing import Callable, Mapping, Optional, Tuple

from zlbench import backends, benchenv
from zlbench.plugins import run_dir, write_plugin_json

PLUGIN = "device_setup"
VENDOR_KEYS = ("GEMS_VENDOR", "FLAGGEMS_VENDOR")


def plan_vendor_env(
    env: Mapping[str, str],
    backend: Optional[str],
    lookup: Callable[[Optional[str]], Tuple[Optional[str], str]] = backends.gems_vendor,
) -> dict:
    """What to set, and why: {"vendor", "source", "set": {key: value}}. The backend
    registry names the vendor (``backends.gems_vendor``) unless the caller set one that
    FlagGems accepts."""
    for key in VENDOR_KEYS:
        if env.get(key) in backends.GEMS_VENDORS:
            vendor, source = env[key], f"env:{key}"
            break
    else:
        vendor, source = lookup(backend)
    if vendor is None:
        return {"vendor": None, "source": source, "set": {}}
    changes = {key: vendor for key in VENDOR_KEYS if env.get(key) != vendor}
    return {"vendor": vendor, "source": source, "set": changes}


def apply(env=os.environ) -> Optional[dict]:
    """Set the vendor variables in ``env`` when a run dir is given; returns the record."""
    if benchenv.run_dir(env) is None:
        return None
    backend = benchenv.backend_name(env)
    before = {key: env.get(key) for key in VENDOR_KEYS}
    plan = plan_vendor_env(env, backend)
    for key, value in plan["set"].items():
        env[key] = value
    return {"backend": backend, "before": before, **plan}


_record = apply()


def pytest_configure(config):
    if _record is not None and run_dir() is not None:
        write_plugin_json(PLUGIN, _record)
