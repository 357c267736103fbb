#!/usr/bin/env bash
# Stop the test cluster that tests/cluster/start-slurm.sh DIR started.
set -uo pipefail
dir=$(realpath -m "${1:?usage: stop-slurm.sh DIR}")
for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid"; do
    [ -s "$pidfile" ] && kill "$(cat "$pidfile")" 2> /dev/null
done
exit 0
