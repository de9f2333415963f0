"""Pure guards against hostile hosts, models and neighbours (issue 14), without a host."""

from __future__ import annotations

import os
import stat
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from envdoctor.config_trust import read_trusted_file
from envdoctor.errors import ConfigError, EnvdoctorError, ProbeError, UsageError
from envdoctor.install.index_credentials import index_options_to_env, wrapped_command
from envdoctor.logsafe import redact_secret_values, redact_text
from envdoctor.modelfacts.import_refs import CodeParseError
from envdoctor.modelfacts.code_imports import collect_imports
from envdoctor.probe.program import parse_lines
from envdoctor.probe.schema import section_problems
from envdoctor.safe_text import escape_line, terminal_safe, xml_safe
from envdoctor.stages.handoff import command_placeholders, drop_invalid_facts, quoted_placeholders, render_command, \
    stage_environment
from envdoctor.untrusted import source_problem

DEEP_SOURCES = {
    "parentheses": "x = " + "(" * 5000 + "1" + ")" * 5000 + "\n",
    "not": "x = " + "not " * 5000 + "1\n",
    "plus": "x = " + "a + " * 5000 + "1\n",
    "attributes": "x = a" + ".b" * 5000 + "\n",
    "strings": "x = " + '"a" ' * 5000 + "\n",
    "lambda": "x = " + "lambda: " * 5000 + "1\n",
    "invalid and deep": "x = = " + "not " * 20000 + "1\n",
}


@pytest.mark.parametrize("name", sorted(DEEP_SOURCES))
def test_deeply_nested_source_is_refused_before_libcst(name):
    """Each nesting that makes libcst recurse (or segfault) is refused with a reason, in this process."""
    problem = source_problem(DEEP_SOURCES[name])
    assert problem and "not parsed" in problem
    with pytest.raises(CodeParseError, match="not parsed"):
        collect_imports("model.py", DEEP_SOURCES[name])


def test_ordinary_code_passes_the_bound():
    """Real code (this test file, a long flat list) is not refused."""
    assert source_problem(Path(__file__).read_text()) is None
    assert source_problem("x = [" + ", ".join(["1"] * 100_000) + "]\n") is None
    assert collect_imports("m.py", "import os\nfrom a import b\n")[1].module == "a"


@pytest.mark.parametrize("ending", ["\n", "\r\n"])
def test_string_runs_are_bounded_exactly_when_the_tokenizer_is_skipped(ending):
    """201 adjacent strings over many lines are refused, 200 are not, nor 300 separate strings (tokenizing is skipped)."""
    def run(count: int) -> str:
        return ("x = (\n" + "".join(f'    "s{i}"  # {i}\n' for i in range(count)) + ")\n").replace("\n", ending)

    assert "adjacent string literals" in (source_problem(run(201)) or "")
    assert source_problem(run(200)) is None
    assert source_problem("".join(f'x{i} = "s{i}"{ending}' for i in range(300))) is None


@pytest.mark.parametrize("answer, words", [
    (b'{"section": "host", "data": [1]}\n{"done": true}\n', "host: expected an object"),
    (b'{"section": "venvs", "data": {"envs": [{"distributions": "x"}]}}\n{"done": true}\n', "venvs.envs[0]"),
    (b'{"section": "models", "data": [{"code": {"a.py": 3}}]}\n{"done": true}\n', "models[0].code"),
    (b'{"section": "host", "error": ["x"]}\n{"done": true}\n', "its error is a list"),
])
def test_probe_sections_of_the_wrong_shape_are_named(answer, words):
    """A section whose data lacks its schema's shape becomes a sentence naming the place."""
    output = parse_lines(answer.splitlines())
    problems = section_problems(output.sections, output.items, output.errors)
    assert any(words in p for p in problems), problems


@pytest.mark.parametrize("answer, words", [
    (b"[" * 100_000 + b"\n", "nested too deeply"),
    (b'{"section": [1], "data": 1}\n', "not a name"),
    (b"[" + b"1," * 4_100_000 + b"1]\n", "more than"),
])
def test_hostile_probe_answers_are_probe_errors(answer, words):
    """Deep nesting, a section name that is not text, or millions of values: a ProbeError, never a crash."""
    with pytest.raises(ProbeError, match=words):
        parse_lines(answer.splitlines())


@pytest.mark.parametrize("template, quoted", [
    ('echo "{tokenizer_class}"', ["tokenizer_class"]),
    ("echo '{tokenizer_class}'", ["tokenizer_class"]),
    ('echo "a $(x) \\" {model}"', ["model"]),
    ("echo \\{model}", ["model"]),
    ("{python} -c 'import sys' {model} \"ok\" {vocab_size}", []),
    ('echo "it\'s" {model}', []),
])
def test_placeholders_inside_quotes_are_found(template, quoted):
    """A placeholder inside '...' or "..." (or after a backslash) is found; outside quotes it is not."""
    assert quoted_placeholders(template) == quoted


def test_quoted_placeholder_is_a_usage_error_naming_the_variable():
    """The refusal says what to write instead: the placeholder bare, or its ENVDOCTOR_ variable."""
    with pytest.raises(UsageError) as caught:
        command_placeholders('echo "{tokenizer_class}"')
    assert "inside quotes" in str(caught.value) and "$ENVDOCTOR_TOKENIZER_CLASS" in caught.value.hint


def test_hostile_model_facts_never_reach_a_command():
    """A class name with $(...) or an id that is text is refused; valid facts become ENVDOCTOR_ variables."""
    values = {"tokenizer_class": "X$(touch /tmp/pwned)", "vocab_size": 163840, "bos_token_id": "1; id",
              "dflash_target_layer_ids": [1, 12]}
    with pytest.raises(EnvdoctorError, match="not a plain name"):
        render_command("echo {tokenizer_class}", values)
    with pytest.raises(EnvdoctorError, match="not an integer"):
        render_command("echo {bos_token_id}", values)
    env = stage_environment(values)
    assert env == {"ENVDOCTOR_VOCAB_SIZE": "163840", "ENVDOCTOR_DFLASH_TARGET_LAYER_IDS": "1,12"}
    doc = {"tokenizer_class": "A\nB", "eos_token_id": 2, "problems": []}
    drop_invalid_facts(doc)
    assert doc["tokenizer_class"] is None and doc["eos_token_id"] == 2 and "tokenizer_class" in doc["problems"][0]


def test_index_urls_move_from_argv_to_pip_environment():
    """--index-url and friends leave pip's argv (readable by every user) for its environment, sent on stdin."""
    argv = ["/v/bin/python", "-m", "pip", "install", "--index-url", "http://u:p4ss@h/simple",
            "--extra-index-url=https://TOKEN@h/x", "--extra-index-url", "http://h/y", "--find-links", "/w h",
            "tiktoken"]
    kept, env = index_options_to_env(argv)
    assert kept == ["/v/bin/python", "-m", "pip", "install", "--find-links", "/w h", "tiktoken"]
    assert env == {"PIP_INDEX_URL": "http://u:p4ss@h/simple", "PIP_EXTRA_INDEX_URL": "https://TOKEN@h/x http://h/y"}
    command, stdin = wrapped_command(argv)
    assert "p4ss" not in " ".join(command) and "TOKEN" not in " ".join(command)
    assert stdin is not None and b"PIP_INDEX_URL=http://u:p4ss@h/simple\n" in stdin
    assert wrapped_command(["/bin/echo", "--index-url", "x"]) == (["/bin/echo", "--index-url", "x"], None)


@pytest.mark.parametrize("text", ["https://TOKEN1234@host/simple", "http://alice:s3cret@host/x",
                                  "--extra-index-url=https://ghp-like-token@10.0.0.1:8080/simple"])
def test_url_userinfo_is_redacted_everywhere(text):
    """A token as the URL's user part is redacted like user:password, in reports and in logs."""
    for redact in (redact_secret_values, redact_text):
        out = redact(text)
        assert "***@" in out and "TOKEN1234" not in out and "s3cret" not in out and "ghp-like" not in out


def test_report_redaction_fast_path_agrees_with_the_full_pattern():
    """redact_secret_values skips the full pattern only on text where it cannot match: same
    output as SECRET_VALUE.sub on 5,000 random texts built from secret-like pieces."""
    import random

    from envdoctor.logsafe import REDACTED, SECRET_VALUE

    pieces = ["mask-token", "sk-", "hf_", "ghp_", "gho_", "://", "@", "a", "_", "-", " ", "\n", "é", "x" * 21,
              "A1b2C3d4E5f6G7h8I9j0K", "-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----",
              "https://u:p@h/s", "/", ":"]
    rng = random.Random(1201)
    matched = 0
    for _ in range(5000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        expected = SECRET_VALUE.sub(REDACTED, text)
        assert redact_secret_values(text) == expected, text
        matched += expected != text
    assert matched > 500  # many texts really held a secret


def test_control_characters_are_escaped_and_xml_made_well_formed():
    """ESC, BEL, CR and newlines are shown escaped in text; what XML forbids is dropped from JUnit."""
    evil = "Evil\x1b]0;pwned\x07\r\n  \u2713 fake\x00"
    assert "\x1b" not in escape_line(evil) and "\n" not in escape_line(evil) and "\\x1b" in escape_line(evil)
    assert terminal_safe("\x1b[1mbold\x1b[0m " + evil).startswith("\x1b[1mbold\x1b[0m Evil\\x1b]0;")
    root = ET.Element("t", name=evil)
    ET.fromstring(xml_safe(ET.tostring(root, encoding="unicode")))  # parses: well-formed


def _plant(path: Path, text: str, mode: int) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_config_writable_by_others_is_refused(tmp_path):
    """A config file writable by group or others is refused, naming why; 0644 of ours is read."""
    folder = tmp_path / "private"
    folder.mkdir(mode=0o755)
    good = _plant(folder / "ok.toml", "x = 1\n", 0o644)
    assert read_trusted_file(good, "config file") == b"x = 1\n"
    for mode in (0o664, 0o646):
        bad = _plant(folder / f"bad{mode:o}.toml", "x = 1\n", mode)
        with pytest.raises(ConfigError, match="writable by other users"):
            read_trusted_file(bad, "config file")


def test_config_in_an_open_folder_is_refused_unless_sticky(tmp_path):
    """A folder anyone can write is fine only with the sticky bit (as /tmp), never without it."""
    folder = tmp_path / "shared"
    folder.mkdir()
    config = _plant(folder / "envdoctor.toml", "x = 1\n", 0o644)
    folder.chmod(0o777)
    with pytest.raises(ConfigError, match="writable by other users and not sticky"):
        read_trusted_file(config, "config file")
    folder.chmod(0o1777)
    assert read_trusted_file(config, "config file") == b"x = 1\n"
    link = tmp_path / "link.toml"
    link.symlink_to(config)
    folder.chmod(0o777)
    with pytest.raises(ConfigError, match="not sticky"):  # the target's folder counts too
        read_trusted_file(link, "config file")
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o777


def test_ledger_entries_naming_paths_outside_the_venv_are_flagged():
    """revert trusts no ledger path: a file outside the venv or a backup outside .envdoctor/backups is named."""
    from envdoctor.patching.ledger import LedgerEntry, outside_environment

    def entry(file: str, backup: str) -> LedgerEntry:
        return LedgerEntry.from_json({"file": file, "backup": backup, "patch": "p", "op": "apply", "phase": "done"})

    good = entry("/v/lib/python3.11/site-packages/m.py", "/v/.envdoctor/backups/p/abc-m.py")
    assert outside_environment(good, "/v") is None
    for bad in (entry("/etc/passwd", "/v/.envdoctor/backups/p/x"),
                entry("/v/../etc/passwd", "/v/.envdoctor/backups/p/x"),
                entry("/v/lib/m.py", "/etc/shadow"),
                entry("/v/lib/m.py", "/v/.envdoctor/backups/../../../etc/shadow"),
                entry("/v/.envdoctor/ledger.jsonl", "/v/.envdoctor/backups/p/x")):
        assert "outside" in (outside_environment(bad, "/v") or ""), bad
