#!/usr/bin/env bash
# Many more kill points than CI runs: scripts/faults.sh [--seeds 1-5] [--kills 12] [--transactions 200]
# Each seed: an undisturbed reference and a faulted run (SIGKILLs at random points, two runs at once,
# every file replayed) over the same sample landing zone; see testkit/faults/.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=1-3 kills=12 transactions=200 batch=3
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seeds) seeds=$2; shift 2 ;;
    --kills) kills=$2; shift 2 ;;
    --transactions) transactions=$2; shift 2 ;;
    --max-files-per-batch) batch=$2; shift 2 ;;
    *) echo "usage: scripts/faults.sh [--seeds A-B] [--kills N] [--transactions N] [--max-files-per-batch N]" >&2; exit 2 ;;
  esac
done
bash scripts/setup.sh >/dev/null
work=${WAL_LAKE_FAULTS_DIR:-$(mktemp -d -t wal_lake_faults.XXXXXX)}
mkdir -p "$work"
failed=0 total_kills=0 runs=0
for seed in $(seq "${seeds%-*}" "${seeds#*-}"); do
  log="$work/seed_$seed.log"
  if .venv/bin/python -m testkit.faults inject --workdir "$work/seed_$seed" --kills "$kills" \
      --seed "$seed" --transactions "$transactions" --max-files-per-batch "$batch" | tee "$log"; then
    :
  else
    failed=$((failed + 1))
  fi
  runs=$((runs + 1))
  n=$(grep -o '^faults: [0-9]* kills injected' "$log" | grep -o '[0-9]*' || echo 0)
  total_kills=$((total_kills + n))
done
echo "faults.sh: $runs seeds, $total_kills kills injected, $failed seeds with differences (logs in $work)"
[[ $failed -eq 0 ]]
