#!/bin/sh
# Slurm prolog: refuse to start a job on a node whose Python environment is not ready.
#
# Install as the node's Prolog (slurm.conf: Prolog=/etc/slurm/prolog.d/envdoctor.sh and
# PrologFlags=Alloc). Slurm runs it as root, with no terminal, no stdin and a minimal
# environment, on every node of the allocation at once: the scheduler does the fan-out, no
# SSH is involved. It is a pure gate: it calls no Slurm command (Slurm's rule for prologs).
# Its exit status:
#   0  the node is ready, or envdoctor ran out of its own time with ENVDOCTOR_ON_TIMEOUT=run
#      (the report says so: "timed_out": true): the job starts
#   1  something is wrong on this node or in its job environment: Slurm drains the node
#      ("Prolog error") and requeues the job (held); slurm-healthcheck.sh reads this
#      prolog's report, gives the drain an "envdoctor: ..." reason and resumes the node
#      once every check passes again
#   2  the gate itself is misconfigured (a bad option or requirement): alert a person
#   3  envdoctor ran out of its own time with ENVDOCTOR_ON_TIMEOUT=hold: the job is held;
#      the node is not at fault, and the health check resumes it at its next run
#
# Settings (override in the environment or edit here):
#   ENVDOCTOR        absolute path of the envdoctor program (PATH is minimal in a prolog)
#   ENVDOCTOR_VENV   the cluster's job environment on this node (part of the node image);
#                    a user's own venv is checked by the job's first step (docs/cluster-gate.md)
#   ENVDOCTOR_ARGS   more options, e.g. "--require tiktoken --model /models/Kimi-K2.6"
#   ENVDOCTOR_REPORT where the JSON report goes (one file per job); when the prolog stops a
#                    job it also copies the report to prolog-NODE.json in the same folder,
#                    where the health check reads why the node was drained
#   ENVDOCTOR_GPUS   GPUs this node must answer with (default: as many as Slurm allocated
#                    to the job here, from SLURM_JOB_GPUS); host.gpu fails on fewer or no driver
#   ENVDOCTOR_TIMEOUT     seconds envdoctor may take in all (default 120): it is asked for
#                    --timeout 15 s less, so that it stops and reports on its own, and a
#                    watchdog stops it at ENVDOCTOR_TIMEOUT should it overrun or hang
#   ENVDOCTOR_ON_TIMEOUT  run (default) or hold: what to do when envdoctor itself runs out
#                    of time before it could judge every check and nothing it judged failed
set -u
PATH=${PATH:-/usr/sbin:/usr/bin:/sbin:/bin}
export PATH

ENVDOCTOR=${ENVDOCTOR:-/opt/envdoctor/bin/envdoctor}
ENVDOCTOR_VENV=${ENVDOCTOR_VENV:-/opt/venvs/job}
ENVDOCTOR_ARGS=${ENVDOCTOR_ARGS:-}
ENVDOCTOR_REPORT=${ENVDOCTOR_REPORT:-/var/log/envdoctor/job-${SLURM_JOB_ID:-none}.json}
ENVDOCTOR_TIMEOUT=${ENVDOCTOR_TIMEOUT:-120}
ENVDOCTOR_ON_TIMEOUT=${ENVDOCTOR_ON_TIMEOUT:-run}
NODE=${SLURMD_NODENAME:-$(hostname)}
LATEST="$(dirname "$ENVDOCTOR_REPORT")/prolog-$NODE.json"

case $ENVDOCTOR_TIMEOUT in
  ''|*[!0-9]*|[0-9]) echo "envdoctor: ENVDOCTOR_TIMEOUT must be whole seconds, 10 or more, not '$ENVDOCTOR_TIMEOUT'" >&2; exit 2 ;;
esac
case $ENVDOCTOR_ON_TIMEOUT in
  run|hold) ;;
  *) echo "envdoctor: ENVDOCTOR_ON_TIMEOUT must be run or hold, not '$ENVDOCTOR_ON_TIMEOUT'" >&2; exit 2 ;;
esac

if [ -z "${ENVDOCTOR_GPUS:-}" ] && [ -n "${SLURM_JOB_GPUS:-}" ]; then
  ENVDOCTOR_GPUS=$(echo "$SLURM_JOB_GPUS" | tr ',' '\n' | grep -c .)
fi
GPU_ARGS=""
if [ -n "${ENVDOCTOR_GPUS:-}" ]; then GPU_ARGS="--gpus $ENVDOCTOR_GPUS"; fi

# envdoctor's --timeout leaves it 15 s (or half the time, when short) to report before the
# watchdog, which stops it at ENVDOCTOR_TIMEOUT (SIGTERM 2 s before, exit 124; 137 if it had
# to be killed): that too is envdoctor's time running out. The prolog ends within
# ENVDOCTOR_TIMEOUT and a moment.
RUN_TIMEOUT=$((ENVDOCTOR_TIMEOUT - 15))
if [ "$RUN_TIMEOUT" -lt $((ENVDOCTOR_TIMEOUT / 2)) ]; then RUN_TIMEOUT=$((ENVDOCTOR_TIMEOUT / 2)); fi
WATCHDOG=""
if command -v timeout >/dev/null 2>&1; then WATCHDOG="timeout -k 2 $((ENVDOCTOR_TIMEOUT - 2))"; fi

mkdir -p "$(dirname "$ENVDOCTOR_REPORT")"
rm -f "$ENVDOCTOR_REPORT"  # never a stale report read as this run's
# ENVDOCTOR_ARGS is split on spaces on purpose (several options); paths in it must not
# contain spaces. Everything else is quoted.
# shellcheck disable=SC2086
$WATCHDOG "$ENVDOCTOR" check local --venv "$ENVDOCTOR_VENV" $GPU_ARGS $ENVDOCTOR_ARGS \
    --format json --output "$ENVDOCTOR_REPORT" --timeout "$RUN_TIMEOUT" </dev/null
status=$?

# envdoctor's own time ran out (the report's "timed_out") and no check it could judge failed:
# that is not the node's fault. Lines are matched whole: a message cannot hold a line break.
only_timed_out() {
  grep -q '^ *"timed_out": true' "$ENVDOCTOR_REPORT" 2>/dev/null \
    && ! grep -q '^ *"status": "fail"' "$ENVDOCTOR_REPORT"
}

case $status in
  124|137)  # the watchdog stopped envdoctor: say so where the health check looks
    printf '{\n  "schema": 1,\n  "command": "check",\n  "exit_status": %s,\n  "timed_out": true,\n  "hosts": []\n}\n' \
      "$status" > "$ENVDOCTOR_REPORT"
    timed_out=1 ;;
  1) if only_timed_out; then timed_out=1; else timed_out=0; fi ;;
  *) timed_out=0 ;;
esac
# The report of a run that stops the job, where the health check finds it (only those: a
# prolog that passes meanwhile for another job on the node must not hide why it drained).
keep() {
  if [ -f "$ENVDOCTOR_REPORT" ]; then cp "$ENVDOCTOR_REPORT" "$LATEST.tmp" && mv -f "$LATEST.tmp" "$LATEST"; fi
}

if [ "$timed_out" = 1 ]; then
  echo "envdoctor: did not finish within ${ENVDOCTOR_TIMEOUT}s on $NODE for job ${SLURM_JOB_ID:-?} (envdoctor's own time, not the node's fault; nothing it judged failed); see $ENVDOCTOR_REPORT" >&2
  if [ "$ENVDOCTOR_ON_TIMEOUT" = hold ]; then keep; exit 3; fi
  exit 0
fi
case $status in
  0) exit 0 ;;
  1) echo "envdoctor: node $NODE is not ready for job ${SLURM_JOB_ID:-?}; see $ENVDOCTOR_REPORT" >&2
     keep
     exit 1 ;;
  *) echo "envdoctor: the prolog gate itself failed (exit $status); check its settings" >&2
     exit 2 ;;
esac
