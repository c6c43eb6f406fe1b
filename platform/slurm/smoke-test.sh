#!/usr/bin/env bash
# Smoke test of the running Torus Slurm cluster (platform/services/components/slurm start).
# Submits a handful of tiny jobs (sbatch and slurmrestd) and checks what the platform relies on.
# Usage: platform/slurm/smoke-test.sh      (TORUS_VAR_DIR as for the component; needs jq, curl)
# shellcheck disable=SC2016,SC2015  # single-quoted $ is for the job; a && b || c is meant
set -u -o pipefail
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TORUS_VAR_DIR=${TORUS_VAR_DIR:-$REPO_ROOT/.var}
# shellcheck source=/dev/null
source "$TORUS_VAR_DIR/slurm/env" || { echo "no $TORUS_VAR_DIR/slurm/env: is slurm started?" >&2; exit 1; }
command -v jq >/dev/null || { echo "smoke-test needs jq" >&2; exit 1; }

work=$(mktemp -d /tmp/torus-slurm-smoke.XXXXXX)
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
final_state() {  # jobid -> waits up to 30 s, prints squeue state
    local j=$1 s i
    for ((i = 0; i < 150; i++)); do
        s=$(squeue -h -t all -j "$j" -o %T 2>/dev/null)
        [[ $s =~ ^(COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY)$ ]] && break
        sleep 0.2
    done
    echo "$s"
}

j1=$(sbatch --parsable --gres=gpu:2 -o "$work/gpu-%j.out" --wrap 'echo $CUDA_VISIBLE_DEVICES')
j2=$(sbatch --parsable -N2 --ntasks-per-node=2 -o "$work/mn-%j.out" \
    --wrap 'srun printenv SLURMD_NODENAME; srun printenv SLURM_PROCID')
[[ $(final_state "$j1") == COMPLETED && $(cat "$work/gpu-$j1.out") == 0,1 ]] &&
    ok "sbatch --gres=gpu:2 -> CUDA_VISIBLE_DEVICES=0,1" || bad "gpu job $j1: $(cat "$work/gpu-$j1.out")"
[[ $(final_state "$j2") == COMPLETED ]] &&
    [[ $(grep -c '^n[12]$' "$work/mn-$j2.out") == 4 && $(grep -cx '[0-3]' "$work/mn-$j2.out") == 4 ]] &&
    ok "sbatch -N2 --ntasks-per-node=2: 4 ranks on n1,n2" || bad "multi-node job $j2: $(tr '\n' ' ' <"$work/mn-$j2.out")"
if sbatch --gres=gpu:5 --wrap true >/dev/null 2>&1; then bad "gpu:5 was accepted"; else ok "gpu:5 rejected at submit"; fi
for j in "$j1" "$j2"; do
    s=$(sacct -X -n -P -j "$j" -o state,exitcode)
    [[ $s == "COMPLETED|0:0" ]] && ok "sacct $j: $s" || bad "sacct $j: $s"
done

tok=$(scontrol token username=root lifespan=600 | sed -n 's/^SLURM_JWT=//p')
tag="torus-attempt-smoke-$$"
body=$(jq -n --arg tag "$tag" --arg out "$work/rest-%j.out" --arg cwd "$work" '{
    script: "#!/bin/bash\necho rest $TORUS_X $CUDA_VISIBLE_DEVICES\nexit 3\n",
    job: {name: $tag, comment: $tag, environment: {PATH: "/usr/bin:/bin", TORUS_X: "x"},
          current_working_directory: $cwd, standard_output: $out, gres: "gpu:1"}}')
resp=$(curl -s -H "X-SLURM-USER-NAME: root" -H "X-SLURM-USER-TOKEN: $tok" -H 'Content-Type: application/json' \
    -X POST --data "$body" "$TORUS_SLURMRESTD_URL/slurm/$TORUS_SLURMRESTD_API/job/submit")
j3=$(jq -r '.job_id // empty' <<<"$resp")
if [[ -n $j3 ]]; then
    st=$(final_state "$j3")
    [[ $st == FAILED && $(cat "$work/rest-$j3.out") == "rest x 0" ]] && ok "REST submit $j3 ran (exit 3 -> FAILED)" ||
        bad "REST job $j3: $st $(cat "$work/rest-$j3.out" 2>&1)"
    q=$(squeue --json | jq -c --argjson j "$j3" '.jobs[] | select(.job_id == $j) | [.comment, .name, .exit_code]')
    [[ $q == "[\"$tag\",\"$tag\",768]" ]] && ok "squeue --json: comment/name/exit_code $q" || bad "squeue --json: $q"
    r=$(curl -s -H "X-SLURM-USER-NAME: root" -H "X-SLURM-USER-TOKEN: $tok" \
        "$TORUS_SLURMRESTD_URL/slurm/$TORUS_SLURMRESTD_API/job/$j3" | jq -c '.jobs[0] | [.comment, .job_state]')
    [[ $r == "[\"$tag\",\"FAILED\"]" ]] && ok "GET job/$j3: $r" || bad "GET job/$j3: $r"
    s=$(sacct -X -n -P -j "$j3" -o comment,state,exitcode)
    [[ $s == "$tag|FAILED|3:0" ]] && ok "sacct $j3: $s" || bad "sacct $j3: $s"
else
    bad "REST submit: $resp"
fi

rm -rf "$work"
((fails == 0)) && echo "slurm smoke test passed" || echo "slurm smoke test: $fails failure(s)"
((fails == 0))
