#!/usr/bin/env bash
# netns-launcher.sh - an "ssh" for MPICH hydra whose remote hosts are the
# network namespaces of scripts/netns-testbed.sh.
#
# Hydra's ssh launcher runs:  <launcher-exec> -x HOST "/path/hydra_pmi_proxy" --control-port ...
# This script accepts that ssh-style call and runs the command inside
# namespace HOST (with hostname HOST, via `netns-testbed.sh exec`).
#
#   mpiexec -launcher ssh -launcher-exec scripts/netns-launcher.sh \
#           -iface veth0 -hosts fbh1,fbh2 -n 2 -ppn 1 python bench.py
#
# mpiexec itself must run inside a testbed host (e.g. via
# `netns-testbed.sh exec fbh1 mpiexec ...`, or `netns-testbed.sh mpiexec ...`)
# because remote proxies connect back to its control port, and the root
# namespace is unreachable from the testbed.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# Skip ssh options; hydra passes "-x", users may add others via
# HYDRA_LAUNCHER_EXTRA_ARGS.  These ssh options take a value.
while [[ $# -gt 0 && $1 == -* ]]; do
    case $1 in
    -[bcDEeFIiJLlmOopQRSWw]) shift 2 ;;
    *) shift ;;
    esac
done
[[ $# -ge 2 ]] || { echo "netns-launcher: usage: [ssh opts] HOST CMD..." >&2; exit 255; }

host=${1#*@}   # accept user@host like ssh
shift

# Like ssh, join the remaining words into one string for a shell: hydra
# quotes its arguments for exactly that (e.g. "\"/path/hydra_pmi_proxy\"").
exec "$SCRIPT_DIR/netns-testbed.sh" exec "$host" sh -c "$*"
