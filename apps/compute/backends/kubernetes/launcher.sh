#!/bin/bash
# Torus container launcher for Kubernetes. This text is identical for every job (it is the
# container's command); all job-specific values arrive as environment data (TORUS_*), so
# nothing a user writes is ever read as script. One pod per node: an Indexed Job gives each
# its JOB_COMPLETION_INDEX (the node rank), and the backend names rank 0's address.
set -euo pipefail

case "${TORUS_ENV_KIND:-none}" in
  venv) export VIRTUAL_ENV="$TORUS_ENV_PATH" PATH="$TORUS_ENV_PATH/bin:$PATH" ;;
  conda) export CONDA_PREFIX="$TORUS_ENV_PATH" PATH="$TORUS_ENV_PATH/bin:$PATH" ;;
esac

nnodes="${TORUS_NNODES:-1}"
per_node="${TORUS_TASKS_PER_NODE:-1}"
export NODE_RANK="${JOB_COMPLETION_INDEX:-0}"
export MASTER_ADDR="${TORUS_MASTER_ADDR:-127.0.0.1}"
# A pod has its own network namespace: a fixed port cannot collide with another job's.
export MASTER_PORT="${TORUS_MASTER_PORT:-29500}"
export WORLD_SIZE=$((nnodes * per_node))

# Dataset versions: the platform wrote a plan and its stager beside it in the attempt's
# directory (on the project's volume). A pod has no node cache mounted, so the stager reads
# each version in place (or fetches an S3 version into the attempt's directory) and writes
# TORUS_DATASET_<AS> lines, which are exported here, by name pattern only.
if [[ -n "${TORUS_DATASETS_PLAN:-}" ]]; then
  plan_dir="${TORUS_DATASETS_PLAN%/*}"
  node="${HOSTNAME:-$(cat /proc/sys/kernel/hostname)}"
  python3 -I "$plan_dir/stager.py" "$TORUS_DATASETS_PLAN"
  while IFS= read -r line; do
    key=${line%%=*}
    if [[ "$key" =~ ^TORUS_DATASETS?(_[A-Z][A-Z0-9_]*)?$ ]]; then export "$key=${line#*=}"; fi
  done < "$plan_dir/datasets-${node%%.*}.env"
fi

decode() { local out; out=$(printf '%s' "$1" | base64 -d; printf x); printf '%s' "${out%x}"; }
args=()
if [[ -n "${TORUS_SCRIPT_B64:-}" ]]; then
  args=(bash -c "$(decode "$TORUS_SCRIPT_B64")" torus-script)
else
  for word in $TORUS_ARGV; do printf -v word '%b' "$word"; args+=("$word"); done
fi

case "${TORUS_LAUNCHER:-none}" in
  torchrun)
    exec torchrun --no-python --nnodes="$nnodes" --nproc-per-node="$per_node" \
      --node-rank="$NODE_RANK" --master-addr="$MASTER_ADDR" --master-port="$MASTER_PORT" \
      "${args[@]}" ;;
  mpirun)
    export RANK=$((NODE_RANK * per_node)) LOCAL_RANK=0
    exec "${args[@]}" ;;
esac
if [[ "$per_node" == 1 ]]; then
  export RANK="$NODE_RANK" LOCAL_RANK=0
  exec "${args[@]}"
fi
# Several tasks on this node: one process each; the pod fails when any of them does.
pids=()
for ((local_rank = 0; local_rank < per_node; local_rank++)); do
  RANK=$((NODE_RANK * per_node + local_rank)) LOCAL_RANK=$local_rank "${args[@]}" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=$?; done
exit "$status"
