"""The probe section that picks and filters installed sources, and the check that parses them."""

from __future__ import annotations

import ast
import base64
import sys
from importlib import resources
from pathlib import Path

import pytest

from envdoctor.engine.graph import CheckContext
from envdoctor.inventory import HostSpec
from envdoctor.probe.program import ProbeOutput
from envdoctor.probe.host.scan.sources import sources_section
from envdoctor.engine.results import Status
from envdoctor.scan.scanner import sources_request

from envdoctor.checks.remote_code import scan_items, trust_remote_code_sites
from tests.unit.fakes import env, facts

GAP = b"from transformers import AutoTokenizer\n\ndef load(p):\n    return AutoTokenizer.from_pretrained(p)\n"
PLAIN = b'"""Nothing here loads a model.\n\n    >>> tok = AutoTokenizer.from_pretrained(path)\n"""\n'


def make_dist(site: Path, name: str, version: str, requires: list[str], files: dict[str, bytes]) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    headers = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    headers += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(headers) + "\n\nLong description mentioning Requires-Dist: vllm\n")
    rows = []
    for rel, data in files.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        rows.append(f"{rel},sha256=x,{len(data)}")
    rows += [f"{info.name}/METADATA,,", "../../../bin/tool.py,,"]
    (info / "RECORD").write_text("\n".join(rows) + "\n")


@pytest.fixture(autouse=True)
def private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The section keeps its filter's verdicts in ~/.cache/envdoctor: a home of the test's own."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    """A fake venv: a dependent of transformers, one through an extra only, one that only imports it, one unrelated."""
    prefix = tmp_path / "venv"
    site = prefix / "lib" / "python3.11" / "site-packages"
    make_dist(site, "speculators", "0.3.0", ["transformers>=4.50", 'pytest; extra == "dev"'],
              {"speculators/__init__.py": b"", "speculators/gen.py": GAP, "speculators/doc.py": PLAIN})
    make_dist(site, "optlib", "1.0", ['transformers; extra == "hf"'], {"optlib/hf.py": GAP})
    make_dist(site, "My_Lib", "2.0", [], {"my_lib/run.py": GAP.replace(b"p)\n", b"p, trust_remote_code=True)\n")})
    make_dist(site, "Served", "1.0", ["vllm (>=0.9)"], {"served/bad.py": b"import vllm\nvllm.LLM(\n"})
    make_dist(site, "unrelated", "1.0", ["numpy"], {
        "unrelated/a.py": b'# works with transformers too\nhint = "import transformers"\nimport transformers_stream\n'})
    return prefix


def run_section(prefix: Path, extra=(), **overrides) -> tuple[dict, list[dict]]:
    items: list[dict] = []
    args = {**sources_request(str(prefix), list(extra)), **overrides}
    return sources_section(args, items.append), items


def test_section_ships_only_filtered_files_of_dependents(venv):
    """Dependents (also through an extra) and importers of transformers/vllm are selected; only files that may hold a site travel."""
    data, items = run_section(venv)
    assert [(d["name"], d["reason"]) for d in data["distributions"]] == [
        ("My_Lib", "imports transformers"), ("Served", "depends on vllm"),
        ("optlib", "depends on transformers (extra hf)"), ("speculators", "depends on transformers"),
    ]
    speculators = data["distributions"][3]
    assert (speculators["files"], speculators["matched"]) == (3, 1)
    assert [(i["distribution"], i["path"]) for i in items] == [
        ("My_Lib", "my_lib/run.py"), ("Served", "served/bad.py"), ("optlib", "optlib/hf.py"),
        ("speculators", "speculators/gen.py")]
    assert base64.b64decode(items[3]["data"]) == GAP
    assert data["shipped_bytes"] == 3 * len(GAP) + len(b"import vllm\nvllm.LLM(\n") + len(b", trust_remote_code=True")


def test_file_that_only_imports_a_loader_name_travels_for_its_exports(tmp_path):
    """A module that imports AutoConfig without calling it ships marked exports_only (its package may re-export it)."""
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    make_dist(site, "pkg", "1.0", ["transformers"], {
        "pkg/__init__.py": b"", "pkg/common.py": b"from transformers import (\n    AutoConfig,\n)\n",
        "pkg/model.py": b"from .common import AutoConfig\nc = AutoConfig.from_pretrained(p)\n"})
    _, items = run_section(tmp_path / "venv")
    assert [(i["path"], i.get("exports_only", False)) for i in items] == [
        ("pkg/common.py", True), ("pkg/model.py", False)]
    sites, errors = scan_items(items)
    assert errors == [] and [(s.site.path, s.site.callee) for s in sites] == [
        ("pkg/model.py", "transformers.AutoConfig.from_pretrained")]


def test_named_distribution_is_added_and_unknown_names_reported(venv):
    """--scan DIST adds a distribution by its canonical name; the section lists one not installed."""
    data, items = run_section(venv, extra=["my-lib", "absent"])
    assert "My_Lib" in [d["name"] for d in data["distributions"]]
    assert "my_lib/run.py" in [i["path"] for i in items]
    assert data["not_found"] == ["absent"]


def test_budget_caps_what_one_probe_ships(venv):
    """Files over the byte budget are listed as skipped instead of shipped."""
    data, items = run_section(venv, max_total_bytes=30)
    assert [i["path"] for i in items] == ["served/bad.py"]
    assert [s["path"] for s in data["skipped"]] == ["my_lib/run.py", "optlib/hf.py", "speculators/gen.py"]
    assert data["shipped_bytes"] <= 30


def test_probe_module_is_python36_stdlib_only():
    """The host side parses as Python 3.6 and imports nothing outside the standard library."""
    source = resources.files("envdoctor.probe.host").joinpath("scan/sources.py").read_text("utf-8")
    tree = ast.parse(source, feature_version=(3, 6))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported - {"envdoctor"} <= sys.stdlib_module_names


def context(venv: Path, data: dict, items: list[dict], *, trust: bool) -> CheckContext:
    spec = HostSpec(name="ct200", ssh=None, venv=str(venv), trust_remote_code=trust)
    host = facts(env(str(venv)))
    probe = ProbeOutput(sections={"sources": data}, items={"sources": items})
    return CheckContext(spec, type(host)(**{**host.__dict__, "probe": probe}))


def test_check_warns_without_consent_and_fails_with_it(venv):
    """A gap warns by default and fails when the host's models need remote code; the message names file:line callee."""
    data, items = run_section(venv)
    warn = trust_remote_code_sites(context(venv, data, items, trust=False))
    fail = trust_remote_code_sites(context(venv, data, items, trust=True))
    assert warn.status is Status.WARN and fail.status is Status.FAIL
    assert "speculators/gen.py:4 transformers.AutoTokenizer.from_pretrained (missing)" in fail.message
    site = next(s for s in fail.details["sites"] if s["state"] == "missing")
    assert (site["distribution"], site["version"], site["path"]) == ("optlib", "1.0", "optlib/hf.py")
    assert "optlib/hf.py:4 transformers.AutoTokenizer.from_pretrained (missing)" in fail.message
    assert [e["path"] for e in fail.details["errors"]] == ["served/bad.py"]


def test_check_passes_when_every_call_passes_the_flag(venv):
    """Only ok sites: the check passes and says how much it scanned."""
    data, items = run_section(venv, extra=["my-lib"])
    items = [i for i in items if i["distribution"] == "My_Lib"]
    result = trust_remote_code_sites(context(venv, data, items, trust=True))
    assert result.status is Status.PASS, result.message
    assert result.message.startswith("1 model-loading call(s)")


def test_scan_items_reports_undecodable_payload():
    """Contents the probe garbled are an error for that file, not a crash."""
    sites, errors = scan_items([{"path": "x/y.py", "data": "not base64!!"}])
    assert sites == [] and [e.path for e in errors] == ["x/y.py"]


def test_probe_names_do_not_collide_with_other_sections():
    """The probe concatenates every section module into one namespace: ours must not shadow another's names."""
    probe = resources.files("envdoctor.probe.host")

    def top_level(name: str) -> set[str]:
        tree = ast.parse(probe.joinpath(name).read_text("utf-8"))
        names = set()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        return names

    ours = top_level("scan/sources.py")
    others = [p.name for p in probe.iterdir() if p.name.endswith(".py") and p.name not in ("scan/sources.py", "__init__.py")]
    for other in others:
        assert not ours & top_level(other), f"sources.py and {other} both define {sorted(ours & top_level(other))}"


def test_check_passes_when_nothing_depends_on_a_loader_library(tmp_path):
    """A venv without dependents of transformers/vllm/sglang has nothing to scan, and says so."""
    data, items = run_section(tmp_path / "empty-venv")
    assert data["distributions"] == [] and items == []
    result = trust_remote_code_sites(context(tmp_path, data, items, trust=True))
    assert result.status is Status.PASS and "nothing to scan" in result.message


def test_scan_of_a_distribution_not_installed_is_an_error_result(venv):
    """--scan of a name not installed: the check errors in one line, and the run-level helper names it."""
    from envdoctor.checks.remote_code import scan_names_not_installed

    data, items = run_section(venv, extra=["absent"])
    result = trust_remote_code_sites(context(venv, data, items, trust=False))
    assert result.status is Status.ERROR and "\n" not in result.message
    assert result.message.startswith("--scan absent: not installed in")
    named = type(result)(id="code.trust-remote-code", status=result.status, message="", details=result.details)
    assert scan_names_not_installed([[named]]) == ["absent"]
    fine = type(result)(id="code.trust-remote-code", status=Status.PASS, message="", details={})
    assert scan_names_not_installed([[named], [fine]]) == []


def test_a_pass_names_the_files_it_could_not_scan(venv):
    """No gap among the calls it could read, but a file that may hold a call does not parse:
    the check still passes (no call is known to lack the flag) and says which file it could not read."""
    data, items = run_section(venv, extra=["my-lib", "served"])
    items = [i for i in items if i["distribution"] in ("My_Lib", "Served")]
    result = trust_remote_code_sites(context(venv, data, items, trust=True))
    assert result.status is Status.PASS, result.message
    assert "1 file(s) that may hold such a call could not be scanned: served/bad.py (does not parse" in result.message


@pytest.mark.parametrize(("path", "expected"), [
    ("accelerate/test_utils/scripts/external_deps/test_metrics.py", True),
    ("accelerate/test_utils/training.py", True),
    ("mylib/tests/helpers.py", True),
    ("mylib/test_loading.py", True),
    ("mylib/loading_test.py", True),
    ("mylib/conftest.py", True),
    ("transformers/testing_utils.py", False),
    ("trl/chat_template_utils.py", False),
    ("contest/attest.py", False),
])
def test_test_code_is_told_by_its_folders_and_names(path, expected):
    from envdoctor.checks.remote_code import in_test_code

    assert in_test_code(path) is expected


def test_gaps_in_a_librarys_own_tests_are_named_but_not_counted(tmp_path):
    """A library's test scaffolding (accelerate/test_utils) loads its own tiny test models, never
    the user's: its gaps are listed apart and neither warn nor fail; a gap in its real code still does."""
    prefix = tmp_path / "venv"
    site = prefix / "lib" / "python3.11" / "site-packages"
    make_dist(site, "acc", "1.0", ["transformers"], {"acc/__init__.py": b"", "acc/test_utils/scripts/test_ckpt.py": GAP,
                                                      "acc/tests/helpers.py": GAP})
    data, items = run_section(prefix)
    only_tests = trust_remote_code_sites(context(prefix, data, items, trust=True))
    assert only_tests.status is Status.PASS, only_tests.message
    assert "2 more in the libraries' own test code, not counted" in only_tests.message
    assert len(only_tests.details["test_code_gaps"]) == 2
    make_dist(site, "real", "1.0", ["transformers"], {"real/load.py": GAP})
    data, items = run_section(prefix)
    mixed = trust_remote_code_sites(context(prefix, data, items, trust=True))
    assert mixed.status is Status.FAIL
    assert mixed.message.startswith("1 model-loading call(s) without trust_remote_code=True: real/load.py:4")
    assert mixed.remedy is not None and "real/load.py" in str(mixed.remedy) and "test_utils" not in str(mixed.remedy)


def test_a_warm_section_reads_only_what_may_hold_a_site(venv, private_home, monkeypatch):
    """The byte filter's "nothing here" verdicts are kept by stat key: a second run reads only
    the files it ships, answers the same, and a changed file is read again."""
    from envdoctor.probe.host.scan import sources as sources

    first = run_section(venv)
    assert list((private_home / ".cache" / "envdoctor").glob("sources-*"))
    read: list[str] = []
    real = sources.read_regular

    def counting(path, limit, *args, **kwargs):
        read.append(str(path))
        return real(path, limit, *args, **kwargs)

    monkeypatch.setattr(sources, "read_regular", counting)
    assert run_section(venv) == first
    shipped = {i["path"] for i in first[1]}
    sources_read = [r for r in read if r.endswith(".py")]
    assert sources_read and all(any(r.endswith(s) for s in shipped) for r in sources_read), sources_read
    doc = venv / "lib" / "python3.11" / "site-packages" / "speculators" / "doc.py"
    doc.write_bytes(GAP)  # now it holds a site: the kept "skip" must not hide it
    _, items = run_section(venv)
    assert ("speculators", "speculators/doc.py") in {(i["distribution"], i["path"]) for i in items}


def test_a_file_over_the_budget_without_a_site_is_no_skip(venv):
    """A generated module larger than the per-file budget is read through the byte filter only:
    without a loader call in it, it is neither shipped nor named as unread; with one, it is named."""
    from envdoctor.probe.host import core

    site = venv / "lib" / "python3.11" / "site-packages"
    big = b"x = 1\n" * 300_000  # 1.8 MB of nothing the scan looks for
    make_dist(site, "bigdep", "1.0", ["transformers"], {"bigdep/gen.py": big, "bigdep/load.py": big + GAP})
    core.SKIPS.clear()
    core._SKIP_STATE["seen"].clear()
    data, items = run_section(venv, max_file_bytes=1 << 20)
    bigdep = next(d for d in data["distributions"] if d["name"] == "bigdep")
    assert bigdep["files"] == 1 and not [i for i in items if i["distribution"] == "bigdep"]
    assert [s["path"] for s in data["skipped"]] == ["bigdep/load.py"]
