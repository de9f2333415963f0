"""The docs say what each command's --help says: the --format choices, the caches and their
places, `run --detach`, the forms --venv takes, the exit statuses.

The commands are read from the CLI itself (`envdoctor --help` and each group's --help,
in-process with click's CliRunner), never from the modules that define them, so a command
added anywhere is held to the docs too. The caches are read from the code: every file of the
envdoctor package that builds a path under ``.cache`` names its cache there.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
from click.testing import CliRunner

import envdoctor
from envdoctor.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
INDEX = DOCS / "README.md"
README = ROOT / "README.md"
PACKAGE = Path(envdoctor.__file__).resolve().parent

#: A place under the user's cache folder: its name is what follows ~/.cache/envdoctor/
#: ("drift-" for drift-<digest>/, "ssh-g", "logs").
USER_CACHE = re.compile(r"~/\.cache/envdoctor/([a-z][a-z0-9_]*(?:-[a-z]+)?-?)")
#: A place inside an environment's own .envdoctor folder.
VENV_STATE = re.compile(r"<venv>/\.envdoctor(?:/([a-z][a-z0-9_.-]*[a-z0-9]))?")


# --- the CLI, as --help shows it ------------------------------------------------------------

@cache
def help_text(command: tuple[str, ...]) -> str:
    """`envdoctor COMMAND --help`, one line per option (wide enough that nothing wraps)."""
    result = CliRunner().invoke(cli, [*command, "--help"], terminal_width=1000)
    assert result.exit_code == 0, result.output
    return result.output


def subcommands(text: str) -> list[str]:
    """The names under "Commands:" in a group's help."""
    if "\nCommands:\n" not in text:
        return []
    block = text.split("\nCommands:\n", 1)[1].split("\n\n", 1)[0]
    return [line.split()[0] for line in block.splitlines() if line.startswith("  ") and line.strip()]


@cache
def commands() -> tuple[tuple[str, ...], ...]:
    """Every command a user can run (a group's subcommands, not the group), from --help."""
    found, todo = [], [()]
    while todo:
        command = todo.pop()
        names = subcommands(help_text(command))
        if command and not names:
            found.append(command)
        todo += [(*command, name) for name in names]
    return tuple(sorted(found))


def option_help(command: tuple[str, ...], option: str) -> str | None:
    """The help line of an option (its names, metavar and text), or None when it has none."""
    options = help_text(command).split("\nOptions:\n", 1)[1].split("\n\n", 1)[0]
    for line in options.splitlines():
        names = line.strip().split("  ", 1)[0]
        if re.search(rf"(^|[ ,]){re.escape(option)}([ ,]|$)", names):
            return line.strip()
    return None


def format_choices(command: tuple[str, ...]) -> list[str]:
    line = option_help(command, "--format")
    assert line is not None, f"envdoctor {' '.join(command)} has no --format"
    match = re.search(r"--format \[([a-z|]+)\]", line)
    assert match, f"envdoctor {' '.join(command)}: --format is not a choice: {line}"
    return match.group(1).split("|")


# --- the docs -------------------------------------------------------------------------------

def doc_pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


@cache
def command_table() -> dict[tuple[str, ...], tuple[list[str], Path]]:
    """docs/README.md's table of commands: command -> (--format choices, its page)."""
    rows = {}
    for line in INDEX.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\| `envdoctor ([a-z -]+)` \|([^|]*)\| \[[^\]]*\]\(([^)#]+)\) \|$", line)
        if match:
            command = tuple(match.group(1).split())
            assert command not in rows, f"docs/README.md lists envdoctor {match.group(1)} twice"
            rows[command] = (re.findall(r"`([a-z]+)`", match.group(2)), DOCS / match.group(3))
    return rows


def cache_places(text: str) -> set[str]:
    """The cache places a text names: '~/.cache/envdoctor/NAME' and '<venv>/.envdoctor/NAME'."""
    return ({f"~/.cache/envdoctor/{name}" for name in USER_CACHE.findall(text)}
            | {f"<venv>/.envdoctor/{name}".rstrip("/") for name in VENV_STATE.findall(text)})


def docs_text() -> str:
    return "\n".join(page.read_text(encoding="utf-8") for page in doc_pages())


# --- the code -------------------------------------------------------------------------------

def code_cache_names() -> dict[str, Path]:
    """The names the code gives its caches under ~/.cache/envdoctor (-> the file building it).

    In each file that builds a path with a ".cache" literal, a cache's name is a literal that
    ends in "-" (a name followed by a digest: "drift-", "probe-") or the literal that comes
    right after "envdoctor" in the path (`("envdoctor", True), ("logs", True)`); the
    controller's caches are named by `user_cache.folder("ssh-g")`."""
    names = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        if path.name == "user_cache.py" or not re.search(r"""["']\.cache["']""", source):
            continue
        found = set(re.findall(r"""["']([a-z][a-z0-9_]*-)["']""", source))
        found |= set(re.findall(r"""["']envdoctor["'][\s,/()A-Za-z]*?["']([a-z][a-z0-9_-]*)(?:\.[a-z]+)?["']""",
                                source))
        names.update({name: path for name in found})
    # The controller's caches name their place through envdoctor/user_cache.py (which honours
    # XDG_CACHE_HOME): user_cache.folder("NAME").
    for path in sorted(PACKAGE.rglob("*.py")):
        for name in re.findall(r"""user_cache\.folder\(["']([a-z][a-z0-9_-]*)(?:\.[a-z]+)?["']""",
                               path.read_text(encoding="utf-8")):
            names[name] = PACKAGE / "user_cache.py"
    return names


def code_literals() -> str:
    return "\n".join(path.read_text(encoding="utf-8") for path in PACKAGE.rglob("*.py"))


def name_of(place: str) -> str:
    return place.removeprefix("~/.cache/envdoctor/")


# --- --format -------------------------------------------------------------------------------

def test_the_cli_lists_its_commands_in_help():
    """The command list comes from --help (so the tests below cover every command), groups included."""
    listed = commands()
    assert ("check",) in listed and ("patches", "list") in listed
    assert ("patches",) not in listed


def test_every_command_has_one_row_in_the_docs_command_table_and_every_row_is_a_command():
    """docs/README.md's table of commands has a row for each command --help lists, and none for a command that does not exist."""
    assert sorted(set(commands()) - set(command_table())) == [], "commands missing from docs/README.md"
    assert sorted(set(command_table()) - set(commands())) == [], "docs/README.md rows for commands that do not exist"


@pytest.mark.parametrize("command", commands(), ids=" ".join)
def test_the_docs_give_each_command_the_format_choices_its_help_gives(command):
    """The `--format` cell of the command's row is the choice list of its --help, in order."""
    assert command in command_table(), f"envdoctor {' '.join(command)} is not in docs/README.md"
    assert command_table()[command][0] == format_choices(command)


def test_the_readme_names_the_commands_whose_formats_differ_from_the_rest():
    """The README says which commands take other formats than most (`text|json|sarif` for `scan`), as --help does."""
    by_choices: dict[tuple[str, ...], list[str]] = {}
    for command in commands():
        by_choices.setdefault(tuple(format_choices(command)), []).append(" ".join(command))
    common = max(by_choices, key=lambda choices: len(by_choices[choices]))
    expected = {name: "|".join(choices) for choices, names in by_choices.items() if choices != common
                for name in names}
    said = {name: choices for choices, name in
            re.findall(r"`([a-z|]+)` for `([a-z ]+)`", README.read_text(encoding="utf-8"))}
    assert said == expected
    common_words = re.findall(r"`([a-z]+)`", README.read_text(encoding="utf-8").split("for most", 1)[0][-80:])
    assert common_words == list(common), "the README names the formats most commands take before 'for most'"


# --- caches ---------------------------------------------------------------------------------

def test_the_code_keeps_caches_under_the_user_cache_folder():
    """The search of the code finds the caches it is meant to find (so the tests below are not vacuous)."""
    assert {"drift-", "gpu-", "ssh-g", "logs"} <= set(code_cache_names())


def test_the_docs_name_every_cache_the_code_keeps():
    """Each ~/.cache/envdoctor/NAME the code builds is named in the docs, with $XDG_CACHE_HOME where the code honours it."""
    named = {name_of(place) for place in cache_places(docs_text()) if place.startswith("~/")}
    assert sorted(set(code_cache_names()) - named) == [], "caches the docs never name"
    text = docs_text()
    for name, path in code_cache_names().items():
        if "XDG_CACHE_HOME" in path.read_text(encoding="utf-8"):
            assert f"$XDG_CACHE_HOME/envdoctor/{name}" in text, f"the docs do not say {name} follows XDG_CACHE_HOME"


def test_every_cache_the_docs_or_a_help_name_is_one_the_code_keeps():
    """No page and no --help names a cache under ~/.cache/envdoctor or a file in <venv>/.envdoctor that the code does not use."""
    places = cache_places(docs_text())
    for command in commands():
        places |= cache_places(help_text(command))
    user = {name_of(p) for p in places if p.startswith("~/")}
    assert sorted(user - set(code_cache_names())) == [], "cache names the code does not use"
    literals = code_literals()
    venv_files = {p.rsplit("/", 1)[1] for p in places if p.startswith("<venv>/.envdoctor/")}
    assert sorted(f for f in venv_files if f'"{f}"' not in literals) == [], "<venv>/.envdoctor files the code never names"


@pytest.mark.parametrize("command", commands(), ids=" ".join)
def test_a_cache_that_a_commands_help_names_is_named_on_its_page(command):
    """Where --help says a cache lives (drift --no-cache, run --detach's log), the command's page says the same place."""
    page = command_table()[command][1]
    in_help = cache_places(help_text(command))
    on_page = cache_places(page.read_text(encoding="utf-8"))
    assert sorted(in_help - on_page) == [], f"{page.name} does not name what envdoctor {' '.join(command)} --help does"


# --- run --detach ---------------------------------------------------------------------------

def test_run_detach_is_documented_with_the_log_its_help_names():
    """`run --detach` exists, and its page documents it: the log folder of its help, the pid it prints, a session of its own."""
    line = option_help(("run",), "--detach")
    assert line is not None, "envdoctor run has no --detach"
    folders = cache_places(line)
    assert folders, f"--detach's help does not say where the log is: {line}"
    page = command_table()[("run",)][1].read_text(encoding="utf-8")
    paragraph = page.split("**`--detach`**", 1)[1].split("\n\n", 1)[0]
    assert folders <= cache_places(paragraph)
    for words in ("session of its own", "pid"):
        assert words in line and words in paragraph, f"help and page differ on {words!r}"


# --- --venv ---------------------------------------------------------------------------------

def venv_forms(text: str) -> list[str]:
    """The path forms a text gives for --venv: /abs/path, ~/path, ~user/path."""
    return re.findall(r"(?<![\w/~])((?:/|~/|~[a-z]+/)[a-z]+(?:/[a-z]+)*)", text)


def test_every_command_that_takes_venv_gives_the_same_three_forms_in_its_help():
    """--venv's help names an absolute path, ~/path and ~user/path, alike in every command."""
    forms = {command: venv_forms(line) for command in commands()
             if (line := option_help(command, "--venv")) is not None}
    assert ("check",) in forms and ("fix",) in forms
    assert len({tuple(f) for f in forms.values()}) == 1, forms
    kinds = sorted("absolute" if f.startswith("/") else "home" if f.startswith("~/") else "user"
                   for f in forms[("check",)])
    assert kinds == ["absolute", "home", "user"]


def test_the_inventory_page_gives_venv_the_forms_the_help_gives():
    """docs/inventory.md's `venv` row names the same forms as --venv's help."""
    help_forms = venv_forms(option_help(("check",), "--venv") or "")
    row = next(line for line in (DOCS / "inventory.md").read_text(encoding="utf-8").splitlines()
               if line.startswith("| `venv` |"))
    assert venv_forms(row) == help_forms


@pytest.mark.parametrize("venv,accepted", [("/root/venv_sglang211", True), ("~/venv_sglang211", True),
                                           ("~alice/venv_sglang211", True), ("venv_sglang211", False),
                                           ("./venv", False)])
def test_venv_takes_the_documented_forms_on_the_command_line_and_in_envdoctor_toml(tmp_path, venv, accepted):
    """The forms the docs give pass --venv's and the inventory's check; a relative path is exit 2 naming it."""
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text("")
    inventory = tmp_path / "envdoctor.toml"
    inventory.write_text(f'[hosts.a]\nssh = "a.invalid"\nvenv = "{venv}"\n')
    ssh_config.chmod(0o600)
    inventory.chmod(0o600)
    runner = CliRunner()
    # An unknown host is refused before anything connects: the error says which check stopped the run.
    on_command_line = runner.invoke(cli, ["check", "no-such-host", "--ssh-config", str(ssh_config), "--venv", venv])
    in_inventory = runner.invoke(cli, ["check", "no-such-host", "--ssh-config", str(ssh_config),
                                       "--config", str(inventory)])
    for result in (on_command_line, in_inventory):
        assert result.exit_code == 2, result.output
        assert ("unknown host 'no-such-host'" in result.output) is accepted, result.output
        assert ("must be an absolute path" in result.output) is not accepted, result.output


# --- exit status ----------------------------------------------------------------------------

def test_the_readme_exit_statuses_are_those_of_envdoctor_help():
    """Each status `envdoctor --help` names has a row in the README's exit status table that starts with the same words."""
    said = dict(re.findall(r"(\d) ([^,.]+)", help_text(()).split("Exit status:", 1)[1].split("\n", 1)[0]))
    assert set(said) == {"0", "1", "2"}
    table = dict(re.findall(r"^\| `(\d)` \| ([^|]+) \|$", README.read_text(encoding="utf-8"), re.MULTILINE))
    assert set(table) == set(said)
    for status, words in said.items():
        assert table[status].startswith(words), (status, words, table[status])
