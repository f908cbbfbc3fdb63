"""`zlbench history`: finished screens recorded in SQLite, each operator's latency over
nights per caliber, and the steps beyond the noise (steps.py, after asv)."""
