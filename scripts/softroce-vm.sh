#!/usr/bin/env bash
# Run a command next to a real SoftRoCE device (rxe0) on a host whose kernel
# has no rdma_rxe: boot Debian's own kernel under QEMU (software emulation)
# with virtme-ng, sharing the host's root filesystem read-only.
#
#   scripts/softroce-vm.sh [--setup-only] [--] [COMMAND...]
#
# COMMAND runs in the guest as root, in the repository, with the guest venv
# activated; its exit status becomes this script's. Default COMMAND:
#   python -m pytest -q -p no:cacheprovider tests/verbs
# --setup-only prepares the cache (packages, kernel, venvs) and boots nothing.
#
# Environment:
#   FABRICBENCH_VM_CACHE    cache dir (default ~/.cache/fabricbench-vm); must
#                           be visible in the guest, so not under /run,
#                           /var/cache, /var/tmp or /var/log (tmpfs there)
#   FABRICBENCH_VM_TIMEOUT  seconds for boot + COMMAND (default 1500)
#   FABRICBENCH_VM_MEMORY   guest memory (default 512M)
#   FABRICBENCH_VM_CPUS     guest vCPUs (default 1: faster than 2 under TCG)
#   FABRICBENCH_VM_EXTRAS   extras for `pip install -e REPO[...]` (default mpich,test)
#   FABRICBENCH_VM_RWDIR    a host dir the guest may write (results); same path
#   FABRICBENCH_VM_RDMACM=1 also set up rxe1 on a dummy netdev for rdma_cm
#                           (default 1 when no COMMAND is given: libfabric's
#                           verbs provider in tests/verbs connects with rdma_cm)
#   Every FABRICBENCH_* variable is passed on to COMMAND.
#
# Exit status: COMMAND's; 124 on timeout; 125 when the VM or its set-up failed.
set -euo pipefail

prog=${0##*/}
script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(cd "$script_dir/.." && pwd -P)

cache=${FABRICBENCH_VM_CACHE:-$HOME/.cache/fabricbench-vm}
vm_timeout=${FABRICBENCH_VM_TIMEOUT:-1500}
vm_memory=${FABRICBENCH_VM_MEMORY:-512M}
vm_cpus=${FABRICBENCH_VM_CPUS:-1}
extras=${FABRICBENCH_VM_EXTRAS-mpich,test}

vng_version=1.42
apt_packages=(
    qemu-system-x86 python3-venv python3-pyverbs ibverbs-utils ibverbs-providers
    rdma-core rdmacm-utils perftest iproute2 kmod
    libibverbs-dev gcc libc6-dev # the verbs C loop is compiled against the host's libibverbs on first use
    libfabric1 libfabric-dev libfabric-bin # the ofi transport's C loop, fi_info and fi_pingpong (its verbs provider)
    busybox-static # virtme-ng builds an initramfs with it (Debian's kernel needs modules to mount 9p)
)
guest_pip_packages=(numpy mpi4py mpich pytest)
default_command=(python -m pytest -q -p no:cacheprovider tests/verbs)

# Drivers for QEMU's emulated PC hardware that udev would load at boot. None
# matter here, and loading them under emulation is slow (kvm alone took 12 s
# in one boot; about 5 s saved on average). Blacklisting keeps udev off them.
boot_blacklist=kvm,kvm_amd,kvm_intel,ccp,ahci,libahci,libata,sr_mod,cdrom,sg,iTCO_wdt,intel_pmc_bxt,i6300esb,lpc_ich,i2c_i801,psmouse,pcspkr,serio_raw,evdev

log() { printf '%s: %s\n' "$prog" "$*" >&2; }
die() { log "error: $*"; exit 125; }

usage() { sed -n '2,27s/^# \{0,1\}//p' "$0"; }

# Seconds since $1 (an $EPOCHREALTIME), one decimal.
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

if [[ $EUID -eq 0 ]]; then sudo=(); else sudo=(sudo); fi

# --- set-up phases; each is a no-op when its result is already there --------

ensure_apt_packages() {
    local pkg missing=()
    for pkg in "${apt_packages[@]}"; do
        [[ $(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null) == 'install ok installed' ]] ||
            missing+=("$pkg")
    done
    ((${#missing[@]} == 0)) && return
    log "installing ${missing[*]}"
    "${sudo[@]}" apt-get update -q >&2
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
}

# Name of Debian's current kernel package, e.g. linux-image-6.1.0-57-amd64.
kernel_package() {
    apt-cache depends linux-image-amd64 2>/dev/null |
        awk '$1 == "Depends:" && $2 ~ /^linux-image-/ { print $2; exit }'
}

# Sets kernel_image to a cached vmlinuz whose modules sit beside it
# (<dir>/boot/vmlinuz-<ver>, <dir>/lib/modules/<ver>), where vng finds them.
ensure_kernel() {
    local pkg dir tmp kver
    pkg=$(kernel_package)
    if [[ -z $pkg ]]; then
        # A fresh machine may have no package lists yet.
        "${sudo[@]}" apt-get update -q >&2 || true
        pkg=$(kernel_package)
    fi
    if [[ -z $pkg ]]; then
        # Offline and no lists: any kernel cached earlier will do.
        dir=$(find "$cache/kernel" -mindepth 1 -maxdepth 1 -name 'linux-image-*' 2>/dev/null | sort -V | tail -n 1)
        [[ -n $dir ]] || die "cannot find Debian's kernel package (apt-cache depends linux-image-amd64)"
        pkg=${dir##*/}
    fi
    dir=$cache/kernel/$pkg
    if [[ ! -d $dir ]]; then
        log "downloading and unpacking $pkg (about 70 MB, 400 MB unpacked)"
        mkdir -p "$cache/kernel"
        tmp=$(mktemp -d "$cache/kernel/.tmp.XXXXXX")
        # As root, apt's _apt sandbox user could not write into the 0700 temp dir.
        local dl_opts=()
        [[ $EUID -eq 0 ]] && dl_opts=(-o APT::Sandbox::User=root)
        (cd "$tmp" && apt-get download -q "${dl_opts[@]}" "$pkg") >&2 ||
            { rm -rf "$tmp"; die "apt-get download $pkg failed"; }
        dpkg -x "$tmp"/*.deb "$tmp/root"
        rm -f "$tmp"/*.deb
        # Newer Debian kernels ship usr/lib/modules only; vng and depmod look in lib/.
        [[ -e $tmp/root/lib ]] || ln -s usr/lib "$tmp/root/lib"
        kver=$(basename "$(find "$tmp/root/lib/modules/" -mindepth 1 -maxdepth 1 -type d | head -n 1)")
        # The .deb ships no modules.dep; modprobe in the guest needs it.
        depmod -b "$tmp/root" "$kver"
        mv "$tmp/root" "$dir"
        rmdir "$tmp"
    fi
    # Drop kernels unused for a day (older apt lists pointed to them); not at
    # once, as a VM started earlier may still be reading its modules.
    touch "$dir"
    find "$cache/kernel" -mindepth 1 -maxdepth 1 -name 'linux-image-*' -mmin +1440 -exec rm -rf {} +
    kernel_image=$(find "$dir/boot" -maxdepth 1 -name 'vmlinuz-*' | head -n 1)
    [[ -n $kernel_image ]] || die "no vmlinuz in $dir/boot"
}

# True when venv $1 was completed with stamp $2. Venvs cannot be moved, so
# they are built in place and stamped only once complete.
venv_is_current() { [[ -f $1/.fabricbench-stamp && $(<"$1/.fabricbench-stamp") == "$2" ]]; }

new_venv() {
    rm -rf "$1"
    # /usr/bin/python3: pyverbs is packaged for Debian's interpreter only.
    /usr/bin/python3 -m venv --system-site-packages "$1"
}

# Sets vng_bin. virtme-ng from PyPI, pinned: its command line and guest init change often.
ensure_vng() {
    local venv=$cache/vng-venv stamp="virtme-ng==$vng_version"
    if ! venv_is_current "$venv" "$stamp"; then
        log "installing $stamp"
        new_venv "$venv"
        "$venv/bin/python" -m pip install -q "$stamp" >&2
        printf '%s' "$stamp" >"$venv/.fabricbench-stamp"
    fi
    vng_bin=$venv/bin/vng
}

# Sets guest_venv: the Python environment COMMAND runs in. The guest reads it
# through the shared root filesystem, so it lives on the host. One per
# checkout, as its editable install points at that checkout.
ensure_guest_venv() {
    local key stamp project_stamp spec venv
    # Drop venvs of checkouts that are gone (CI clones, deleted worktrees).
    for venv in "$cache"/guest-venv-*; do
        [[ -f $venv/.fabricbench-repo && ! -d $(<"$venv/.fabricbench-repo") ]] && rm -rf "$venv"
    done
    key=$(printf '%s' "$repo" | sha256sum | cut -c1-12)
    guest_venv=$cache/guest-venv-$key
    stamp="${guest_pip_packages[*]}"
    if ! venv_is_current "$guest_venv" "$stamp"; then
        log "creating guest venv $guest_venv"
        new_venv "$guest_venv"
        "$guest_venv/bin/python" -m pip install -q "${guest_pip_packages[@]}" >&2
        printf '%s' "$stamp" >"$guest_venv/.fabricbench-stamp"
    fi
    printf '%s' "$repo" >"$guest_venv/.fabricbench-repo"
    # Re-install the project only when pyproject.toml (or the extras) changed;
    # being editable, plain source changes need nothing.
    if [[ ! -f $repo/pyproject.toml ]]; then
        log "no $repo/pyproject.toml yet: project not installed in the guest venv"
        return
    fi
    spec=$repo${extras:+[$extras]}
    project_stamp="$(sha256sum <"$repo/pyproject.toml" | cut -d' ' -f1) $spec"
    if [[ ! -f $guest_venv/.fabricbench-project || $(<"$guest_venv/.fabricbench-project") != "$project_stamp" ]]; then
        log "pip install -e $spec"
        "$guest_venv/bin/python" -m pip install -q -e "$spec" >&2
        printf '%s' "$project_stamp" >"$guest_venv/.fabricbench-project"
    fi
}

# Builds the C loops (MPI, tcp, verbs, ofi, ucx) on the host, into a cache the guest may
# write: compiling them under emulation takes minutes, natively about a second.
# The guest shares the host's compiler, libraries and headers, so the cache
# keys match there and the ranks load these builds.
ensure_c_loops() {
    c_loop_cache=$cache/xdg-cache # the guest's XDG_CACHE_HOME: tests drop FABRICBENCH_CACHE_DIR, not this
    mkdir -p "$c_loop_cache"
    [[ -x $guest_venv/bin/python ]] || return 0
    env -u FABRICBENCH_CACHE_DIR XDG_CACHE_HOME="$c_loop_cache" "$guest_venv/bin/python" - >&2 <<'PY' ||
from fabricbench.transports.mpi import transport as mpi
from fabricbench.transports.ofi import cloop as ofi_cloop
from fabricbench.transports.tcp import transport as tcp
from fabricbench.transports.ucx import cloop as ucx_cloop
from fabricbench.transports.verbs import cloop as verbs_cloop
for name, build in (
    ("mpi", lambda: mpi.load(mpi.library_version())),
    ("tcp", tcp.load_c_loop),
    ("verbs", verbs_cloop.load),
    ("ofi", ofi_cloop.load),
    ("ucx", ucx_cloop.load),
):
    try:
        build()
    except Exception as exc:  # the guest then builds (or falls back) itself
        print(f"softroce-vm.sh: the {name} C loop was not prebuilt: {exc}")
PY
        log "warning: prebuilding the C loops failed"
}

# Compiles the checkout's Python to bytecode on the host, into its own
# __pycache__ folders (git ignores them). The guest sees the repository
# read-only and writes no bytecode, and the host's own runs may have written
# none (PYTHONDONTWRITEBYTECODE, or a Python of another version than the
# guest's Debian one, which pyverbs needs). Without it every guest process
# compiles each fabricbench module it imports from source, at emulated speed
# (README, "SoftRoCE", has the figures). The guest venv's site-packages were
# compiled when pip installed them. The guest's interpreter compiles, so the
# files are the ones it reads.
ensure_bytecode() {
    [[ -x $guest_venv/bin/python ]] || return 0
    env -u PYTHONDONTWRITEBYTECODE -u PYTHONPYCACHEPREFIX \
        "$guest_venv/bin/python" -m compileall -q -j 0 "$repo/src" "$repo/tests" >&2 ||
        log "warning: compiling the checkout to bytecode failed: the guest compiles from source"
}

# --- the run -----------------------------------------------------------------

# Writes the file the guest executes: the settings and COMMAND, shell-quoted.
# (vng's --exec takes one string; a file keeps arbitrary arguments intact.)
write_launcher() {
    local launcher=$1 scratch=$2 name
    shift 2
    {
        echo '#!/bin/bash'
        for name in $(compgen -e | grep '^FABRICBENCH_' || true); do
            printf 'export %s=%q\n' "$name" "${!name}"
        done
        printf 'export FABRICBENCH_REPO=%q\n' "$repo"
        printf 'export FABRICBENCH_GUEST_VENV=%q\n' "$guest_venv"
        printf 'export FABRICBENCH_VM_SCRATCH=%q\n' "$scratch"
        printf 'export FABRICBENCH_VM_CACHE_HOME=%q\n' "$c_loop_cache"
        printf 'exec bash %q --' "$script_dir/softroce-guest.sh"
        printf ' %q' "$@"
        echo
    } >"$launcher"
}

# Called from traps. timeout passes the signal on to its process group: vng and QEMU.
# shellcheck disable=SC2317
stop_vm() {
    log "interrupted: stopping the VM"
    kill -TERM "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
    exit "$2"
}

run_vm() {
    local scratch rc=0 status
    # Writable in the guest (--rwdir): carries the launcher in and the exit status out.
    scratch=$(mktemp -d "${TMPDIR:-/tmp}/fabricbench-vm.XXXXXX")
    # shellcheck disable=SC2064 # expand $scratch now
    trap "rm -rf '$scratch'" EXIT
    write_launcher "$scratch/launch.sh" "$scratch" "$@"

    local vng_args=(
        --run "$kernel_image"
        --disable-kvm # no KVM here: QEMU aborts without this
        --force-9p    # virtiofs fails with Debian 12's QEMU; skips a 3 s fallback
        --cpus "$vm_cpus" --memory "$vm_memory"
        --append "modprobe.blacklist=$boot_blacklist"
        --rwdir "$scratch"
        --rwdir "$c_loop_cache"
    )
    [[ -n ${FABRICBENCH_VM_RWDIR:-} ]] && vng_args+=(--rwdir "$FABRICBENCH_VM_RWDIR")
    vng_args+=(--exec "bash $(printf '%q' "$scratch/launch.sh")")

    # QEMU reopens /proc/self/fd/1 and /proc/self/fd/2, truncating a file
    # there (a log loses its start): give it pipes to cat, which also keeps
    # the guest's stdout and stderr apart.
    local out err out_pid err_pid vm_pid
    exec {out}> >(cat)
    out_pid=$!
    exec {err}> >(cat >&2)
    err_pid=$!
    # vng runs virtme-run from its own bin/. It runs in the background because
    # bash runs traps only between foreground commands: a signal to this
    # script must stop the VM at once, not leave it running until the timeout.
    PATH=$(dirname "$vng_bin"):$PATH timeout -k 10 "$vm_timeout" \
        "$vng_bin" "${vng_args[@]}" </dev/null 1>&"$out" 2>&"$err" &
    vm_pid=$!
    exec {out}>&- {err}>&-
    # shellcheck disable=SC2064 # expand $vm_pid now
    {
        trap "stop_vm $vm_pid 129" HUP
        trap "stop_vm $vm_pid 130" INT
        trap "stop_vm $vm_pid 143" TERM
    }
    wait "$vm_pid" || rc=$?
    trap - HUP INT TERM
    wait "$out_pid" "$err_pid" 2>/dev/null || true

    # The guest script records COMMAND's status; vng's own status says only
    # whether the VM itself worked.
    if [[ -f $scratch/status ]]; then
        status=$(<"$scratch/status")
    elif ((rc == 124 || rc == 137)); then
        log "timed out after ${vm_timeout} s (FABRICBENCH_VM_TIMEOUT)"
        status=124
    else
        log "the VM exited ($rc) before the guest script reported a status"
        status=125
    fi
    return "$status"
}

main() {
    local setup_only=0 t0 rc=0
    while (($#)); do
        case $1 in
        --setup-only) setup_only=1; shift ;;
        -h | --help) usage; exit 0 ;;
        --) shift; break ;;
        -*) usage >&2; exit 125 ;;
        *) break ;;
        esac
    done
    if (($# == 0)); then
        set -- "${default_command[@]}"
        # tests/verbs/test_ofi_verbs.py: rdma_cm refuses rxe0's lo, so libfabric's verbs;ofi_rxm needs rxe1.
        export FABRICBENCH_VM_RDMACM=${FABRICBENCH_VM_RDMACM:-1}
    fi

    [[ $(uname -m) == x86_64 ]] || die "x86_64 hosts only (qemu-system-x86 and Debian's amd64 kernel)"
    t0=$EPOCHREALTIME
    ensure_apt_packages
    mkdir -p "$cache"
    # One set-up at a time per cache: parallel runs would build the same venvs.
    exec 9>"$cache/.lock"
    flock 9
    ensure_kernel
    ensure_vng
    ensure_guest_venv
    ensure_c_loops
    ensure_bytecode
    flock -u 9
    log "setup: $(elapsed "$t0") s (kernel $kernel_image, guest venv $guest_venv)"
    ((setup_only)) && exit 0

    t0=$EPOCHREALTIME
    run_vm "$@" || rc=$?
    log "boot+run: $(elapsed "$t0") s, exit status $rc"
    exit "$rc"
}

main "$@"
