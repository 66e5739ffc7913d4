#!/bin/bash
# Runs inside the VM that scripts/softroce-vm.sh boots (as root, on Debian's
# kernel): brings up SoftRoCE on lo, then runs COMMAND in the repository with
# the guest venv active, and exits with COMMAND's status.
#
#   softroce-guest.sh [--] COMMAND...
#
# Set by softroce-vm.sh: FABRICBENCH_REPO, FABRICBENCH_GUEST_VENV and
# FABRICBENCH_VM_SCRATCH (a host dir writable here; the status goes there).
# FABRICBENCH_VM_RDMACM=1 adds rxe1 on dummy0 (10.77.0.1) for rdma_cm users,
# which refuse 127.0.0.1.
#
# Exit status: COMMAND's; 125 when the SoftRoCE set-up failed.
set -euo pipefail

: "${FABRICBENCH_REPO:?set by softroce-vm.sh}"
: "${FABRICBENCH_GUEST_VENV:?set by softroce-vm.sh}"
status_file=${FABRICBENCH_VM_SCRATCH:+$FABRICBENCH_VM_SCRATCH/status}

# Record how we leave, whatever the path out; the host trusts this file over
# vng's own exit status.
trap 'rc=$?; [[ -z $status_file ]] || echo "$rc" >"$status_file"' EXIT

fail() {
    echo "softroce-guest: error: $*" >&2
    exit 125
}

[[ ${1:-} == -- ]] && shift
(($#)) || fail "no command given"

# --- SoftRoCE ----------------------------------------------------------------
modprobe rdma_rxe || fail "modprobe rdma_rxe failed"
ip link set lo up
if ! rdma link show rxe0 >/dev/null 2>&1; then
    rdma link add rxe0 type rxe netdev lo || fail "rdma link add rxe0 failed"
fi
if [[ ${FABRICBENCH_VM_RDMACM:-0} == 1 ]]; then
    # The address exists only inside this VM.
    modprobe rdma_ucm || fail "modprobe rdma_ucm failed"
    modprobe dummy || fail "modprobe dummy failed"
    ip link add dummy0 type dummy
    ip addr add 10.77.0.1/24 dev dummy0
    ip link set dummy0 up
    rdma link add rxe1 type rxe netdev dummy0 || fail "rdma link add rxe1 failed"
fi
rdma link show >&2  # diagnostics on stderr: stdout is COMMAND's alone
ibv_devinfo -d rxe0 | grep -E 'hca_id|transport|state|active_mtu|link_layer' >&2 || true

# --- environment for COMMAND ---------------------------------------------------
# The repository and the host's / are read-only here. The guest's /tmp is an
# overlay kept in guest memory: writable, thrown away at power-off, and (unlike
# the 9p scratch dir) fine for unix sockets.
[[ -x $FABRICBENCH_GUEST_VENV/bin/python ]] ||
    fail "guest venv $FABRICBENCH_GUEST_VENV is not visible in the VM (is FABRICBENCH_VM_CACHE on a tmpfs-in-guest path such as /run or /var/cache?)"
cd "$FABRICBENCH_REPO" || fail "repository $FABRICBENCH_REPO is not visible in the VM"

guest_tmp=$(mktemp -d /tmp/fabricbench.XXXXXX)
mkdir -p "$guest_tmp/home"
# XDG_CACHE_HOME: where softroce-vm.sh built the C loops on the host (a --rwdir), so the ranks load them.
export TMPDIR=$guest_tmp HOME=$guest_tmp/home XDG_CACHE_HOME=${FABRICBENCH_VM_CACHE_HOME:-$guest_tmp/home/.cache}
export VIRTUAL_ENV=$FABRICBENCH_GUEST_VENV PATH=$FABRICBENCH_GUEST_VENV/bin:$PATH
export PYTHONDONTWRITEBYTECODE=1
# Any pytest run: no .pytest_cache in the read-only repository.
export PYTEST_ADDOPTS="-p no:cacheprovider${PYTEST_ADDOPTS:+ $PYTEST_ADDOPTS}"

echo "softroce-guest: running: $*" >&2
rc=0
"$@" || rc=$?
exit "$rc"
