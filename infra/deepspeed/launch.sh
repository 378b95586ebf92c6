#!/usr/bin/env bash
# Multi-node DeepSpeed launch of one rubricflow CLI command on every GPU of the hosts in the hostfile.
#
#   MASTER_ADDR=gpu-node-0 infra/deepspeed/launch.sh [rubricflow global options] <command> [args...]
#   e.g. MASTER_ADDR=gpu-node-0 infra/deepspeed/launch.sh --profile gpu \
#          --set judge.openai.base_url=http://head-node:8000/v1 <command>
#
# Runs `deepspeed --hostfile ... --master_addr ... --no_python --no_local_rank rubricflow <args> ...` from the
# project root: DeepSpeed ssh-es (pdsh) into each host, cds into the same directory and starts one process per
# slot with RANK/LOCAL_RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set (no --local_rank argument is appended, so the
# typer CLI sees only its own arguments). Each node needs the same checkout at the same path and the same
# environment (or the rubricflow image).
#
# Environment:
#   MASTER_ADDR  (required) address of the first host, reachable from all nodes
#   MASTER_PORT  rendezvous port (default 29500)
#   HOSTFILE     default: infra/deepspeed/hostfile
#   DS_LAUNCHER  pdsh (default), openmpi, mvapich, slurm, ... (deepspeed --launcher)
#   DRY_RUN=1    print the command (one shell-quoted line) and the forwarded variables' names, run nothing
# Forwarded to every rank when set (besides MLFLOW_* and NCCL_*, which DeepSpeed forwards itself):
#   PREFECT_API_URL, JUDGE_API_KEY, RUBRICFLOW_PARAMS, RUBRICFLOW_THREADS, HF_HOME, HF_HUB_OFFLINE.
#   Note: pdsh passes them on the remote command line (visible in `ps` on the nodes).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

if [ $# -lt 1 ]; then
  echo "usage: MASTER_ADDR=<first host> $0 [rubricflow global options] <command> [args...]" >&2
  exit 2
fi
: "${MASTER_ADDR:?set MASTER_ADDR to the first host of the hostfile (reachable from every node)}"
MASTER_PORT="${MASTER_PORT:-29500}"
HOSTFILE="${HOSTFILE:-$here/hostfile}"
DS_LAUNCHER="${DS_LAUNCHER:-pdsh}"
if [ ! -f "$HOSTFILE" ]; then
  echo "launch.sh: hostfile not found: $HOSTFILE (lines of '<host> slots=<gpus>')" >&2
  exit 2
fi

# DeepSpeed reads extra exports from $DS_ENV_FILE (lines NAME=value) and passes them to every rank.
forward=(PREFECT_API_URL JUDGE_API_KEY RUBRICFLOW_PARAMS RUBRICFLOW_THREADS HF_HOME HF_HUB_OFFLINE)
env_file="$(mktemp "${TMPDIR:-/tmp}/rubricflow-deepspeed-env.XXXXXX")"
trap 'rm -f "$env_file"' EXIT
forwarded=()
for name in "${forward[@]}"; do
  if [ -n "${!name:-}" ]; then
    printf '%s=%s\n' "$name" "${!name}" >>"$env_file"
    forwarded+=("$name")
  fi
done

cmd=(deepspeed --hostfile "$HOSTFILE" --master_addr "$MASTER_ADDR" --master_port "$MASTER_PORT"
     --launcher "$DS_LAUNCHER" --no_python --no_local_rank rubricflow "$@")

if [ "${DRY_RUN:-0}" = "1" ]; then
  printf '%q ' "${cmd[@]}"
  printf '\n'
  echo "forwarded: ${forwarded[*]:-}"
  exit 0
fi

cd "$root"
DS_ENV_FILE="$env_file" "${cmd[@]}"
