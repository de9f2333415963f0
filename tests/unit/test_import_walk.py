"""code.imports on files laid out on disk: the drift section's walk from a stage's entry, and the
check's verdict on what it found (the real interpreter is compared in tests/oracle)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from envdoctor.checks.imports import code_imports
from envdoctor.drift.request import stage_import_entries
from envdoctor.engine.graph import CheckContext
from envdoctor.engine.results import Status
from envdoctor.inventory import HostSpec, parse_stage_command
from envdoctor.probe.host.drift import section as probe_drift
from envdoctor.probe.program import ProbeOutput
from tests.unit import fakes
from tests.unit.test_drift_probe import dist


@pytest.fixture()
def venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the cache lives in ~/.cache/envdoctor
    prefix = tmp_path / "venv"
    site = prefix / "lib" / "python3.11" / "site-packages"
    dist(site, "transformers", "5.0.0", {"transformers/__init__.py": "", "transformers/models/__init__.py": ""})
    dist(site, "trainer", "1.0", {
        "trainer/__init__.py": "from trainer import loop\n",
        "trainer/loop.py": """
            import transformers
            try:
                import wandb
            except ImportError:
                wandb = None
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                import typing_only_mod
            def video():
                import decord  # an option: only when video() runs
        """,
        "trainer/native.py": "from trainer import _C\n",
    }, requires=("transformers>=4", 'decord; extra == "video"'))
    (site / "trainer" / "_C.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF")
    return prefix


def job(folder: Path, files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return folder


def walk(prefix: Path, commands: list[str], **args) -> dict:
    request = {"prefix": str(prefix), "depends_on": ["transformers", "vllm", "sglang"], "extra": [],
               "discover_baselines": False, "cache": False, "import_entries": stage_import_entries(commands), **args}
    return probe_drift.drift_section(request, lambda item: None)


def verdict(prefix: Path, data: dict, commands: list[str]):
    spec = HostSpec("h", None, venv=str(prefix), stage_commands=tuple(commands))
    facts = fakes.facts(fakes.env(str(prefix)))
    facts = type(facts)(**{**facts.__dict__, "probe": ProbeOutput(sections={"imports": data})})
    return code_imports(CheckContext(spec, facts))


def test_a_stage_script_importing_a_module_no_distribution_provides_fails_naming_file_and_line(venv: Path, tmp_path: Path):
    """`cd DIR && python train.py` whose helper imports a missing module: fail at helper.py:2."""
    folder = job(tmp_path / "job", {"train.py": "import trainer\nfrom helper import run\n",
                                    "helper.py": "import json\nimport nosuchmodule\n"})
    commands = [f"cd {folder} && {{python}} train.py --epochs 1"]
    result = verdict(venv, walk(venv, commands), commands)
    assert result.status is Status.FAIL
    assert f"{folder}/helper.py:2 imports nosuchmodule" in result.message
    assert [m["missing"] for m in result.details["missing"] if m["severity"] == "fail"] == ["nosuchmodule"]


def test_guarded_typing_only_and_library_function_imports_inform_and_pass(venv: Path, tmp_path: Path):
    """try/except ImportError, if TYPE_CHECKING and a library's function-level import never fail."""
    folder = job(tmp_path / "job", {"train.py": "import trainer.loop\n"})
    commands = [f"cd {folder} && {{python}} train.py"]
    result = verdict(venv, walk(venv, commands), commands)
    assert result.status is Status.PASS, result.message
    classes = {m["missing"]: m["class"] for m in result.details["missing"]}
    assert classes == {"wandb": "guarded", "typing_only_mod": "typing", "decord": "deferred"}
    assert all(m["severity"] == "info" for m in result.details["missing"])


def test_the_distribution_a_missing_module_comes_from_is_named_by_the_importers_requirements(venv: Path, tmp_path: Path):
    """decord imported at module level: fail, naming the extra of trainer's Requires-Dist that lists it."""
    site = next(venv.glob("lib/*/site-packages"))
    (site / "trainer" / "loop.py").write_text("import decord\n")
    folder = job(tmp_path / "job", {"train.py": "import trainer\n"})
    commands = [f"cd {folder} && python train.py"]
    result = verdict(venv, walk(venv, commands), commands)
    assert result.status is Status.FAIL
    assert "trainer/loop.py:1 imports decord" in result.message
    assert "trainer 1.0 lists decord under its extra 'video'" in result.message
    assert result.remedy is not None and "decord" in result.remedy.argv and not result.remedy.automatic


def test_a_compiled_submodule_is_found_and_a_missing_one_is_an_incomplete_install(venv: Path, tmp_path: Path):
    """trainer._C exists as an extension module; once removed, `from trainer import _C` fails as trainer's gap."""
    folder = job(tmp_path / "job", {"train.py": "import trainer.native\n"})
    commands = [f"cd {folder} && python train.py"]
    assert verdict(venv, walk(venv, commands), commands).status is Status.PASS
    next(venv.glob("lib/*/site-packages/trainer/_C.*.so")).unlink()
    result = verdict(venv, walk(venv, commands), commands)
    assert result.status is Status.FAIL
    assert "the installed trainer has no trainer._C" in result.message


def test_dead_branches_and_fallbacks_whose_try_resolves_are_not_reported(venv: Path, tmp_path: Path):
    """An old-Python branch, a fallback of a resolving import and a __main__ block of a library are never run."""
    site = next(venv.glob("lib/*/site-packages"))
    (site / "trainer" / "loop.py").write_text(textwrap.dedent("""
        import sys
        if sys.version_info < (3, 8):
            import importlib_metadata
        try:
            import json
        except ImportError:
            import simplejson as json
        if __name__ == "__main__":
            import only_as_script
    """))
    folder = job(tmp_path / "job", {"train.py": "import trainer\n"})
    commands = [f"cd {folder} && python train.py"]
    result = verdict(venv, walk(venv, commands), commands)
    assert result.status is Status.PASS
    assert result.details["missing"] == []


def test_a_missing_fallback_runs_when_its_try_import_is_missing(venv: Path, tmp_path: Path):
    """try: import ujson except ImportError: import simplejson — both absent: the fallback fails the job."""
    folder = job(tmp_path / "job", {"train.py": "try:\n    import ujson\nexcept ImportError:\n    import simplejson\n"})
    commands = [f"cd {folder} && python train.py"]
    result = verdict(venv, walk(venv, commands), commands)
    assert result.status is Status.FAIL
    assert "train.py:4 imports simplejson" in result.message


def test_a_local_package_that_hides_an_installed_one_warns_naming_both_paths(venv: Path, tmp_path: Path):
    """A transformers/ package in the stage's folder is what the job imports: warn with both paths."""
    folder = job(tmp_path / "job", {"train.py": "import transformers\n", "transformers/__init__.py": "",
                                    "trainer/README": "a folder without __init__.py hides nothing"})
    commands = [f"cd {folder} && python train.py"]
    result = verdict(venv, walk(venv, commands), commands)
    assert result.status is Status.WARN
    site = next(venv.glob("lib/*/site-packages"))
    assert f"{folder}/transformers/__init__.py hides the installed transformers" in result.message
    assert f"{site}/transformers/__init__.py" in result.message
    assert [s["name"] for s in result.details["shadows"]] == ["transformers"]


def test_a_console_script_is_followed_from_its_entry_point_and_a_missing_module_entry_fails(venv: Path, tmp_path: Path):
    """`{venv}/bin/trainer` runs trainer.loop:main (entry_points.txt); `-m trainer.gone` cannot start."""
    info = next(venv.glob("lib/*/site-packages/trainer-1.0.dist-info"))
    (info / "entry_points.txt").write_text("[console_scripts]\ntrainer = trainer.loop:main\n")
    data = walk(venv, ["{venv}/bin/trainer --fast"])
    assert data["imports"]["entries"][0]["module"] == "trainer.loop"
    assert {m["missing"] for m in data["imports"]["missing"]} == {"wandb", "typing_only_mod", "decord"}
    commands = ["{python} -m trainer.gone"]
    result = verdict(venv, walk(venv, commands), commands)
    assert result.status is Status.FAIL
    assert "the stage runs -m trainer.gone, but trainer.gone is not importable" in result.message


def test_without_a_stage_the_libraries_packages_are_walked_at_import_time_only(venv: Path):
    """No stage: trainer's package is the entry; its function-level import is not followed further."""
    data = walk(venv, [])
    assert [(e["kind"], e["name"]) for e in data["imports"]["entries"]] == [("package", "trainer")]
    result = verdict(venv, data, [])
    assert result.status is Status.PASS
    assert "the libraries' packages (trainer" in result.message


def test_the_answer_is_cached_and_an_edited_script_is_read_again(venv: Path, tmp_path: Path):
    """A re-check of unchanged files is a cache hit; editing the stage's script is a miss that sees the edit."""
    folder = job(tmp_path / "job", {"train.py": "import json\n"})
    commands = [f"cd {folder} && python train.py"]
    assert walk(venv, commands, cache=True)["cache"] == "miss"
    assert walk(venv, commands, cache=True)["cache"] == "hit"
    (folder / "train.py").write_text("import json\nimport notthere\n")
    again = walk(venv, commands, cache=True)
    assert again["cache"] == "miss"
    assert [m["missing"] for m in again["imports"]["missing"]] == ["notthere"]


@pytest.mark.parametrize(("command", "workdir", "words"), [
    ("cd /job && CUDA_VISIBLE_DEVICES=0 {python} -m pkg.train --x 1; echo done", "/job", ("{python}", "-m", "pkg.train", "--x", "1")),
    ("export A=1; cd runs && cd b && nohup python t.py", "runs/b", ("python", "t.py")),
    ("cd ~/job;{venv}/bin/vllm serve 'a b'", "~/job", ("{venv}/bin/vllm", "serve", "a b")),
    ("{python} -c 'import x'", None, ("{python}", "-c", "import x")),
])
def test_a_stage_command_gives_its_working_folder_and_the_words_that_start_the_job(command, workdir, words):
    """`cd DIR` joins as the shell would; assignments, env and nohup are not the program."""
    parsed = parse_stage_command(command)
    assert (parsed.workdir, parsed.words) == (workdir, words)


def test_stage_entries_name_module_script_console_script_or_nothing_to_follow():
    """-m and .py name what runs; another program is looked up as a console script; python -c is not followed."""
    assert stage_import_entries(["cd /j && {python} -m a.b", "cd /k && python run.py", "{venv}/bin/vllm serve m",
                                 "{python} -c pass"]) == [
        {"kind": "module", "name": "a.b", "cwd": "/j"}, {"kind": "script", "name": "run.py", "cwd": "/k"},
        {"kind": "console", "name": "vllm", "cwd": None}, {"kind": "unfollowed", "name": "{python} -c pass", "cwd": None}]
    assert stage_import_entries([]) is None
