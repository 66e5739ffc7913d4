#!/usr/bin/env bash
# The GPU check: what a GPU user (or a lent GPU machine) runs to see fabricbench's GPU paths work here.
#
#   scripts/gpu-check.sh [RESULTS_DIR] [--wheels DIR]
#
# It makes a venv that sees the host's packages (--system-site-packages: CuPy, the NCCL wheel, mpi4py; a parent
# venv's too), adds an MPI only if none loads, and fabricbench with what it needs that neither has (from the wheels
# in --wheels DIR, else PyPI), then runs in well under 5 minutes on one GPU:
#   - tests/test_gpu.py (when pytest is there);
#   - nccl on 1 rank: every collective, with validation, loop and per-iteration timing, in place, graphs;
#   - mpi --buffer cuda on 2 ranks, staged through pinned memory (and CUDA-aware, or its unsupported rows);
#   - cuda-copy: h2d, d2h (pinned and pageable), d2d, and peer where two GPUs are visible;
#   - benchmarks/nccl_overhead.py: fabricbench's nccl allreduce against a minimal cupy.cuda.nccl loop timed with
#     events (paired, shuffled reps), the ratios in RESULTS_DIR/ratios/ratios.json.
# Everything (tables, metadata, log, ratios) lands in RESULTS_DIR (default: $OUT, else gpu-check-DATE).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=""
wheels=""
while [ $# -gt 0 ]; do
    case "$1" in
        --wheels) wheels=${2:?--wheels needs a directory}; shift 2 ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        *) out=$1; shift ;;
    esac
done
out=${out:-${OUT:-gpu-check-$(date +%Y%m%d-%H%M%S)}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
log="$out/gpu-check.log"
exec > >(tee -a "$log") 2>&1
echo "# gpu-check $(date -u +%FT%TZ) on $(hostname), results in $out"

python=${PYTHON:-python3}
venv="$out/.venv"
step() { echo; echo "## $*"; }
failures=0
try() {  # run a step; a failure is counted and logged, and the check goes on to the next step
    echo "\$ $*"
    if ! "$@"; then
        echo "!! failed: $*"
        failures=$((failures + 1))
    fi
}

step "environment"
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total --format=csv 2>/dev/null || echo "nvidia-smi: none"
nvidia-smi -q 2>/dev/null | grep -iA3 'PCIe Generation' | head -8 || true
"$python" --version

step "venv ($venv)"
"$python" -m venv --system-site-packages "$venv"
vpy="$venv/bin/python"
# A python3 that is itself a venv's (an image's /opt/NAME/.venv holding CuPy) lends the new venv only its base
# interpreter's packages through --system-site-packages: a .pth file names the parent venv's site-packages too.
parent_site=$("$python" -c 'import site, sys; print("\n".join(site.getsitepackages()) if sys.prefix != sys.base_prefix else "")')
if [ -n "$parent_site" ]; then
    "$vpy" -c 'import site, sys; open(site.getsitepackages()[0] + "/parent-venv.pth", "w").write(sys.stdin.read())' \
        <<<"$parent_site"
fi
wheel_index=()
[ -n "$wheels" ] && wheel_index=(--no-index --find-links "$wheels")
if ! "$vpy" -c "from mpi4py import MPI; MPI.Get_library_version()" >/dev/null 2>&1; then
    "$vpy" -m pip install -q --ignore-installed "${wheel_index[@]}" mpich  # into this venv: mpi4py looks in its lib/
fi
# fabricbench itself, with what it needs that neither Python has (from --wheels DIR where given); else without its
# dependencies; where it cannot be built here, straight from the checkout.
if ! "$vpy" -m pip install -q --no-build-isolation "${wheel_index[@]}" "$repo" 2>/dev/null \
    && ! "$vpy" -m pip install -q --no-deps --no-build-isolation "$repo" 2>/dev/null \
    && ! "$vpy" -m pip install -q --no-deps "$repo"; then
    export PYTHONPATH="$repo/src${PYTHONPATH:+:$PYTHONPATH}"
fi
"$vpy" -c "from mpi4py import MPI; print(MPI.Get_library_version().splitlines()[0])"
fb() { "$vpy" -m fabricbench "$@"; }
export FABRICBENCH_PROGRESS=0

step "doctor"
try fb doctor
fb doctor --json >"$out/doctor.json" || true

if "$vpy" -c "import pytest" 2>/dev/null; then
    step "tests/test_gpu.py"
    cd "$repo"
    try "$vpy" -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/unit/test_gpu_parts.py \
        tests/unit/test_gpu_routes.py tests/unit/test_mpi_cuda.py
    cd - >/dev/null
fi

collectives=allreduce,allgather,reduce_scatter,alltoall,bcast,reduce
common=(--np 1 -i 20 -x 5 -c --format table)
step "nccl, 1 rank: every collective, validated (nccl-tests timing: events around the loop)"
try fb run -t nccl -k "$collectives" -m 8:64M "${common[@]}" --out "$out/nccl"
step "nccl: per-iteration events (percentiles), in place"
try fb run -t nccl -k "$collectives" -m 8:1M --gpu-timing iteration --in-place "${common[@]}" --out "$out/nccl-iter"
step "nccl: CUDA graphs"
try fb run -t nccl -k "$collectives" -m 8:1M --cuda-graph "${common[@]}" --out "$out/nccl-graph"
step "nccl: --dtype float16 --op max, and float64 prod"
try fb run -t nccl -k allreduce,reduce_scatter -m 8:1M --dtype float16 --op max "${common[@]}" --out "$out/nccl-f16"
try fb run -t nccl -k allreduce -m 8:1M --dtype float64 --op prod "${common[@]}" --out "$out/nccl-f64"

step "cuda-copy: host<->device (pinned, pageable), device->device"
try fb run -t cuda-copy -k h2d,d2h,h2d-pageable,d2h-pageable,d2d -m 1K:256M --np 1 -i 20 -x 3 -c --out "$out/cuda-copy"
gpus=$("$vpy" -c "import cupy; print(cupy.cuda.runtime.getDeviceCount())" 2>/dev/null || echo 0)
if [ "$gpus" -gt 1 ]; then
    step "cuda-copy: peer matrix over $gpus GPUs (a row per ordered pair)"
    try fb run -t cuda-copy -k peer -m 1M:256M --np 1 -i 10 -x 2 -c --out "$out/cuda-peer"
    try fb compare "$out/cuda-peer" --out "$out/cuda-peer-plots"  # heatmap_peer.png: the NVLink/PCIe matrix
else
    step "cuda-copy: peer on one GPU (an unsupported row, by design)"
    try fb run -t cuda-copy -k peer -m 1M:1M --np 1 -i 10 -x 2 --out "$out/cuda-peer"
fi

step "mpi --buffer cuda, 2 ranks on one GPU: staged through pinned memory, and CUDA-aware (or unsupported rows)"
mpi_cuda=latency,bw,bibw,allreduce,allgather,alltoall,bcast,reduce,reduce_scatter,barrier
try fb run -t mpi -k "$mpi_cuda" --buffer cuda --method staged -m 4:4M -i 50 -x 5 -c --out "$out/mpi-cuda-staged"
try fb run -t mpi -k "$mpi_cuda" --buffer cuda --method blocking -m 4:4M -i 50 -x 5 -c --out "$out/mpi-cuda-direct"
if "$vpy" -c "from mpi4py import MPI; import sys; sys.exit('MPICH' not in MPI.Get_library_version())" 2>/dev/null; then
    # MPICH built with GPU support inspects every buffer's pointer and may copy pinned host memory on the GPU:
    # the staged latency again with that off shows what it costs.
    step "mpi staged latency with MPICH's GPU support off (MPIR_CVAR_ENABLE_GPU=0)"
    MPIR_CVAR_ENABLE_GPU=0 try fb run -t mpi -k latency --buffer cuda --method staged -m 4:64K -i 50 -x 5 -c \
        --out "$out/mpi-cuda-staged-nogpu"
fi

step "ratio: fabricbench nccl allreduce against a minimal cupy.cuda.nccl loop (events), paired reps"
try "$vpy" "$repo/benchmarks/nccl_overhead.py" --python "$vpy" --out "$out/ratios"

rm -rf "$venv"
echo
echo "# gpu-check done: $failures step(s) failed; results and log in $out"
exit $((failures > 0))
