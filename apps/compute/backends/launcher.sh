#!/bin/bash
# Torus batch launcher. This text is identical for every job: all job-specific values arrive
# as environment data (TORUS_*), so nothing a user writes is ever read as script or directive.
set -euo pipefail

case "${TORUS_ENV_KIND:-none}" in
  venv) export VIRTUAL_ENV="$TORUS_ENV_PATH" PATH="$TORUS_ENV_PATH/bin:$PATH" ;;
  conda) export CONDA_PREFIX="$TORUS_ENV_PATH" PATH="$TORUS_ENV_PATH/bin:$PATH" ;;
esac

if [[ "$SLURM_NNODES" == 1 ]]; then
  export MASTER_ADDR=127.0.0.1  # every rank is on this node
else
  first_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
  addr=$(scontrol show node "$first_node" -o | sed -n 's/.* NodeAddr=\([^ ]*\).*/\1/p')
  export MASTER_ADDR="${addr:-$first_node}"
fi
# 22000-31999: below Linux's ephemeral range (32768-60999), so no outgoing connection on the
# node can hold the rendezvous port, and above the ports of the platform's own services (up to
# 21001: job 259 once met the kube-scheduler on 20259); jobs 10000 ids apart on one node would
# share it.
export MASTER_PORT="${TORUS_MASTER_PORT:-$((22000 + SLURM_JOB_ID % 10000))}"
export WORLD_SIZE=$((SLURM_NNODES * TORUS_TASKS_PER_NODE))
# The CPUs each task was allotted (Slurm's count of the allocation, which may exceed the
# request), in the platform's word: a serve replica's engine threads (apps/serving/replicas.py).
export TORUS_CPUS_PER_TASK="${SLURM_CPUS_PER_TASK:-}"

# Dataset versions (apps/compute/backends/stager.py): staged once per node into its cache, or
# read in place; each task then gets TORUS_DATASET_<AS> from its node's env file.
if [[ -n "${TORUS_DATASETS_PLAN:-}" ]]; then
  stager="${TORUS_DATASETS_PLAN%/*}/stager.py"
  if [[ "$SLURM_NNODES" == 1 ]]; then
    python3 -I "$stager" "$TORUS_DATASETS_PLAN"
  else
    srun --ntasks="$SLURM_NNODES" --ntasks-per-node=1 python3 -I "$stager" "$TORUS_DATASETS_PLAN"
  fi
fi

# Run inside every task: rebuild the argv from its words (data, never evaluated: argv.py), set the
# rank variables from Slurm's, then exec the program.
read -r -d '' TORUS_TASK_SH <<'TASK' || true
set -euo pipefail
decode() { local out; out=$(printf '%s' "$1" | base64 -d; printf x); printf '%s' "${out%x}"; }
args=()
if [[ -n "${TORUS_SCRIPT_B64:-}" ]]; then
  args=(bash -c "$(decode "$TORUS_SCRIPT_B64")" torus-script)
else
  for word in $TORUS_ARGV; do printf -v word '%b' "$word"; args+=("$word"); done
fi
if [[ -n "${TORUS_DATASETS_PLAN:-}" ]]; then
  while IFS= read -r line; do
    key=${line%%=*}
    if [[ "$key" =~ ^TORUS_DATASETS?(_[A-Z][A-Z0-9_]*)?$ ]]; then export "$key=${line#*=}"; fi
  done < "${TORUS_DATASETS_PLAN%/*}/datasets-${SLURMD_NODENAME}.env"
fi
export NODE_RANK="${SLURM_NODEID:-0}"
case "$TORUS_LAUNCHER" in
  torchrun)
    exec torchrun --no-python --nnodes="$SLURM_NNODES" --nproc-per-node="$TORUS_TASKS_PER_NODE" \
      --node-rank="$NODE_RANK" --master-addr="$MASTER_ADDR" --master-port="$MASTER_PORT" \
      "${args[@]}" ;;
  mpirun)
    export RANK="${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}"
    export LOCAL_RANK="${OMPI_COMM_WORLD_LOCAL_RANK:-${MPI_LOCALRANKID:-0}}" ;;
  *)
    export RANK="${SLURM_PROCID:-0}" LOCAL_RANK="${SLURM_LOCALID:-0}" ;;
esac
exec "${args[@]}"
TASK
export TORUS_TASK_SH
task() ( eval "$TORUS_TASK_SH" )  # the same in a subshell of this one: cheaper than a new bash

# Run the program and leave its exit status in TORUS_EXIT_FILE: a controller that loses the
# job's end (slurmctld SIGKILLed before it saved it) cannot make the platform run it again
# (apps/jobs/reconcile.py). The launcher then ends as the program did, by its signal too.
ended() {
  local status=0
  "$@" || status=$?
  if [[ -n "${TORUS_EXIT_FILE:-}" ]]; then  # one write, its newline last: only a status that
    printf '%s\n' "$status" >"$TORUS_EXIT_FILE" || true  # ends in one is read (paths.py)
  fi
  if ((status > 128 && status < 160)); then
    trap - "$((status - 128))" 2>/dev/null || true
    kill -s "$((status - 128))" "$$" 2>/dev/null || true
  fi
  exit "$status"
}

case "$TORUS_LAUNCHER" in
  torchrun)
    ended srun --kill-on-bad-exit=1 --export=ALL --ntasks="$SLURM_NNODES" --ntasks-per-node=1 \
      bash -c "$TORUS_TASK_SH" ;;
  mpirun)
    ended mpirun -np "$WORLD_SIZE" bash -c "$TORUS_TASK_SH" ;;
  *)
    if [[ "$WORLD_SIZE" == 1 ]]; then  # one process: it runs in the batch step itself
      ended task
    fi
    ended srun --kill-on-bad-exit=1 --export=ALL --ntasks="$WORLD_SIZE" \
      --ntasks-per-node="$TORUS_TASKS_PER_NODE" bash -c "$TORUS_TASK_SH" ;;
esac
