#!/usr/bin/env bash
# GPU evidence for the timing and autotune plugins and `zlbench ab`, in stages that each
# fit one 10-minute call on one CUDA GPU. Needs FLAGGEMS_DIR (a FlagGems checkout: the
# parent of benchmark/, src/ beside it) and zlbench importable (PYTHONPATH=<repo>).
#
#   bash benchmarks/gpu_checks.sh plugins  OUT   # GPU tests of the timer/autotune plugins and workers
#   bash benchmarks/gpu_checks.sh noise    OUT   # A/A noise per timer class, verdicts, 5% A/B
#   bash benchmarks/gpu_checks.sh ab       OUT   # zlbench ab on a live and a dead switch
#   bash benchmarks/gpu_checks.sh isolated OUT   # isolated vs shared tuner cache counts
#   bash benchmarks/gpu_checks.sh screen   OUT   # the 24-operator sample: warm, A/A, re-check, kernel mode
#   bash benchmarks/gpu_checks.sh fixed    OUT   # where an operator's fixed cost goes, phase by phase
#   bash benchmarks/gpu_checks.sh frames   OUT   # small rows across processes: placements' copies in pages of their own
# noise and screen resume: after a call's time limit cut one, run the same command again
# (screen stops a pass after PASS_LIMIT seconds, 250 by default, with exit 3). Another timing
# rule over the same warm caches: PASSES=a,b,recheck,report ZL_GRAPH_REPLAY_MS=0.5 (any ZL_
# knob; the batches read them from the environment) with another OUT. Whole processes'
# shifts: PASSES=warm,a,b,repeat,report (--repeats 4 more batches of the same build).
# Several GPUs: benchmarks/multi_gpu.py (batch makespans per device set, warmup sweep).
set -uo pipefail
stage=${1:?stage: plugins, noise, ab, isolated, screen, fixed or frames}
out=${2:?output dir}
: "${FLAGGEMS_DIR:?set FLAGGEMS_DIR to a FlagGems checkout}"
export GEMS_VENDOR=${GEMS_VENDOR:-nvidia} PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
mkdir -p "$out"
py=${PYTHON:-python3}
# A user's install carries zlbench's bytecode (pip compiles at install, an editable install
# writes it at its first import). In a tree where nothing wrote it, every process a batch
# forks would compile the zlbench modules it imports from source, in every operator's
# fixed cost (0.05-0.08 s an operator over the bundled sample on a 2-core CPU host):
# compile them once. Not into a PYTHONPYCACHEPREFIX where the tree is read-only: Python
# would then read every package's bytecode from there alone (torch's import 1.6 -> 4.2 s).
if [ -w zlbench ]; then
    $py -m compileall -q zlbench >/dev/null || echo "zlbench not fully byte-compiled (above)" >&2
else
    echo "zlbench is read-only here and not byte-compiled: every operator's start-up compiles it" >&2
fi

case "$stage" in
plugins)
    # One pytest per file: a file's failures print at its own end, so a call's time limit
    # that cuts a later file still leaves the earlier ones' tracebacks in the log.
    rc=0
    for file in tests/test_plugin_graph_timer_gpu.py tests/test_plugin_flaggems_gpu.py \
        tests/test_autotune_gpu.py tests/test_batch_workers_gpu.py; do
        $py -m pytest -m gpu -v -rfEs --tb=short -p no:cacheprovider "$file" 2>&1 | tee -a "$out/plugins.log" || rc=1
    done
    exit $rc
    ;;
noise)
    # Batches a1, a2 (graph + per-call direct), slow (SLOW_OP 5% slower), k1, k2 (kernel
    # mode). A batch that completed is reused: if the call's time limit cuts it, run the
    # same command again. FlagGems' 1000 ms warm-up per timing is cut to 100 ms for all,
    # and its rep budget set to 100 ms (HEAD reads --iter as ms). Host-synchronising ops
    # (nonzero, masked_select; add FlagGems' unique mark as `zlbench ops` names it) are
    # the direct-timed rows. NOISE_ARGS: more timing_noise.py arguments.
    # shellcheck disable=SC2086
    PYTEST_ADDOPTS="--warmup ${WARMUP_MS:-100} --iter ${ITER_MS:-100}" \
    $py benchmarks/timing_noise.py --flaggems-dir "$FLAGGEMS_DIR" --backend cuda \
        --ops "${OPS:-abs,softmax,sum,layer_norm,nonzero,masked_select}" \
        --batch-arg=--dtypes --batch-arg="${DTYPES:-float16}" \
        --slow-op "${SLOW_OP:-softmax}" --kernel \
        --out "$out/noise" --result "$out/timing_noise.json" ${NOISE_ARGS:-} 2>&1 | tee -a "$out/noise.log"
    ;;
ab)
    # Live: triton's FP fusion off on side A, on on side B changes the PTX of every kernel
    # with a multiply-add. Dead: a variable nothing reads.
    for switch in TRITON_DEFAULT_FP_FUSION ZL_NO_SUCH_SWITCH; do
        $py -m zlbench ab --switch "$switch" --flaggems-dir "$FLAGGEMS_DIR" --backend cuda \
            --ops "${AB_OPS:-addmm}" --dtypes float16 --out "$out/ab-$switch" \
            2>&1 | tee "$out/ab-$switch.log"
        grep -E "liveness|Paired" "$out/ab-$switch.log"
    done
    ;;
isolated)
    $py benchmarks/autotune_replay_check.py --flaggems-dir "$FLAGGEMS_DIR" --out "$out/autotune" \
        2>&1 | tee "$out/isolated.log"
    ;;
screen)
    # benchmarks/screen_throughput.py at the defaults: the warm pass fills the caches (its
    # walls are the cold ones), a and b are the measured A/A, recheck runs its SLOWER and
    # FASTER operators again, kernel is FlagGems' own kernel mode on six of them.
    $py benchmarks/screen_throughput.py --flaggems-dir "$FLAGGEMS_DIR" --out "$out/screen" \
        --passes "${PASSES:-warm,a,b,recheck,kernel,report}" --pass-limit "${PASS_LIMIT:-250}" \
        --json "$out/screen.json" 2>&1 | tee -a "$out/screen.log"
    ;;
fixed)
    # benchmarks/fixed_cost.py: the same cheap operators as a warm-up batch, then plain and
    # profiled batches on the caches it filled (FIXED_PASSES=plain,profiled,report where a
    # screen has just filled them), each benchmark process profiled phase by phase: where
    # start-up, collection, first call, teardown and exit go.
    # shellcheck disable=SC2086
    $py benchmarks/fixed_cost.py --flaggems-dir "$FLAGGEMS_DIR" --backend cuda --out "$out/fixed" \
        --passes "${FIXED_PASSES:-warm,plain,profiled,report}" ${FIXED_ARGS:-} 2>&1 | tee -a "$out/fixed.log"
    ;;
frames)
    # benchmarks/placement_frames.py: torch rows of a few microseconds in fresh processes,
    # the placements' copies as now and each in a 2 MiB page of its own (FlagGems not used).
    $py benchmarks/placement_frames.py --processes "${FRAMES_PROCESSES:-6}" \
        --json "$out/placement_frames.json" 2>&1 | tee -a "$out/frames.log"
    ;;
*)
    echo "unknown stage $stage: plugins, noise, ab, isolated, screen, fixed or frames" >&2
    exit 2
    ;;
esac
