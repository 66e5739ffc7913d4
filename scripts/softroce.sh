#!/usr/bin/env bash
# SoftRoCE (rdma_rxe) on a Linux host whose kernel ships the rdma_rxe module:
# laptops, workstations, GitHub-hosted runners. No VM needed there.
# For kernels without rdma_rxe, use scripts/softroce-vm.sh instead.
#
#   sudo scripts/softroce.sh up [IFACE]    load rdma_rxe, add the rxe device (idempotent)
#   sudo scripts/softroce.sh down          delete the rxe device
#        scripts/softroce.sh status        show rdma links and verbs devices
#
# IFACE defaults to the interface of the default route, else lo.
# The device name is rxe0; set FABRICBENCH_RXE_NAME to change it.
#
# Exit status: 0 ok; 1 other failure, or `status` finds no such device;
# 2 the kernel has no rdma_rxe (use scripts/softroce-vm.sh).
set -euo pipefail

prog=${0##*/}
rxe_name=${FABRICBENCH_RXE_NAME:-rxe0}

usage() {
    sed -n '2,14s/^# \{0,1\}//p' "$0"
}

die() {
    local status=$1
    shift
    printf '%s: %s\n' "$prog" "$*" >&2
    exit "$status"
}

need_cmd() {
    command -v "$1" >/dev/null 2>&1 ||
        die 1 "'$1' not found; install $2 (Debian/Ubuntu: apt-get install $2)"
}

need_root() {
    [[ $EUID -eq 0 ]] || die 1 "'$1' needs root; run: sudo $0 $1"
}

# Loaded, built in, or available as a module for the running kernel.
kernel_has_rxe() {
    [[ -d /sys/module/rdma_rxe ]] || modinfo rdma_rxe >/dev/null 2>&1
}

require_rxe() {
    kernel_has_rxe ||
        die 2 "kernel $(uname -r) has no rdma_rxe module; use scripts/softroce-vm.sh (on Ubuntu first try: apt-get install linux-modules-extra-$(uname -r))"
}

default_iface() {
    local iface
    iface=$(ip -o route show default 2>/dev/null |
        awk '{for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit }}')
    printf '%s\n' "${iface:-lo}"
}

rxe_exists() {
    rdma link show 2>/dev/null | grep -Eq "^link ${rxe_name}/"
}

show() {
    echo "== rdma link"
    rdma link show || true
    if command -v ibv_devices >/dev/null 2>&1; then
        echo "== ibv_devices"
        ibv_devices || true
    fi
}

cmd_up() {
    local iface=${1:-$(default_iface)}
    need_cmd rdma iproute2
    require_rxe
    need_root up
    ip link show dev "$iface" >/dev/null 2>&1 || die 1 "no network interface '$iface'"

    modprobe rdma_rxe || die 2 "modprobe rdma_rxe failed on kernel $(uname -r)"
    # rxe needs its netdev up; lo in particular is down in fresh namespaces.
    ip link set dev "$iface" up
    if rxe_exists; then
        echo "$prog: $rxe_name already exists"
    else
        rdma link add "$rxe_name" type rxe netdev "$iface" ||
            die 1 "rdma link add $rxe_name type rxe netdev $iface failed"
        echo "$prog: added $rxe_name on $iface"
    fi
    show
}

cmd_down() {
    need_cmd rdma iproute2
    need_root down
    if rxe_exists; then
        rdma link delete "$rxe_name"
        echo "$prog: deleted $rxe_name"
    else
        echo "$prog: no $rxe_name; nothing to do"
    fi
}

cmd_status() {
    need_cmd rdma iproute2
    require_rxe
    show
    rxe_exists || die 1 "no $rxe_name; run: sudo $0 up"
}

case ${1:-} in
up) shift; cmd_up "$@" ;;
down) cmd_down ;;
status) cmd_status ;;
-h | --help | help) usage ;;
*) usage >&2; exit 1 ;;
esac
