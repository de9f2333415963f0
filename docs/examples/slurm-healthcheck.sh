#!/bin/sh
# Slurm HealthCheckProgram: drain a node whose GPUs, driver, disk, /dev/shm or job
# environment is broken, and give back the nodes envdoctor drained once it is fixed.
#
# Install on every node and point slurm.conf at it (see docs/cluster-gate.md):
#   HealthCheckProgram=/etc/slurm/envdoctor-healthcheck.sh
#   HealthCheckInterval=300
#   HealthCheckNodeState=ANY
# slurmd runs it as root on every node at once, with almost no environment, and kills it
# after 60 seconds; it bounds itself well inside that (envdoctor's --timeout and a watchdog).
# As LBNL NHC does, it talks to Slurm itself (scontrol); the prolog never does.
#
#  - A failing check drains the node with a reason that starts "envdoctor:", names the first
#    failing check and its subject, and ends with the problem's kind, e.g.
#      envdoctor: packages.required tiktoken is missing in /opt/venvs/job [job env: packages]
#      envdoctor: host.gpu no nvidia-smi on PATH: ...; 1 GPU(s) expected [node: driver]
#    (the node's: GPU, driver, disk, /dev/shm; the job environment's: venv, packages, model).
#  - A "Prolog error" drain that slurm-prolog.sh's report explains gets that same reason.
#  - A node drained with an envdoctor reason is resumed once every check passes again.
#  - A node drained by a person or another tool, or down, is left as it is.
#  - What running jobs use is not a failure: on a node with jobs, gpu.free (GPU memory held,
#    processes on the GPUs) and host.collectives:shm (/dev/shm in use) are waived.
#  - envdoctor running out of its own time is no verdict: it never drains for that.
#
# Settings, as for slurm-prolog.sh (override in the environment or edit here):
#   ENVDOCTOR, ENVDOCTOR_VENV, ENVDOCTOR_ARGS, ENVDOCTOR_GPUS (default: none expected)
#   ENVDOCTOR_REPORT   this script's own report (default /var/log/envdoctor/health-NODE.json);
#                      the prolog's reports must be in the same folder (prolog-NODE.json:
#                      the report of the prolog that last stopped a job)
#   ENVDOCTOR_TIMEOUT  seconds envdoctor may take in all (default 40, at most 40: with three
#                      Slurm commands of 5 s at most the run ends within 55 s); it is asked for
#                      --timeout 15 s less and a watchdog stops it at ENVDOCTOR_TIMEOUT
set -u
PATH=${PATH:-/usr/sbin:/usr/bin:/sbin:/bin}:/usr/sbin:/usr/bin:/sbin:/bin
export PATH

NODE=${SLURMD_NODENAME:-$(hostname)}
ENVDOCTOR=${ENVDOCTOR:-/opt/envdoctor/bin/envdoctor}
ENVDOCTOR_VENV=${ENVDOCTOR_VENV:-/opt/venvs/job}
ENVDOCTOR_ARGS=${ENVDOCTOR_ARGS:-}
ENVDOCTOR_REPORT=${ENVDOCTOR_REPORT:-/var/log/envdoctor/health-$NODE.json}
ENVDOCTOR_TIMEOUT=${ENVDOCTOR_TIMEOUT:-40}
PROLOG_REPORT="$(dirname "$ENVDOCTOR_REPORT")/prolog-$NODE.json"

case $ENVDOCTOR_TIMEOUT in
  ''|*[!0-9]*|[0-9]) echo "envdoctor-healthcheck: ENVDOCTOR_TIMEOUT must be whole seconds, 10 or more" >&2; exit 2 ;;
esac
if [ "$ENVDOCTOR_TIMEOUT" -gt 40 ]; then ENVDOCTOR_TIMEOUT=40; fi
RUN_TIMEOUT=$((ENVDOCTOR_TIMEOUT - 15))
if [ "$RUN_TIMEOUT" -lt $((ENVDOCTOR_TIMEOUT / 2)) ]; then RUN_TIMEOUT=$((ENVDOCTOR_TIMEOUT / 2)); fi

# Every command is bounded: envdoctor by its --timeout and a watchdog behind it, scontrol
# and sinfo by 4 s each (5 once killed), so the whole run ends within 55 s, before Slurm kills it at 60.
bounded() {
  limit=$1; shift
  if command -v timeout >/dev/null 2>&1; then timeout -k 1 "$limit" "$@"; else "$@"; fi
}

# The interpreter envdoctor is installed with reads the reports (the venv envdoctor lives in).
PY="$(dirname "$ENVDOCTOR")/python"
if [ ! -x "$PY" ]; then
  PY=$(sed -n '1s/^#! *\([^ ]*\).*/\1/p' "$ENVDOCTOR" 2>/dev/null)
  case $PY in *python*) ;; *) PY=python3 ;; esac
fi

# verdict REPORT [DRAINED_AT]: one line, "pass", "timeout", "gate" (envdoctor's own command
# was wrong, or no report), "fail<TAB>REASON" with the Slurm reason for the first failing
# check, or "stale" when the report was not written when the node was drained at DRAINED_AT
# (sinfo's %H: another prolog's failure, not the one this report tells of).
verdict() {
  "$PY" - "$@" <<'PYTHON'
import json, os, sys, time

# The kind of problem each check finds: the node's, or the job environment's.
KINDS = [("host.gpu", "node: GPU"), ("gpu.stack", "node: driver"), ("gpu.", "node: GPU"),
         ("host.disk", "node: disk"), ("host.collectives:shm", "node: /dev/shm"), ("host.", "node"),
         ("python.jit-toolchain", "node"), ("python.", "job env: venv"), ("model.", "job env: model"),
         ("", "job env: packages")]
# Which failure is named first: the layers in the order they build on each other.
ORDER = ["host.reachable", "host.python", "host.gpu", "gpu.", "host.disk", "host.collectives", "host.",
         "python.venv", "python.", "packages.required", "packages.", "code.", "patch.", "audit.", "model."]
LIMIT = 255  # bytes: the reason column of slurmdbd's node events (tinytext)


def rank(rid):
    return next((i for i, p in enumerate(ORDER) if rid.startswith(p)), len(ORDER))


def kind(rid, message):
    if rid == "host.gpu" and "driver" in message.lower():
        return "node: driver"
    return next(k for p, k in KINDS if rid.startswith(p))


def one_line(text):
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())


try:
    with open(sys.argv[1], encoding="utf-8") as handle:
        data = json.load(handle)
    if len(sys.argv) > 2:  # written by the prolog that ended just before Slurm drained the node
        drained = time.mktime(time.strptime(sys.argv[2], "%Y-%m-%dT%H:%M:%S"))
        if not -5 <= drained - os.path.getmtime(sys.argv[1]) <= 30:
            print("stale")
            sys.exit()
except (OSError, ValueError):
    print("gate")
    sys.exit()
results = [r for h in data.get("hosts") or [] for r in h.get("results") or []]
failing = [r for r in results if r.get("status") == "fail"]
timed_out = data.get("timed_out") is True or any(h.get("timed_out") is True for h in data.get("hosts") or [])
if failing or (data.get("exit_status") == 1 and not timed_out):
    worst = failing or [r for r in results if r.get("status") in ("error", "blocked")]
    if not worst:
        print("gate")
        sys.exit()
    first = min(worst, key=lambda r: rank(str(r.get("id"))))
    rid, message = one_line(str(first.get("id"))), one_line(str(first.get("message")))
    tail = f" [{kind(rid, message)}]"
    reason = f"envdoctor: {rid} {message}"
    room = LIMIT - len(tail.encode())
    if len(reason.encode()) > room:
        reason = reason.encode()[:room - 3].decode("utf-8", "ignore") + "..."
    print(f"fail\t{reason}{tail}")
elif timed_out:
    print("timeout")
elif data.get("exit_status") == 0:
    print("pass")
else:
    print("gate")
PYTHON
}

TIMEOUT_REASON="envdoctor: did not finish within its own time in the prolog; the node is not at fault [envdoctor]"

set_reason() {  # keep the node drained, with REASON
  bounded 4 scontrol update NodeName="$NODE" State=DRAIN Reason="$1"
}

line=$(bounded 4 sinfo -h -N -n "$NODE" -o '%T|%H|%E') || { echo "envdoctor-healthcheck: sinfo failed" >&2; exit 0; }
line=$(echo "$line" | head -n 1)
state=${line%%|*}
line=${line#*|}
since=${line%%|*}
reason=${line#*|}
ours=0
case $state in
  drain*)
    case $reason in
      envdoctor:*) ours=1 ;;
      "Prolog error"*)
        [ -f "$PROLOG_REPORT" ] || exit 0  # not envdoctor's prolog, or it wrote nothing: not ours
        found=$(verdict "$PROLOG_REPORT" "$since")
        case $found in
          fail*) reason=$(printf '%s' "$found" | cut -f 2-); set_reason "$reason"; ours=1 ;;
          timeout) reason=$TIMEOUT_REASON; set_reason "$reason"; ours=1 ;;
          *) exit 0 ;;  # no failure of this prolog's then: another prolog drained the node
        esac ;;
      *) exit 0 ;;  # drained by a person or another tool: theirs to lift
    esac ;;
  down*|fail*|unknown*|future*) exit 0 ;;
esac

# On a node with jobs running, what they use is theirs, not a fault of the node.
WAIVE=""
case $state in
  alloc*|mix*|comp*|draining) WAIVE=1 ;;
esac

GPU_ARGS=""
if [ -n "${ENVDOCTOR_GPUS:-}" ]; then GPU_ARGS="--gpus $ENVDOCTOR_GPUS"; fi
mkdir -p "$(dirname "$ENVDOCTOR_REPORT")"
rm -f "$ENVDOCTOR_REPORT"
# shellcheck disable=SC2086
if [ -n "$WAIVE" ]; then
  bounded $((ENVDOCTOR_TIMEOUT - 1)) "$ENVDOCTOR" check local --venv "$ENVDOCTOR_VENV" $GPU_ARGS $ENVDOCTOR_ARGS \
      --skip "gpu.free=jobs are running on the node" --skip "host.collectives:shm=jobs are running on the node" \
      --format json --output "$ENVDOCTOR_REPORT" --timeout "$RUN_TIMEOUT" </dev/null
else
  bounded $((ENVDOCTOR_TIMEOUT - 1)) "$ENVDOCTOR" check local --venv "$ENVDOCTOR_VENV" $GPU_ARGS $ENVDOCTOR_ARGS \
      --format json --output "$ENVDOCTOR_REPORT" --timeout "$RUN_TIMEOUT" </dev/null
fi
status=$?
case $status in
  124|137) found=timeout ;;  # the watchdog stopped it
  0|1) found=$(verdict "$ENVDOCTOR_REPORT") ;;
  *) found=gate ;;
esac

case $found in
  pass)
    if [ "$ours" = 1 ]; then bounded 4 scontrol update NodeName="$NODE" State=RESUME; fi ;;
  fail*)
    new=$(printf '%s' "$found" | cut -f 2-)
    if [ "$ours" = 1 ] || ! expr "$state" : 'drain' >/dev/null; then
      [ "$new" = "$reason" ] || set_reason "$new"
    fi ;;
  timeout)
    echo "envdoctor-healthcheck: envdoctor ran out of its own time on $NODE (${ENVDOCTOR_TIMEOUT}s): no verdict" >&2
    # The prolog's own timeout was never the node's fault: give the node back.
    if [ "$ours" = 1 ] && [ "$reason" = "$TIMEOUT_REASON" ]; then
      bounded 4 scontrol update NodeName="$NODE" State=RESUME
    fi ;;
  *)
    echo "envdoctor-healthcheck: envdoctor's own command failed on $NODE (exit $status); check its settings" >&2
    exit 2 ;;
esac
exit 0
