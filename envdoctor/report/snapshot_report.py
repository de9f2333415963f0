"""Reports of ``envdoctor snapshot``: one text block per host to paste into a bug report, the
JSON (check's shape, each host with its ``snapshot`` document and its ``have``, which
``envdoctor diff REPORT.json...`` reads), and JUnit (the check results)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from envdoctor import __version__
from envdoctor.operations.compare import HostSnapshot
from envdoctor.operations.fleet import FleetReport
from envdoctor.report import json_report, junit
from envdoctor.report.envelope import NO_CONFIG, Config, dump_json

WIDTH = 28


def fleet_of(hosts: Sequence[HostSnapshot]) -> FleetReport:
    return FleetReport("snapshot", [h.report for h in hosts])


def render_json(hosts: Sequence[HostSnapshot], *, config: Config = NO_CONFIG) -> str:
    entries = []
    for host in hosts:
        entry = json_report.host_json(host.report)
        if host.problem is not None:
            entry["error"] = host.problem.message
        if host.document is not None:
            entry["snapshot"] = host.document
        if host.report.have is not None:
            entry["have"] = host.report.have.to_json()
        entries.append(entry)
    return dump_json("snapshot", fleet_of(hosts).exit_status, {"hosts": entries}, config=config)


def render(hosts: Sequence[HostSnapshot], fmt: str, *, config: Config = NO_CONFIG) -> str:
    if fmt == "json":
        return render_json(hosts, config=config)
    if fmt == "junit":
        return junit.render(fleet_of(hosts))
    return "\n".join(render_host(h) for h in hosts)


def _row(label: str, value: Any) -> str:
    shown = "Could not collect" if value in (None, "") else value
    return f"{label:<{WIDTH}}: {shown}"


def _size(count: Any) -> str:
    if not isinstance(count, int):
        return "?"
    return f"{count / 2**30:.1f} GiB"


def render_host(host: HostSnapshot) -> str:
    name = host.report.spec.name
    lines = [f"envdoctor {__version__} snapshot of {name} ({host.report.spec.destination})"]
    if host.document is None:
        lines.append(f"  not collected: {host.problem.message if host.problem else 'unknown'}")
        return "\n".join(lines) + "\n"
    doc = host.document
    lines += _section("System", _system_rows(doc))
    lines += _section("Python", _python_rows(doc.get("python") or {}))
    lines += _section("GPU stack", _gpu_rows(doc))
    topology = (doc.get("topology") or {}).get("text")
    if topology:
        lines += ["GPU topology:", *("  " + line for line in topology.splitlines())]
    lines += _section("Versions of relevant packages",
                      [f"{n}=={v}" for n, v in (doc.get("packages") or {}).items()] or ["none found"])
    lines += _section("Environment variables",
                      [f"{k}={v}" for k, v in (doc.get("environment_variables") or {}).items()] or ["none set"])
    lines += _section("Patch ledger (envdoctor's changes)",
                      [f"{p['patch']}  {p['file']}  {p['state']}" for p in doc.get("patches") or []] or ["none"])
    counts = ", ".join(f"{n} {status}" for status, n in (doc.get("checks") or {}).items())
    lines += _section(f"envdoctor's findings ({counts or 'no checks ran'})",
                      [f"{f['status']:<8} {f['id']}: {f['message']}" for f in doc.get("findings") or []]
                      or ["nothing wrong"])
    if doc.get("not_collected"):
        lines += _section("Not collected", [f"{k}: {v}" for k, v in doc["not_collected"].items()])
    return "\n".join(lines) + "\n"


def _section(title: str, rows: Sequence[str]) -> list[str]:
    return ["", f"== {title} ==", *rows]


def _system_rows(doc: Mapping[str, Any]) -> list[str]:
    cpu = doc.get("cpu") or {}
    memory = doc.get("memory") or {}
    limits = doc.get("limits") or {}
    cpu_text = cpu.get("model")
    if cpu_text:
        parts = [f"{cpu.get('logical')} logical", f"{cpu.get('usable')} usable"]
        if cpu.get("sockets"):
            parts.append(f"{cpu['sockets']} socket(s)")
        if cpu.get("numa_nodes"):
            parts.append(f"{cpu['numa_nodes']} NUMA node(s)")
        if cpu.get("hypervisor"):
            parts.append("under a hypervisor" + (f" ({cpu['vendor_of_machine']})" if cpu.get("vendor_of_machine") else ""))
        cpu_text = f"{cpu_text} ({', '.join(parts)})"
    return [_row("OS", doc.get("os")), _row("Kernel", doc.get("kernel")), _row("Libc version", doc.get("libc")),
            _row("CPU", cpu_text),
            _row("Memory", f"{_size(memory.get('total'))} total, {_size(memory.get('available'))} available"
                 if memory.get("total") else None),
            _row("ulimit -n (soft)", _limit(limits.get("nofile"))),
            _row("ulimit -l (soft)", _limit(limits.get("memlock")))]


def _limit(pair: Any) -> Any:
    """A [soft, hard] pair of the probe (None for unlimited) as ulimit shows the soft one."""
    if not isinstance(pair, list) or not pair:
        return None
    return "unlimited" if pair[0] is None else f"{pair[0]}"


def _python_rows(python: Mapping[str, Any]) -> list[str]:
    version = python.get("version")
    if version and python.get("bits"):
        version = f"{version} ({python['bits']}-bit runtime)"
    return [_row("Python version", version), _row("Python platform", python.get("platform")),
            _row("Environment", python.get("environment")), _row("Interpreter", python.get("interpreter"))]


def _gpu_rows(doc: Mapping[str, Any]) -> list[str]:
    torch = doc.get("torch") or {}
    driver = doc.get("driver") or {}
    toolkit = doc.get("cuda_toolkit") or {}
    gpus = doc.get("gpus") or []
    names: dict[str, list[str]] = {}
    for gpu in gpus:
        names.setdefault(f"{gpu['name']} (compute capability {gpu['compute_capability']})", []).append(
            str(gpu["index"]))
    models = "; ".join(f"GPU {','.join(ids)}: {name}" for name, ids in names.items()) or "none found"
    toolkit_text = None
    if toolkit.get("exists"):
        toolkit_text = f"{toolkit.get('version') or 'version unknown'} at {toolkit.get('home')}" + \
            (" (nvcc present)" if toolkit.get("nvcc") else " (no nvcc)")
    on_path = toolkit.get("nvcc_on_path") if isinstance(toolkit.get("nvcc_on_path"), Mapping) else {}
    runtime = doc.get("cuda_runtime_version")
    if runtime and on_path.get("path"):
        runtime = f"{runtime} (nvcc on PATH: {on_path['path']}" + (
            f" -> {on_path['binary']})" if on_path.get("binary") not in (None, on_path["path"]) else ")")
    return [_row("PyTorch version", torch.get("version") or "not installed"),
            _row("Is debug build", torch.get("debug")),
            _row("CUDA used to build PyTorch", torch.get("cuda") or ("None" if torch else None)),
            _row("ROCM used to build PyTorch", torch.get("hip") or "N/A"),
            _row("CUDA runtime version", runtime),
            _row("CUDA toolkit (CUDA_HOME)", toolkit_text),
            _row("NCCL (wheel)", doc.get("nccl") or "not installed"),
            _row("cuDNN (wheel)", doc.get("cudnn") or "not installed"),
            _row("Nvidia driver version", (f"{driver['version']} (from {driver.get('source')})"
                                           if driver.get("version") else "none found")),
            _row("GPU models and configuration", models)]
