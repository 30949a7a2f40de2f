#!/usr/bin/env bash
# A cluster of N "nodes" on one Linux machine: each node is a network namespace with its own
# veth into one bridge, its own address and host name. Open MPI reaches the nodes through
# tests/cluster/netns-agent (its ssh stand-in), so commbench launches across them as it would
# across real hosts. Needs root, `ip` and (for impairments) `tc`.
#
#   tests/cluster/netns-cluster.sh up [-n 4] [--rate-mbit 1000]   create nodes cbn1..cbn4
#                                                       (10.213.22.11..14), links of 1 Gbit/s
#   tests/cluster/netns-cluster.sh run -- CMD ...       run CMD as the cluster's login host (env below)
#   tests/cluster/netns-cluster.sh with [up options] -- CMD ...   up, run CMD, down (also on failure)
#   tests/cluster/netns-cluster.sh exec NODE -- CMD ... run CMD on a node (its namespace and host name)
#   tests/cluster/netns-cluster.sh slow NODE [--delay-us N] [--rate-mbit R]   impair a node's link
#   tests/cluster/netns-cluster.sh slow-link A B [--delay-us N] [--rate-mbit R] impair one node pair
#   tests/cluster/netns-cluster.sh heal [NODE...]       remove impairments (all nodes without names)
#   tests/cluster/netns-cluster.sh kill NODE            the node dies: its processes are killed, its
#                                                       link goes down, later launches cannot reach it
#   tests/cluster/netns-cluster.sh status | env | down  show, print the environment, tear down
#
# Settings (environment): CB_CLUSTER_PREFIX (default cbn; node names are PREFIX1..PREFIXN),
# CB_CLUSTER_NET (first three octets, default 10.213.22), CB_CLUSTER_STATE (default
# /tmp/commbench-cluster-PREFIX). Only the namespaces, links, addresses and /etc/netns/PREFIXk
# folders this script created are ever touched; `down` removes them all.
#
# Exit status: 0 done, 2 bad usage, 3 cannot here (not root, no `ip`, a kernel without the
# needed qdisc), 4 the cluster is not up.
set -euo pipefail

PREFIX=${CB_CLUSTER_PREFIX:-cbn}
NET=${CB_CLUSTER_NET:-10.213.22}
STATE=${CB_CLUSTER_STATE:-/tmp/commbench-cluster-$PREFIX}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BRIDGE=${PREFIX}br
# The "line rate" of `up --rate-mbit 0`: far above what veths carry, so nothing is shaped.
FAST_RATE=100gbit

die() { echo "netns-cluster: $2" >&2; exit "$1"; }
usage() { awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "${BASH_SOURCE[0]}" >&2; exit 2; }

check_name_settings() {
    [[ "$PREFIX" =~ ^[a-z][a-z0-9]{0,5}$ ]] || die 2 "CB_CLUSTER_PREFIX must be 1-6 lower-case letters/digits starting with a letter, not '$PREFIX'"
    [[ "$NET" =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || die 2 "CB_CLUSTER_NET must be three octets like 10.213.22, not '$NET'"
}

can_run_here() {
    [[ $(id -u) -eq 0 ]] || die 3 "needs root (network namespaces, veths and a bridge)"
    command -v ip >/dev/null || die 3 "needs iproute2's ip (apt-get install iproute2)"
    command -v unshare >/dev/null || die 3 "needs unshare (util-linux)"
}

nodes() { cat "$STATE/nodes" 2>/dev/null || true; }
node_index() { local n=$1; [[ "$n" =~ ^${PREFIX}([0-9]+)$ ]] && echo "${BASH_REMATCH[1]}"; }
node_addr() { echo "$NET.$((10 + $(node_index "$1")))"; }
host_veth() { echo "${1}h"; }   # the node's veth end in the root namespace, on the bridge

require_up() { [[ -s "$STATE/nodes" ]] || die 4 "no cluster is up (state $STATE); run: $0 up"; }
require_node() {
    require_up
    grep -qx "$1" "$STATE/nodes" || die 2 "unknown node '$1' (nodes: $(nodes | paste -sd' '))"
}

# A kernel primitive the cluster is made of (namespace, bridge, veth, htb): when it fails this
# machine cannot host the cluster (a container without CAP_NET_ADMIN, a kernel without the
# module): undo, and exit 3 so tests skip with the reason. Other failures are errors.
primitive() {
    local err
    if ! err=$("$@" 2>&1); then
        trap - ERR
        cmd_down >/dev/null 2>&1 || true
        die 3 "cannot build the cluster here: '$*' failed: $err"
    fi
}

cmd_up() {
    local n=4 rate_mbit=1000
    while [[ $# -gt 0 ]]; do
        case $1 in
            -n) n=${2:-}; shift 2 || usage ;;
            --rate-mbit) rate_mbit=${2:-}; shift 2 || usage ;;
            *) usage ;;
        esac
    done
    [[ "$n" =~ ^[0-9]+$ && $n -ge 1 && $n -le 200 ]] || die 2 "-n must be 1..200, not '$n'"
    [[ "$rate_mbit" =~ ^[0-9]+$ ]] || die 2 "--rate-mbit must be a whole number (0: no line rate), not '$rate_mbit'"
    command -v tc >/dev/null || die 3 "needs iproute2's tc (apt-get install iproute2)"
    can_run_here
    [[ -e "$STATE/nodes" ]] && die 2 "a cluster is already up (state $STATE); run: $0 down"
    if ip -o -4 addr show | awk '{print $4}' | grep -q "^$NET\."; then
        die 3 "addresses in $NET.0/24 exist already on this machine; pick another CB_CLUSTER_NET"
    fi
    ip netns list | awk '{print $1}' | grep -Eq "^${PREFIX}[0-9]+$" && \
        die 3 "namespaces named ${PREFIX}<k> exist already (left by a killed run?); run: $0 down"
    mkdir -p "$STATE"
    echo "$rate_mbit" > "$STATE/rate_mbit"
    trap 'echo "netns-cluster: up failed; removing what it made" >&2; cmd_down >/dev/null 2>&1 || true' ERR

    primitive ip link add "$BRIDGE" type bridge
    ip addr add "$NET.1/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    {
        echo "127.0.0.1 localhost"
        for ((i = 1; i <= n; i++)); do echo "$NET.$((10 + i)) $PREFIX$i"; done
    } > "$STATE/hosts"
    local node
    for ((i = 1; i <= n; i++)); do
        node=$PREFIX$i
        primitive ip netns add "$node"
        echo "$node" >> "$STATE/nodes"
        # ip netns exec bind-mounts /etc/netns/<name>/hosts over /etc/hosts: names resolve per node
        mkdir -p "/etc/netns/$node"
        cp "$STATE/hosts" "/etc/netns/$node/hosts"
        primitive ip link add "$(host_veth "$node")" type veth peer name eth0 netns "$node"
        ip link set "$(host_veth "$node")" master "$BRIDGE" up
        ip -n "$node" addr add "$(node_addr "$node")/24" dev eth0
        ip -n "$node" link set lo up
        ip -n "$node" link set eth0 up
        primitive shape_dev "$node" eth0
        primitive shape_dev "" "$(host_veth "$node")"
    done
    {
        echo "# source me: the environment of the cluster's login host ($n nodes)"
        echo "export CB_CLUSTER_PREFIX=$PREFIX CB_CLUSTER_NET=$NET CB_CLUSTER_STATE=$STATE"
        echo "export COMMBENCH_HOSTS=$(nodes | paste -sd,)"
        # Open MPI 4 (orte) and 5 (prrte) spellings: ssh is replaced by the agent, the default
        # hostfile names the nodes, and MPI traffic and daemon wiring use the bridge only.
        echo "export OMPI_MCA_plm_rsh_agent=$STATE/agent PRTE_MCA_plm_ssh_agent=$STATE/agent"
        echo "export OMPI_MCA_orte_default_hostfile=$STATE/hostfile PRTE_MCA_prte_default_hostfile=$STATE/hostfile"
        echo "export OMPI_MCA_btl_tcp_if_include=$NET.0/24 OMPI_MCA_oob_tcp_if_include=$NET.0/24"
        echo "export PRTE_MCA_oob_tcp_if_include=$NET.0/24 PMIX_MCA_ptl_tcp_if_include=$NET.0/24"
        echo "export OMPI_MCA_btl=self,vader,sm,tcp OMPI_MCA_btl_base_warn_component_unused=0"
        # the nodes share this machine's cores: ranks waiting for a message must yield them
        echo "export OMPI_MCA_mpi_yield_when_idle=1"
    } > "$STATE/env"
    nodes | sed 's/$/ slots=2/' > "$STATE/hostfile"
    # the ssh stand-in Open MPI calls, bound to this cluster's state
    printf '#!/bin/bash\nCB_CLUSTER_STATE=%q exec %q "$@"\n' "$STATE" "$HERE/netns-agent" > "$STATE/agent"
    chmod +x "$STATE/agent"
    trap - ERR
    local speed="no line rate"; [[ $rate_mbit -gt 0 ]] && speed="links of $rate_mbit Mbit/s"
    echo "netns-cluster: $n nodes up: $(nodes | paste -sd' ') on $BRIDGE ($NET.0/24, $speed); env in $STATE/env"
}

kill_node_processes() {
    local pids
    pids=$(ip netns pids "$1" 2>/dev/null || true)
    [[ -n "$pids" ]] && kill -9 $pids 2>/dev/null || true
}

cmd_down() {
    check_name_settings
    [[ $(id -u) -eq 0 ]] || die 3 "needs root"
    # Slurm daemons on this cluster (tests/cluster/slurm-cluster.sh) go first
    if [[ -d "$STATE/slurm" ]]; then
        CB_CLUSTER_PREFIX=$PREFIX CB_CLUSTER_NET=$NET CB_CLUSTER_STATE=$STATE bash "$HERE/slurm-cluster.sh" down || true
    fi
    # namespaces: those recorded, and any leftover PREFIX<k> (a run killed before recording)
    local ns
    for ns in $( { nodes; ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${PREFIX}[0-9]+$"; } | sort -u); do
        kill_node_processes "$ns"
        ip link del "$(host_veth "$ns")" 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
        rm -rf "/etc/netns/$ns"
    done
    rmdir /etc/netns 2>/dev/null || true   # only when empty: other namespaces may use it
    ip link del "$BRIDGE" 2>/dev/null || true
    rm -rf "$STATE"
    echo "netns-cluster: down ($PREFIX)"
}

# Run a command as the cluster's login host: the root namespace (where mpiexec runs and reaches
# the nodes over the bridge) with the cluster's environment, and the node names resolvable in a
# private mount namespace, so the machine's own /etc/hosts is never edited.
cmd_run() {
    require_up
    [[ "${1:-}" == "--" ]] && shift
    [[ $# -gt 0 ]] || usage
    # shellcheck disable=SC1091
    source "$STATE/env"
    exec unshare --mount --propagation private -- /bin/sh -c \
        'mount --bind "$0" /etc/hosts && exec "$@"' "$STATE/hosts" "$@"
}

# up, CMD as the login host, down, whatever CMD does (a trap also covers Ctrl-C and kill):
# a one-shot rehearsal that leaves nothing behind. Exits with CMD's status.
cmd_with() {
    local -a up_args=()
    while [[ $# -gt 0 && "$1" != "--" ]]; do up_args+=("$1"); shift; done
    [[ "${1:-}" == "--" ]] && shift
    [[ $# -gt 0 ]] || usage
    trap 'cmd_down >/dev/null 2>&1 || true' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    cmd_up "${up_args[@]}"
    local rc=0
    ( cmd_run "$@" ) || rc=$?
    exit "$rc"
}

cmd_exec() {
    local node=${1:-}; shift || usage
    require_node "$node"
    [[ "${1:-}" == "--" ]] && shift
    [[ $# -gt 0 ]] || usage
    CB_CLUSTER_STATE=$STATE exec "$HERE/netns-agent" "$node" "$(printf '%q ' "$@")"
}

has_qdisc() {   # a qdisc kind this kernel knows (tried on a node's loopback, then removed)
    local probe; probe=$(nodes | head -1)
    if tc -n "$probe" qdisc add dev lo root handle 9: "$@" 2>/dev/null; then
        tc -n "$probe" qdisc del dev lo root 2>/dev/null || true
        return 0
    fi
    return 1
}

line_rate() { local r; r=$(cat "$STATE/rate_mbit" 2>/dev/null || echo 0); [[ $r -gt 0 ]] && echo "${r}mbit" || echo "$FAST_RATE"; }
burst_bytes() {  # 1 ms of traffic at $1 Mbit/s, at least 16 KiB (a few full-size packets)
    local b=$(( ${1:-0} * 1000 / 8 )); (( b < 16384 || ${1:-0} == 0 )) && b=16384; echo "$b"
}

# Every link is an htb on both of its ends (the node's eth0 sends, the bridge-side veth sends to
# the node): class 1:10 carries all traffic at the line rate; class 1:20 (only with `slow-link`)
# carries the packets to one peer. An impairment changes a class's rate and may hang a netem
# delay under it. htb is in every kernel with traffic control; netem is not, so without netem
# only rates can be impaired.
tcx() { local ns=$1; shift; if [[ -n "$ns" ]]; then tc -n "$ns" "$@"; else tc "$@"; fi; }

shape_dev() {   # ns dev: the unimpaired link
    local ns=$1 dev=$2 rate mbit
    rate=$(line_rate); mbit=$(cat "$STATE/rate_mbit" 2>/dev/null || echo 0)
    tcx "$ns" qdisc del dev "$dev" root 2>/dev/null || true
    tcx "$ns" qdisc add dev "$dev" root handle 1: htb default 10
    tcx "$ns" class add dev "$dev" parent 1: classid 1:10 htb rate "$rate" burst "$(burst_bytes "$mbit")" quantum 60000
}

set_class() {   # ns dev classid delay_us rate_mbit: that class's rate (line rate if empty) and delay
    local ns=$1 dev=$2 classid=$3 delay_us=$4 rate_mbit=$5 rate handle
    rate=${rate_mbit:+${rate_mbit}mbit}; rate=${rate:-$(line_rate)}
    handle=${classid#1:}:
    tcx "$ns" class replace dev "$dev" parent 1: classid "$classid" htb rate "$rate" \
        burst "$(burst_bytes "${rate_mbit:-$(cat "$STATE/rate_mbit" 2>/dev/null || echo 0)}")" quantum 60000
    if [[ -n "$delay_us" ]]; then
        tcx "$ns" qdisc replace dev "$dev" parent "$classid" handle "$handle" netem delay "${delay_us}us" limit 100000
    fi
}

parse_impairment() {   # sets DELAY_US and RATE_MBIT from --delay-us / --rate-mbit
    DELAY_US="" RATE_MBIT=""
    while [[ $# -gt 0 ]]; do
        case $1 in
            --delay-us) DELAY_US=${2:-}; shift 2 || usage ;;
            --rate-mbit) RATE_MBIT=${2:-}; shift 2 || usage ;;
            *) usage ;;
        esac
    done
    [[ -n "$DELAY_US$RATE_MBIT" ]] || die 2 "give --delay-us N and/or --rate-mbit R"
    [[ -z "$DELAY_US" || "$DELAY_US" =~ ^[0-9]+$ ]] || die 2 "--delay-us must be a whole number, not '$DELAY_US'"
    [[ -z "$RATE_MBIT" || "$RATE_MBIT" =~ ^[0-9]+$ && $RATE_MBIT -ge 1 ]] || die 2 "--rate-mbit must be a whole number >= 1, not '$RATE_MBIT'"
    command -v tc >/dev/null || die 3 "needs iproute2's tc"
    if [[ -n "$DELAY_US" ]] && ! has_qdisc netem delay 1us; then
        die 3 "this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM): a delay cannot be injected here; --rate-mbit can"
    fi
}

describe() { echo "${DELAY_US:+delay ${DELAY_US}us }${RATE_MBIT:+rate ${RATE_MBIT}mbit}" | sed 's/ $//'; }

cmd_slow() {
    local node=${1:-}; shift || usage
    require_node "$node"
    parse_impairment "$@"
    # both directions: what the node sends (its eth0) and what it receives (the bridge-side veth)
    set_class "$node" eth0 1:10 "$DELAY_US" "$RATE_MBIT"
    set_class "" "$(host_veth "$node")" 1:10 "$DELAY_US" "$RATE_MBIT"
    echo "$node $(describe)" >> "$STATE/impairments"
    echo "netns-cluster: $node slowed ($(describe))"
}

cmd_slow_link() {
    local a=${1:-} b=${2:-}; shift 2 || usage
    require_node "$a"; require_node "$b"
    [[ "$a" != "$b" ]] || die 2 "a link needs two different nodes"
    parse_impairment "$@"
    local x peer
    for x in "$a" "$b"; do
        peer=$b; [[ $x == "$b" ]] && peer=$a
        set_class "$x" eth0 1:20 "$DELAY_US" "$RATE_MBIT"
        tc -n "$x" filter replace dev eth0 parent 1: protocol ip prio 1 u32 \
            match ip dst "$(node_addr "$peer")/32" flowid 1:20
    done
    echo "$a-$b $(describe)" >> "$STATE/impairments"
    echo "netns-cluster: link $a-$b slowed ($(describe))"
}

cmd_heal() {
    require_up
    local -a which=("$@"); [[ ${#which[@]} -eq 0 ]] && mapfile -t which < <(nodes)
    local node
    for node in "${which[@]}"; do
        require_node "$node"
        shape_dev "$node" eth0
        shape_dev "" "$(host_veth "$node")"
        # a dead node comes back: link up, the agent reaches it again
        ip link set "$(host_veth "$node")" up
        rm -f "$STATE/down.$node"
        [[ -e "$STATE/impairments" ]] && sed -i "/^$node[ -]/d; /-$node /d" "$STATE/impairments"
    done
    echo "netns-cluster: healed ${which[*]}"
}

cmd_kill() {
    local node=${1:-}
    require_node "$node"
    # later launches fail as ssh would ("no route to host"), and the link carries nothing
    : > "$STATE/down.$node"
    ip link set "$(host_veth "$node")" down
    kill_node_processes "$node"
    echo "netns-cluster: $node killed (processes gone, link down)"
}

cmd_status() {
    require_up
    echo "nodes ($STATE):"
    local node state
    for node in $(nodes); do
        state=up; [[ -e "$STATE/down.$node" ]] && state=down
        printf '  %-10s %-15s %-5s %s processes\n' "$node" "$(node_addr "$node")" "$state" \
            "$(ip netns pids "$node" 2>/dev/null | wc -l)"
    done
    echo "impairments:"
    if [[ -s "$STATE/impairments" ]]; then sed 's/^/  /' "$STATE/impairments"; else echo "  none"; fi
}

check_name_settings
case ${1:-} in
    up) shift; cmd_up "$@" ;;
    down) shift; cmd_down ;;
    run) shift; cmd_run "$@" ;;
    with) shift; cmd_with "$@" ;;
    exec) shift; cmd_exec "$@" ;;
    slow) shift; cmd_slow "$@" ;;
    slow-link) shift; cmd_slow_link "$@" ;;
    heal) shift; cmd_heal "$@" ;;
    kill) shift; cmd_kill "$@" ;;
    status) shift; cmd_status ;;
    env) require_up; cat "$STATE/env" ;;
    *) usage ;;
esac
