"""Cost of code.imports, model.architecture and packages.tags: host time, files read, re-check.

    python bench/job_code_bench.py [VENV ENTRY]...

Without arguments: the drift bench's two venvs (bench/drift_bench.py builds them: speculators
0.3.0 beside vLLM 0.16.0's sources, sglang 0.5.3 beside flashinfer-python 0.7.4), each walked
from a serving stage's entry (`-m vllm.entrypoints.openai.api_server`, `-m
sglang.launch_server`) and without a stage; then the architecture section over the real
registries of transformers 5.25.0, vLLM 0.16.0 and SGLang 0.5.9 (tests/engine_registries.py)
for a Kimi K2.6 model folder; then the wheel-tags section of each venv. Every figure is of the
real probe program run through the local transport (what an SSH host runs), first with the
host caches cleared, then again (served from the cache).
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import envdoctor.operations.gather  # noqa: E402,F401  (registers the architecture and wheel-tags sections)
from envdoctor.drift.request import drift_request  # noqa: E402  (after the path tweak)
from envdoctor.probe.host.drift.section import drift_cache_folder  # noqa: E402
from envdoctor.probe.program import run_probe, section_code_digest  # noqa: E402
from envdoctor.transport.local import LocalTransport  # noqa: E402


async def probe(venv: Path, sections: dict) -> tuple[dict, float]:
    started = time.perf_counter()
    async with LocalTransport("bench") as transport:
        output = await run_probe(transport, sections, python_candidates=[str(venv / "bin" / "python")])
    return output.sections, time.perf_counter() - started


def twice(venv: Path, sections: dict) -> list[tuple[dict, float]]:
    shutil.rmtree(drift_cache_folder(str(venv)), ignore_errors=True)
    return [asyncio.run(probe(venv, sections)) for _ in range(2)]


def bench_imports(venv: Path, entry: str | None) -> None:
    entries = [{"kind": "module", "name": entry, "cwd": None}] if entry else None
    request = {"drift": drift_request(str(venv), entry=entry, import_entries=entries)}
    print(f"{venv}: drift section with code.imports' walk, {'stage -m ' + entry if entry else 'no stage'}")
    for label, (sections, total) in zip(("first check", "re-check   "), twice(venv, request)):
        data = sections["drift"]
        walk = data["imports"]
        print(f"  {label}: host {data['host_seconds']:.3f} s wall, {data['host_cpu_seconds']:.3f} s CPU "
              f"(cache {data['cache']}; probe end to end {total:.3f} s); walk: {walk['files']} files, "
              f"{walk['sites']} imports, missing by class {walk['missing_counts']}; "
              f"{data['files_parsed']} files summarized, {data['bytes_read'] / 1e6:.1f} MB read")


def bench_architecture(root: Path) -> None:
    from tests.engine_registries import environment
    from tests.kimi_fixture import build_kimi

    venv = environment(root, "transformers==5.25.0", "vllm==0.16.0", "sglang==0.5.9")
    model = build_kimi(root / "Kimi-K2.6", mark=root / "MARK", named_only=True, ranks=False)
    request = {"architecture": {"prefix": str(venv), "models": [str(model)], "code": section_code_digest("architecture")}}
    print(f"{venv}: architecture section (transformers 5.25.0, vLLM 0.16.0, SGLang 0.5.9 registries)")
    for label, (sections, total) in zip(("first check", "re-check   "), twice(venv, request)):
        data = sections["architecture"]
        print(f"  {label}: host {data['host_seconds']:.3f} s (cache {data['cache']}; {data['files_read']} files, "
              f"{data['bytes_read'] / 1e6:.1f} MB read; probe end to end {total:.3f} s)")


def bench_tags(venv: Path) -> None:
    started = time.perf_counter()
    sections, total = asyncio.run(probe(venv, {"wheel-tags": {"prefix": str(venv)}}))
    data = sections["wheel-tags"]
    print(f"{venv}: wheel-tags section: {len(data['distributions'])} distributions, probe end to end {total:.3f} s "
          f"({time.perf_counter() - started:.3f} s)")


def main() -> None:
    args = sys.argv[1:]
    pairs = list(zip(args[::2], args[1::2]))
    if not pairs:
        from bench.drift_bench import build_default

        spec, sglang = build_default(Path(tempfile.mkdtemp(prefix="job-code-bench-")))
        pairs = [(str(spec), "vllm.entrypoints.openai.api_server"), (str(sglang), "sglang.launch_server")]
    for venv, entry in pairs:
        bench_imports(Path(venv), entry)
        bench_imports(Path(venv), None)
    bench_architecture(Path(tempfile.mkdtemp(prefix="job-code-arch-")))
    for venv, _ in pairs:
        bench_tags(Path(venv))


if __name__ == "__main__":
    main()
