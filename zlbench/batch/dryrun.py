"""``zlbench batch --dry-run``: the plan as text, nothing run or written."""

from __future__ import annotations

from typing import List

from .. import rundir
from .driver import DryRun


def _seconds(value) -> str:
    return "no limit" if not value else f"{value:g} s"


def render_dry_run(dry: DryRun) -> str:
    prep, config = dry.prepared, dry.config
    plan = prep.plan
    lines: List[str] = [
        f"zlbench batch --dry-run: nothing runs, nothing is written. The plan for {dry.out}"
        + (" (resumed: operators already complete there are kept)" if dry.resume else ""),
        "",
        f"corpus     {prep.corpus_root or '?'} ({prep.settings.values.get('provider')})"
        + (f"; stages {','.join(config.stages)}" if config.stages else ""),
        f"backend    {prep.backend_name}   timer: {prep.timer}   run mode: {config.run_mode}"
        + (f"   shard: {config.shard}" if config.shard.count > 1 else ""),
        f"timeout    {_seconds(config.timeout_s)} per attempt; retries {config.retries}; "
        f"stall timeout {_seconds(config.stall_timeout_s)}; kill grace {config.kill_grace_s:g} s",
        "fallback   "
        + (" then ".join(",".join(level) for level in config.fallback_dtypes) or "none")
        + " (dtype lists after a deterministic failure)",
        f"dismiss    {config.dismiss or 'none'}",
        "",
        f"{len(plan.ops)} operators on {len(plan.devices)} device(s):",
    ]
    for device, queue in plan.queues().items():
        expected = sum(plan.expected.get(item.op, 0.0) for item in queue)
        lines.append(
            f"  device {device}: {len(queue)} operators"
            + (f", about {expected:.0f} s expected (--balance-from)" if expected else "")
        )
        for item in queue:
            extra = []
            if item.timeout_s != config.timeout_s:
                extra.append(f"timeout {_seconds(item.timeout_s)}")
            if item.replay_from:
                extra.append(f"replays {item.replay_from}")
            if item.replay_note:
                extra.append("no autotune records to replay")
            if dry.resume and rundir.is_complete(dry.out / item.op):
                extra.append("complete: kept if the batch's journal accepts it")
            lines.append(f"    {item.op}" + (f"  ({'; '.join(extra)})" if extra else ""))
    if plan.dismissed:
        lines.append(f"dismissed ({len(plan.dismissed)}), not run:")
        lines.extend(f"  {op}: {why or '(no reason given)'}" for op, why in sorted(plan.dismissed.items()))
    if prep.refused:
        lines.append(f"refused as operator names ({len(prep.refused)}), not run:")
        lines.extend(f"  {op!r}: {why}" for op, why in sorted(prep.refused.items()))
    lines.append("settings (what plan.json records; caliber ones go into run_identity.json):")
    for name, value in sorted(prep.doc.get("settings", {}).items()):
        if value not in (None, [], ""):
            lines.append(f"  {name} = {value}")
    if dry.notes:
        lines.append("notes:")
        lines.extend(f"  {note}" for note in dry.notes)
    return "\n".join(lines)
