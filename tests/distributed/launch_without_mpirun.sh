#!/usr/bin/env bash
# Starts one program as the N ranks of a world without mpirun, the way any
# other launcher would: each process gets TANDEM_RANK, TANDEM_WORLD_SIZE,
# MASTER_ADDR and MASTER_PORT (Note [Joining without mpirun] in
# distributed/join_world.h). Rank 0 starts last, so that the others must wait
# for it. Exits 0 when every process does.
#
#   launch_without_mpirun.sh [--leave-out-last] N program [args...]
#
# --leave-out-last starts ranks 0 to N-2 only: a rank that never comes.
set -uo pipefail

leave_out_last=0
if [[ "${1:-}" == "--leave-out-last" ]]; then
  leave_out_last=1
  shift
fi
world_size="$1"
shift
# Below Linux's ephemeral ports (32768 and up), which outgoing connections take.
port=$((20000 + RANDOM % 12000))

pids=()
trap 'kill "${pids[@]}" 2>/dev/null' INT TERM
for ((rank = world_size - 1 - leave_out_last; rank >= 0; rank--)); do
  TANDEM_RANK=$rank TANDEM_WORLD_SIZE=$world_size MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
  wait "$pid" || status=1
done
exit "$status"
