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
#   netns-testbed.sh up --topology leaf-spine L H [--prefix P] [--net A.B.C] [--rate R ...]
#   netns-testbed.sh up --topology dragonfly G S H [--prefix P] [--net A.B.C] [--rate R ...]
#   netns-testbed.sh topology-file [--prefix fbh]   # path of the testbed's topology file
#   netns-testbed.sh down   [--prefix fbh]
#   netns-testbed.sh status [--prefix fbh]
#   netns-testbed.sh hosts  [--prefix fbh]        # "HOST ADDR" lines
#   netns-testbed.sh exec HOST CMD...             # run CMD as host HOST
#   netns-testbed.sh shape HOST|all RATE [--burst B] [--latency L] [--prefix fbh]
#   netns-testbed.sh shape-link HOST|all RATE [--burst B] [--latency L]  # both directions of HOST's link
#   netns-testbed.sh shape-pair HOST1 HOST2 RATE [--burst B] [--latency L] # only traffic between the two
#   netns-testbed.sh shape-uplink leafK RATE [--burst B] [--latency L]  # both directions of a leaf's trunk
#   netns-testbed.sh shape-global G1 G2 RATE [--burst B] [--latency L]  # both directions of a global link
#   netns-testbed.sh unshape HOST|leafK|all [--prefix fbh]  # all: every host and every trunk
#   netns-testbed.sh unshape G1 G2 [--prefix fbh]           # a dragonfly's global link
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
#
# Switch testbeds (`up --topology`): every switch is a namespace <prefix>-NAME
# holding a bridge br0 with its hosts' ports p<i>; hosts are numbered in switch
# order, so switch k (from 1) holds hosts (k-1)*H+1..k*H.
# - leaf-spine L H: switches leaf1..leafL and spine.  Each leaf's trunk is a
#   veth "uplink" in the leaf's bridge, its peer "l<k>" in the spine's bridge.
#   Hosts keep one flat /24 (<net>.<i>): plain L2 switching, so a frame
#   between leaves crosses leaf -> trunk -> spine -> trunk -> leaf.
# - dragonfly G S H: switches g<g>s<s>, each a router, not a bridge: a mesh of
#   bridges loops, and STP blocks links chosen by bridge ids (random MACs), so
#   which links a flow crosses, and whether a shaped global link carries
#   anything, would change from run to run; static routes do not.  Switch k
#   (from 0, in order g1s1, g1s2, ..) owns <net>.16k/28: .16k+1 on its bridge,
#   its hosts .16k+2.. (so G*S <= 16 and H <= 13); hosts route <net>.0/24 via
#   their switch.  A group's switches are linked all-to-all (interface l<t>
#   towards switch t); groups a and b by one global link, from group a's
#   switch ((b-1) mod S)+1 to group b's switch ((a-1) mod S)+1 (interfaces
#   g<b> and g<a>).  Routes follow the minimal path: a local hop to the switch
#   holding the global link, the global link, a local hop.
# `up` writes the topology into /run/fabricbench-testbed/<prefix>/ (removed by
# `down`): topology.conf in Slurm's syntax (leaf-spine; for a dragonfly a tree
# approximation: its switches under a group switch g<g> under "root") and for a
# dragonfly topology.toml (fabricbench's map with groups); `topology-file`
# prints the one to read.  shape-uplink, shape-global and shape-link put the
# same tbf on both ends of a link, so each direction is shaped on its egress.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
IFACE=veth0          # host-side interface name (same in every host)
BRIDGE=br0           # bridge device inside <prefix>-br (and every switch)
UPLINK=uplink          # a leaf's trunk (its peer in the spine is l<k>)
STATE_ROOT=/run/fabricbench-testbed  # per-prefix topology files
DF_SUBNET=16         # a dragonfly switch's /28: 16 addresses

die() { echo "netns-testbed: $*" >&2; exit 1; }
bad() { echo "netns-testbed: $*" >&2; exit 2; }  # bad input: nothing was built
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

# Switch namespaces of a testbed: <prefix>-NAME (a prefix holds no '-', so
# these are its own and no other prefix's).
list_switches() {
    ip netns list | awk '{print $1}' | grep -E "^$1-" | sort -V || true
}

# The switch namespace holding host HOST's port p<i>.
host_switch() {
    local host=$1 prefix=$2 ns
    for ns in $(list_switches "$prefix"); do
        if ip -n "$ns" link show dev "p${host#"$prefix"}" >/dev/null 2>&1; then
            echo "$ns"
            return 0
        fi
    done
    die "no switch of testbed '$prefix' holds $host's port"
}

# Slurm's hostlist expression for NAME A..B: "name[a-b]", or "namea" for one.
range_expr() {
    if (($2 == $3)); then echo "$1$2"; else echo "$1[$2-$3]"; fi
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
    tbf_on "$host" "$IFACE" "$rate" "$burst" "$latency"
}

# The one tbf every shaping command uses, on DEV's egress in namespace NS.
tbf_on() {
    local ns=$1 dev=$2 rate=$3 burst=$4 latency=$5
    tc -n "$ns" qdisc replace dev "$dev" root tbf \
        rate "$rate" burst "$burst" latency "$latency"
}

# Deleting a root qdisc that is not there fails; absent is what we want.
tbf_off() { tc -n "$1" qdisc del dev "$2" root 2>/dev/null || true; }

remove_shape() {
    # shape-link also shapes the switch port towards the host: remove that too.
    local sw
    tbf_off "$1" "$IFACE"
    sw=$(host_switch "$1" "$2")
    tbf_off "$sw" "p${1#"$2"}"
}

# Both directions of one host's link: tbf on its egress, and on the switch port
# that carries everything sent to it (the port is p<i> for host <prefix><i>).
apply_link_shape() {
    local host=$1 prefix=$2 rate=$3 burst=$4 latency=$5 sw
    apply_shape "$host" "$rate" "$burst" "$latency"
    sw=$(host_switch "$host" "$prefix")
    tbf_on "$sw" "p${host#"$prefix"}" "$rate" "$burst" "$latency"
}

# The two ends of a trunk: "NS DEV NS DEV" for leafK's uplink, or for the
# global link between dragonfly groups G1 and G2 (numbers, or g1 g2).
uplink_ends() {
    local prefix=$1 leaf=$2
    [[ $leaf =~ ^leaf([0-9]+)$ ]] || bad "shape-uplink: SWITCH is leafK, got '$leaf'"
    ns_exists "$prefix-$leaf" && ns_exists "$prefix-spine" ||
        bad "testbed '$prefix' has no leaf-spine switch $leaf"
    echo "$prefix-$leaf $UPLINK $prefix-spine l${BASH_REMATCH[1]}"
}

global_ends() {
    local prefix=$1 a=${2#g} b=${3#g} s
    [[ $a =~ ^[0-9]+$ && $b =~ ^[0-9]+$ && $a != "$b" ]] ||
        bad "shape-global: two different groups G1 G2 (numbers or g<n>), got '$2' '$3'"
    s=$(state_get "$prefix" switches_per_group) ||
        bad "testbed '$prefix' is not a dragonfly"
    local sa=$(((b - 1) % s + 1)) sb=$(((a - 1) % s + 1))
    ns_exists "$prefix-g${a}s$sa" && ns_exists "$prefix-g${b}s$sb" ||
        bad "testbed '$prefix' has no groups g$a and g$b"
    echo "$prefix-g${a}s$sa g$b $prefix-g${b}s$sb g$a"
}

# Shape (RATE given) or unshape both ends of a trunk: NS DEV NS DEV [tbf args].
trunk_shape() {
    local ns1=$1 dev1=$2 ns2=$3 dev2=$4
    shift 4
    if [[ $# -gt 0 ]]; then
        tbf_on "$ns1" "$dev1" "$@"
        tbf_on "$ns2" "$dev2" "$@"
    else
        tbf_off "$ns1" "$dev1"
        tbf_off "$ns2" "$dev2"
    fi
}

# Every interface of every switch back to no qdisc: trunks and host ports.
unshape_switches() {
    local ns dev
    for ns in $(list_switches "$1"); do
        for dev in $(ip -n "$ns" -o link show | awk -F': ' '{sub(/@.*/, "", $2); print $2}'); do
            tbf_off "$ns" "$dev"
        done
    done
}

state_dir() { echo "$STATE_ROOT/$1"; }

# One value `up` recorded for a switch testbed (fails where there is none).
state_get() {
    local file
    file="$(state_dir "$1")/$2"
    [[ -f $file ]] && cat "$file"
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
    # Trunks and host ports live in the switch namespaces: deleting those
    # deletes them (a veth goes with either of its ends).
    for ns in $(list_hosts "$prefix") $(list_switches "$prefix") "${prefix}-br"; do
        ns_exists "$ns" || { rm -rf "/etc/netns/$ns"; continue; }
        # Processes left inside would keep the namespace (and its veth)
        # alive after its name is gone, so stop them first.
        for pid in $(ip netns pids "$ns" 2>/dev/null); do
            kill "$pid" 2>/dev/null || true
        done
        ip netns delete "$ns"
        rm -rf "/etc/netns/$ns"
    done
    rm -rf "$(state_dir "$prefix")"
    # Leave no empty /etc/netns (or state root) behind; others' entries stay.
    rmdir /etc/netns "$STATE_ROOT" 2>/dev/null || true
    info "testbed '$prefix' is down"
}

# A switch: namespace NS with bridge br0, and no IPv6 (router solicitations
# would add bytes to the counters that show which links carried traffic).
make_switch() {
    local ns=$1
    ip netns add "$ns"
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
        net.ipv6.conf.default.disable_ipv6=1
    ip -n "$ns" link set lo up
    ip -n "$ns" link add "$BRIDGE" type bridge
    ip -n "$ns" link set "$BRIDGE" up
}

# A veth between switches: IF1 in NS1, IF2 in NS2; with BRIDGED=1 each end
# joins its switch's bridge.
link_switches() {
    local ns1=$1 if1=$2 ns2=$3 if2=$4 bridged=$5
    ip link add "$if1" netns "$ns1" type veth peer name "$if2" netns "$ns2"
    if ((bridged)); then
        ip -n "$ns1" link set dev "$if1" master "$BRIDGE"
        ip -n "$ns2" link set dev "$if2" master "$BRIDGE"
    fi
    ip -n "$ns1" link set dev "$if1" up
    ip -n "$ns2" link set dev "$if2" up
}

# Host <prefix><i>: veth0 with ADDR/LEN, its peer p<i> in switch SW's bridge;
# GW (or "") routes the rest of the testbed's /24.  HOSTS_FILE becomes its
# /etc/hosts.
make_host() {
    local prefix=$1 i=$2 cidr=$3 sw=$4 gw=$5 net=$6 hosts_file=$7
    local host="${prefix}${i}"
    ip netns add "$host"
    ip -n "$host" link set lo up
    # Create both ends directly in their namespaces: nothing ever
    # appears in the root namespace, not even briefly.
    ip link add "$IFACE" netns "$host" type veth peer name "p$i" netns "$sw"
    ip -n "$sw" link set "p$i" master "$BRIDGE" up
    # No IPv6 on the testbed link: router solicitations and DAD would
    # add bytes to the counters used to prove traffic crossed the link.
    ip netns exec "$host" sysctl -qw "net.ipv6.conf.$IFACE.disable_ipv6=1"
    ip -n "$host" addr add "$cidr" dev "$IFACE"
    ip -n "$host" link set "$IFACE" up
    if [[ -n $gw ]]; then
        ip -n "$host" route add "$net.0/24" via "$gw" dev "$IFACE"
    fi
    mkdir -p "/etc/netns/$host"
    cp "$hosts_file" "/etc/netns/$host/hosts"
    echo "$host" >"/etc/netns/$host/hostname"
}

# Check a topology's sizes before anything is built; prints the host count.
topology_hosts() {
    local topology=$1
    shift
    local want=3 d
    case $topology in
    flat) want=1 ;;
    leaf-spine) want=2 ;;
    dragonfly) ;;
    *) bad "--topology is leaf-spine or dragonfly, got '$topology'" ;;
    esac
    [[ $# -eq $want ]] || bad "usage: up N | up --topology leaf-spine L H | up --topology dragonfly G S H"
    for d in "$@"; do
        [[ $d =~ ^[1-9][0-9]{0,2}$ ]] || bad "sizes are whole numbers from 1 to 999, got '$d'"
    done
    case $topology in
    flat) (($1 <= 254)) || bad "N must be 1..254"; echo "$1" ;;
    leaf-spine) (($1 * $2 <= 254)) || bad "leaf-spine: L*H must be at most 254"; echo $(($1 * $2)) ;;
    dragonfly)
        (($1 * $2 <= 256 / DF_SUBNET)) || bad "dragonfly: G*S must be at most $((256 / DF_SUBNET)) (a /28 each)"
        (($3 <= DF_SUBNET - 3)) || bad "dragonfly: H must be at most $((DF_SUBNET - 3)) (a /28 per switch)"
        echo $(($1 * $2 * $3))
        ;;
    esac
}

# Host i's address (CIDR), switch namespace and gateway, as "CIDR SW GW".
host_place() {
    local topology=$1 prefix=$2 net=$3 i=$4
    shift 4
    local k j
    case $topology in
    flat) echo "$net.$i/24 ${prefix}-br" ;;
    leaf-spine) echo "$net.$i/24 ${prefix}-leaf$(((i - 1) / $2 + 1))" ;;
    dragonfly)
        k=$(((i - 1) / $3)) j=$(((i - 1) % $3 + 1))
        echo "$net.$((DF_SUBNET * k + 1 + j))/28 ${prefix}-g$((k / $2 + 1))s$((k % $2 + 1)) $net.$((DF_SUBNET * k + 1))"
        ;;
    esac
}

build_leaf_spine() {
    local prefix=$1 leaves=$2 k
    make_switch "${prefix}-spine"
    for ((k = 1; k <= leaves; k++)); do
        make_switch "${prefix}-leaf$k"
        link_switches "${prefix}-leaf$k" "$UPLINK" "${prefix}-spine" "l$k" 1
    done
}

# Dragonfly switches as routers: see the header for addresses and links.
build_dragonfly() {
    local prefix=$1 net=$2 groups=$3 per=$4 a s b t ns
    for ((a = 1; a <= groups; a++)); do
        for ((s = 1; s <= per; s++)); do
            ns="${prefix}-g${a}s$s"
            make_switch "$ns"
            ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1
            ip -n "$ns" addr add "$(df_gateway "$net" "$per" "$a" "$s")/28" dev "$BRIDGE"
            for ((t = 1; t < s; t++)); do
                link_switches "${prefix}-g${a}s$t" "l$s" "$ns" "l$t" 0
            done
        done
    done
    for ((a = 1; a <= groups; a++)); do
        for ((b = a + 1; b <= groups; b++)); do
            link_switches "${prefix}-g${a}s$(((b - 1) % per + 1))" "g$b" \
                "${prefix}-g${b}s$(((a - 1) % per + 1))" "g$a" 0
        done
    done
    # Each switch: a route to every other switch's /28 via the next switch on
    # the minimal path, whose own address answers ARP on the link (onlink).
    for ((a = 1; a <= groups; a++)); do
        for ((s = 1; s <= per; s++)); do
            for ((b = 1; b <= groups; b++)); do
                for ((t = 1; t <= per; t++)); do
                    ((a == b && s == t)) && continue
                    local dest hop_dev hop
                    dest=$(df_gateway "$net" "$per" "$b" "$t")
                    if ((a == b)); then
                        hop_dev="l$t" hop=$dest
                    elif ((s != (b - 1) % per + 1)); then
                        hop_dev="l$(((b - 1) % per + 1))"
                        hop=$(df_gateway "$net" "$per" "$a" $(((b - 1) % per + 1)))
                    else
                        hop_dev="g$b"
                        hop=$(df_gateway "$net" "$per" "$b" $(((a - 1) % per + 1)))
                    fi
                    ip -n "${prefix}-g${a}s$s" route add "${dest%.*}.$((${dest##*.} - 1))/28" \
                        via "$hop" dev "$hop_dev" onlink
                done
            done
        done
    done
}

# Switch g<a>s<s>'s own address: the first of its /28.
df_gateway() {
    local net=$1 per=$2 a=$3 s=$4
    echo "$net.$((DF_SUBNET * ((a - 1) * per + s - 1) + 1))"
}

# topology.conf (and topology.toml for a dragonfly) in the state folder.
write_topology() {
    local topology=$1 prefix=$2
    shift 2
    local dir k a s first
    dir=$(state_dir "$prefix")
    [[ $topology == flat ]] && return 0
    mkdir -p "$dir"
    case $topology in
    leaf-spine)
        {
            echo "# netns-testbed.sh leaf-spine '$prefix': $1 leaves of $2 hosts under one spine"
            for ((k = 1; k <= $1; k++)); do
                echo "SwitchName=leaf$k Nodes=$(range_expr "$prefix" $(((k - 1) * $2 + 1)) $((k * $2)))"
            done
            echo "SwitchName=spine Switches=$(range_expr leaf 1 "$1")"
        } >"$dir/topology.conf"
        ;;
    dragonfly)
        echo "$2" >"$dir/switches_per_group"
        {
            echo "# netns-testbed.sh dragonfly '$prefix': $1 groups of $2 switches of $3 hosts"
            echo "# (a tree approximation: each group's switches under a switch g<g>, which the testbed has not)"
            for ((a = 1; a <= $1; a++)); do
                for ((s = 1; s <= $2; s++)); do
                    first=$(((((a - 1) * $2 + s - 1)) * $3 + 1))
                    echo "SwitchName=g${a}s$s Nodes=$(range_expr "$prefix" "$first" $((first + $3 - 1)))"
                done
                echo "SwitchName=g$a Switches=$(range_expr "g${a}s" 1 "$2")"
            done
            echo "SwitchName=root Switches=$(range_expr g 1 "$1")"
        } >"$dir/topology.conf"
        {
            echo "# netns-testbed.sh dragonfly '$prefix': $1 groups of $2 switches of $3 hosts"
            for ((a = 1; a <= $1; a++)); do
                for ((s = 1; s <= $2; s++)); do
                    first=$(((((a - 1) * $2 + s - 1)) * $3 + 1))
                    printf '[switches.g%ds%d]\ngroup = "g%d"\nhosts = "%s"\n\n' "$a" "$s" "$a" \
                        "$(range_expr "$prefix" "$first" $((first + $3 - 1)))"
                done
            done
        } >"$dir/topology.toml"
        ;;
    esac
}

cmd_topology_file() {
    local dir
    dir=$(state_dir "$1")
    if [[ -f $dir/topology.toml ]]; then
        echo "$dir/topology.toml"
    elif [[ -f $dir/topology.conf ]]; then
        echo "$dir/topology.conf"
    else
        die "testbed '$1' has no topology file (down, or a flat 'up N')"
    fi
}

cmd_up() {
    local topology=$1 prefix=$2 net=$3 rate=$4 burst=$5 latency=$6
    shift 6
    local n i hosts_file addr
    local -a place

    n=$(topology_hosts "$topology" "$@")
    [[ $net =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || bad "--net wants A.B.C, got '$net'"

    # Recreate from scratch: cheaper and more certain than diffing state.
    cmd_down "$prefix" 2>/dev/null

    case $topology in
    flat) make_switch "${prefix}-br" ;;
    leaf-spine) build_leaf_spine "$prefix" "$1" ;;
    dragonfly) build_dragonfly "$prefix" "$net" "$@" ;;
    esac

    # One /etc/hosts for all hosts so names resolve to testbed addresses
    # (hydra and MPI resolve host names; keep localhost entries intact).
    hosts_file=$(mktemp)
    printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
        >"$hosts_file"
    for ((i = 1; i <= n; i++)); do
        addr=$(host_place "$topology" "$prefix" "$net" "$i" "$@")
        printf '%s\t%s%d\n' "${addr%%/*}" "$prefix" "$i" >>"$hosts_file"
    done

    for ((i = 1; i <= n; i++)); do
        read -r -a place <<<"$(host_place "$topology" "$prefix" "$net" "$i" "$@")"
        make_host "$prefix" "$i" "${place[0]}" "${place[1]}" "${place[2]:-}" "$net" "$hosts_file"
        if [[ -n $rate ]]; then
            apply_shape "${prefix}$i" "$rate" "$burst" "$latency"
        fi
    done
    rm -f "$hosts_file"
    write_topology "$topology" "$prefix" "$@"

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
    local prefix=$1 host qd sw dev
    local hosts switches
    hosts=$(list_hosts "$prefix")
    switches=$(list_switches "$prefix")
    if [[ -z $hosts && -z $switches ]]; then
        echo "testbed '$prefix': down"
        return 0
    fi
    if [[ -z $switches || $switches == "${prefix}-br" ]]; then
        echo "testbed '$prefix': bridge namespace ${prefix}-br" \
            "$(ns_exists "${prefix}-br" && echo present || echo MISSING)"
    else
        echo "testbed '$prefix': switch namespaces" $switches
        # Trunks (every switch interface but lo, br0 and host ports).
        for sw in $switches; do
            for dev in $(ip -n "$sw" -o link show | awk -F': ' '{sub(/@.*/, "", $2); print $2}'); do
                [[ $dev == lo || $dev == "$BRIDGE" || $dev =~ ^p[0-9]+$ ]] && continue
                qd=$(tc -n "$sw" qdisc show dev "$dev" root 2>/dev/null | awk 'NR == 1')
                printf '%s %s qdisc: %s\n' "${sw#"$prefix"-}" "$dev" "${qd:-none}"
            done
        done
    fi
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

    local prefix=fbh net=10.213.0 rate="" burst=32kbit latency=400ms topology=""
    local -a pos=()
    while [[ $# -gt 0 ]]; do
        case $1 in
        --prefix) prefix=${2:?--prefix needs a value}; shift 2 ;;
        --net) net=${2:?--net needs a value}; shift 2 ;;
        --rate) rate=${2:?--rate needs a value}; shift 2 ;;
        --burst) burst=${2:?--burst needs a value}; shift 2 ;;
        --latency) latency=${2:?--latency needs a value}; shift 2 ;;
        --topology) topology=${2:?--topology needs a value}; shift 2 ;;
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
        if [[ -z $topology ]]; then
            [[ ${#pos[@]} -eq 1 ]] || bad "usage: up N [options]"
            topology=flat
        fi
        cmd_up "$topology" "$prefix" "$net" "$rate" "$burst" "$latency" "${pos[@]}"
        ;;
    down) cmd_down "$prefix" ;;
    topology-file) cmd_topology_file "$prefix" ;;
    shape-uplink | shape-global)
        local ends
        if [[ $cmd == shape-uplink ]]; then
            [[ ${#pos[@]} -eq 2 ]] || bad "usage: shape-uplink leafK RATE [--burst B] [--latency L]"
            ends=$(uplink_ends "$prefix" "${pos[0]}")
        else
            [[ ${#pos[@]} -eq 3 ]] || bad "usage: shape-global G1 G2 RATE [--burst B] [--latency L]"
            ends=$(global_ends "$prefix" "${pos[0]}" "${pos[1]}")
        fi
        read -r -a ends <<<"$ends"
        trunk_shape "${ends[@]}" "${pos[-1]}" "$burst" "$latency"
        info "${ends[0]#"$prefix"-}:${ends[1]} <-> ${ends[2]#"$prefix"-}:${ends[3]}: tbf rate ${pos[-1]} burst $burst latency $latency each way"
        ;;
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
        [[ ${#pos[@]} -ge 1 && ${#pos[@]} -le 2 ]] || bad "usage: unshape HOST|leafK|all, or unshape G1 G2"
        local ends=""
        if [[ ${#pos[@]} -eq 2 ]]; then
            ends=$(global_ends "$prefix" "${pos[0]}" "${pos[1]}")
        elif [[ ${pos[0]} =~ ^leaf[0-9]+$ ]]; then
            ends=$(uplink_ends "$prefix" "${pos[0]}")
        fi
        if [[ -n $ends ]]; then
            read -r -a ends <<<"$ends"
            trunk_shape "${ends[@]}"
            info "${pos[*]}: trunk unshaped"
            exit 0
        fi
        hosts=$(resolve_hosts "$prefix" "${pos[0]}")
        if [[ ${pos[0]} == all ]]; then
            unshape_switches "$prefix"
        fi
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
