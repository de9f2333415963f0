"""Shared fixtures: a real sshd on 127.0.0.1, real virtualenvs, and the CLI as a user runs it."""

from __future__ import annotations

import compileall
import ensurepip
import os
import shutil
import subprocess
import sys
import venv as venv_module
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

from tests.cli_server import CLIServer, can_serve
from tests.sshd import SSHServer, find_sshd, start_sshd
from tests.venv_clones import built_once, clone_venv, end_run, start_run

ALIASES = ["ct200", "b300", "gpu-a", "gpu-b"]


REPOSITORY = Path(__file__).resolve().parent.parent
_VENV_TEMPLATES = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    """Compile envdoctor's own sources once, before any test (in the controller, not again in
    each xdist worker), as pip compiles an installed package. The commands the tests launch run
    with PYTHONDONTWRITEBYTECODE (so the test venvs stay as built); without this, every launch of
    an editable checkout's CLI compiled each module it imports from source again. Also makes the
    run's folder of built venvs that make_venv copies (tests/venv_clones.py)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    for folder in ("envdoctor", "checks", "patches"):
        compileall.compile_dir(REPOSITORY / folder, quiet=1, workers=1)
    config.stash[_VENV_TEMPLATES] = start_run()  # (before the xdist workers start: they inherit it)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _VENV_TEMPLATES in config.stash:
        end_run(config.stash[_VENV_TEMPLATES])


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    """A real OpenSSH server on 127.0.0.1 with aliases ct200, b300, gpu-a, gpu-b."""
    if find_sshd() is None:
        pytest.fail("openssh-server is not installed; .ci/run installs it (apt-get install openssh-server)")
    server = start_sshd(tmp_path_factory.mktemp("sshd"), ALIASES)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def test_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment for every command the tests run: offline hub, private caches."""
    caches = tmp_path_factory.mktemp("caches")
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        HF_HOME=str(caches / "hf"),
        TIKTOKEN_CACHE_DIR=str(caches / "tiktoken"),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.pop("NO_COLOR", None)
    env.pop("VIRTUAL_ENV", None)  # an activated venv would be `local`'s chosen interpreter
    return env


@dataclass
class CLIResult:
    exit_status: int
    stdout: str
    stderr: str


Launch = Callable[..., CLIResult]


@pytest.fixture(scope="session")
def launch_cli(test_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launch]:
    """launch(args, env, cwd, timeout): `envdoctor ARGS...` as its own process with exactly
    ``env``, forked from tests/cli_server.py's interpreter that has the CLI's modules imported
    (a fresh interpreter when ``env`` changes what start-up reads, or with
    ENVDOCTOR_TESTS_FRESH_CLI=1)."""
    server: CLIServer | None = None
    fresh = os.environ.get("ENVDOCTOR_TESTS_FRESH_CLI") == "1"

    def launch(args: Sequence[str], env: dict[str, str], cwd: Path | str | None = None,
               timeout: float = 600) -> CLIResult:
        nonlocal server
        if fresh or not can_serve(env, test_env):
            proc = subprocess.run([sys.executable, "-m", "envdoctor", *args], capture_output=True, text=True,
                                  env=env, cwd=cwd, timeout=timeout, stdin=subprocess.DEVNULL)
            return CLIResult(proc.returncode, proc.stdout, proc.stderr)
        if server is None:
            server = CLIServer(str(tmp_path_factory.mktemp("cli-server")), test_env, str(REPOSITORY))
        status, out, err = server.run(list(args), env=env, cwd=str(cwd or os.getcwd()), timeout=timeout)
        return CLIResult(status, out, err)

    yield launch
    if server is not None:
        server.stop()


@pytest.fixture(scope="session")
def run_cli(test_env: dict[str, str], launch_cli: Launch):
    """Run `envdoctor ARGS...` as a separate process, the way a user or CI does."""

    def run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 600) -> CLIResult:
        return launch_cli(args, {**test_env, **(env or {})}, cwd, timeout)

    return run


def uv_executable() -> str:
    """The uv the test extra installs (beside this interpreter), else the one on PATH."""
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if beside.exists() else shutil.which("uv")
    if not found:
        pytest.fail("uv is not installed; `pip install -e '.[test]'` installs it")
    return found


def make_venv(path: Path, packages: list[str] = (), *, pip_args: list[str] = (),  # type: ignore[assignment]  # tuple default
              compile_bytecode: bool = True) -> Path:
    """A real virtualenv: the venv module's layout, the pip that `python -m venv` would bundle
    (ensurepip's own version), and real packages from PyPI, bytecode compiled as pip compiles it.

    uv installs them from its cache (no second download or build): the same wheels as pip
    would take, in seconds instead of half a minute. The files are copied, not hard-linked:
    a link shares its inode with uv's cache, whose ctime then changes whenever any other venv
    links it, and the venv would not keep still. Tests that are about pip's own behaviour run
    the venv's pip afterwards, as a user does. ``compile_bytecode=False`` for a venv a test
    imports a few modules of once (compiling all of transformers costs more than that).

    A compiled venv is built once per run for each set of packages and copied to ``path``
    (see tests/venv_clones.py): the compiling is most of the CPU of a build.
    """
    packages, pip_args = list(packages), list(pip_args)
    if not compile_bytecode:
        return build_venv(path, packages, pip_args, compile_bytecode=False)
    template = built_once(["venv", packages, pip_args],
                          lambda where: build_venv(where, packages, pip_args, compile_bytecode=True))
    if template is None:  # (outside a pytest run)
        return build_venv(path, packages, pip_args, compile_bytecode=True)
    return clone_venv(template, path)


def build_venv(path: Path, packages: list[str], pip_args: list[str], *, compile_bytecode: bool) -> Path:
    """The venv make_venv describes, built at ``path`` itself (make_venv copies one built once)."""
    venv_module.EnvBuilder(with_pip=False, clear=True).create(path)
    install = [uv_executable(), "pip", "install", "--quiet", "--python", str(path / "bin" / "python"),
               "--link-mode=copy"]
    compiled = ["--compile-bytecode"] if compile_bytecode else []  # (what that command installed)
    env = {**os.environ, "UV_NO_PROGRESS": "1"}
    subprocess.run([*install, *compiled, f"pip=={ensurepip.version()}"], check=True, env=env)
    if packages:
        subprocess.run([*install, *compiled, *pip_args, *packages], check=True, env=env)
    return path


#: The read-only transformers venv: transformers (with tokenizers and huggingface_hub) and what
#: models' tokenizers load with (tiktoken, jinja2 for chat templates, sentencepiece, protobuf).
TRANSFORMERS_STACK = ("transformers", "tiktoken", "jinja2", "sentencepiece", "protobuf")


@pytest.fixture(scope="session")
def transformers_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One venv for the session (one per xdist worker that needs it) with real transformers
    from PyPI, for the tests that only read it: an oracle that loads models with it, a --venv
    that `check` or `facts` reads. A test that installs or removes packages (fix, the model
    cache's invalidation, an interrupted pip) gets its own with make_venv instead, so that no
    test sees another's changes."""
    return make_venv(tmp_path_factory.mktemp("transformers venv") / "venv", list(TRANSFORMERS_STACK))


@pytest.fixture(scope="session")
def venv_factory(tmp_path_factory: pytest.TempPathFactory):
    """make(name, packages) -> path of a fresh venv (names may hold spaces and metacharacters)."""
    root = tmp_path_factory.mktemp("venvs")

    def make(name: str, packages: list[str] = ()) -> Path:  # type: ignore[assignment]  # tuple default
        return make_venv(root / name, list(packages))

    return make


TIERS = ("unit", "oracle", "e2e", "realstack")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--realstack", action="store_true", default=False,
                     help="also run tests/realstack: build the real vLLM and SGLang stacks of "
                          "tests/real_stacks.py with uv (kept between runs, ~10 GB each) and check them")

#: Modules whose tests share nothing costly (each case its own temporary folder): spread over
#: the xdist workers one test at a time, like the unit tier. Every other e2e and oracle module
#: runs whole on one worker, so that its module- and session-scoped fixtures (venvs from PyPI,
#: servers) are built once and its tests run in their order.
SPREAD = frozenset({"tests/oracle/test_ssh_corpus_heldout.py", "tests/oracle/test_ssh_resolve_corpus.py"})


def work_unit(nodeid: str) -> str:
    """The unit of work a test goes to an xdist worker in: its module, or itself (see SPREAD)."""
    module = nodeid.split("::", 1)[0]
    if module.startswith(("tests/e2e/", "tests/oracle/", "tests/realstack/")) and module not in SPREAD:
        return module
    return nodeid


#: The modules that take longest (measured here, 2 cores and 3 workers: 40-130 s each), longest
#: first. They start before the others, so that none is left running alone at the end of the
#: run; the order changes only how long the run takes, never what it tests.
SLOW_FIRST = tuple(f"tests/{name}.py" for name in (
    "e2e/test_slurm_gate",  # (~3 min, most of it waiting for Slurm's health check runs: little CPU)
    "e2e/test_interrupts", "e2e/test_ssh_parity", "e2e/test_patch_real_libraries", "e2e/test_model_cache",
    "e2e/test_faults_fix", "e2e/test_patches", "e2e/test_drift", "e2e/test_model_layouts",
    "oracle/test_engine_registries", "e2e/test_consistency_vs_pip", "e2e/test_hostile_neighbours",
    "e2e/test_env_choice", "e2e/test_fleet_diff", "e2e/test_first_line",
))


def start_order(nodeids: list[str]) -> dict[str, tuple[int, int]]:
    """Each work unit's place in the run: SLOW_FIRST in its order, then the other modules run
    whole (most tests first, as xdist's loadscope orders them), then the tests that go one at a
    time (they fill the workers at the end)."""
    sizes = Counter(work_unit(nodeid) for nodeid in nodeids)
    order = {}
    for unit, size in sizes.items():
        if unit in SLOW_FIRST:
            order[unit] = (0, SLOW_FIRST.index(unit))
        else:
            order[unit] = (1 if "::" not in unit else 2, -size)
    return order


class SuiteScheduling(LoadScopeScheduling):
    """xdist's loadscope (whole units of work, then one at a time as workers free up), with this
    suite's units of work (work_unit), started in the collection's order (start_order)."""

    def __init__(self, config: pytest.Config, log=None) -> None:  # type: ignore[no-untyped-def]  # xdist's Producer
        super().__init__(config, log)
        config.option.loadscopereorder = False  # (the collection is in start_order already)

    def _split_scope(self, nodeid: str) -> str:
        return work_unit(nodeid)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log) -> LoadScopeScheduling | None:
    """`--dist loadscope` (pyproject's addopts) schedules with SuiteScheduling."""
    return SuiteScheduling(config, log) if config.getvalue("dist") == "loadscope" else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test carries its tier's marker, from its folder: `pytest -m unit` runs the fast tier."""
    root = Path(__file__).parent
    for item in items:
        try:
            tier = item.path.relative_to(root).parts[0]
        except ValueError:
            continue
        if tier in TIERS:
            item.add_marker(tier)
        if tier == "realstack" and not config.getoption("--realstack"):
            item.add_marker(pytest.mark.skip(reason="the real-stack tier runs with --realstack (see README)"))
    order = start_order([item.nodeid for item in items])
    items.sort(key=lambda item: order[work_unit(item.nodeid)])  # (stable: a module keeps its tests' order)
