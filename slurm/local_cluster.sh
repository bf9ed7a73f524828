#!/usr/bin/env bash
# Run a real Slurm 22.05 test cluster (slurmctld + several slurmd's) on this one machine.
#
# Usage: bash slurm/local_cluster.sh up|down|status|reconfigure-preempt-signal on|off
#
# Used by CI (.ci/run calls `up` before the tests) and by developers. Needs root and Debian 12
# (apt). All nodes are slurmd daemons on this host, told apart by their port (`slurmd -N nodeK`);
# their GPUs are fake character devices that Slurm schedules like real ones.
#
# Options (environment variables):
#   SLURM_LOCAL_NODES            number of nodes node1..nodeN                   (default 3)
#   SLURM_LOCAL_GPUS_PER_NODE    fake GPUs per node, 0 for none                  (default 4)
#   SLURM_LOCAL_CPUS_PER_NODE    CPUs each node advertises (oversubscribed)      (default 8)
#   SLURM_LOCAL_MEM_PER_NODE     RealMemory in MB each node advertises           (default 8000)
#   SLURM_LOCAL_GRACE_TIME       GraceTime (s) of partition gpu when the preempt
#                                user signal is on                               (default 20)
#   SLURM_LOCAL_PREEMPT_SIGNAL   on|off: overrides the mode saved by
#                                reconfigure-preempt-signal                      (default: saved, else off)
#   SLURM_LOCAL_TIMEOUT          seconds to wait for daemons / nodes             (default 120)
#   SLURM_LOCAL_CRED_EXPIRE      AuthInfo cred_expire (s, >= 5); also the delay
#                                before a requeued job may run again             (default 10)
#   SLURM_LOCAL_MAX_ARRAY_SIZE   MaxArraySize: a job array's indices are 0..N-1 (default 64, a small
#                                site's value, so tests can exceed it; a change needs a slurmctld
#                                restart, `scontrol reconfigure` does not apply it)
#   SLURM_LOCAL_KEEP_JOBS=1      `down` leaves jobs alone instead of cancelling them
set -euo pipefail

NODES=${SLURM_LOCAL_NODES:-3}
GPUS=${SLURM_LOCAL_GPUS_PER_NODE:-4}
CPUS=${SLURM_LOCAL_CPUS_PER_NODE:-8}
MEM=${SLURM_LOCAL_MEM_PER_NODE:-8000}
GRACE=${SLURM_LOCAL_GRACE_TIME:-20}
TIMEOUT=${SLURM_LOCAL_TIMEOUT:-120}
CRED_EXPIRE=${SLURM_LOCAL_CRED_EXPIRE:-10}
MAX_ARRAY=${SLURM_LOCAL_MAX_ARRAY_SIZE:-64}

CLUSTER=localcluster
CTLD_PORT=6817
SLURMD_PORT_BASE=6900           # nodeK listens on 6900+K
HOST=$(hostname -s)

CONF_DIR=/etc/slurm             # the client tools read /etc/slurm/slurm.conf
SLURM_CONF=$CONF_DIR/slurm.conf
GRES_CONF=$CONF_DIR/gres.conf
LOCAL_DIR=/var/lib/slurm-local  # our bookkeeping and the fake GPU devices
DEV_DIR=$LOCAL_DIR/dev
MODE_FILE=$LOCAL_DIR/preempt_signal
MUNGE_MARK=$LOCAL_DIR/munge-started-by-us
CTLD_STATE=/var/spool/slurmctld
SLURMD_SPOOL=/var/spool/slurmd
LOG_DIR=/var/log/slurm
CTLD_PID=/run/slurmctld.pid
MUNGE_PID=/run/munge/munged.pid

log() { printf '[local_cluster] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# usage [STATUS]: print the header comment of this file.
usage() {
    sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//' >&2
    exit "${1:-2}"
}

require_root() {
    [[ $(id -u) -eq 0 ]] || die "must run as root (installs packages, writes /etc/slurm, starts daemons)"
}

validate_options() {
    local v
    for v in NODES GPUS CPUS MEM GRACE TIMEOUT CRED_EXPIRE MAX_ARRAY; do
        [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a non-negative integer, got '${!v}'"
    done
    ((NODES >= 1)) || die "SLURM_LOCAL_NODES must be >= 1"
    ((CRED_EXPIRE >= 5)) || die "SLURM_LOCAL_CRED_EXPIRE must be >= 5 (Slurm ignores smaller values)"
}

node_names() { seq -f 'node%g' 1 "$NODES"; }

# ---------------------------------------------------------------- packages

install_packages() {
    local missing=0 bin
    for bin in slurmctld slurmd sinfo munged; do
        command -v "$bin" >/dev/null 2>&1 || [[ -x /usr/sbin/$bin ]] || missing=1
    done
    ((missing)) || return 0
    log "installing slurmctld slurmd slurm-client munge (apt)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq slurmctld slurmd slurm-client munge >/dev/null
}

# On a host with systemd, installing the packages starts slurmd.service/slurmctld.service. They
# would fight ours for the ports and pid files, so stop and disable them (munge.service is fine
# to share).
disable_distro_units() {
    [[ -d /run/systemd/system ]] || return 0
    local unit
    for unit in slurmctld slurmd; do
        if systemctl is-enabled --quiet "$unit" 2>/dev/null || systemctl is-active --quiet "$unit" 2>/dev/null; then
            log "disabling distro unit $unit.service (this script runs its own daemons)"
            systemctl disable --now "$unit" >/dev/null 2>&1 || true
        fi
    done
}

# ---------------------------------------------------------------- config

preempt_mode() {
    local mode=${SLURM_LOCAL_PREEMPT_SIGNAL:-}
    [[ -n $mode ]] || mode=$(cat "$MODE_FILE" 2>/dev/null || echo off)
    [[ $mode == on || $mode == off ]] || die "preempt signal mode must be on|off, got '$mode'"
    echo "$mode"
}

# gpu_range prints the bracket suffix for nvidia0..nvidia(G-1), e.g. "[0-3]" (or "0" for one GPU).
gpu_range() { ((GPUS == 1)) && echo 0 || echo "[0-$((GPUS - 1))]"; }

render_slurm_conf() {
    local mode=$1 grace="" gres_types="" node_gres="" k
    local ctld_params="# SlurmctldParameters=preempt_send_user_signal: see reconfigure-preempt-signal on"
    if [[ $mode == on ]]; then
        # Real clusters send the job's --signal at preemption only with this flag and a GraceTime;
        # without them the preempted job sees SIGTERM alone (which submitit ignores).
        ctld_params="SlurmctldParameters=preempt_send_user_signal"
        grace=" GraceTime=$GRACE"
    fi
    if ((GPUS > 0)); then
        gres_types="GresTypes=gpu"
        node_gres=" Gres=gpu:$GPUS"
    fi
    cat <<EOF
# Generated by slurm/local_cluster.sh -- edits are overwritten by the next 'up'.
# Preempt user signal: $mode
ClusterName=$CLUSTER
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# A requeued job may start again only cred_expire seconds later (default 120): keep tests fast.
AuthInfo=cred_expire=$CRED_EXPIRE
MailProg=/bin/true
MpiDefault=none
SwitchType=switch/none

# State and per-node paths; %n is the node name so several slurmd's can share this host.
StateSaveLocation=$CTLD_STATE
SlurmdSpoolDir=$SLURMD_SPOOL/%n
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info

# No cgroups in the test container: track processes by parent pid, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# Nodes advertise more CPUs/memory than the machine has; accept that.
SlurmdParameters=config_overrides
ReturnToService=2
$ctld_params

# No accounting database (sacct is disabled on purpose; use squeue / scontrol show job).
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none

# Scheduling: short intervals so tests do not wait for the default 60 s / 30 s loops.
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=500
$gres_types

# Preemption: a job in 'urgent' requeues jobs of 'gpu' that hold resources it needs.
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
JobRequeue=1
KillWait=10
# Finished jobs stay visible to 'scontrol show job' for an hour.
MinJobAge=3600
# Small on purpose (SLURM_LOCAL_MAX_ARRAY_SIZE): sweeps larger than this are split or refused.
MaxArraySize=$MAX_ARRAY
MaxJobCount=20000
InactiveLimit=0
Waittime=0

EOF
    for k in $(seq 1 "$NODES"); do
        echo "NodeName=node$k NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$((SLURMD_PORT_BASE + k)) CPUs=$CPUS Sockets=1 CoresPerSocket=$CPUS ThreadsPerCore=1 RealMemory=$MEM$node_gres State=UNKNOWN"
    done
    echo
    echo "PartitionName=gpu Nodes=ALL Default=YES PriorityTier=1 PreemptMode=REQUEUE$grace MaxTime=INFINITE State=UP"
    echo "PartitionName=urgent Nodes=ALL PriorityTier=10 MaxTime=INFINITE State=UP"
}

render_gres_conf() {
    local k
    echo "# Generated by slurm/local_cluster.sh: fake GPUs (character devices made with mknod)."
    echo "AutoDetect=off"
    ((GPUS > 0)) || return 0
    for k in $(seq 1 "$NODES"); do
        echo "NodeName=node$k Name=gpu File=$DEV_DIR/node$k/nvidia$(gpu_range)"
    done
}

# install_file SRC DST: move SRC over DST if the content differs; status 0 when DST changed.
install_file() {
    if [[ -f $2 ]] && cmp -s "$1" "$2"; then
        rm -f "$1"
        return 1
    fi
    install -m 0644 "$1" "$2"
    rm -f "$1"
}

# write_configs MODE: status 0 when slurm.conf or gres.conf changed.
write_configs() {
    local tmp changed=1
    mkdir -p "$CONF_DIR"
    tmp=$(mktemp)
    render_slurm_conf "$1" >"$tmp"
    install_file "$tmp" "$SLURM_CONF" && changed=0
    tmp=$(mktemp)
    render_gres_conf >"$tmp"
    install_file "$tmp" "$GRES_CONF" && changed=0
    return $changed
}

configs_current() {
    cmp -s <(render_slurm_conf "$1") "$SLURM_CONF" 2>/dev/null &&
        cmp -s <(render_gres_conf) "$GRES_CONF" 2>/dev/null
}

prepare_dirs() {
    mkdir -p "$LOCAL_DIR" "$CTLD_STATE" "$LOG_DIR"
    local n
    for n in $(node_names); do mkdir -p "$SLURMD_SPOOL/$n"; done
}

# Slurm rejects regular files as GRES devices, so make real character devices (major 195 is
# NVIDIA's). Each node gets its own directory so gres.conf names distinct files per node.
make_fake_gpus() {
    local n g dev
    for n in $(node_names); do
        mkdir -p "$DEV_DIR/$n"
        for ((g = 0; g < GPUS; g++)); do
            dev=$DEV_DIR/$n/nvidia$g
            [[ -c $dev ]] && continue
            rm -f "$dev"
            mknod -m 0666 "$dev" c 195 "$g"
        done
    done
}

# ---------------------------------------------------------------- processes

# pid_alive PIDFILE NAME: the pid in PIDFILE is running and is NAME (guards against stale pids).
pid_alive() {
    local pid
    pid=$(cat "$1" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$2" ]] || return 1
    # An exited daemon whose parent does not reap it (no init in a container) lingers as a zombie.
    # The state is the field after "(comm)" in /proc/PID/stat (no procps needed).
    local stat
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat%% *} != Z ]]
}

# wait_for DESCRIPTION SECONDS CMD...: poll CMD until it succeeds or the deadline passes.
wait_for() {
    local what=$1 secs=$2 deadline
    shift 2
    deadline=$((SECONDS + secs))
    until "$@"; do
        ((SECONDS < deadline)) || { log "timed out after ${secs}s waiting for $what"; return 1; }
        sleep 0.5
    done
}

# stop_pidfile PIDFILE NAME: SIGTERM, wait, SIGKILL as a last resort.
stop_pidfile() {
    pid_alive "$1" "$2" || { rm -f "$1"; return 0; }
    local pid
    pid=$(cat "$1")
    log "stopping $2 (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_for "$2 to exit" 30 not_alive "$1" "$2"; then
        log "$2 did not exit on SIGTERM; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        wait_for "$2 to die" 10 not_alive "$1" "$2" || true
    fi
    rm -f "$1"
}
not_alive() { ! pid_alive "$@"; }

munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
    if munge_ok; then return 0; fi
    log "starting munged"
    install -d -o munge -g munge -m 0755 /run/munge
    # munged wants to run as the owner of its key (user munge); root needs --force.
    if id munge >/dev/null 2>&1; then
        runuser -u munge -- /usr/sbin/munged
    else
        /usr/sbin/munged --force
    fi
    touch "$MUNGE_MARK"
    wait_for "munge" 30 munge_ok
}

stop_munge() {
    # Only stop a munged this script started: a host's own munge may serve other software.
    [[ -f $MUNGE_MARK ]] || return 0
    stop_pidfile "$MUNGE_PID" munged
    rm -f "$MUNGE_MARK"
}

slurmd_pidfile() { echo "/run/slurmd-$1.pid"; }

ctld_alive() { pid_alive "$CTLD_PID" slurmctld; }
slurmd_alive() { pid_alive "$(slurmd_pidfile "$1")" slurmd; }
# No pipe into grep -q: with pipefail an early grep exit can fail the pipeline via SIGPIPE.
ctld_responds() { [[ $(scontrol ping 2>/dev/null) == *"is UP"* ]]; }

start_slurmctld() {
    ctld_alive && return 0
    log "starting slurmctld"
    # -i: ignore unreadable state left by an older config instead of refusing to start.
    /usr/sbin/slurmctld -i
    # The daemon forks before it writes its pid file: wait for that before judging it dead.
    wait_for "slurmctld pid file" 30 ctld_alive || die_with_log slurmctld "$LOG_DIR/slurmctld.log"
    wait_for "slurmctld to answer" "$TIMEOUT" ctld_up_or_dead
    ctld_alive || die_with_log slurmctld "$LOG_DIR/slurmctld.log"
}
# Stop waiting as soon as slurmctld died (e.g. a fatal config error) instead of at the deadline.
ctld_up_or_dead() { ctld_responds || ! ctld_alive; }

die_with_log() {
    log "$1 exited; last lines of $2:"
    tail -n 5 "$2" >&2 || true
    die "$1 failed to start"
}

start_slurmd() {
    slurmd_alive "$1" && return 0
    log "starting slurmd -N $1"
    /usr/sbin/slurmd -N "$1"
    wait_for "slurmd $1 pid file" 30 slurmd_alive "$1" || die_with_log "slurmd -N $1" "$LOG_DIR/slurmd-$1.log"
}

all_slurmd_alive() {
    local n
    for n in $(node_names); do slurmd_alive "$n" || return 1; done
}

stop_slurm_daemons() {
    stop_pidfile "$CTLD_PID" slurmctld
    local f
    # Every slurmd pid file, also those of nodes a previous config had and this one does not.
    for f in /run/slurmd-*.pid; do
        [[ -e $f ]] || continue
        stop_pidfile "$f" slurmd
    done
}

# ---------------------------------------------------------------- readiness

# A node is ready when it responds (no '*' etc. suffix) and is in a usable state.
node_states() { sinfo -h -N -o '%N %T' 2>/dev/null | sort -u; }

nodes_ready() {
    local states ready
    states=$(node_states) || return 1
    ready=$(awk '$2 ~ /^(idle|mixed|allocated|completing)$/' <<<"$states" | wc -l)
    ((ready == NODES)) && [[ $(wc -l <<<"$states") -eq $NODES ]]
}

# Nodes left down/drained by an earlier run (e.g. "Not responding", "Kill task failed") are put
# back to service: 'up' means "usable cluster".
resume_broken_nodes() {
    local name state
    while read -r name state; do
        [[ -n $name ]] || continue
        case $state in
        down | drained | draining | fail | failing | inval)
            log "resuming $name (state $state)"
            scontrol update NodeName="$name" State=RESUME 2>/dev/null || true
            ;;
        esac
    done < <(node_states)
}

wait_ready() {
    local deadline=$((SECONDS + TIMEOUT)) resumed=0
    wait_for "slurmctld to answer" "$TIMEOUT" ctld_responds || return 1
    until nodes_ready; do
        local n
        for n in $(node_names); do
            slurmd_alive "$n" || die_with_log "slurmd -N $n" "$LOG_DIR/slurmd-$n.log"
        done
        if ((SECONDS >= deadline)); then
            log "timed out after ${TIMEOUT}s waiting for nodes; sinfo says:"
            node_states >&2 || true
            log "see $LOG_DIR/slurmctld.log and $LOG_DIR/slurmd-<node>.log"
            return 1
        fi
        # Give fresh registrations a few seconds before declaring a node stuck.
        if ((!resumed && SECONDS + TIMEOUT - deadline >= 5)); then
            resume_broken_nodes
            resumed=1
        fi
        sleep 0.5
    done
}

is_up() {
    munge_ok && ctld_alive && all_slurmd_alive && ctld_responds && nodes_ready
}

print_info() {
    log "config: $SLURM_CONF, $GRES_CONF (preempt user signal: $(preempt_mode))"
    log "logs:   $LOG_DIR/slurmctld.log, $LOG_DIR/slurmd-node<K>.log, /var/log/munge/munged.log"
    log "state:  $CTLD_STATE, $SLURMD_SPOOL/<node>, fake GPUs under $DEV_DIR"
}

# ---------------------------------------------------------------- commands

cmd_up() {
    local start=$EPOCHREALTIME mode
    install_packages
    disable_distro_units
    mode=$(preempt_mode)
    if configs_current "$mode" && is_up; then
        log "already up with the same config; nothing to do"
        print_info
        return 0
    fi
    prepare_dirs
    make_fake_gpus
    echo "$mode" >"$MODE_FILE"
    if write_configs "$mode"; then
        # Node lines and GRES changed: 22.05 can only pick those up on a restart.
        log "wrote $SLURM_CONF and $GRES_CONF; (re)starting the Slurm daemons"
        stop_slurm_daemons
    fi
    start_munge
    start_slurmctld
    local n
    for n in $(node_names); do start_slurmd "$n"; done
    wait_ready
    sinfo
    log "cluster up in $(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')s"
    print_info
}

cancel_all_jobs() {
    ctld_responds || return 0
    local users user
    users=$(squeue -h -o '%u' 2>/dev/null | sort -u)
    [[ -n $users ]] || return 0
    log "cancelling all jobs (set SLURM_LOCAL_KEEP_JOBS=1 to keep them)"
    for user in $users; do scancel -u "$user" 2>/dev/null || true; done
    wait_for "jobs to finish" 60 no_active_jobs || true
}
no_active_jobs() { [[ -z $(squeue -h -o '%i' 2>/dev/null) ]]; }

cmd_down() {
    if [[ ${SLURM_LOCAL_KEEP_JOBS:-0} != 1 ]]; then cancel_all_jobs; fi
    stop_slurm_daemons
    stop_munge
    log "cluster down (state kept in $CTLD_STATE; logs in $LOG_DIR)"
}

cmd_status() {
    local n rc=0
    printf 'munge:     %s\n' "$(munge_ok && echo up || echo down)"
    printf 'slurmctld: %s\n' "$(ctld_alive && echo "running (pid $(cat "$CTLD_PID"))" || echo stopped)"
    for n in $(node_names); do
        printf 'slurmd %-5s %s\n' "$n:" "$(slurmd_alive "$n" && echo "running (pid $(cat "$(slurmd_pidfile "$n")"))" || echo stopped)"
    done
    if ctld_responds; then
        sinfo
        squeue
    fi
    is_up || rc=3
    print_info
    echo "cluster: $( ((rc == 0)) && echo up || echo 'not (fully) up')"
    return $rc
}

# The running slurmctld has the given preempt settings loaded.
preempt_applied() {
    local mode=$1 params grace
    params=$(scontrol show config 2>/dev/null | awk -F' = ' '$1 ~ /^SlurmctldParameters/ {print $2}')
    grace=$(scontrol show partition gpu 2>/dev/null | grep -o 'GraceTime=[0-9]*' | cut -d= -f2)
    if [[ $mode == on ]]; then
        [[ $params == *preempt_send_user_signal* && $grace == "$GRACE" ]]
    else
        [[ $params != *preempt_send_user_signal* && $grace == 0 ]]
    fi
}

cmd_reconfigure_preempt_signal() {
    local mode=${1:-}
    [[ $mode == on || $mode == off ]] || usage
    mkdir -p "$LOCAL_DIR"
    echo "$mode" >"$MODE_FILE"
    export SLURM_LOCAL_PREEMPT_SIGNAL=$mode
    if ! ctld_alive || ! ctld_responds; then
        log "cluster not running; starting it with preempt user signal $mode"
        cmd_up
        return
    fi
    if write_configs "$mode"; then
        log "preempt user signal $mode: scontrol reconfigure"
        scontrol reconfigure
    fi
    if ! wait_for "slurmctld to load the new settings" 30 preempt_applied "$mode"; then
        log "reconfigure did not apply; restarting slurmctld"
        stop_pidfile "$CTLD_PID" slurmctld
        start_slurmctld
        wait_for "slurmctld to load the new settings" 30 preempt_applied "$mode" ||
            die "slurmctld does not show the preempt settings; see $LOG_DIR/slurmctld.log"
    fi
    wait_ready
    log "preempt user signal is $mode (GraceTime of partition gpu: $([[ $mode == on ]] && echo "$GRACE" || echo 0)s)"
}

main() {
    local cmd=${1:-}
    [[ -n $cmd ]] || usage
    shift
    case $cmd in -h | --help | help) usage 0 ;; esac
    require_root
    validate_options
    case $cmd in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    reconfigure-preempt-signal) cmd_reconfigure_preempt_signal "$@" ;;
    *) usage ;;
    esac
}

main "$@"
