# Runs ON THE HOST (stdlib only, Python 3.6+): see core.py for the rules.
# Helper of the "node" section: the commands it needs (nvidia-smi three times, the kernel
# log, nvcc --version) started together, each with a deadline and a cap on the output kept.
# nvidia-smi can take seconds on a node without persistence mode and can hang outright on
# a GPU that fell off the bus; run one after the other, the section would pay their sum,
# and core.run_command keeps all of a command's output however large it grows.

import os
import selectors
import signal
import subprocess
import time


def run_all(commands, timeout, limit, tail=()):
    """{name: {"status", "out", "err", "truncated", "seconds"}} for {name: argv}. Every
    command starts at once in its own session; one still running at `timeout` seconds is
    killed with its children (status 124, "timed out" in err). Of each stream at most
    `limit` bytes are kept: the first ones, or the last ones for the names in `tail` (the
    kernel log's newest lines are the ones that matter). A program that cannot start is
    status 127 with the reason, never an exception."""
    started = time.time()
    results, procs, buffers = {}, {}, {}
    selector = selectors.DefaultSelector()
    for name, argv in commands.items():
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True)
        except OSError as exc:
            results[name] = {"status": 127, "out": "", "err": str(exc), "truncated": False, "seconds": 0.0}
            continue
        procs[name] = proc
        for stream, key in ((proc.stdout, "out"), (proc.stderr, "err")):
            buffers[(name, key)] = [bytearray(), False]
            selector.register(stream, selectors.EVENT_READ, (name, key))
    deadline = started + timeout
    while selector.get_map():
        left = deadline - time.time()
        if left <= 0:
            break
        for found, _ in selector.select(min(left, 1.0)):
            name, key = found.data
            chunk = os.read(found.fd, 65536)
            if not chunk:
                selector.unregister(found.fileobj)
                continue
            keep_output(buffers[(name, key)], chunk, limit, name in tail)
    timed_out = set(name for name, key in (k.data for k in selector.get_map().values()))
    selector.close()
    for name, proc in procs.items():
        if name in timed_out:
            kill_command(proc)
        status = wait_command(proc, max(0.1, deadline - time.time()))
        out, cut_out = buffers[(name, "out")]
        err, cut_err = buffers[(name, "err")]
        text_err = err.decode("utf-8", "replace")
        if name in timed_out or status is None:
            kill_command(proc)
            status, text_err = 124, (text_err + "\ntimed out after %ss" % timeout).strip()
        results[name] = {"status": status, "out": out.decode("utf-8", "replace"), "err": text_err,
                         "truncated": cut_out or cut_err, "seconds": round(time.time() - started, 4)}
        proc.stdout.close()
        proc.stderr.close()
    return results


def keep_output(buffer, chunk, limit, tail):
    data = buffer[0]
    data.extend(chunk)
    if len(data) > limit:
        buffer[1] = True
        if tail:
            del data[: len(data) - limit]
        else:
            del data[limit:]


def kill_command(proc):
    """Kill a command and what it started (its own session), without raising."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        try:
            proc.kill()
        except OSError:
            pass


def wait_command(proc, seconds):
    try:
        return proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return None
