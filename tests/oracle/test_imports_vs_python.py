"""code.imports against the real interpreter: each stage script is run with the venv's python in
its working folder; where python stops with an ImportError, `envdoctor check` fails naming the
same file and line, and where python runs, the check passes (or warns of a hiding folder that
python did import)."""

from __future__ import annotations

import json
import re
import subprocess
import textwrap

import pytest

from tests.conftest import make_venv

#: name -> (files of the job folder, whether python fails, what the check says)
CASES: dict[str, tuple[dict[str, str], bool]] = {
    "missing-top": ({"train.py": "import json\nimport nosuchmodule_xyz\n"}, True),
    "missing-in-helper": ({"train.py": "import helper\n", "helper.py": "import os\n\nfrom nosuch_pkg_xyz import thing\n"}, True),
    "missing-name-of-installed": ({"train.py": "from packaging import nosuchthing_xyz\n"}, True),
    "missing-submodule-of-installed": ({"train.py": "import packaging.nosuchsub_xyz\n"}, True),
    "guarded": ({"train.py": "try:\n    import nosuchmodule_xyz\nexcept ImportError:\n    nosuchmodule_xyz = None\n"}, False),
    "fallback-runs": ({"train.py": "try:\n    import nosuch_a_xyz\nexcept ImportError:\n    import nosuch_b_xyz\n"}, True),
    "version-branch": ({"train.py": "import sys\nif sys.version_info >= (3, 99):\n    import nosuchmodule_xyz\n"}, False),
    "typing-only": ({"train.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import nosuchmodule_xyz\n"}, False),
    "installed-ok": ({"train.py": "import packaging.version\nfrom packaging.version import Version\nimport local_mod\n",
                      "local_mod.py": "import packaging.specifiers\n"}, False),
    "hiding-package": ({"train.py": "import packaging\nprint(packaging.__file__)\n",
                        "packaging/__init__.py": "LOCAL = True\n"}, False),
    "namespace-folder-hides-nothing": ({"train.py": "import packaging.version\nprint(packaging.__file__)\n",
                                        "packaging/notes.txt": "a folder without __init__.py\n"}, False),
}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A real venv with packaging from PyPI, one job folder per case and an inventory of stages on `box` (local)."""
    root = tmp_path_factory.mktemp("imports-oracle")
    venv = make_venv(root / "venv", ["packaging==24.2"])
    lines = ["[hosts.box]", 'ssh = "local"', f"venv = {json.dumps(str(venv))}"]
    folders = {}
    for name, (files, _) in CASES.items():
        folder = root / name
        for rel, text in files.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(textwrap.dedent(text))
        folders[name] = folder
    inventory = root / "envdoctor.toml"
    inventory.write_text("\n".join(lines) + "\n")
    return {"root": root, "venv": venv, "folders": folders, "lines": lines}


def check_case(run_cli, setup: dict, name: str) -> dict:
    folder = setup["folders"][name]
    inventory = setup["root"] / f"{name}.toml"
    stage = ["[stages.train]", 'host = "box"', f"command = {json.dumps(f'cd {folder} && {{python}} train.py')}"]
    inventory.write_text("\n".join(setup["lines"] + stage) + "\n")
    res = run_cli("check", "box", "--config", str(inventory), "--only", "code.imports", "--format", "json")
    assert res.exit_status in (0, 1), res.stderr
    results = json.loads(res.stdout)["hosts"][0]["results"]
    return next(r for r in results if r["id"] == "code.imports")


def run_python(setup: dict, name: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(setup["venv"] / "bin" / "python"), "train.py"], cwd=setup["folders"][name],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_check_fails_exactly_where_the_interpreter_cannot_import(run_cli, setup, name):
    """Python's ImportError and its file:line are what code.imports names; a script python runs passes."""
    result = check_case(run_cli, setup, name)
    ran = run_python(setup, name)
    assert (ran.returncode != 0) == CASES[name][1], ran.stderr
    if ran.returncode != 0:
        assert "ImportError" in ran.stderr or "ModuleNotFoundError" in ran.stderr, ran.stderr
        file, line = re.findall(r'File "([^"]+)", line (\d+)', ran.stderr)[-1]
        assert result["status"] == "fail", result["message"]
        assert f"{file}:{line} imports" in result["message"]
    else:
        assert result["status"] in ("pass", "warn"), result["message"]


def test_a_hiding_package_is_the_one_python_imports_and_the_warning_names_both(run_cli, setup):
    """python prints the local packaging/__init__.py; the check warns with that path and the installed one."""
    result = check_case(run_cli, setup, "hiding-package")
    local = str(setup["folders"]["hiding-package"] / "packaging" / "__init__.py")
    assert run_python(setup, "hiding-package").stdout.strip() == local
    assert result["status"] == "warn"
    installed = next(setup["venv"].glob("lib/python3*/site-packages/packaging/__init__.py"))
    assert local in result["message"] and str(installed) in result["message"]


def test_a_folder_without_init_is_not_what_python_imports_and_is_not_reported(run_cli, setup):
    """A bare packaging/ folder in the working folder loses to the installed package, for python and the check."""
    result = check_case(run_cli, setup, "namespace-folder-hides-nothing")
    assert "site-packages/packaging/__init__.py" in run_python(setup, "namespace-folder-hides-nothing").stdout
    assert result["status"] == "pass" and result["details"]["shadows"] == []
