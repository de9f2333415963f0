"""The trust_remote_code scanner: name resolution, states, errors, and the byte filter."""

from __future__ import annotations

import textwrap

import pytest

from envdoctor.probe.host.core import decode_source
from envdoctor.scan.scanner import TrustRemoteCodeScanner, might_contain_site, package_of_relative_path, resolve_relative, scan_source
from envdoctor.scan.loaders import canonical_callee


def sites_of(source: str, *, package: str | None = None) -> list[tuple[int, str, str]]:
    """(line, callee, state) of every site; the filter must pass whatever the parser finds."""
    data = textwrap.dedent(source).encode()
    sites, error = scan_source(data, "m.py", package=package)
    reference, reference_error = scan_source(data, "m.py", package=package, shortcuts=False)
    assert error is None and reference_error is None
    assert sites == reference, "the ast shortcuts changed what libcst finds"
    if sites:
        assert might_contain_site(data), "the byte filter dropped a file that holds a site"
    return [(s.line, s.callee, s.state) for s in sites]


TOK = "transformers.AutoTokenizer.from_pretrained"
CFG = "transformers.AutoConfig.from_pretrained"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param(
            """
            import transformers as tf
            tok = tf.AutoTokenizer.from_pretrained(path)
            """,
            [(3, TOK, "missing")],
            id="module-alias",
        ),
        pytest.param(
            """
            from transformers import AutoTokenizer as AT
            tok = AT.from_pretrained(path, trust_remote_code=True)
            """,
            [(3, TOK, "ok")],
            id="class-alias",
        ),
        pytest.param(
            """
            def load(path):
                from transformers import AutoConfig
                return AutoConfig.from_pretrained(path, trust_remote_code=False)
            """,
            [(4, CFG, "explicit-false")],
            id="function-local-import",
        ),
        pytest.param(
            """
            from transformers.models.auto import AutoModelForCausalLM
            from transformers.models.auto.processing_auto import AutoProcessor
            m = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=args.trust)
            p = AutoProcessor.from_pretrained(path, **kwargs)
            """,
            [(4, "transformers.AutoModelForCausalLM.from_pretrained", "parameterized"),
             (5, "transformers.AutoProcessor.from_pretrained", "kwargs")],
            id="submodule-imports",
        ),
        pytest.param(
            """
            import transformers
            a = transformers.AutoImageProcessor.from_pretrained(p, **kw, trust_remote_code=True)
            b = transformers.AutoFeatureExtractor.from_pretrained(p, trust_remote_code=flag, **kw)
            """,
            [(3, "transformers.AutoImageProcessor.from_pretrained", "ok"),
             (4, "transformers.AutoFeatureExtractor.from_pretrained", "parameterized")],
            id="explicit-keyword-wins-over-kwargs",
        ),
        pytest.param(
            """
            class AutoTokenizer:
                @classmethod
                def from_pretrained(cls, path):
                    return cls()
            tok = AutoTokenizer.from_pretrained(path)
            """,
            [],
            id="local-class-sharing-the-name",
        ),
        pytest.param(
            '''
            """Load with AutoTokenizer.from_pretrained(path) from transformers."""
            import transformers
            # tok = transformers.AutoTokenizer.from_pretrained(path)
            text = "transformers.AutoTokenizer.from_pretrained(path)"
            def f():
                """
                >>> from transformers import AutoTokenizer
                >>> AutoTokenizer.from_pretrained("x")
                """
            ''',
            [],
            id="docstrings-comments-strings",
        ),
        pytest.param(
            """
            from transformers import AutoTokenizer
            tok = AutoTokenizer.from_config(config)
            ref = AutoTokenizer.from_pretrained
            other = transformers_like.AutoTokenizer.from_pretrained(path)
            """,
            [],
            id="not-a-loading-call",
        ),
        pytest.param(
            """
            import vllm
            from vllm import LLM as Engine, EngineArgs
            from vllm.config import ModelConfig
            from vllm.entrypoints.llm import LLM
            from vllm.engine.arg_utils import AsyncEngineArgs
            a = vllm.LLM(model=path)
            b = Engine(path, trust_remote_code=True)
            c = EngineArgs(model=path, trust_remote_code=False)
            d = ModelConfig(model=path, **overrides)
            e = LLM(path)
            f = AsyncEngineArgs(model=path)
            """,
            [(7, "vllm.LLM", "missing"), (8, "vllm.LLM", "ok"), (9, "vllm.EngineArgs", "explicit-false"),
             (10, "vllm.config.ModelConfig", "kwargs"), (11, "vllm.LLM", "missing"),
             (12, "vllm.AsyncEngineArgs", "missing")],
            id="vllm-entry-points",
        ),
        pytest.param(
            """
            from transformers import (
                AutoConfig,
                AutoTokenizer,
            )
            tok = (
                AutoTokenizer
                .from_pretrained(
                    path,
                )
            )
            """,
            [(7, TOK, "missing")],
            id="parenthesised-import-and-call-over-lines",
        ),
        pytest.param(
            """
            import transformers.models.auto as auto
            x = auto.AutoModel.from_pretrained(p)
            import transformers.AutoModel
            """,
            [(3, "transformers.AutoModel.from_pretrained", "missing")],
            id="module-alias-of-submodule",
        ),
    ],
)
def test_sites_are_found_by_what_names_resolve_to(source, expected):
    """Each call is found (or not) by its resolved name, with the right line and state."""
    assert sites_of(source) == expected


def test_module_level_alias_resolves_like_an_import():
    """A module-level `X = AutoTokenizer` (even below the def) makes `X.from_pretrained` a site."""
    source = """
    from transformers import AutoTokenizer
    tokenizer_cls = AutoTokenizer
    tok = tokenizer_cls.from_pretrained(path)
    def load(path):
        return tokenizer_cls.from_pretrained(path, trust_remote_code=True)
    def later(path):
        return late_cls.from_pretrained(path)
    late_cls = AutoTokenizer
    """
    assert sites_of(source) == [(4, TOK, "missing"), (6, TOK, "ok"), (8, TOK, "missing")]


def test_function_local_alias_resolves_like_an_import():
    """An alias assigned in the function that calls it resolves like a function-local import."""
    source = """
    def load(path):
        from transformers import AutoTokenizer
        cls = AutoTokenizer
        return cls.from_pretrained(path, trust_remote_code=flag)
    """
    assert sites_of(source) == [(5, TOK, "parameterized")]


def test_alias_of_an_attribute_resolves():
    """`X = transformers.AutoConfig` is an alias of the class the attribute names."""
    source = """
    import transformers
    config_cls = transformers.AutoConfig
    config = config_cls.from_pretrained(path, trust_remote_code=False)
    """
    assert sites_of(source) == [(4, CFG, "explicit-false")]


def test_vllm_alias_called_directly_is_a_site():
    """`LLMClass = vllm.LLM; LLMClass(...)` is a vLLM site, as is an alias of an imported one."""
    source = """
    import vllm
    from vllm.engine.arg_utils import EngineArgs
    LLMClass = vllm.LLM
    Args = EngineArgs
    llm = LLMClass(model=path)
    args = Args(model=path, trust_remote_code=True)
    """
    assert sites_of(source) == [(6, "vllm.LLM", "missing"), (7, "vllm.EngineArgs", "ok")]


def test_alias_sites_have_the_states_of_their_arguments():
    """Through an alias a call is ok with the flag and missing without it, like a direct call."""
    source = """
    from transformers import AutoModelForCausalLM as Auto
    model_cls = Auto
    ok = model_cls.from_pretrained(path, trust_remote_code=True)
    missing = model_cls.from_pretrained(path)
    """
    model = "transformers.AutoModelForCausalLM.from_pretrained"
    assert sites_of(source) == [(4, model, "ok"), (5, model, "missing")]


def test_alias_whose_every_binding_is_a_loader_is_resolved_and_others_are_not():
    """A name assigned only loader classes (in branches) is a site; one also bound otherwise is not guessed at."""
    source = """
    from transformers import AutoConfig, AutoTokenizer
    cls = AutoTokenizer
    if want_config:
        cls = AutoConfig
    x = cls.from_pretrained(path)
    other = AutoTokenizer
    other = make_class()
    y = other.from_pretrained(path)
    same = AutoTokenizer
    same = AutoTokenizer
    z = same.from_pretrained(path)
    """
    assert sites_of(source) == [(6, "transformers.AutoConfig.from_pretrained", "missing"), (12, TOK, "missing")]


def test_loader_class_chosen_in_branches_as_llamafactory_does():
    """`load_class = AutoModelForX` in each branch of a function: the call through it is a site."""
    source = """
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoModelForSeq2SeqLM

    def load_model(config, init_kwargs):
        if type(config) in AutoModelForImageTextToText._model_mapping.keys():
            load_class = AutoModelForImageTextToText
        elif type(config) in AutoModelForSeq2SeqLM._model_mapping.keys():
            load_class = AutoModelForSeq2SeqLM
        else:
            load_class = AutoModelForCausalLM
        if init_kwargs.get("train_from_scratch"):
            return load_class.from_config(config, trust_remote_code=True)
        return load_class.from_pretrained(**init_kwargs)
    """
    assert sites_of(source) == [
        (12, "transformers.AutoModelForCausalLM.from_config", "ok"),
        (13, "transformers.AutoModelForCausalLM.from_pretrained", "kwargs"),
    ]


def test_from_config_is_a_site_of_its_own_kind():
    """`AutoModel.from_config(...)` is reported as transformers.AutoModel.from_config; AutoConfig has none."""
    source = """
    import transformers
    from transformers import AutoModelForCausalLM as M
    a = M.from_config(config)
    b = transformers.AutoModel.from_config(config, trust_remote_code=True)
    c = transformers.AutoConfig.from_config(config)
    """
    assert sites_of(source) == [
        (4, "transformers.AutoModelForCausalLM.from_config", "missing"),
        (5, "transformers.AutoModel.from_config", "ok"),
    ]


def test_reexport_inside_the_package_is_followed():
    """`from .common import AutoConfig` resolves when the scanned package's common.py imports it from transformers."""
    from envdoctor.scan.scanner import ExportTable
    from envdoctor.scan.exports import exports_of_source

    common = b"try:\n    from transformers import AutoConfig\nexcept ImportError:\n    pass\nTok = __import__('x')\n"
    init = b"from .common import AutoConfig as Config\n"
    exports = ExportTable.build({
        "pkg.common": exports_of_source(common, "pkg.common", "pkg"),
        "pkg": exports_of_source(init, "pkg", "pkg"),
    })
    source = textwrap.dedent("""
    from .common import AutoConfig
    from . import common
    from pkg import Config
    a = AutoConfig.from_pretrained(p)
    b = common.AutoConfig.from_pretrained(p)
    c = Config.from_pretrained(p, trust_remote_code=True)
    """).encode()
    for shortcuts in (True, False):
        sites, error = scan_source(source, "pkg/model.py", package="pkg", exports=exports, shortcuts=shortcuts)
        assert error is None
        assert [(s.line, s.callee, s.state) for s in sites] == [
            (5, CFG, "missing"), (6, CFG, "missing"), (7, CFG, "ok")]
    assert scan_source(source, "pkg/model.py", package="pkg")[0] == []


def test_alias_shadowed_by_a_parameter_is_not_resolved():
    """A parameter of the same name hides the module-level alias, so the call is not a site."""
    source = """
    from transformers import AutoTokenizer
    tokenizer_cls = AutoTokenizer
    def load(path, tokenizer_cls):
        return tokenizer_cls.from_pretrained(path)
    """
    assert sites_of(source) == []


def test_attribute_targets_chains_and_local_classes_are_not_aliases():
    """`self.x = AutoTokenizer`, an alias of an alias, and one of a local class stay unresolved."""
    source = """
    from transformers import AutoTokenizer
    class AutoLocal:
        pass
    class Loader:
        def __init__(self, path):
            self.tokenizer_class = AutoTokenizer
            self.tok = self.tokenizer_class.from_pretrained(path)
    first = AutoTokenizer
    second = first
    a = second.from_pretrained(path)
    local = AutoLocal
    b = local.from_pretrained(path)
    """
    assert sites_of(source) == []


def test_alias_file_passes_the_byte_filter_and_the_pruning():
    """The byte filter passes a file whose only site is via an alias; pruning keeps the alias."""
    import ast

    from envdoctor.scan.prune import candidate_names, prune_source

    source = (
        "import transformers\n"
        "doc = 'unrelated'\n"
        "tok_cls = transformers.AutoTokenizer\n"
        "tok = tok_cls.from_pretrained(p)\n"
    )
    assert might_contain_site(source.encode())
    # A comparison or an attribute of the class is no alias: the filter still drops these.
    no_alias = b"y = m.from_pretrained(p)\nz = AutoConfig.for_model(x)\nq = a == AutoConfig\n"
    assert not might_contain_site(no_alias)
    tree = ast.parse(source)
    names = candidate_names(tree, {"from_pretrained"}, {"LLM"})
    assert names == {"tok_cls", "transformers"}
    before, after = source.split("\n"), prune_source(source, tree, names).split("\n")
    assert after[1] == "pass" and after[2:4] == before[2:4]


def test_relative_imports_resolve_inside_their_package():
    """`from ..auto import AutoModel` inside transformers is transformers; elsewhere it is not."""
    source = """
    from ..auto import AutoModel
    from .llm import LLM
    m = AutoModel.from_pretrained(p)
    e = LLM(p)
    """
    assert sites_of(source, package="transformers.models.bert") == [
        (4, "transformers.AutoModel.from_pretrained", "missing")
    ]
    assert sites_of(source, package="vllm.entrypoints") == [(5, "vllm.LLM", "missing")]
    assert sites_of(source, package="mylib.models") == []
    assert sites_of(source) == []


def test_column_is_where_the_call_starts():
    """A site's column is the 0-based offset of the call's first character."""
    data = b"from transformers import AutoTokenizer\nself.tok = AutoTokenizer.from_pretrained(p)\n"
    (site,), _ = scan_source(data, "a/b.py")
    assert (site.path, site.line, site.column) == ("a/b.py", 2, 11)
    assert site.to_json() == {"path": "a/b.py", "line": 2, "column": 11, "callee": TOK, "state": "missing"}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"from transformers import AutoTokenizer\nx = '\xff\xfe'\n", "not UTF-8"),
        (b"from transformers import AutoTokenizer\ndef f(:\n", "does not parse"),
    ],
)
def test_unreadable_source_is_an_error_value(data, message):
    """Bytes that are not UTF-8 or do not parse give a ScanError, never an exception."""
    sites, error = scan_source(data, "bad.py")
    assert sites == []
    assert error is not None and error.path == "bad.py" and message in error.message


#: Source bytes and whether Python's own decoding (PEP 3120, PEP 263) accepts them.
DECODING_CASES = [
    b"x = 1\n",
    b"# -*- coding: latin-1 -*-\nname = 'caf\xe9'\n",
    b"#!/usr/bin/env python\n# vim: set fileencoding=cp1252 :\ns = '\x80'\n",
    b"\xef\xbb\xbfx = 1\r\n",
    b"\xef\xbb\xbf# coding: latin-1\nx = 1\n",
    b"# coding: no-such-codec\nx = 1\n",
    b"x = 1\n# coding: latin-1\ny = '\xe9'\n",  # a declaration on line 3 does not count
    b"x = '\xe9'\n",
    b"# coding: utf-8\nx = '\xe9'\n",
    b"# coding: ascii\nx = '\xe9'\n",
    b"# coding=utf8\r\nx = '\xc3\xa9'\r\n",
]


@pytest.mark.parametrize("data", DECODING_CASES)
def test_source_is_decoded_as_python_decodes_it(data):
    """decode_source agrees with the interpreter: importlib's decode_source is the oracle
    for the text (it also turns line ends into \\n), compile() for acceptance."""
    import importlib.util

    text, problem = decode_source(data)
    try:
        expected = importlib.util.decode_source(data)
    except (SyntaxError, UnicodeDecodeError):
        expected = None
    assert (text is None) == (expected is None) == (problem is not None), problem
    if text is not None:
        assert text.replace("\r\n", "\n") == expected
        compile(data, "case.py", "exec")  # Python runs it, so the scanner must read it
    else:
        with pytest.raises(SyntaxError):
            compile(data, "case.py", "exec")


def test_a_file_with_a_coding_declaration_is_scanned_not_refused():
    """A latin-1 file that declares its codec is valid Python: its call is found where it is."""
    data = b"# -*- coding: latin-1 -*-\nfrom transformers import AutoTokenizer\nname = 'caf\xe9'\n" \
           b"tok = AutoTokenizer.from_pretrained(name)\n"
    sites, error = scan_source(data, "old.py")
    assert error is None
    assert [(s.line, s.column, s.callee, s.state) for s in sites] == [(4, 6, TOK, "missing")]
    sites, error = scan_source(b"# coding: no-such-codec\n" + data.split(b"\n", 1)[1], "bad.py")
    assert sites == [] and error.message == "bad coding declaration: unknown encoding: no-such-codec"


@pytest.mark.parametrize(
    ("name", "package", "expected"),
    [
        ("..auto.AutoModel", "transformers.models.bert", "transformers.models.auto.AutoModel"),
        (".llm.LLM", "vllm.entrypoints", "vllm.entrypoints.llm.LLM"),
        ("...x", "a.b", None),
        (".x", None, None),
        ("vllm.LLM", None, "vllm.LLM"),
    ],
)
def test_resolve_relative(name, package, expected):
    """Relative names resolve against the package, as Python's import system does."""
    assert resolve_relative(name, package) == expected


def test_canonical_callee_names_the_public_class():
    """Any module path of an Auto class or vLLM entry point is reported by its public name."""
    assert canonical_callee("transformers.models.auto.tokenization_auto.AutoTokenizer.from_pretrained") == TOK
    assert canonical_callee("transformers.TFAutoModel.from_pretrained") == "transformers.TFAutoModel.from_pretrained"
    assert canonical_callee("vllm.engine.arg_utils.EngineArgs") == "vllm.EngineArgs"
    assert canonical_callee("transformers.BertModel.from_pretrained") is None
    assert canonical_callee("transformers.AutoTokenizer.register") is None
    assert canonical_callee("mylib.LLM") is None


@pytest.mark.parametrize(
    "source",
    [
        b'"""Load it with AutoTokenizer: its from_pretrained takes a path."""\n',
        b'import transformers\nx = transformers.AutoConfig.from_dict({})\ny = other.from_pretrained(p)\n',
        b"# from transformers import AutoTokenizer\n# AutoTokenizer.from_pretrained(p)\n",
        b"    >>> from transformers import AutoTokenizer\n    >>> AutoTokenizer.from_pretrained(p)\n",
        b"def from_pretrained(cls, path):\n    return AutoTokenizer\n",
        b'"""Calculate the rope index of each image in LLM."""\n',
        b"import os\nprint('hello')\n",
    ],
)
def test_byte_filter_drops_files_without_a_possible_site(source):
    """Files whose only mentions are in comments, doctests or prose never reach the parser."""
    assert not might_contain_site(source)


def test_package_of_relative_path():
    """A RECORD path names its package by its folders."""
    assert package_of_relative_path("speculators/data_generation/x.py") == "speculators.data_generation"
    assert package_of_relative_path("top.py") is None


@pytest.fixture
def tree(tmp_path):
    """A small source tree: a package with relative imports, a bad file, a file without sites."""
    pkg = tmp_path / "repo" / "transformers" / "models" / "bert"
    pkg.mkdir(parents=True)
    for folder in (pkg, pkg.parent, pkg.parent.parent):
        (folder / "__init__.py").write_text("")
    (pkg / "modeling.py").write_text("from ..auto import AutoConfig\nc = AutoConfig.from_pretrained(p)\n")
    root = tmp_path / "repo"
    (root / "app.py").write_text(
        "import vllm\nfrom transformers import AutoTokenizer\n"
        "t = AutoTokenizer.from_pretrained(p, trust_remote_code=True)\nllm = vllm.LLM(p)\n"
    )
    (root / "latin1.py").write_bytes(b"from transformers import AutoTokenizer\ns = '\xe9'\nAutoTokenizer.from_pretrained(p)\n")
    # The same bytes with a coding declaration are valid Python, scanned like any file.
    (root / "declared.py").write_bytes(b"# coding: latin-1\nfrom transformers import AutoTokenizer\ns = '\xe9'\n"
                                       b"AutoTokenizer.from_pretrained(p)\n")
    (root / "plain.py").write_text("print('nothing to see')\n")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "ignored.py").write_text("import vllm\nvllm.LLM(p)\n")
    return root


def test_scanner_walks_a_tree_and_goes_on_after_errors(tree):
    """Paths are relative to the scanned folder; a bad file is an error and the scan continues."""
    report = TrustRemoteCodeScanner().scan([tree])
    found = [(s.path, s.line, s.callee, s.state) for s in report.sites]
    assert found == [
        ("app.py", 3, TOK, "ok"),
        ("app.py", 4, "vllm.LLM", "missing"),
        ("declared.py", 4, TOK, "missing"),
        ("transformers/models/bert/modeling.py", 2, CFG, "missing"),
    ]
    assert [(e.path, e.message.split(" (")[0]) for e in report.errors] == [("latin1.py", "not UTF-8 text")]
    assert report.files == 8 and report.parsed == 4
    assert [s.path for s in report.gaps] == ["app.py", "declared.py", "transformers/models/bert/modeling.py"]


def test_files_without_a_candidate_call_never_reach_libcst(tmp_path):
    """A file past the byte filter with no call that can be a site is settled by ast alone; a deep one is still an error."""
    (tmp_path / "typed.py").write_text("from vllm.config import ModelConfig\ndef f(c: ModelConfig) -> None:\n    pass\n")
    (tmp_path / "deep.py").write_text("from vllm import LLM\nx = " + "(" * 300 + "1" + ")" * 300 + "\n")
    (tmp_path / "site.py").write_text("from vllm import LLM\nLLM(p)\n")
    assert all(might_contain_site(path.read_bytes()) for path in tmp_path.iterdir())
    report = TrustRemoteCodeScanner().scan([tmp_path])
    assert report.files == 3 and report.parsed == 2  # site.py, and deep.py to report it
    assert [(s.path, s.callee) for s in report.sites] == [("site.py", "vllm.LLM")]
    assert [e.path for e in report.errors] == ["deep.py"] and "not parsed" in report.errors[0].message
    reference = TrustRemoteCodeScanner(use_filter=False, shortcuts=False).scan([tmp_path])
    assert reference.parsed == 3 and (report.sites, report.errors) == (reference.sites, reference.errors)


PRUNABLE = """\
\"\"\"Module docstring
over two lines.\"\"\"
from transformers import AutoTokenizer
import os

def load(path):
    \"\"\"Load it.\"\"\"
    size = os.path.getsize(path)  # a comment
    x = 1; y = 2
    kind = type(AutoTokenizer) if size > 10**9 else None
    return AutoTokenizer.from_pretrained(
        path,
    )

@staticmethod
def unrelated(path):
    if path:
        return os.path.basename(path)
"""


def test_prune_keeps_what_resolution_needs_and_every_position():
    """Statements, imports and defs that cannot matter are replaced (a run of them by one `pass` or one empty
    string over their lines); lines, columns and relevant statements stay."""
    import ast

    from envdoctor.scan.prune import candidate_names, prune_source

    tree = ast.parse(PRUNABLE)
    names = candidate_names(tree, {"from_pretrained"}, {"LLM"})
    assert names == {"AutoTokenizer"}
    pruned = prune_source(PRUNABLE, tree, names)
    before, after = PRUNABLE.split("\n"), pruned.split("\n")
    assert len(before) == len(after)
    assert after[0:2] == ['"""', '"""']  # the module docstring, over two lines
    assert after[2] == before[2] and after[3] == "pass"  # the import that binds the name stays; `import os` not
    assert after[6:8] == ['    """', '"""']  # docstring and unrelated assignment: one string over both lines
    assert after[8] == before[8]  # shares its line with another statement: left alone
    assert after[9:13] == before[9:13]  # binds and calls the name: kept
    assert after[14:18] == ['"""', "", "", '"""']  # a whole def that never mentions it, decorator included
    (site,), _ = scan_source(pruned.encode(), "p.py")
    (original,), _ = scan_source(PRUNABLE.encode(), "p.py", shortcuts=False)
    assert site == original and (site.line, site.column) == (11, 11)


IMPORTS_AND_RUNS = """\
from __future__ import annotations
import os
from typing import (
    Any,
    Optional,
)
from helpers import *
import transformers.models.auto


class Unrelated:
    \"\"\"A class that never names the loader.\"\"\"

    def a(self):
        return os.getcwd()

    def b(self) -> Optional[Any]:
        return None


def load(path):
    import json
    return transformers.models.auto.AutoTokenizer.from_pretrained(path)  # loads
"""


@pytest.mark.parametrize("ending", ["\n", "\r\n"])
def test_prune_drops_unrelated_imports_and_merges_runs(ending):
    """Imports that bind no candidate name go (a star or __future__ import stays); a run of unrelated
    statements becomes one node over the same lines; the site keeps its line and column (LF and CRLF)."""
    import ast

    from envdoctor.scan.prune import candidate_names, prune_source

    source = IMPORTS_AND_RUNS.replace("\n", ending)
    tree = ast.parse(source)
    names = candidate_names(tree, {"from_pretrained"}, {"LLM"})
    assert names == {"transformers"}
    before, after = source.split("\n"), prune_source(source, tree, names).split("\n")
    assert len(after) == len(before)
    assert after[0] == before[0] and after[6:8] == before[6:8]  # __future__, star, the binding import
    assert after[1:6] == ['"""' + ending.strip("\n"), *[ending.strip("\n")] * 3, '"""' + ending.strip("\n")]  # two imports
    cr = ending.strip("\n")
    assert after[10:18] == ['"""' + cr, *[cr] * 6, '"""' + cr]  # a whole class that never names it: one string
    assert after[21] == "    pass" + cr  # `import json` binds nothing asked for
    assert after[22] == before[22]
    (site,), error = scan_source(source.encode(), "m.py")
    assert error is None and (site.line, site.column) == (23, 11)
    assert scan_source(source.encode(), "m.py", shortcuts=False) == ([site], None)


def test_prune_is_skipped_without_candidates():
    """A file whose calls cannot be sites is never handed to libcst."""
    import ast

    from envdoctor.scan.prune import candidate_names

    tree = ast.parse("import os\nfrom_pretrained = os.getcwd\nx = model.from_pretrained(p)\n")
    assert candidate_names(tree, {"from_pretrained"}, {"LLM"}) == set()


def test_reports_sarif_json_and_text(tmp_path):
    """SARIF lists gaps as errors and caller-decided flags as notes, never ok sites; JSON is the contract."""
    import json

    from envdoctor.report.scan_report import render
    from envdoctor.scan.scanner import ScanReport
    from envdoctor.scan.loaders import ScanError, Site

    report = ScanReport(
        (Site("a/x.py", 3, 4, TOK, "missing"), Site("a/x.py", 5, 0, CFG, "ok"), Site("b.py", 1, 0, "vllm.LLM", "kwargs")),
        (ScanError("c.py", "not UTF-8 text (byte 0)"),),
        files=3, parsed=3,
    )
    scans = [(tmp_path, report)]
    data = json.loads(render(scans, "json"))
    assert data["sites"][0] == {"path": "a/x.py", "line": 3, "column": 4, "callee": TOK, "state": "missing"}
    assert data["errors"] == [{"path": "c.py", "message": "not UTF-8 text (byte 0)"}]
    (run,) = json.loads(render(scans, "sarif"))["runs"]
    results = [(r["ruleId"], r["level"], r["locations"][0]["physicalLocation"]["region"]) for r in run["results"]]
    assert results == [("trust-remote-code/missing", "error", {"startLine": 3, "startColumn": 5}),
                       ("trust-remote-code/kwargs", "note", {"startLine": 1, "startColumn": 1})]
    assert run["invocations"][0]["toolExecutionNotifications"][0]["message"]["text"].startswith("c.py:")
    text = render(scans, "text")
    assert "a/x.py:3:5: missing" in text and text.rstrip().endswith("1 file(s) could not be scanned")


def test_from_config_and_reexport_files_pass_the_byte_filters():
    """The site filter passes from_config calls; the export filter passes files that only import a loader name."""
    from envdoctor.scan.scanner import might_export_loader

    assert might_contain_site(b"m = AutoModelForCausalLM.from_config(c)\n")
    assert might_contain_site(b"from x import AutoModel as M\nm = M.from_config(c)\n")
    assert might_export_loader(b"from transformers import (\n    AutoConfig,\n    AutoTokenizer,\n)\n")
    assert might_export_loader(b"from vllm import LLM\n")
    assert not might_export_loader(b"x = AutoConfig\n# from transformers import AutoConfig\n")


def test_a_class_that_only_shares_a_vllm_name_is_no_candidate():
    """sglang's own ModelConfig (imported from its package) is not parsed by libcst at all; vLLM's is a site."""
    from envdoctor.scan.sites import _NO_CANDIDATES, _pruned_module

    own = "from sglang.srt.configs.model_config import ModelConfig\nconfig = ModelConfig(path)\n"
    assert _pruned_module(own, "sglang.srt.managers") is _NO_CANDIDATES
    assert sites_of(own, package="sglang.srt.managers") == []
    vllm = "from vllm.config import ModelConfig\nconfig = ModelConfig(path)\n"
    assert _pruned_module(vllm, "mylib") is not _NO_CANDIDATES
    assert sites_of(vllm, package="mylib") == [(2, "vllm.config.ModelConfig", "missing")]


def test_a_module_bound_by_assignment_is_found_with_and_without_shortcuts():
    """`transformers = pytest.importorskip("transformers")` then `transformers.AutoModel.from_config`:
    libcst names the call as written, and the ast shortcuts (and their pruning) find it too
    (sglang's test_gemma4_unified_layerwise_offload.py, missed before)."""
    found = sites_of("""
        import pytest

        transformers = pytest.importorskip("transformers")
        helper = object()


        def test_it(config):
            model = transformers.AutoModel.from_config(config)
            tok = transformers.AutoTokenizer.from_pretrained("m", trust_remote_code=True)
            other = helper.from_pretrained("x")
    """)
    assert found == [(9, "transformers.AutoModel.from_config", "missing"), (10, TOK, "ok")]
