"""The drift resolver's rules on small trees laid out on disk: memo and bounds, modules found as
the import system finds them (namespace packages, .pth code lines), findings charged to the
distribution that provides the module, branches decided by installed versions and flags."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from envdoctor.drift.judge import ERROR, judge
from envdoctor.probe.host.drift.summaries import summarize_source
from envdoctor.probe.host.drift.flags import version_key
from envdoctor.probe.host.drift.resolve import Resolver
from envdoctor.probe.host.drift.walk import ImportFinder, pth_code_paths
from tests.unit.test_drift_probe import dist
from tests.unit.test_import_walk import verdict, walk
from envdoctor.engine.results import Status


def summaries(sources: dict[str, str]) -> dict:
    return {name: summarize_source(text.encode(), name, True) for name, text in sources.items()}


def counting(modules: dict) -> tuple[Resolver, list[str]]:
    loads: list[str] = []

    def load(name: str):
        loads.append(name)
        return modules.get(name)

    return Resolver(load), loads


def test_each_module_name_is_resolved_once_through_a_diamond_of_star_imports() -> None:
    """20 modules each star-importing the next two: a missing name costs linear work, not 2**20."""
    modules = summaries({f"m{i}": f"from m{i + 1} import *\nfrom m{i + 2} import *\n" for i in range(20)})
    modules.update(summaries({"m20": "X = 1\n", "m21": "Y = 1\n"}))
    resolver, loads = counting(modules)
    started = time.monotonic()
    assert [t.kind for t in resolver.resolve("m0.Y")] == ["value"]
    assert [t.kind for t in resolver.resolve("m0.nothing")] == ["missing"]
    assert time.monotonic() - started < 2
    assert len(resolver.memo) <= 2 * 22  # one entry per (module, name) asked
    assert len(loads) < 200


def test_a_cycle_of_re_exports_is_unresolved_and_a_use_past_its_budget_too() -> None:
    """a.f from b, b.f from a: unresolved (never a hang); a chain longer than the work bound: unresolved."""
    cycle = summaries({"a": "from b import f\n", "b": "from a import f\n"})
    assert [t.kind for t in Resolver(cycle.get).resolve("a.f")] == ["unresolved"]
    chain = summaries({f"c{i}": f"from c{i + 1} import f\n" for i in range(10)})
    chain.update(summaries({"c10": "def f(x):\n    pass\n"}))
    assert [t.kind for t in Resolver(chain.get).resolve("c0.f")] == ["def"]
    small = Resolver(chain.get, max_steps=4)
    bounded = small.resolve("c0.f")
    assert [t.kind for t in bounded] == ["unresolved"] and "work" in bounded[0].why
    assert not any(key[0] == "c0" for key in small.memo)  # a cut result is not kept


@pytest.fixture()
def shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two distributions sharing the namespace package nsp/ (no __init__.py), a consumer of both."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    prefix = tmp_path / "venv"
    site = prefix / "lib" / "python3.11" / "site-packages"
    dist(site, "transformers", "5.0.0", {"transformers/__init__.py": ""})
    dist(site, "nsp-alpha", "1.0", {"nsp/alpha/__init__.py": "def run(a):\n    pass\n"})
    dist(site, "nsp-beta", "2.0", {"nsp/beta/__init__.py": "def go(b):\n    pass\n"})
    dist(site, "cons", "0.1", {"cons/__init__.py": """
        import transformers
        import nsp.alpha
        from nsp import beta
        nsp.alpha.run(1, 2)
        beta.go(b=1, c=2)
        def optional():
            import nsp.gamma  # no installed distribution provides it
    """}, requires=("transformers",))
    return prefix


def run(prefix: Path, **args) -> dict:
    from tests.unit.test_drift_probe import run as run_section

    return run_section(prefix, cache=False, **args)


def test_a_namespace_package_shared_by_distributions_charges_each_module_to_its_own(shared: Path) -> None:
    """nsp.alpha's break is nsp-alpha's, nsp.beta's nsp-beta's; nsp.gamma is nobody's: no finding."""
    pairs = {p.provider: p for p in judge(run(shared)) if p.consumer == "cons"}
    assert set(pairs) == {"nsp-alpha", "nsp-beta", "transformers"}
    assert [(f.line, f.severity) for f in pairs["nsp-alpha"].findings] == [(5, ERROR)]
    assert [(f.line, f.severity) for f in pairs["nsp-beta"].findings] == [(6, ERROR)]
    assert not any("gamma" in f.use for p in pairs.values() for f in p.findings)


def test_a_pth_code_line_puts_its_folder_first_and_a_module_beside_its_folder_wins(tmp_path: Path) -> None:
    """`import sys, os, pkg; sys.path.insert(0, os.path.join(pkg.__path__[0], 'dsl'))` is read, not run;
    a compiled module beside a folder of its name (stubs) is the module, not a namespace."""
    site = tmp_path / "site"
    (site / "pkg" / "dsl" / "cutlass").mkdir(parents=True)
    (site / "pkg" / "dsl" / "cutlass" / "__init__.py").write_text("")
    (site / "pkg.pth").write_text("import sys, os, pkg; sys.path.insert(0, os.path.join(pkg.__path__[0], 'dsl'))\n")
    (site / "core").mkdir()
    (site / "core" / "_ext").mkdir()
    (site / "core" / "__init__.py").write_text("")
    from envdoctor.probe.host.drift.walk import EXTENSION_SUFFIXES

    (site / "core" / f"_ext{EXTENSION_SUFFIXES[0]}").write_bytes(b"\x7fELF")
    front, back = pth_code_paths(str(site))
    assert front == [str(site / "pkg" / "dsl")] and back == []
    finder = ImportFinder([], [str(site)], [], front=front)
    found = finder.find("cutlass")
    assert (found.status, found.kind, found.path) == ("found", "pkg", str(site / "pkg" / "dsl" / "cutlass" / "__init__.py"))
    assert finder.find("core._ext").kind == "ext"


def test_a_version_flag_bound_in_two_steps_and_an_availability_flag_decide_their_branches(tmp_path: Path,
                                                                                         monkeypatch) -> None:
    """`V = importlib.metadata.version("prov")`, `NEW = Version(V) >= Version("2.0.dev0")`: with prov 2.1
    the else branch is not judged; `if config.HAS_NOPE:` (find_spec of a missing module) is not taken."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    prefix = tmp_path / "venv"
    site = prefix / "lib" / "python3.11" / "site-packages"
    dist(site, "transformers", "5.0.0", {"transformers/__init__.py": "def new_api(x):\n    pass\n"})
    dist(site, "prov", "2.1", {"prov/__init__.py": "def new_api(x):\n    pass\n"})
    dist(site, "cons", "0.1", {
        "cons/__init__.py": "",
        "cons/config.py": "import importlib.util\nHAS_NOPE = importlib.util.find_spec('nope') is not None\n",
        "cons/mod.py": """
            import importlib.metadata
            from packaging.version import Version
            import transformers
            from . import config
            V = importlib.metadata.version("prov")
            NEW = Version(V) >= Version("2.0.dev0")
            if NEW:
                from prov import new_api
            else:
                from prov import old_api
            if config.HAS_NOPE:
                from prov import nope_api
                import nope
        """}, requires=("transformers",))
    data = run(prefix)
    findings = [f for p in judge(data) for f in p.findings if f.severity != "unresolved"]
    assert findings == []
    walked = walk(prefix, [])
    assert not [m for m in walked["imports"]["missing"] if m["module"] == "nope"]


def test_code_imports_follows_a_sure_import_through_an_installed_library(tmp_path: Path, monkeypatch) -> None:
    """A stage script imports safe.torch (installed), whose own `import torch` finds nothing: fail."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    prefix = tmp_path / "venv"
    site = prefix / "lib" / "python3.11" / "site-packages"
    dist(site, "safe", "0.5", {"safe/__init__.py": "", "safe/torch.py": '"""\nimport docstring_only\n"""\n'
                                                                            "import os\nimport torch\n"
                                                                            "try:\n    import optional_thing\n"
                                                                            "except ImportError:\n    pass\n"})
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.py").write_text("from safe.torch import load_file\n")
    commands = [f"cd {job} && python train.py"]
    result = verdict(prefix, walk(prefix, commands), commands)
    assert result.status is Status.FAIL
    assert "safe/torch.py:5 imports torch" in result.message
    assert [m["missing"] for m in result.details["missing"]] == ["torch"]


def test_versions_order_as_pep_440_says() -> None:
    """dev < alpha < rc < final < post; trailing zeros and local labels do not count."""
    order = ["5.17.0.dev0", "5.17.0a1", "5.17.0rc1", "5.17", "5.17.0.post1", "5.19.0+cu130"]
    assert sorted(order, key=version_key) == order
    assert version_key("2.0") == version_key("2.0.0") and version_key("not a version") is None


def test_the_drift_host_modules_share_no_top_level_name_with_another_host_module() -> None:
    """The probe's modules run in one namespace: a drift name defined twice would replace the other."""
    import ast as ast_module
    from collections import defaultdict

    host = Path(__file__).resolve().parents[2] / "envdoctor" / "probe" / "host"
    defined: dict[str, set[str]] = defaultdict(set)
    for path in host.glob("*.py"):
        for node in ast_module.parse(path.read_text(encoding="utf-8")).body:
            names = [node.name] if isinstance(node, (ast_module.FunctionDef, ast_module.ClassDef)) else \
                [t.id for t in getattr(node, "targets", []) if isinstance(t, ast_module.Name)]
            for name in names:
                defined[name].add(path.name)
    assert {n: f for n, f in defined.items() if len(f) > 1 and any(x.startswith("drift") for x in f)} == {}


def test_a_changed_file_is_read_again_and_the_others_answer_from_the_files_cache(shared: Path) -> None:
    """After an edit (the whole answer's cache misses), only the edited consumer file is parsed again,
    and a fact an answer depended on that changed (a top-level name now installed) is noticed."""
    from tests.unit.test_drift_probe import run as run_section

    first = run_section(shared)
    assert first["cache"] == "miss" and first["files_reused"] == 0
    site = next(shared.glob("lib/*/site-packages"))
    (site / "cons" / "extra.py").write_text("import transformers\nimport newtop\nnewtop.f(1, 2)\n")
    record = next(site.glob("cons-0.1.dist-info")) / "RECORD"
    record.write_text(record.read_text() + "cons/extra.py,,\n")
    second = run_section(shared)
    assert second["cache"] == "miss" and second["files_reused"] == 1  # cons/__init__.py
    pairs = {p.provider: p for p in judge(second) if p.consumer == "cons"}
    assert [f.line for f in pairs["nsp-alpha"].findings] == [5]
    assert "newtop" not in pairs
    dist(site, "newtop", "1.0", {"newtop/__init__.py": "def f(a):\n    pass\n"})
    third = run_section(shared)
    assert third["files_reused"] == 1  # extra.py depended on newtop being absent: read again
    assert [f.line for p in judge(third) if p.provider == "newtop" for f in p.findings] == [3]


def test_a_major_version_read_from_a_version_string_decides_its_branch() -> None:
    """`int(np.__version__.split(".")[0]) >= 2` with numpy 2.3 installed: True."""
    import ast as ast_module

    from envdoctor.probe.host.drift.flags import FlagFacts, FlagScope

    tree = ast_module.parse("import numpy as np\nmajor = int(np.__version__.split('.')[0])\n")
    facts = FlagFacts(lambda m: None, lambda name: "2.3.1" if name == "numpy" else None, lambda m: None)
    scope = FlagScope(tree, "m", False)
    assert facts.decide(ast_module.parse("major >= 2", mode="eval").body, scope) is True
    assert facts.decide(ast_module.parse("major < 2", mode="eval").body, scope) is False
