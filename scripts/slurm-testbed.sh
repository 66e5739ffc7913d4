#!/usr/bin/env bash
# slurm-testbed.sh - a multi-node Slurm cluster on a running netns testbed (scripts/netns-testbed.sh).
#
# Every testbed host runs a slurmd as that host (its network namespace, its UTS hostname, `slurmd -N HOST`),
# the first host also runs slurmctld, and one munged in the root namespace serves them all (its socket is a
# file, which every namespace sees). slurm.conf names each host with its testbed address (NodeAddr), uses
# topology/tree with the testbed's topology.conf (`netns-testbed.sh topology-file`; a one-switch file for a
# flat testbed) and keeps its key, state, spool, pid files and logs in one scratch folder.
#
# Usage:
#   slurm-testbed.sh up     [--prefix fbh] [--state DIR] [--wait S]   # start, wait until every node is idle
#   slurm-testbed.sh down   [--prefix fbh] [--state DIR]              # cancel jobs, stop every daemon it started
#   slurm-testbed.sh status [--prefix fbh] [--state DIR]
#   slurm-testbed.sh exec   [--prefix fbh] [--state DIR] CMD...       # CMD as the controller's host
#
# Clients (sbatch, srun, sinfo, scontrol) reach slurmctld only from inside the testbed: run them with `exec`,
# which runs them as the first host with SLURM_CONF set, e.g.
#   slurm-testbed.sh exec --prefix fbh sbatch -N 4 --wait scripts/slurm-two-nodes.sbatch
# `exec` sets UCX_TLS=tcp UCX_NET_DEVICES=veth0 FI_TCP_IFACE=veth0 unless already set, as netns-testbed.sh's
# mpiexec does, and srun and sbatch pass them to every task: the hosts share one kernel, and UCX left alone moves
# the bytes between them through shared memory, not their veths.
# The state folder defaults to /tmp/fabricbench-slurm-<prefix>. Ports are Slurm's own (6817, 6818): every
# daemon listens inside a testbed namespace, whose ports no other cluster on the machine shares.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TESTBED="$SCRIPT_DIR/netns-testbed.sh"
CTLD_PORT=6817
SLURMD_PORT=6818
STOP_S=15 # a daemon still alive this long after SIGTERM gets SIGKILL
IFACE=veth0 # each testbed host's link (netns-testbed.sh)

die() { echo "slurm-testbed: $*" >&2; exit 1; }
info() { echo "slurm-testbed: $*" >&2; }

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
    exit "${1:-2}"
}

# "HOST ADDR" lines of the testbed.
testbed_hosts() { "$TESTBED" hosts --prefix "$1"; }

# The pid in FILE if that process is alive and is NAME (a reused pid is someone else's).
live_pid() {
    local file=$1 name=$2 pid
    [[ -s $file ]] || return 1
    pid=$(tr -dc '0-9' <"$file")
    [[ -n $pid && -r /proc/$pid/comm && $(cat "/proc/$pid/comm") == "$name" ]] || return 1
    echo "$pid"
}

# SIGTERM to each pid, then SIGKILL to those alive after STOP_S seconds.
stop_pids() {
    local pid end
    [[ $# -gt 0 ]] || return 0
    kill "$@" 2>/dev/null || true
    end=$((SECONDS + STOP_S))
    for pid in "$@"; do
        while kill -0 "$pid" 2>/dev/null && ((SECONDS < end)); do sleep 0.2; done
        if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
    done
}

# The topology.conf the testbed wrote (a dragonfly's topology.toml has one beside it), else none.
testbed_topology() {
    local path
    path=$("$TESTBED" topology-file --prefix "$1" 2>/dev/null) || return 0
    [[ $path == *.toml ]] && path="$(dirname "$path")/topology.conf"
    [[ -f $path ]] && echo "$path"
    return 0
}

# The hardware fields of this machine's node line (`slurmd -C`), less its name and memory: Slurm drains a node
# whose free memory falls below the stated figure, and what is free varies.
node_fields() {
    slurmd -C | awk '/^NodeName=/ {
        for (i = 2; i <= NF; i++) if ($i !~ /^RealMemory=/) { printf "%s%s", sep, $i; sep = " " } }'
}

write_conf() {
    local state=$1 prefix=$2 hosts=$3 first first_addr names topology host addr fields
    first=$(awk 'NR == 1 {print $1}' <<<"$hosts")
    first_addr=$(awk 'NR == 1 {print $2}' <<<"$hosts")
    names=$(awk '{print $1}' <<<"$hosts" | paste -sd, -)
    topology=$(testbed_topology "$prefix")
    if [[ -n $topology ]]; then
        cp "$topology" "$state/topology.conf"
    else
        echo "SwitchName=${prefix}-switch Nodes=$names" >"$state/topology.conf"
    fi
    fields=$(node_fields)
    : >"$state/plugstack.conf" # not /etc/slurm's
    # `ip netns exec` mounts a sysfs of the namespace's own, with nothing on /sys/fs/cgroup, where slurmd's
    # cgroup autodetection fails; naming v1 skips it (the v1 plugin only looks for its hierarchies when a
    # cgroup proctrack, task or accounting plugin asks, and none does here).
    echo "CgroupPlugin=cgroup/v1" >"$state/cgroup.conf"
    {
        echo "ClusterName=${prefix}testbed"
        echo "SlurmctldHost=$first($first_addr)"
        echo "SlurmctldPort=$CTLD_PORT"
        echo "SlurmdPort=$SLURMD_PORT"
        echo "SlurmUser=root"
        echo "SlurmdUser=root"
        echo "AuthType=auth/munge"
        echo "CredType=cred/munge"
        echo "AuthInfo=socket=$state/munge/munge.socket"
        echo "StateSaveLocation=$state/ctld"
        # %n: the node's name, so that the slurmd of each host keeps its own spool, pid file and log.
        echo "SlurmdSpoolDir=$state/spool/%n"
        echo "SlurmctldPidFile=$state/slurmctld.pid"
        echo "SlurmdPidFile=$state/slurmd-%n.pid"
        echo "SlurmctldLogFile=$state/slurmctld.log"
        echo "SlurmdLogFile=$state/slurmd-%n.log"
        # No cgroups in a namespace: processes tracked through /proc, tasks not bound.
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=task/none"
        echo "JobAcctGatherType=jobacct_gather/none"
        echo "AccountingStorageType=accounting_storage/none"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_CPU"
        echo "SchedulerType=sched/builtin"
        echo "MpiDefault=pmi2"
        echo "TopologyPlugin=topology/tree"
        echo "ReturnToService=2"
        echo "SlurmdTimeout=300"
        echo "KillWait=5"
        echo "PlugStackConfig=$state/plugstack.conf"
        while read -r host addr; do
            echo "NodeName=$host NodeAddr=$addr $fields"
        done <<<"$hosts"
        echo "PartitionName=testbed Nodes=$names Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
    } >"$state/slurm.conf"
}

start_munge() {
    local munge=$1/munge end
    mkdir -m 700 "$munge"
    head -c 1024 /dev/urandom >"$munge/munge.key"
    chmod 400 "$munge/munge.key"
    # --force: key and socket live in the scratch folder, not /etc/munge and /run/munge.
    munged --force --key-file="$munge/munge.key" --socket="$munge/munge.socket" \
        --pid-file="$munge/munged.pid" --log-file="$munge/munged.log" --seed-file="$munge/munged.seed"
    end=$((SECONDS + 20))
    until [[ -S $munge/munge.socket ]]; do
        ((SECONDS < end)) || die "munged made no socket in 20 s: $(tail -n 3 "$munge/munged.log" 2>/dev/null)"
        sleep 0.1
    done
}

# Run a client or daemon as host HOST (its namespaces and hostname) against this cluster.
as_host() {
    local state=$1 host=$2
    shift 2
    SLURM_CONF="$state/slurm.conf" "$TESTBED" exec "$host" "$@"
}

controller() { awk -F'[=(]' '/^SlurmctldHost=/ {print $2}' "$1/slurm.conf"; }

# "NODE STATE" lines, as slurmctld sees them (nothing when it does not answer).
node_states() {
    as_host "$1" "$(controller "$1")" sinfo -h -N -o '%N %t' 2>/dev/null || true
}

cmd_up() {
    local prefix=$1 state=$2 wait_s=$3 hosts first host end states pending
    local tool names=()
    for tool in munged slurmctld slurmd sinfo squeue scancel; do
        command -v "$tool" >/dev/null || die "$tool not found: apt-get install slurm-wlm munge"
    done
    hosts=$(testbed_hosts "$prefix")
    [[ -n $hosts ]] || die "testbed '$prefix' is not up (scripts/netns-testbed.sh up N --prefix $prefix)"
    mapfile -t names < <(awk '{print $1}' <<<"$hosts")
    [[ -d $state ]] && cmd_down "$prefix" "$state" 2>/dev/null
    mkdir -p "$state/ctld" "$state/spool"
    chmod 700 "$state"
    start_munge "$state"
    write_conf "$state" "$prefix" "$hosts"
    first=$(controller "$state")
    as_host "$state" "$first" slurmctld -f "$state/slurm.conf" ||
        { info "slurmctld did not start: $(tail -n 3 "$state/slurmctld.log" 2>/dev/null)"; cmd_down "$prefix" "$state"; exit 1; }
    for host in "${names[@]}"; do
        mkdir -p "$state/spool/$host"
        as_host "$state" "$host" slurmd -N "$host" -f "$state/slurm.conf" ||
            { info "slurmd on $host did not start: $(tail -n 3 "$state/slurmd-$host.log" 2>/dev/null)"; cmd_down "$prefix" "$state"; exit 1; }
    done
    end=$((SECONDS + wait_s))
    while :; do
        states=$(node_states "$state")
        pending=$(awk -v s="$states" 'BEGIN {
            n = split(s, lines, "\n"); for (i = 1; i <= n; i++) { split(lines[i], f, " "); st[f[1]] = f[2] } }
            st[$1] != "idle" {printf "%s%s", sep, $1; sep = " "}' <<<"$hosts")
        [[ -z $pending ]] && break
        if ((SECONDS >= end)); then
            echo "slurm-testbed: error: node(s) not idle after ${wait_s} s: $pending (sinfo: $(paste -sd' ' <<<"$states"))" >&2
            for host in $pending; do
                echo "--- $state/slurmd-$host.log" >&2
                tail -n 5 "$state/slurmd-$host.log" >&2 2>/dev/null || echo "(no log)" >&2
            done
            cmd_down "$prefix" "$state" 2>/dev/null
            exit 1
        fi
        sleep 0.5
    done
    info "cluster of $(wc -l <<<"$hosts") node(s) idle, controller $first; state in $state"
    echo "$state/slurm.conf"
}

cmd_down() {
    local prefix=$1 state=$2 pids=() pid file host first end
    [[ -d $state ]] || { info "no cluster state in $state"; return 0; }
    if [[ -f $state/slurm.conf ]] && live_pid "$state/slurmctld.pid" slurmctld >/dev/null; then
        first=$(controller "$state")
        as_host "$state" "$first" scancel --full --quiet --partition testbed 2>/dev/null || true
        end=$((SECONDS + STOP_S))
        while [[ -n $(as_host "$state" "$first" squeue -h 2>/dev/null) ]] && ((SECONDS < end)); do sleep 0.5; done
    fi
    for file in "$state"/slurmd-*.pid; do
        pid=$(live_pid "$file" slurmd) && pids+=("$pid")
    done
    pid=$(live_pid "$state/slurmctld.pid" slurmctld) && pids+=("$pid")
    stop_pids "${pids[@]}"
    # Steps whose slurmd is gone (a job scancel did not end in time): their slurmstepd, in this testbed's hosts.
    pids=()
    for host in $(testbed_hosts "$prefix" 2>/dev/null | awk '{print $1}'); do
        for pid in $(ip netns pids "$host" 2>/dev/null); do
            [[ $(cat "/proc/$pid/comm" 2>/dev/null) == slurmstepd ]] && pids+=("$pid")
        done
    done
    stop_pids "${pids[@]}"
    pids=()
    pid=$(live_pid "$state/munge/munged.pid" munged) && pids+=("$pid")
    stop_pids "${pids[@]}"
    rm -rf "$state"
    info "cluster on testbed '$prefix' is down"
}

cmd_status() {
    local prefix=$1 state=$2 file name
    [[ -f $state/slurm.conf ]] || { echo "slurm on testbed '$prefix': down"; return 0; }
    echo "slurm on testbed '$prefix': state in $state"
    for file in "$state/munge/munged.pid" "$state/slurmctld.pid" "$state"/slurmd-*.pid; do
        name=$(basename "$file" .pid)
        if live_pid "$file" "${name%%-*}" >/dev/null; then
            echo "$name running (pid $(cat "$file"))"
        else
            echo "$name NOT running"
        fi
    done
    node_states "$state"
}

main() {
    [[ $# -ge 1 ]] || usage
    local cmd=$1
    shift
    case $cmd in -h | --help | help) usage 0 ;; esac
    [[ $(id -u) -eq 0 ]] || die "must run as root (slurmd, slurmctld and munged as root; ip netns)"
    local prefix=fbh state="" wait_s=60
    local -a pos=()
    while [[ $# -gt 0 ]]; do
        case $1 in
        --prefix) prefix=${2:?--prefix needs a value}; shift 2 ;;
        --state) state=${2:?--state needs a value}; shift 2 ;;
        --wait) wait_s=${2:?--wait needs a value}; shift 2 ;;
        *) pos=("$@"); break ;; # exec: the command, untouched
        esac
    done
    [[ $prefix =~ ^[a-z][a-z0-9]*$ ]] || die "bad prefix '$prefix'"
    [[ $wait_s =~ ^[0-9]+$ ]] || die "--wait wants whole seconds, got '$wait_s'"
    state=${state:-/tmp/fabricbench-slurm-$prefix}
    case $cmd in
    up | down | status) [[ ${#pos[@]} -eq 0 ]] || die "$cmd: unexpected '${pos[0]}'" ;;
    esac
    case $cmd in
    up) cmd_up "$prefix" "$state" "$wait_s" ;;
    down) cmd_down "$prefix" "$state" ;;
    status) cmd_status "$prefix" "$state" ;;
    exec)
        [[ ${#pos[@]} -gt 0 ]] || die "exec: no command"
        [[ -f $state/slurm.conf ]] || die "no cluster on testbed '$prefix' (state $state): run up first"
        export UCX_TLS=${UCX_TLS:-tcp} UCX_NET_DEVICES=${UCX_NET_DEVICES:-$IFACE} FI_TCP_IFACE=${FI_TCP_IFACE:-$IFACE}
        as_host "$state" "$(controller "$state")" "${pos[@]}"
        ;;
    *) usage ;;
    esac
}

main "$@"
