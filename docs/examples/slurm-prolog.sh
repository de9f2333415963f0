#!/bin/sh
# Slurm prolog: refuse to start a job on a node whose Python environment is not ready.
#
# Install as the node's Prolog (slurm.conf: Prolog=/etc/slurm/prolog.d/envdoctor.sh).
# Slurm runs it as root, with no terminal, no stdin and a minimal environment, on every
# node of the allocation at once: the scheduler does the fan-out, no SSH is involved.
# A non-zero exit drains the node and requeues the job, so only "something is wrong on
# this node" (1) and "the gate itself is misconfigured" (2) should stop a job.
#
# Settings (override in the environment or edit here):
#   ENVDOCTOR        absolute path of the envdoctor program (PATH is minimal in a prolog)
#   ENVDOCTOR_VENV   the job's virtualenv on this node
#   ENVDOCTOR_ARGS   more options, e.g. "--require tiktoken --model /models/Kimi-K2.6"
#   ENVDOCTOR_REPORT where the JSON report goes (one file per job)
#   ENVDOCTOR_GPUS   GPUs this node must answer with (default: as many as Slurm allocated
#                    to the job here, from SLURM_JOB_GPUS); host.gpu fails on fewer or no driver
set -u

ENVDOCTOR=${ENVDOCTOR:-/opt/envdoctor/bin/envdoctor}
ENVDOCTOR_VENV=${ENVDOCTOR_VENV:-/opt/venvs/job}
ENVDOCTOR_ARGS=${ENVDOCTOR_ARGS:-}
ENVDOCTOR_REPORT=${ENVDOCTOR_REPORT:-/var/log/envdoctor/job-${SLURM_JOB_ID:-none}.json}

if [ -z "${ENVDOCTOR_GPUS:-}" ] && [ -n "${SLURM_JOB_GPUS:-}" ]; then
  ENVDOCTOR_GPUS=$(echo "$SLURM_JOB_GPUS" | tr ',' '\n' | grep -c .)
fi
GPU_ARGS=""
if [ -n "${ENVDOCTOR_GPUS:-}" ]; then GPU_ARGS="--gpus $ENVDOCTOR_GPUS"; fi

mkdir -p "$(dirname "$ENVDOCTOR_REPORT")"
# ENVDOCTOR_ARGS is split on spaces on purpose (several options); paths in it must not
# contain spaces. Everything else is quoted.
# shellcheck disable=SC2086
"$ENVDOCTOR" check local --venv "$ENVDOCTOR_VENV" $GPU_ARGS $ENVDOCTOR_ARGS \
    --format json --output "$ENVDOCTOR_REPORT" --timeout 120 </dev/null
status=$?

case $status in
  0) exit 0 ;;
  1) echo "envdoctor: node $(hostname) is not ready for job ${SLURM_JOB_ID:-?}; see $ENVDOCTOR_REPORT" >&2
     exit 1 ;;
  *) echo "envdoctor: the prolog gate itself failed (exit $status); check its settings" >&2
     exit "$status" ;;
esac
