#!/usr/bin/env bash
# netns-testbed.sh - a multi-"host" testbed built from Linux network namespaces.
#
# Each host is a network namespace (<prefix>1..<prefix>N) holding a veth
# "veth0" with address <net>.<i>/24.  The veth peers are enslaved to a bridge
# that lives in its own namespace (<prefix>-br), so nothing is added to the
# root namespace and no traffic can leave the machine: the test range exists
# only inside namespaces this script created.
#
# Usage:
#   netns-testbed.sh up N [--rate 100mbit] [--burst 32kbit] [--latency 400ms]
#                         [--prefix fbh] [--net 10.213.0]
#   netns-testbed.sh down   [--prefix fbh]
#   netns-testbed.sh status [--prefix fbh]
#   netns-testbed.sh hosts  [--prefix fbh]        # "HOST ADDR" lines
#   netns-testbed.sh exec HOST CMD...             # run CMD as host HOST
#   netns-testbed.sh shape HOST|all RATE [--burst B] [--latency L] [--prefix fbh]
#   netns-testbed.sh shape-link HOST|all RATE [--burst B] [--latency L]  # both directions of HOST's link
#   netns-testbed.sh shape-pair HOST1 HOST2 RATE [--burst B] [--latency L] # only traffic between the two
#   netns-testbed.sh unshape HOST|all [--prefix fbh]
#   netns-testbed.sh mpiexec [--prefix fbh] [MPIEXEC ARGS...]
#
# Machine-readable output: `up` and `hosts` print one "HOST ADDR" line per
# host on stdout; everything else informational goes to stderr.
#
# `exec` (and scripts/netns-launcher.sh) also give the command its own UTS
# namespace with hostname HOST, and /etc/hosts inside every host maps all
# host names to their testbed addresses (via ip-netns' /etc/netns/NAME/
# bind-mount convention), so each host looks like a separate machine.
#
# `mpiexec` runs MPICH hydra's mpiexec inside <prefix>1 with the namespace
# launcher, so an mpi4py job spans hosts and its traffic crosses the veths:
#   netns-testbed.sh mpiexec -n 2 -ppn 1 -hosts fbh1,fbh2 python bench.py
# It sets UCX_TLS=tcp UCX_NET_DEVICES=veth0 FI_TCP_IFACE=veth0 unless already
# set: left alone, UCX sees one kernel and uses shared memory between hosts.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
IFACE=veth0          # host-side interface name (same in every host)
BRIDGE=br0           # bridge device inside <prefix>-br

die() { echo "netns-testbed: $*" >&2; exit 1; }
info() { echo "netns-testbed: $*" >&2; }

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
    exit "${1:-2}"
}

need_root() {
    [[ $(id -u) -eq 0 ]] || die "must run as root (ip netns, tc)"
}

# awk reads all input (grep -q would not): with pipefail an early exit could
# make ip die of SIGPIPE and turn a match into a failure.
ns_exists() { ip netns list | awk -v n="$1" '$1 == n {f = 1} END {exit !f}'; }

# Hosts of a testbed, in numeric order: namespaces named <prefix><digits>.
list_hosts() {
    local prefix=$1
    ip netns list | awk '{print $1}' | grep -E "^${prefix}[0-9]+$" |
        sed "s/^${prefix}//" | sort -n | sed "s/^/${prefix}/" || true
}

host_addr() {
    ip -n "$1" -4 -o addr show dev "$IFACE" 2>/dev/null |
        awk '!done {split($4, a, "/"); print a[1]; done = 1}'
}

# Resolve "all" or a single host name to a host list, checking it exists.
resolve_hosts() {
    local prefix=$1 which=$2
    if [[ $which == all ]]; then
        list_hosts "$prefix"
    else
        ns_exists "$which" || die "no such host namespace: $which"
        echo "$which"
    fi
}

check_prefix() {
    # No trailing digit: prefix "fbh1" would own "fbh11", a host of "fbh".
    [[ $1 =~ ^[a-z]([a-z0-9]{0,8}[a-z])?$ ]] ||
        die "bad prefix '$1' (1-10 of [a-z0-9], starting and ending with a letter)"
}

# tbf on the host's egress: every host-to-host flow leaves some host through
# veth0, so shaping all hosts shapes every flow (both directions).
apply_shape() {
    local host=$1 rate=$2 burst=$3 latency=$4
    tc -n "$host" qdisc replace dev "$IFACE" root tbf \
        rate "$rate" burst "$burst" latency "$latency"
}

remove_shape() {
    # Deleting a root qdisc that is not there fails; absent is what we want.
    # shape-link also shapes the bridge port towards the host: remove that too.
    tc -n "$1" qdisc del dev "$IFACE" root 2>/dev/null || true
    tc -n "$2-br" qdisc del dev "p${1#"$2"}" root 2>/dev/null || true
}

# Both directions of one host's link: tbf on its egress, and on the bridge port
# that carries everything sent to it (the port is p<i> for host <prefix><i>).
apply_link_shape() {
    local host=$1 prefix=$2 rate=$3 burst=$4 latency=$5
    apply_shape "$host" "$rate" "$burst" "$latency"
    tc -n "${prefix}-br" qdisc replace dev "p${host#"$prefix"}" root tbf \
        rate "$rate" burst "$burst" latency "$latency"
}

# Only the traffic between two hosts: on each one's egress an htb root with
# "default 0", which sends unclassified packets straight out (no class, no
# rate), and a u32 filter that puts packets for the other host's address in
# one class shaped to RATE, as an htb class and under it the same tbf `shape`
# uses (so both commands shape alike).
apply_pair_shape() {
    local host=$1 peer_addr=$2 rate=$3 burst=$4 latency=$5
    tc -n "$host" qdisc del dev "$IFACE" root 2>/dev/null || true
    tc -n "$host" qdisc add dev "$IFACE" root handle 1: htb default 0
    tc -n "$host" class add dev "$IFACE" parent 1: classid 1:10 htb \
        rate "$rate" ceil "$rate" burst "$burst" quantum 1514
    tc -n "$host" qdisc add dev "$IFACE" parent 1:10 handle 10: tbf \
        rate "$rate" burst "$burst" latency "$latency"
    tc -n "$host" filter add dev "$IFACE" parent 1: protocol ip prio 1 u32 \
        match ip dst "$peer_addr/32" flowid 1:10
}

cmd_down() {
    local prefix=$1 ns pid
    for ns in $(list_hosts "$prefix") "${prefix}-br"; do
        ns_exists "$ns" || { rm -rf "/etc/netns/$ns"; continue; }
        # Processes left inside would keep the namespace (and its veth)
        # alive after its name is gone, so stop them first.
        for pid in $(ip netns pids "$ns" 2>/dev/null); do
            kill "$pid" 2>/dev/null || true
        done
        ip netns delete "$ns"
        rm -rf "/etc/netns/$ns"
    done
    # Leave no empty /etc/netns behind (other users' entries stay).
    rmdir /etc/netns 2>/dev/null || true
    info "testbed '$prefix' is down"
}

cmd_up() {
    local n=$1 prefix=$2 net=$3 rate=$4 burst=$5 latency=$6
    local br="${prefix}-br" i host hosts_file

    if ! [[ $n =~ ^[0-9]+$ ]] || ((n < 1 || n > 254)); then
        die "N must be 1..254"
    fi
    [[ $net =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "--net wants A.B.C, got '$net'"

    # Recreate from scratch: cheaper and more certain than diffing state.
    cmd_down "$prefix" 2>/dev/null

    ip netns add "$br"
    ip -n "$br" link set lo up
    ip -n "$br" link add "$BRIDGE" type bridge
    ip -n "$br" link set "$BRIDGE" up

    # One /etc/hosts for all hosts so names resolve to testbed addresses
    # (hydra and MPI resolve host names; keep localhost entries intact).
    hosts_file=$(mktemp)
    printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
        >"$hosts_file"
    for ((i = 1; i <= n; i++)); do
        printf '%s.%d\t%s%d\n' "$net" "$i" "$prefix" "$i" >>"$hosts_file"
    done

    for ((i = 1; i <= n; i++)); do
        host="${prefix}${i}"
        ip netns add "$host"
        ip -n "$host" link set lo up
        # Create both ends directly in their namespaces: nothing ever
        # appears in the root namespace, not even briefly.
        ip link add "$IFACE" netns "$host" type veth peer name "p$i" netns "$br"
        ip -n "$br" link set "p$i" master "$BRIDGE" up
        # No IPv6 on the testbed link: router solicitations and DAD would
        # add bytes to the counters used to prove traffic crossed the link.
        ip netns exec "$host" sysctl -qw "net.ipv6.conf.$IFACE.disable_ipv6=1"
        ip -n "$host" addr add "$net.$i/24" dev "$IFACE"
        ip -n "$host" link set "$IFACE" up
        if [[ -n $rate ]]; then
            apply_shape "$host" "$rate" "$burst" "$latency"
        fi
        mkdir -p "/etc/netns/$host"
        cp "$hosts_file" "/etc/netns/$host/hosts"
        echo "$host" >"/etc/netns/$host/hostname"
    done
    rm -f "$hosts_file"

    if [[ -n $rate ]]; then
        info "shaped every host's egress: tbf rate $rate burst $burst latency $latency"
    fi
    cmd_hosts "$prefix"
}

cmd_hosts() {
    local host
    for host in $(list_hosts "$1"); do
        printf '%s %s\n' "$host" "$(host_addr "$host")"
    done
}

cmd_status() {
    local prefix=$1 host qd
    local hosts
    hosts=$(list_hosts "$prefix")
    if [[ -z $hosts ]] && ! ns_exists "${prefix}-br"; then
        echo "testbed '$prefix': down"
        return 0
    fi
    echo "testbed '$prefix': bridge namespace ${prefix}-br" \
        "$(ns_exists "${prefix}-br" && echo present || echo MISSING)"
    for host in $hosts; do
        qd=$(tc -n "$host" qdisc show dev "$IFACE" root 2>/dev/null | awk 'NR == 1')
        printf '%s %s %s qdisc: %s\n' "$host" "$(host_addr "$host")" \
            "$(ip -n "$host" -br link show dev "$IFACE" 2>/dev/null | awk '{print $2}')" \
            "${qd:-none}"
    done
}

# Run a command as host HOST: its network namespace, plus a private UTS
# namespace whose hostname is HOST (ip netns exec alone keeps the machine's
# hostname, so every "host" would report the same name).
cmd_exec() {
    local host=$1
    shift
    [[ $# -gt 0 ]] || die "exec: no command"
    ns_exists "$host" || die "no such host namespace: $host"
    # shellcheck disable=SC2016  # $0/$@ expand in the inner sh, on purpose
    exec ip netns exec "$host" unshare --uts -- \
        sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
}

cmd_mpiexec() {
    local prefix=$1
    shift
    local mpiexec=${MPIEXEC:-}
    if [[ -z $mpiexec ]]; then
        mpiexec=$(command -v mpiexec || true)
        [[ -x $SCRIPT_DIR/../.venv/bin/mpiexec ]] &&
            mpiexec=$SCRIPT_DIR/../.venv/bin/mpiexec
    fi
    [[ -n $mpiexec ]] || die "no mpiexec found (set MPIEXEC)"
    ns_exists "${prefix}1" || die "testbed '$prefix' is not up"
    # The namespaces share one kernel, /dev/shm and SysV IPC, so UCX (this
    # MPICH's default netmod) treats the hosts as one node and moves data by
    # shared memory and CMA: nothing would cross the veth and shaping would
    # be ignored.  Force its TCP transport on veth0 unless the caller chose
    # (hydra forwards the environment to every rank).  For the OFI netmod
    # instead: MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp.
    export UCX_TLS=${UCX_TLS:-tcp}
    export UCX_NET_DEVICES=${UCX_NET_DEVICES:-$IFACE}
    export FI_TCP_IFACE=${FI_TCP_IFACE:-$IFACE}
    # mpiexec must live inside a testbed host: proxies in other namespaces
    # connect back to its control port, and they cannot reach the root
    # namespace.  -iface makes hydra advertise the veth address.
    cmd_exec "${prefix}1" "$mpiexec" -launcher ssh \
        -launcher-exec "$SCRIPT_DIR/netns-launcher.sh" -iface "$IFACE" "$@"
}

main() {
    [[ $# -ge 1 ]] || usage
    local cmd=$1
    shift
    case $cmd in -h | --help | help) usage 0 ;; esac
    need_root

    # exec passes everything through untouched.
    if [[ $cmd == exec ]]; then
        [[ $# -ge 1 ]] || die "exec HOST CMD..."
        cmd_exec "$@"
    fi

    local prefix=fbh net=10.213.0 rate="" burst=32kbit latency=400ms
    local -a pos=()
    while [[ $# -gt 0 ]]; do
        case $1 in
        --prefix) prefix=${2:?--prefix needs a value}; shift 2 ;;
        --net) net=${2:?--net needs a value}; shift 2 ;;
        --rate) rate=${2:?--rate needs a value}; shift 2 ;;
        --burst) burst=${2:?--burst needs a value}; shift 2 ;;
        --latency) latency=${2:?--latency needs a value}; shift 2 ;;
        --) shift; pos+=("$@"); break ;;
        *)
            # mpiexec's own options follow; stop parsing ours.
            if [[ $cmd == mpiexec ]]; then pos+=("$@"); break; fi
            pos+=("$1"); shift ;;
        esac
    done
    check_prefix "$prefix"

    local host hosts
    case $cmd in
    up)
        [[ ${#pos[@]} -eq 1 ]] || die "usage: up N [options]"
        cmd_up "${pos[0]}" "$prefix" "$net" "$rate" "$burst" "$latency"
        ;;
    down) cmd_down "$prefix" ;;
    status) cmd_status "$prefix" ;;
    hosts) cmd_hosts "$prefix" ;;
    shape)
        [[ ${#pos[@]} -ge 1 ]] || die "usage: shape HOST|all RATE [--burst B] [--latency L]"
        [[ ${#pos[@]} -ge 2 ]] && rate=${pos[1]}
        [[ -n $rate ]] || die "shape: RATE missing"
        # Assign first: a failure inside $(...) in a for list is ignored.
        hosts=$(resolve_hosts "$prefix" "${pos[0]}")
        for host in $hosts; do
            apply_shape "$host" "$rate" "$burst" "$latency"
            info "$host: tbf rate $rate burst $burst latency $latency"
        done
        ;;
    shape-link)
        [[ ${#pos[@]} -eq 2 ]] || die "usage: shape-link HOST|all RATE [--burst B] [--latency L]"
        hosts=$(resolve_hosts "$prefix" "${pos[0]}")
        for host in $hosts; do
            apply_link_shape "$host" "$prefix" "${pos[1]}" "$burst" "$latency"
            info "$host: both directions tbf rate ${pos[1]} burst $burst latency $latency"
        done
        ;;
    shape-pair)
        [[ ${#pos[@]} -eq 3 ]] || die "usage: shape-pair HOST1 HOST2 RATE [--burst B] [--latency L]"
        local a b addr_a addr_b
        [[ ${pos[0]} != all && ${pos[1]} != all && ${pos[0]} != "${pos[1]}" ]] ||
            die "shape-pair: two different hosts, not all"
        a=$(resolve_hosts "$prefix" "${pos[0]}")
        b=$(resolve_hosts "$prefix" "${pos[1]}")
        addr_a=$(host_addr "$a")
        addr_b=$(host_addr "$b")
        apply_pair_shape "$a" "$addr_b" "${pos[2]}" "$burst" "$latency"
        apply_pair_shape "$b" "$addr_a" "${pos[2]}" "$burst" "$latency"
        info "$a <-> $b: tbf rate ${pos[2]} burst $burst latency $latency (other traffic unshaped)"
        ;;
    unshape)
        [[ ${#pos[@]} -eq 1 ]] || die "usage: unshape HOST|all"
        hosts=$(resolve_hosts "$prefix" "${pos[0]}")
        for host in $hosts; do
            remove_shape "$host" "$prefix"
            info "$host: unshaped"
        done
        ;;
    mpiexec) cmd_mpiexec "$prefix" "${pos[@]}" ;;
    *) usage ;;
    esac
}

main "$@"
