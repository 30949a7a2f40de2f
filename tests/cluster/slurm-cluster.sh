#!/usr/bin/env bash
# Slurm on a tests/cluster/netns-cluster.sh cluster: munged and slurmctld in the machine's own
# network namespace (the login/controller host, PREFIXctl at NET.1), one slurmd in each node's
# namespace. Needs Debian's slurm-wlm and munge (`make cluster-deps`).
#
#   tests/cluster/slurm-cluster.sh up       start munged, slurmctld and a slurmd per node; wait for idle nodes
#   tests/cluster/slurm-cluster.sh status   sinfo
#   tests/cluster/slurm-cluster.sh down     stop them and remove their files (the namespaces stay)
#
# Then, as the login host:  tests/cluster/netns-cluster.sh run -- sbatch ... (SLURM_CONF is in its env).
# Everything lives in CB_CLUSTER_STATE/slurm; ports CB_SLURMCTLD_PORT (default 6900 + the subnet's
# third octet, 6922 for 10.213.22) and 6918 for slurmd (in each node's own namespace), so a site
# Slurm on the default ports, or another test bed, is not disturbed.
#
# Exit status: 0 done, 2 bad usage, 3 cannot here (no slurm-wlm/munge, not root), 4 no cluster up,
# 5 the daemons did not come up (their logs are printed).
set -euo pipefail

PREFIX=${CB_CLUSTER_PREFIX:-cbn}
NET=${CB_CLUSTER_NET:-10.213.22}
STATE=${CB_CLUSTER_STATE:-/tmp/commbench-cluster-$PREFIX}
S=$STATE/slurm
# slurmctld listens in the machine's own namespace: one port per cluster (from its subnet)
CTLD_PORT=${CB_SLURMCTLD_PORT:-$((6900 + ${NET##*.}))}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PATH=$PATH:/usr/sbin:/sbin

die() { echo "slurm-cluster: $2" >&2; exit "$1"; }

require() {
    [[ $(id -u) -eq 0 ]] || die 3 "needs root"
    local tool
    for tool in munged slurmctld slurmd sbatch sinfo scontrol; do
        command -v "$tool" >/dev/null || die 3 "needs $tool: apt-get install slurm-wlm munge (make cluster-deps)"
    done
    [[ -s "$STATE/nodes" ]] || die 4 "no namespace cluster is up (state $STATE); run: tests/cluster/netns-cluster.sh up"
}

# MpiDefault=pmix as sites whose MPI is PMIx-based set it (srun steps wire up without --mpi), where
# Slurm's pmix plugin can load the PMIx library (Debian: libpmix-dev, which `make slurm-deps`
# installs); without it every srun that does not name --mpi fails ("can not load PMIx library"),
# so the cluster then keeps Debian's default, none.
mpi_default() {
    if compgen -G "/usr/lib/*/pmix*/lib/libpmix.so" >/dev/null || compgen -G "/usr/lib*/libpmix.so" >/dev/null \
        || compgen -G "/usr/lib/*/libpmix.so" >/dev/null; then
        echo pmix
    else
        echo none
    fi
}

write_conf() {
    local nodes; nodes=$(paste -sd, "$STATE/nodes")
    cat > "$S/slurm.conf" <<EOF
# written by tests/cluster/slurm-cluster.sh for the namespace cluster $PREFIX
ClusterName=$PREFIX
SlurmctldHost=${PREFIX}ctl($NET.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=6918
AuthType=auth/munge
AuthInfo=socket=$S/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool-%n
# one path, a folder of its own on each node (bound in slurmd's mount namespace): PMIx puts
# per-step files there that would collide between nodes sharing this machine's /tmp
TmpFS=$S/nodetmp
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd-%n.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=$(mpi_default)
ReturnToService=2
# the nodes share this machine's cores; each may run as many tasks as a job asks for
SlurmdParameters=config_overrides
NodeName=DEFAULT CPUs=64 RealMemory=1000 State=UNKNOWN
EOF
    local node i=0
    while read -r node; do
        i=$((i + 1))
        echo "NodeName=$node NodeAddr=$NET.$((10 + i)) NodeHostname=$node" >> "$S/slurm.conf"
    done < "$STATE/nodes"
    printf 'CgroupPlugin=autodetect\nIgnoreSystemd=yes\n' > "$S/cgroup.conf"
    echo "PartitionName=nodes Nodes=$nodes Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES" >> "$S/slurm.conf"
}

print_logs() { tail -n 20 "$S"/log/*.log >&2 2>/dev/null || true; }

cmd_up() {
    require
    [[ -e "$S/slurmctld.pid" ]] && die 2 "Slurm is up already on this cluster; run: $0 down"
    mkdir -p "$S/state" "$S/log"
    chmod 755 "$S"   # munged: its socket's folder must be searchable by all
    trap 'echo "slurm-cluster: up failed; stopping what it started" >&2; print_logs; cmd_down >/dev/null 2>&1 || true' ERR
    head -c 1024 /dev/urandom > "$S/munge.key"
    chmod 400 "$S/munge.key"
    munged --force --socket="$S/munge.sock" --key-file="$S/munge.key" --pid-file="$S/munged.pid" \
        --log-file="$S/log/munged.log" --seed-file="$S/munged.seed"
    write_conf
    echo "export SLURM_CONF=$S/slurm.conf" > "$S/env"
    grep -q SLURM_CONF "$STATE/env" || echo "export SLURM_CONF=$S/slurm.conf" >> "$STATE/env"
    # the controller's host name must be its SlurmctldHost name: a UTS namespace of its own
    unshare --uts -- /bin/sh -c 'hostname "$1" && exec slurmctld -f "$2"' slurmctld "${PREFIX}ctl" "$S/slurm.conf"
    local node
    while read -r node; do
        mkdir -p "$S/spool-$node" "$S/tmp-$node" "$S/nodetmp"
        # Not `ip netns exec` (the agent's way): it mounts a fresh /sys without the cgroup trees
        # slurmd needs. The node's network and host name, its /etc/hosts in a mount namespace.
        nsenter --net="/run/netns/$node" unshare --uts --mount --propagation private -- /bin/sh -c \
            'hostname "$1" && mount --bind "/etc/netns/$1/hosts" /etc/hosts &&
             mount --bind "$3/tmp-$1" "$3/nodetmp" && exec slurmd -f "$2" -N "$1"' \
            slurmd "$node" "$S/slurm.conf" "$S"
    done < "$STATE/nodes"
    local n; n=$(wc -l < "$STATE/nodes")
    for _ in $(seq 1 60); do
        if [[ $(SLURM_CONF=$S/slurm.conf sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l) -eq $n ]]; then
            trap - ERR
            echo "slurm-cluster: $n nodes idle (SLURM_CONF=$S/slurm.conf, MpiDefault=$(mpi_default))"
            return 0
        fi
        sleep 0.5
    done
    SLURM_CONF=$S/slurm.conf sinfo -N >&2 || true
    print_logs
    trap - ERR
    cmd_down >/dev/null 2>&1 || true
    die 5 "the nodes did not become idle within 30 s"
}

stop_pid_file() {   # a daemon this script started, by its pid file
    local pid
    pid=$(cat "$1" 2>/dev/null || true)
    [[ "$pid" =~ ^[0-9]+$ ]] && kill "$pid" 2>/dev/null || true
}

cmd_down() {
    [[ -d "$S" ]] || { echo "slurm-cluster: not up"; return 0; }
    local f
    for f in "$S"/slurmd-*.pid "$S/slurmctld.pid"; do [[ -e "$f" ]] && stop_pid_file "$f"; done
    sleep 1
    stop_pid_file "$S/munged.pid"
    [[ -e "$STATE/env" ]] && sed -i '/SLURM_CONF/d' "$STATE/env"
    rm -rf "$S"
    echo "slurm-cluster: down"
}

case ${1:-} in
    up) cmd_up ;;
    down) cmd_down ;;
    status) require; SLURM_CONF=$S/slurm.conf sinfo -N ;;
    *) sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
