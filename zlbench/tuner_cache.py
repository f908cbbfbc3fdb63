"""Tuner caches: isolating a run's FlagGems/Triton caches, keeping FlagGems' per host in a
screen over several hosts, and comparing Triton caches.

Why isolate: FlagGems' LibTuner keeps winners in a sqlite DB under FLAGGEMS_CACHE_DIR
(default ~/.flaggems) shared by every run on the host. The second side of an A/B then
inherits the first side's winners and compiles only those (upstream measured 10
variants instead of 234), which reads like a compiler effect when it is not. With
ZL_ISOLATE_TUNER_CACHE=1 a run gets fresh FLAGGEMS_CACHE_DIR and TRITON_CACHE_DIR that
are dropped afterwards; the configs it chose are already in autotune_records/.

Why compare: an A/B "no difference" table means something only if the axis changed what
the compiler emitted. ``compare_triton_caches`` looks at the compiled artefacts of both
sides and says whether they are byte-identical.

No torch or triton here; the orchestrator imports this.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

ISOLATED = "isolated"
# Every isolated cache root is a temp dir named so; nothing else is ever removed whole.
ISOLATED_ROOT_PREFIX = "zlbench-tuner-"


# ---- isolated caches ------------------------------------------------------------


@dataclass
class TunerCachePlan:
    """What a run adds to its environment, and how to tidy up after it.

    ``env``: variables to set on top of the caller's. ``description``: ``isolated`` or
    ``shared:<path>``, for the header and run_identity.json. ``triton_cache_dir``: where
    this run's compiled kernels land (for ``compare_triton_caches``).
    """

    env: Dict[str, str]
    description: str
    triton_cache_dir: Optional[Path] = None
    flaggems_cache_dir: Optional[Path] = None
    keep_triton_cache: bool = False
    root: Optional[Path] = None

    def cleanup(self) -> None:
        """Drop the isolated caches; keep the Triton one when asked to (A/B liveness)."""
        if self.root is None:
            return
        if self.keep_triton_cache:
            if self.flaggems_cache_dir is not None:
                shutil.rmtree(self.flaggems_cache_dir, ignore_errors=True)
        else:
            shutil.rmtree(self.root, ignore_errors=True)


def discard_kept_triton_cache(triton_dir: Path) -> None:
    """Drop a Triton cache a run kept (``triton_cache_dir`` in its run_identity.json) with
    its isolated root; a dir outside an isolated root (a shared cache) is left alone."""
    root = Path(triton_dir).parent
    if root.name.startswith(ISOLATED_ROOT_PREFIX):
        shutil.rmtree(root, ignore_errors=True)


def _home(environ: Mapping[str, str]) -> Path:
    home = environ.get("HOME")
    return Path(home) if home else Path.home()


def triton_cache_dir(environ: Mapping[str, str]) -> str:
    """Triton's file cache for a process with this environment: TRITON_CACHE_DIR, else
    ``<TRITON_HOME or HOME>/.triton/cache``, as triton's knobs read them."""
    explicit = environ.get("TRITON_CACHE_DIR")
    if explicit:
        return explicit
    base = environ.get("TRITON_HOME")
    return str((Path(base) if base else _home(environ)) / ".triton" / "cache")


def flaggems_cache_dir(environ: Mapping[str, str]) -> str:
    """FlagGems' cache dir (generated code, its tuner DB): FLAGGEMS_CACHE_DIR, else ~/.flaggems."""
    explicit = environ.get("FLAGGEMS_CACHE_DIR")
    return str(Path(explicit).expanduser()) if explicit else str(_home(environ) / ".flaggems")


def cache_dirs(environ: Mapping[str, str]) -> List[str]:
    """Where a benchmark process with this environment puts compiled kernels (Triton)
    and tuned configs (FlagGems): the batch watches them to tell compiling from hanging,
    and the phases plugin reports the ones its process used."""
    return [triton_cache_dir(environ), flaggems_cache_dir(environ)]


def flaggems_db_path(cache_dir: Path) -> Path:
    """Where FlagGems keeps its sqlite tuner DB under a FLAGGEMS_CACHE_DIR."""
    return Path(cache_dir) / "config_cache" / "TunedConfig.db"


def shared_cache_path(environ: Mapping[str, str]) -> str:
    """Where FlagGems keeps its tuned configs for a process with this environment."""
    return environ.get("FLAGGEMS_DB_URL") or flaggems_cache_dir(environ)


# ---- caches across hosts ---------------------------------------------------------

# Under FlagGems' default cache dir: one dir per host for the shards of a screen.
HOSTS_DIR = "hosts"


def per_host_flaggems_cache(environ: Mapping[str, str], host: str) -> Dict[str, str]:
    """What a host shard adds to its children's environment so that FlagGems' tuning DB
    is this host's own: ``FLAGGEMS_CACHE_DIR=<FlagGems' default>/hosts/<host>``, or
    nothing where the caller chose FLAGGEMS_CACHE_DIR or FLAGGEMS_DB_URL themselves.

    Why: FlagGems names its sqlite DB by vendor and Triton version only
    (``TunedConfig_<vendor>_triton_<x>_<y>.db``), not by GPU model, so a home dir shared
    by the nodes of a cluster hands one model's winners to another; and sqlite's locks
    over a network file system are only as good as its lock daemon, across hosts at
    worst. Triton's compiled kernels need nothing: their entries are content-addressed
    (the hash of source, options, target and version) and written by rename, so hosts may
    share them; its autotune winners (ZL_AUTOTUNE_CACHE) name the architecture only, so
    hosts of different models of one architecture want their own TRITON_CACHE_DIR.
    """
    if environ.get("FLAGGEMS_CACHE_DIR") or environ.get("FLAGGEMS_DB_URL"):
        return {}
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", host) or "unknown-host"
    return {"FLAGGEMS_CACHE_DIR": str(Path(flaggems_cache_dir(environ)) / HOSTS_DIR / name)}


def plan_tuner_cache(
    run_dir: Path,
    isolate: bool,
    environ: Mapping[str, str],
    keep_triton_cache: bool = False,
    temp_root: Optional[Path] = None,
) -> TunerCachePlan:
    """The tuner cache a run uses.

    ``isolate``: ZL_ISOLATE_TUNER_CACHE. Isolated caches live in a fresh temp dir
    (``temp_root``, default the system temp dir) named after the run dir, because the
    Triton cache of an autotuned mm runs to hundreds of MB that do not belong in a
    results tree. ``keep_triton_cache``: ``cleanup()`` leaves the Triton cache for
    ``zlbench ab`` to compare; it then calls ``discard_kept_triton_cache()``.
    """
    if not isolate:
        triton_dir = environ.get("TRITON_CACHE_DIR")
        return TunerCachePlan(
            env={},
            description=f"shared:{shared_cache_path(environ)}",
            triton_cache_dir=Path(triton_dir) if triton_dir else None,
        )
    prefix = f"{ISOLATED_ROOT_PREFIX}{re.sub(r'[^A-Za-z0-9_.-]', '-', Path(run_dir).name)}-"
    root = Path(tempfile.mkdtemp(prefix=prefix, dir=str(temp_root) if temp_root else None))
    flaggems_dir = root / "flaggems"
    triton_path = root / "triton"
    flaggems_dir.mkdir()
    triton_path.mkdir()
    env = {"FLAGGEMS_CACHE_DIR": str(flaggems_dir), "TRITON_CACHE_DIR": str(triton_path)}
    if environ.get("FLAGGEMS_DB_URL"):
        # The URL wins over FLAGGEMS_CACHE_DIR inside FlagGems: point it here as well.
        db = flaggems_db_path(flaggems_dir)
        db.parent.mkdir()
        env["FLAGGEMS_DB_URL"] = f"sqlite:///{db}"
    return TunerCachePlan(
        env=env,
        description=ISOLATED,
        triton_cache_dir=triton_path,
        flaggems_cache_dir=flaggems_dir,
        keep_triton_cache=keep_triton_cache,
        root=root,
    )


# ---- liveness: did both sides compile the same kernels? -------------------------

# Compiler outputs, front end first. The metadata json is left out: it carries the
# cache hash and versions, which differ between builds even for identical code.
ARTEFACT_SUFFIXES = (".ttir", ".ttgir", ".llir", ".ptx", ".cubin", ".amdgcn", ".hsaco", ".spv", ".mubin")
FRONT_END_SUFFIX = ".ttir"

_LOC_LINE = re.compile(r"^#loc")
_LOC_TAIL = re.compile(r"\s+loc\(.*\)\s*$")


def _normalise_ir(text: str) -> str:
    # MLIR location info names source files and lines, not what was compiled.
    lines = [_LOC_TAIL.sub("", ln) for ln in text.splitlines() if not _LOC_LINE.match(ln)]
    return "\n".join(lines)


def _digest(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix in (".ttir", ".ttgir"):
        data = _normalise_ir(data.decode("utf-8", "replace")).encode("utf-8")
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Variant:
    """One compiled kernel: a Triton cache entry dir and its artefacts."""

    kernel: str
    entry: str
    fingerprint: str  # all artefacts
    front_end: Optional[str]  # the TTIR alone: what was asked of the compiler


def scan_triton_cache(cache_dir: Path, suffixes: Iterable[str] = ARTEFACT_SUFFIXES) -> List[Variant]:
    """Every compiled kernel under a Triton cache dir (``<dir>/<hash>/<name>.<ext>``)."""
    wanted = tuple(suffixes)
    variants: List[Variant] = []
    root = Path(cache_dir)
    if not root.is_dir():
        return variants
    for entry in sorted(p for p in root.iterdir() if p.is_dir()):
        by_kernel: Dict[str, List[Tuple[str, str]]] = {}
        for f in sorted(entry.iterdir()):
            if f.is_file() and f.suffix in wanted and not f.name.startswith("__grp__"):
                by_kernel.setdefault(f.stem, []).append((f.suffix, _digest(f)))
        for kernel, parts in sorted(by_kernel.items()):
            fp = hashlib.sha256(repr(sorted(parts)).encode()).hexdigest()
            front = next((d for s, d in parts if s == FRONT_END_SUFFIX), None)
            variants.append(Variant(kernel, entry.name, fp, front))
    return variants


@dataclass
class KernelLiveness:
    kernel: str
    variants_a: int = 0
    variants_b: int = 0
    same: int = 0  # B variants with a byte-identical twin in A
    changed: int = 0  # B variants whose TTIR is in A but whose output differs
    unmatched: int = 0  # B variants with neither


@dataclass
class LivenessReport:
    """Whether sides A and B compiled identical kernels.

    verdict: ``identical`` (every kernel B compiled is byte-identical to one A compiled:
    the axis changed nothing the compiler emitted), ``live`` (some kernel compiled from
    the same TTIR came out different), ``inconclusive`` (B compiled kernels A never
    did, none comparable), or ``empty`` (a side has no compiled kernels).
    """

    a_dir: str
    b_dir: str
    verdict: str
    variants_a: int
    variants_b: int
    kernels: Dict[str, KernelLiveness] = field(default_factory=dict)

    @property
    def identical(self) -> bool:
        return self.verdict == "identical"

    def counts(self) -> Dict[str, int]:
        rows = self.kernels.values()
        return {
            "variants_a": self.variants_a,
            "variants_b": self.variants_b,
            "same": sum(r.same for r in rows),
            "changed": sum(r.changed for r in rows),
            "unmatched": sum(r.unmatched for r in rows),
        }

    def summary(self) -> str:
        c = self.counts()
        tail = (
            f"A {c['variants_a']} variants, B {c['variants_b']}: same {c['same']}, "
            f"changed {c['changed']}, unmatched {c['unmatched']}"
        )
        if self.verdict == "identical":
            return (
                "WARNING: the A/B axis is dead: both sides compiled byte-identical "
                f"kernels ({tail}). A 'no difference' table says nothing about the "
                "compiler."
            )
        if self.verdict == "live":
            changed = sorted(k for k, r in self.kernels.items() if r.changed)
            return f"A/B axis is live: {', '.join(changed)} compiled differently ({tail})"
        if self.verdict == "empty":
            return f"WARNING: cannot check the A/B axis: no compiled kernels ({tail})"
        return (
            "WARNING: cannot tell whether the A/B axis is live: B compiled kernels "
            "whose TTIR A never produced (a front-end change, or different configs: "
            f"check the replay fell back 0) ({tail})"
        )

    def to_json(self) -> Dict[str, object]:
        return {
            "a_dir": self.a_dir,
            "b_dir": self.b_dir,
            "verdict": self.verdict,
            **self.counts(),
            "kernels": {k: vars(r) for k, r in sorted(self.kernels.items())},
        }


def compare_triton_caches(
    a_dir: Path, b_dir: Path, suffixes: Iterable[str] = ARTEFACT_SUFFIXES
) -> LivenessReport:
    """Compare the compiled kernels in two Triton cache dirs (A recorded, B replayed).

    B is measured against A rather than the other way round because the recording
    side tunes, compiling every candidate config, while the replaying side compiles
    only the winners; B's kernels are therefore a subset of A's when nothing changed.
    Variants are paired by their TTIR, so a kernel whose front end is the same but whose
    lowered output differs is counted as changed: that is the compiler switch at work.
    """
    va = scan_triton_cache(a_dir, suffixes)
    vb = scan_triton_cache(b_dir, suffixes)
    a_fps = {(v.kernel, v.fingerprint) for v in va}
    a_fronts = {(v.kernel, v.front_end) for v in va if v.front_end is not None}
    kernels: Dict[str, KernelLiveness] = {}
    for v in va:
        kernels.setdefault(v.kernel, KernelLiveness(v.kernel)).variants_a += 1
    for v in vb:
        row = kernels.setdefault(v.kernel, KernelLiveness(v.kernel))
        row.variants_b += 1
        if (v.kernel, v.fingerprint) in a_fps:
            row.same += 1
        elif v.front_end is not None and (v.kernel, v.front_end) in a_fronts:
            row.changed += 1
        else:
            row.unmatched += 1
    report = LivenessReport(str(a_dir), str(b_dir), "", len(va), len(vb), kernels)
    c = report.counts()
    if not va or not vb:
        report.verdict = "empty"
    elif c["changed"]:
        report.verdict = "live"
    elif c["unmatched"]:
        report.verdict = "inconclusive"
    else:
        report.verdict = "identical"
    return report
