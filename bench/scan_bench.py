"""Benchmark the trust_remote_code scanner on real library sources.

Compares the filtered scan (byte filters, re-exports read with ast, then libcst on the
files that may hold a site) with parsing every file with libcst, on 1 and 2 worker
processes, and checks that both find exactly the same sites and errors. Prints a table
(with files/s) per library; exits 1 if the findings differ.

    python bench/scan_bench.py                          # sglang and vllm (wheels from PyPI, .py files only)
    python bench/scan_bench.py --library transformers   # any distribution on PyPI (repeatable)
    python bench/scan_bench.py --root DIR               # any package folder
    python bench/scan_bench.py --jobs 1 --no-reference  # one core only, skip the slowest run
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
import venv
import zipfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import libcst

from envdoctor.scan.scanner import ScanReport, TrustRemoteCodeScanner, might_contain_site

BENCH_VENV = Path(os.environ.get("ENVDOCTOR_BENCH_VENV", Path.home() / ".cache" / "envdoctor-bench" / "venv"))
BENCH_SOURCES = BENCH_VENV.parent / "sources"
DEFAULT_LIBRARIES = ("sglang", "vllm")


def library_root(requirement: str) -> Path:
    """The .py files of a distribution's wheel from PyPI (downloaded --no-deps once, then kept)."""
    wheels = BENCH_SOURCES / "wheels"
    name = requirement.split("=")[0].split("<")[0].split(">")[0].strip().lower().replace("-", "_")
    found = sorted(BENCH_SOURCES.glob(f"{name}-*/"))
    if found and "==" not in requirement:
        return found[-1]
    print(f"downloading {requirement} (no deps) ...", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--disable-pip-version-check",
                    "--only-binary", ":all:", "-d", str(wheels), requirement], check=True)
    wheel = max(wheels.glob(f"{name}-*.whl"), key=lambda w: w.stat().st_mtime)
    root = BENCH_SOURCES / "-".join(wheel.name.split("-")[:2])
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if member.endswith(".py") and not member.startswith(("/", "..")):
                archive.extract(member, root)
    return root


def transformers_root() -> Path:
    """The installed transformers package; installed (without deps) into a bench venv if absent."""
    spec = importlib.util.find_spec("transformers")
    if spec is not None and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0])
    found = sorted(BENCH_VENV.glob("lib/python3*/site-packages/transformers"))
    if not found:
        print(f"installing transformers (no deps) into {BENCH_VENV} ...", file=sys.stderr)
        venv.EnvBuilder(with_pip=True, clear=True).create(BENCH_VENV)
        subprocess.run([str(BENCH_VENV / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "transformers"],
                       check=True)
        found = sorted(BENCH_VENV.glob("lib/python3*/site-packages/transformers"))
    return found[0]


def timed_scan(root: Path, *, jobs: int, use_filter: bool = True, shortcuts: bool = True) -> tuple[ScanReport, float]:
    start = time.perf_counter()
    report = TrustRemoteCodeScanner(jobs=jobs, use_filter=use_filter, shortcuts=shortcuts).scan([root])
    return report, time.perf_counter() - start


def _parse_only(abspath: str) -> int:
    data = Path(abspath).read_bytes()
    try:
        libcst.parse_module(data)
    except Exception:  # counted like the scanner does: a file that does not parse still took the time
        pass
    return len(data)


def parse_only(root: Path, jobs: int) -> tuple[int, int, float]:
    """libcst.parse_module on every file and nothing else: the floor of any libcst scan."""
    paths = [a for a, _ in TrustRemoteCodeScanner().python_files(root)]
    start = time.perf_counter()
    if jobs == 1:
        sizes = list(map(_parse_only, paths))
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            sizes = list(pool.map(_parse_only, paths, chunksize=max(1, len(paths) // (jobs * 8))))
    return len(paths), sum(sizes), time.perf_counter() - start


def filter_only(root: Path) -> tuple[int, int, int, float]:
    """Read and filter every file without parsing: files, bytes, files passed, seconds."""
    start = time.perf_counter()
    files = size = passed = 0
    for abspath, _ in TrustRemoteCodeScanner().python_files(root):
        data = Path(abspath).read_bytes()
        files += 1
        size += len(data)
        passed += might_contain_site(data)
    return files, size, passed, time.perf_counter() - start


def findings(report: ScanReport) -> tuple[list, list]:
    return sorted(report.sites, key=lambda s: (s.path, s.line, s.column)), sorted(report.errors, key=lambda e: e.path)


def bench(root: Path, jobs_list: list[int], reference_run: bool, unfiltered: bool = True) -> bool:
    """Measure one tree; print its table; True when every run found the same."""
    files, size, passed, seconds = filter_only(root)
    print(f"{root}: {files} files, {size / 1e6:.1f} MB; byte filter passes {passed} files", flush=True)
    rows = [("byte filter only", 1, files, 0, size, seconds)]
    reports: dict[tuple[str, int], ScanReport] = {}

    def measure(mode: str, jobs: int, **options: bool) -> None:
        report, seconds = timed_scan(root, jobs=jobs, **options)
        reports[(mode, jobs)] = report
        rows.append((mode, jobs, report.files, report.parsed, report.bytes, seconds))
        print(f"  done: {mode}, {jobs} job(s), {seconds:.1f} s", file=sys.stderr, flush=True)

    for jobs in jobs_list:
        measure("filtered scan", jobs)
        if unfiltered:
            measure("scan without byte filter", jobs, use_filter=False)
        n, nbytes, seconds = parse_only(root, jobs)
        rows.append(("libcst.parse_module only", jobs, n, n, nbytes, seconds))
        print(f"  done: parse only, {jobs} job(s), {seconds:.1f} s", file=sys.stderr, flush=True)
    if reference_run:
        # libcst and QualifiedNameProvider over every whole file: no filter, no ast shortcut.
        measure("reference: libcst names, all", max(jobs_list), use_filter=False, shortcuts=False)

    print()
    print(f"{'mode':<30} {'jobs':>4} {'files':>6} {'parsed':>6} {'MB':>6} {'seconds':>8} {'files/s':>8} {'MB/s':>7}")
    for mode, jobs, n, parsed, nbytes, secs in rows:
        print(f"{mode:<30} {jobs:>4} {n:>6} {parsed:>6} {nbytes / 1e6:>6.1f} {secs:>8.2f} "
              f"{n / secs:>8.0f} {nbytes / 1e6 / secs:>7.2f}")
    print()

    def seconds_of(mode: str, jobs: int) -> float:
        return next(r[5] for r in rows if r[0] == mode and r[1] == jobs)

    for jobs in jobs_list:
        filtered = seconds_of("filtered scan", jobs)
        print(f"{jobs} job(s): filtered scan: {files / filtered:.0f} files/s; it takes "
              f"{100 * filtered / seconds_of('libcst.parse_module only', jobs):.1f}% "
              f"of the time libcst takes just to parse every file (target <= 10%)")
    if reference_run:
        jobs = max(jobs_list)
        print(f"{jobs} job(s): filtered scan takes "
              f"{100 * seconds_of('filtered scan', jobs) / seconds_of('reference: libcst names, all', jobs):.1f}% "
              f"of resolving names in every whole file")

    key = ("reference: libcst names, all", max(jobs_list)) if reference_run else ("scan without byte filter", jobs_list[0])
    if key not in reports:
        key = ("filtered scan", jobs_list[0])
        print("findings not compared with an unfiltered scan (--no-unfiltered)")
    reference = findings(reports[key])
    same = all(findings(r) == reference for r in reports.values())
    sites, errors = reference
    gaps = sum(1 for s in sites if s.is_gap)
    print(f"findings: {len(sites)} sites ({gaps} missing/explicit-false), {len(errors)} errors; "
          f"identical across all runs: {'yes' if same else 'NO'}")
    if not same:
        for key, report in reports.items():
            print(f"  {key}: {len(report.sites)} sites, {len(report.errors)} errors")
    print(flush=True)
    return same


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, action="append", help="package folder to scan (repeatable)")
    parser.add_argument("--library", action="append", metavar="REQ",
                        help=f"a distribution whose wheel's sources to scan (repeatable; default: "
                             f"{', '.join(DEFAULT_LIBRARIES)}; 'transformers' uses the installed one when present)")
    parser.add_argument("--jobs", default="1,2", help="worker counts to measure, comma-separated (default 1,2)")
    parser.add_argument("--no-reference", dest="reference", action="store_false",
                        help="skip the slow reference run (libcst name resolution in every whole file)")
    parser.add_argument("--no-unfiltered", dest="unfiltered", action="store_false",
                        help="skip the scan without byte filter (and so the comparison of findings)")
    args = parser.parse_args()
    jobs_list = [int(j) for j in args.jobs.split(",")]
    roots = list(args.root or [])
    for requirement in args.library or ([] if roots else DEFAULT_LIBRARIES):
        roots.append(transformers_root() if requirement == "transformers" else library_root(requirement))
    results = [bench(root, jobs_list, args.reference, args.unfiltered) for root in roots]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
