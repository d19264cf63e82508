#!/usr/bin/env bash
# One model, three modes, with collectives (exported_collectives_child.cc):
# export from 3 ranks under mpirun, run the saved graph with tandem-run on 3
# ranks under mpirun and again without it, and compare each rank's outputs
# with its eager ones.
#
#   run_exported_collectives.sh CHILD TANDEM_RUN MPIEXEC
set -euo pipefail
child="$1" tandem_run="$2" mpiexec="$3"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
mpirun=("$mpiexec" --allow-run-as-root --oversubscribe -np 3)
# A rank that is missing fails the others within a minute, well before ctest's timeout.
export TANDEM_DISTRIBUTED_TIMEOUT=60

"${mpirun[@]}" "$child" export "$dir"
"${mpirun[@]}" "$tandem_run" "$dir/step.json" --input "$dir/x_rank{rank}.npy" \
  --output "$dir/under_mpirun"
"$child" check "$dir/under_mpirun" "$dir" 3
bash "$here/launch_without_mpirun.sh" 3 "$tandem_run" "$dir/step.json" \
  --input "$dir/x_rank{rank}.npy" --output "$dir/without_mpirun"
"$child" check "$dir/without_mpirun" "$dir" 3
