#!/usr/bin/env bash
# Start a one-node SLURM cluster (munged, slurmctld, slurmd) for trainscope's tests, with
# its state, logs and config in DIR; prints the SLURM_CONF to export. Needs root and
# Debian's slurm-wlm and munge packages. Stop it with tests/cluster/stop-slurm.sh DIR.
set -euo pipefail
dir=$(realpath -m "${1:?usage: start-slurm.sh DIR}")
here=$(dirname "$(realpath "$0")")
mkdir -p "$dir/state" "$dir/spool"
host=$(hostname -s)
cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # nproc honours OMP_NUM_THREADS
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
# Ports of their own: not SLURM's 6817/6818 (a real cluster's are left alone), and not
# in 15000-31999, where trainscope derives a SLURM step's rendezvous port.
sed -e "s|@HOST@|$host|g" -e "s|@CPUS@|$cpus|g" -e "s|@MEM@|$mem|g" -e "s|@DIR@|$dir|g" \
    -e "s|@CTLD_PORT@|${SLURMCTLD_PORT:-32700}|g" -e "s|@SLURMD_PORT@|${SLURMD_PORT:-32701}|g" \
    "$here/slurm.conf.in" > "$dir/slurm.conf"
export SLURM_CONF="$dir/slurm.conf"
# munged runs as its own user, with its socket where the clients look for it.
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge
if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
fi
pgrep -x munged > /dev/null || runuser -u munge -- /usr/sbin/munged
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 60); do
    if sinfo -h -o %T 2>/dev/null | grep -qx idle; then
        echo "export SLURM_CONF=$SLURM_CONF"
        exit 0
    fi
    scontrol update nodename="$host" state=resume > /dev/null 2>&1 || true
    sleep 1
done
echo "start-slurm.sh: the node did not come up; see $dir/slurmctld.log and $dir/slurmd.log" >&2
exit 1
