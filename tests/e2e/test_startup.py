"""Start-up time: commands that parse no code do not import libcst (~150 ms of every run)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import venv as venv_module
from pathlib import Path

#: Runs in a fresh interpreter (this one has long imported libcst for other tests); prints
#: the libcst modules loaded after the commands, then after one libcst operation of each kind.
PROGRAM = textwrap.dedent(
    """
    import sys

    from click.testing import CliRunner

    import envdoctor.cli.main, envdoctor.operations.fleet, envdoctor.operations.gather, envdoctor.operations.revert
    from envdoctor.cli.main import cli
    from envdoctor.operations.gather import build_request
    from envdoctor.engine.graph import load_checks
    from envdoctor.inventory import HostSpec
    from envdoctor.patching.engine import load_patches


    def loaded():
        return sorted(name for name in sys.modules if name.split(".")[0] == "libcst")


    venv, model = sys.argv[1:3]
    assert len(load_checks().checks) > 10
    patches = load_patches().patches
    assert patches and all(p.id and p.distribution and p.files and p.versions for p in patches)
    # Every probe section's arguments, the patched files and the scan filter among them.
    build_request(HostSpec("h", None, venv=venv, models=("/nonexistent",)))
    for args in (["--help"], ["checks"], ["patches", "list"],
                 ["patches", "show", "speculators-multimodal-decoder-layers"],
                 ["check", "local", "--format", "json"], ["facts", "local", "--model", model, "-f", "json"],
                 ["audit", "local", "--venv", venv, "--format", "json"]):
        result = CliRunner().invoke(cli, args)
        assert result.exception is None or isinstance(result.exception, SystemExit), (args, result.output)
    print(loaded())

    from envdoctor.modelfacts.code import read_imports
    from envdoctor.patching.engine import transform_source
    from envdoctor.scan.scanner import scan_source
    from envdoctor.patches.speculators import MULTIMODAL_DECODER

    worker = b"def _setup_hidden_states_capture(model):\\n    base_model = model.model\\n"
    assert b"language_model" in transform_source(MULTIMODAL_DECODER, worker)
    assert scan_source(b"from transformers import AutoModel\\nAutoModel.from_pretrained(p)\\n", "m.py")[0]
    assert read_imports("m.py", "import tiktoken\\n")[0].module == "tiktoken"
    print(bool(loaded()))
    """
)


def test_commands_without_parsing_do_not_import_libcst(tmp_path: Path) -> None:
    """Commands that parse no code leave libcst unimported; transforms, scans, model imports work."""
    venv_module.EnvBuilder(with_pip=False, clear=True).create(tmp_path / "venv")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(
        '{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, '
        '"num_hidden_layers": 2, "vocab_size": 100}'
    )
    proc = subprocess.run([sys.executable, "-c", PROGRAM, str(tmp_path / "venv"), str(tmp_path / "model")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    after_commands, after_parsing = proc.stdout.strip().splitlines()[-2:]
    assert after_commands == "[]", f"libcst imported at start-up: {after_commands}"
    assert after_parsing == "True"


def test_json_check_imports_neither_structlog_nor_rich():
    """A JSON check that logs nothing loads no structlog and no rich (~90 ms of start-up)."""
    program = textwrap.dedent(
        """
        import sys
        from click.testing import CliRunner
        from envdoctor.cli.main import cli

        result = CliRunner().invoke(cli, ["check", "local", "--only", "host.python", "--format", "json"])
        assert result.exit_code in (0, 1), result.output
        print(sorted({name.split(".")[0] for name in sys.modules} & {"structlog", "rich"}))
        """
    )
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_install_adds_only_the_envdoctor_package():
    """checks/ and patches/ install as envdoctor.checks and envdoctor.patches, never top-level."""
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    setuptools = project["tool"]["setuptools"]
    assert all(p == "envdoctor" or p.startswith("envdoctor.") for p in setuptools["packages"])
    assert setuptools["package-dir"] == {"envdoctor.checks": "checks", "envdoctor.patches": "patches"}
    import envdoctor.checks
    import envdoctor.patches

    assert Path(envdoctor.checks.__path__[0]).name == "checks"
    assert Path(envdoctor.patches.__path__[0]).name == "patches"


def test_asyncssh_is_imported_without_the_liboqs_search_unless_asked(tmp_path: Path) -> None:
    """Importing asyncssh for SSH hosts searches for liboqs only when a config names sntrup."""
    program = textwrap.dedent(
        """
        import ctypes.util, sys
        asked = []
        real = ctypes.util.find_library
        ctypes.util.find_library = lambda name: asked.append(name) or real(name)
        from envdoctor.transport.asyncssh_loader import import_asyncssh
        import_asyncssh(sys.argv[1:])
        import asyncssh.crypto.pq
        print(sorted(set(asked) & {"oqs", "liboqs"}), asyncssh.crypto.pq.mlkem_available)
        """
    )
    plain = tmp_path / "plain_config"
    plain.write_text("Host *\n  ServerAliveInterval 10\n")
    pq = tmp_path / "pq_config"
    pq.write_text("Host *\n  KexAlgorithms sntrup761x25519-sha512@openssh.com\n")
    runs = {name: subprocess.run([sys.executable, "-c", program, str(path)], capture_output=True,
                                 text=True, timeout=120) for name, path in (("plain", plain), ("pq", pq))}
    assert all(r.returncode == 0 for r in runs.values()), {k: r.stderr for k, r in runs.items()}
    assert runs["plain"].stdout.split("]")[0] == "["
    assert "oqs" in runs["pq"].stdout
    # ML-KEM does not come from liboqs: it stays available either way when cryptography has it.
    assert runs["plain"].stdout.split()[-1] == runs["pq"].stdout.split()[-1]


def test_local_check_does_not_import_asyncssh() -> None:
    """`check local` never loads asyncssh (~150 ms of imports)."""
    program = textwrap.dedent(
        """
        import sys
        from click.testing import CliRunner
        from envdoctor.cli.main import cli

        result = CliRunner().invoke(cli, ["check", "local", "--only", "host.python", "--format", "json"])
        assert result.exit_code in (0, 1), result.output
        print("asyncssh" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"


def run_in_fresh_interpreter(*args: str) -> tuple[list[str], str]:
    """``envdoctor ARGS`` in a fresh interpreter: the command modules (envdoctor.cli.commands.*)
    it imported, and its output."""
    program = textwrap.dedent(
        """
        import json, sys
        from click.testing import CliRunner
        from envdoctor.cli.main import cli

        result = CliRunner().invoke(cli, sys.argv[1:])
        assert result.exit_code in (0, 1), result.output
        modules = sorted(name for name in sys.modules if name.startswith("envdoctor.cli.commands."))
        print(json.dumps({"modules": modules, "output": result.output}))
        """
    )
    out = subprocess.run([sys.executable, "-c", program, *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout.strip().splitlines()[-1])
    return answer["modules"], answer["output"]


def test_help_imports_no_command_module():
    """`envdoctor --help` lists every command of the registry without importing any of their modules."""
    from envdoctor.cli.commands import commands_dict

    modules, output = run_in_fresh_interpreter("--help")
    assert modules == []
    assert all(f"  {name} " in output for name in commands_dict)


def test_a_command_imports_only_its_own_module():
    """`check local --format json` imports the check command's module and no other command's."""
    modules, output = run_in_fresh_interpreter("check", "local", "--only", "host.python", "--format", "json")
    assert modules == ["envdoctor.cli.commands.check"]
    assert json.loads(output)["command"] == "check"
    assert run_in_fresh_interpreter("checks", "--format", "json")[0] == ["envdoctor.cli.commands.checks"]
