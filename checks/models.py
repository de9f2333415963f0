"""Can the job load its models? Config, the model's own code, the tokenizer, the mask token.

Every check reads what the probe found in the model folders (``--model DIR`` or ``models``
in envdoctor.toml). Without the user's consent (``--trust-remote-code``) nothing of the
model's code was imported or run on the host: only its files were read.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from envdoctor.checks._common import target_env, target_python
from envdoctor.checks.packages import externally_managed_remedy, install_remedy

from envdoctor.engine.graph import CheckContext, check
from envdoctor.engine.results import (
    CheckResult,
    Remedy,
    Status,
    about,
    by_subject,
    errored,
    failed,
    passed,
    skipped,
    warned,
)
from envdoctor.safe_text import escape_line

if TYPE_CHECKING:
    from envdoctor.engine.facts import Environment
    from envdoctor.modelfacts.code import GoneName, MissingModule
    from envdoctor.modelfacts.model import ModelFacts

# The model modules (config, tokenizer and code readers) are imported inside the judges:
# a host without models never pays for them at start-up.

#: How transformers names the packages a model's code imports but the venv lacks.
MISSING_PACKAGES = re.compile(r"packages that were not found in your environment: ([\w.\-]+(?:, [\w.\-]+)*)")
NO_MODELS = "no model directories given (use --model DIR or models in envdoctor.toml)"
#: Files from which transformers can build a tokenizer (with or without the model's code).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tiktoken.model", "tokenizer_config.json", "tekken.json",
                   "vocab.json", "vocab.txt", "spiece.model", "sentencepiece.bpe.model")
_SEVERITY = {Status.PASS: 0, Status.SKIPPED: 0, Status.WARN: 1, Status.FAIL: 2, Status.ERROR: 3}


def per_model(ctx: CheckContext, judge: Callable[[ModelFacts], CheckResult]) -> CheckResult:
    """Judge each model; the worst result decides, every model's message is kept."""
    if not ctx.spec.models:
        return skipped(NO_MODELS)
    from envdoctor.modelfacts.model import models_from_facts

    models = models_from_facts(ctx.facts)
    if not models:
        failed = ctx.section_failed("models", "the probe could not read the model folders")
        return failed or errored("the probe could not read the model folders: no result")
    results = [(m, judge(m)) for m in models]
    if len(results) == 1:
        return results[0][1]
    if any(r.findings for _, r in results):
        return merged_findings(results)
    worst = max((r for _, r in results), key=lambda r: _SEVERITY.get(r.status, 0))
    message = "; ".join(f"{m.path}: {r.message}" for m, r in results)
    details = {m.path: dict(r.details) for m, r in results}
    return CheckResult("", worst.status, message, why=worst.why, remedy=worst.remedy, details=details)


def merged_findings(results: list[tuple[ModelFacts, CheckResult]]) -> CheckResult:
    """Several models' findings, one per subject (two models lacking tiktoken: one finding
    naming both); a model's result without subjects that is a problem counts under its path."""
    by_name: dict[str, list[tuple[ModelFacts, CheckResult]]] = {}
    for model, result in results:
        own = result.findings or ((about(model.path, result),) if result.status not in (Status.PASS, Status.SKIPPED)
                                  else ())
        for finding in own:
            by_name.setdefault(finding.subject, []).append((model, finding))
    findings = []
    for found in by_name.values():
        worst = max((f for _, f in found), key=lambda f: _SEVERITY.get(f.status, 0))
        findings.append(replace(worst, message="; ".join(f"{m.path}: {f.message}" for m, f in found)))
    return by_subject(findings, **{m.path: dict(r.details) for m, r in results})


def folder_contents(model: ModelFacts) -> str:
    """What the folder has instead, so that a wrong path is recognised at a glance."""
    if model.error:
        return ""
    if not model.listing:
        return " (the folder is empty)"
    shown = ", ".join(model.listing[:8]) + (", ..." if len(model.listing) > 8 else "")
    return f" (it has: {shown})"


@check(
    "model.config",
    facts=("models",),
    title="Model config.json describes the architecture",
    requires=["python.venv"],
    why="the drafter and the serving engine are sized from these fields; a guess here trains the wrong shape",
)
def model_config(ctx: CheckContext) -> CheckResult:
    def judge(model: ModelFacts) -> CheckResult:
        from envdoctor.modelfacts.model import REQUIRED_ARCH_FIELDS, ModelConfigError

        try:
            arch = model.architecture()
        except ModelConfigError as exc:
            return failed(str(exc) + folder_contents(model), path=model.path)
        absent = [n for n in REQUIRED_ARCH_FIELDS if arch.get(n) is None]
        where = f" (looked at the top level and {arch.nested_in})" if arch.nested_in else ""
        if absent:
            return failed(f"config.json has no {', '.join(absent)}{where}", path=model.path)
        return passed(arch.summary(), path=model.path, nested_in=arch.nested_in, **dict(arch.fields))

    return per_model(ctx, judge)


@check(
    "model.code-imports",
    facts=("models",),
    title="The model's own code can import what it needs",
    requires=["python.venv"],
    why="trust_remote_code runs these files; an import they lack fails the first tokenizer load of the job",
)
def code_imports(ctx: CheckContext) -> CheckResult:
    env = target_env(ctx)
    assert env is not None  # python.venv passed

    def judge(model: ModelFacts) -> CheckResult:
        from envdoctor.modelfacts.code import check_code, is_stdlib

        if model.error:
            return failed(f"{model.path}: {model.error}")
        if not model.code and not model.auto_map:
            return passed("no auto_map: the model uses only code from installed libraries")
        files = {c.name: c.sha256 for c in model.code}
        report = check_code(model.code, env, model.listing)
        # One finding per subject (each import the venv lacks, each name gone, each file
        # missing), so that each can be fixed, or waived, on its own.
        findings = [about(m.distribution, missing_import(ctx, env, m)) for m in report.missing]
        findings += [about(gone.name, gone_name(ctx, env, gone)) for gone in report.gone]
        missing_code = [c.name for c in model.code if c.error == "missing"]
        for name in missing_code:
            findings.append(about(name, failed(f"the model folder lacks {name}, which auto_map names",
                                               remedy=copy_remedy(name, "auto_map names"))))
        for ref in report.missing_files:
            name = f"{ref.module.split('.')[0]}.py"
            if name not in missing_code and name not in [f.subject for f in findings]:
                findings.append(about(name, failed(f"{ref.file}:{ref.line} imports .{ref.module}, which is not in "
                                                   f"{model.path}", remedy=copy_remedy(name, "the model's code imports"))))
        findings += [about(c.name, failed(f"{c.name}: {c.error}")) for c in model.code if c.error and c.error != "missing"]
        findings += [about(e.partition(":")[0].strip() or "code", failed(e)) for e in report.errors
                     if not any(e.startswith(c.name + ":") for c in model.code if c.error)]
        if findings:
            return by_subject(findings, files=files, missing=[m.distribution for m in report.missing])
        modules = sorted({r.module.split(".")[0] for r in report.imports
                          if r.module and not r.relative and not is_stdlib(r.module)})
        listed = ", ".join(f"{name} (sha256 {digest[:12] if digest else '?'})" for name, digest in files.items())
        return passed(f"trust_remote_code would run {listed}; what they import is installed: {', '.join(modules) or 'stdlib only'}",
                      files=files)

    return per_model(ctx, judge)


def missing_import(ctx: CheckContext, env: Environment, missing: MissingModule) -> CheckResult:
    """An import the model's code makes that the venv lacks: installed only with consent (the
    name comes from the model's code, which anyone who publishes a model writes: installing it,
    an sdist build or a .pth, runs code)."""
    ref = missing.ref
    consent = "" if ctx.spec.trust_remote_code else \
        "this name comes from the model's code; --trust-remote-code lets fix install it"
    remedy = install_remedy(ctx, [missing.distribution], by_hand=consent,
                            unlocked_by="--trust-remote-code" if consent else "")
    return failed(f"{ref.file}:{ref.line} imports {ref.module}, which {env.prefix} lacks (install {missing.distribution})",
                  remedy=remedy, distribution=missing.distribution)


def gone_name(ctx: CheckContext, env: Environment, gone: GoneName) -> CheckResult:
    """A name the model's code imports that the installed library no longer has."""
    removed = gone.removed
    if env.externally_managed:
        remedy = externally_managed_remedy(ctx, env, [removed.works_with])
    else:
        remedy = Remedy(
            summary=f"use a model revision that imports {removed.moved_to}, or pin {removed.works_with}",
            argv=(target_python(ctx), "-m", "pip", "install", *ctx.settings.pip_args(), removed.works_with),
            automatic=False,  # a downgrade may break what else the venv runs
        )
    return failed(f"{gone.ref.file}:{gone.ref.line} imports {gone.name} from {gone.ref.module}, which "
                  f"{removed.distribution} {gone.installed} no longer has (removed in {removed.removed_in}; "
                  f"works with {removed.works_with}; it is now {removed.moved_to})", remedy=remedy)


def copy_remedy(name: str, named_by: str) -> Remedy:
    return Remedy(summary=f"the model folder lacks {name}, which {named_by}: copy the model's code files from its "
                          f"source (or waive this finding with --skip model.code-imports:{name})", automatic=False)


@check(
    "model.tokenizer",
    facts=("models",),
    title="Tokenizer files are complete (read, not run)",
    requires=["python.venv"],
    why="a tokenizer that is missing its ranks file or chat template fails or, worse, formats prompts wrongly",
)
def tokenizer_static(ctx: CheckContext) -> CheckResult:
    env = target_env(ctx)

    def judge(model: ModelFacts) -> CheckResult:
        from envdoctor.modelfacts.model import ModelConfigError, tokenizer_needs_ranks

        if model.error:
            return failed(f"{model.path}: {model.error}")
        if "tokenizer_config.json" in model.json_errors:
            return failed(model.json_errors["tokenizer_config.json"])
        if not any(name in model.listing for name in TOKENIZER_FILES):
            return failed(f"{model.path} has no tokenizer files ({', '.join(TOKENIZER_FILES[:4])}, ...): "
                          f"AutoTokenizer cannot load it{folder_contents(model)}")
        if not model.remote_tokenizer and not any(n in model.listing for n in TOKENIZER_FILES if n != "tokenizer_config.json"):
            return failed(f"{model.path} has tokenizer_config.json but no vocabulary ({', '.join(TOKENIZER_FILES[:3])}, "
                          f"...): AutoTokenizer cannot load it{folder_contents(model)}")
        reduced_error = (model.tokenizer_json or {}).get("error")
        if reduced_error and not model.remote_tokenizer:
            return failed(str(reduced_error))
        tok = model.static_tokenizer()
        problems = []
        ranks = model.ranks
        if ranks is None and tokenizer_needs_ranks(model):
            problems.append(f"the tokenizer's code reads a tiktoken ranks file, but {model.path} has no tiktoken.model")
        elif ranks is not None:
            if ranks.get("error"):
                problems.append(f"{ranks['file']}: {ranks['error']}")
            elif ranks.get("verified"):
                if ranks.get("bad_lines"):
                    problems.append(f"{ranks['file']}: {ranks['bad_lines']} malformed line(s), first {ranks['first_bad']}")
                if not ranks.get("dense"):
                    problems.append(f"{ranks['file']}: ranks are not 0, 1, 2, ... in order")
                if ranks.get("single_bytes") != 256:
                    problems.append(f"{ranks['file']}: only {ranks.get('single_bytes')} of the 256 single bytes")
                if ranks.get("duplicates"):
                    problems.append(f"{ranks['file']}: {ranks['duplicates']} duplicate token(s)")
        try:
            vocab = model.architecture().get("vocab_size")
        except ModelConfigError:
            vocab = None
        if ranks and vocab and tok.special and ranks.get("lines", 0) + len(tok.special) > vocab:
            problems.append(f"{ranks['lines']} ranks + {len(tok.special)} special tokens exceed vocab_size {vocab}")
        details = {"tokenizer_class": tok.tokenizer_class, "ids": dict(tok.ids), "len": tok.length,
                   "vocab_size": tok.vocab_size, "special_tokens": len(tok.special), "ranks": ranks,
                   "unknown": dict(tok.unknown), "files": tok.basis}
        remedy = None
        if tok.chat_template is not None and env is not None and "jinja2" not in env.installed:
            # transformers renders chat templates with jinja2 but does not depend on it.
            problems.append(f"the model has a chat template, but {env.prefix} lacks jinja2 to render it")
            remedy = install_remedy(ctx, ["jinja2"])
        if problems:
            return failed("; ".join(problems), remedy=remedy, **details)
        ids = ", ".join(f"{role} {tok.ids[role]}" for role in ("bos", "eos", "pad") if tok.ids.get(role) is not None)
        size = f"{ranks['lines']} ranks, " if ranks else ""
        length = f"len {tok.length}, " if tok.length is not None else ""
        # The class name comes from the model's files: a newline in it must not start a line.
        summary = (f"{escape_line(tok.tokenizer_class or 'tokenizer')}: {size}{length}{len(tok.special)} special tokens"
                   + (f" ({ids})" if ids else ""))
        if tok.chat_template is None:
            return warned(f"{summary}; no chat template",
                          why="without a chat template, generation renders raw text instead of the model's turn format",
                          **details)
        return passed(summary + "; chat template present", **details)

    return per_model(ctx, judge)


@check(
    "model.tokenizer-live",
    facts=("models",),
    title="Tokenizer loads in the venv, as the job will load it",
    requires=["python.venv"],
    why="a tokenizer that loads as a different class without an error silently changes every id the job sees",
)
def tokenizer_live(ctx: CheckContext) -> CheckResult:
    if not ctx.spec.trust_remote_code:
        return skipped("the model's code is not run without consent (--trust-remote-code)")

    def judge(model: ModelFacts) -> CheckResult:
        if model.error:
            return failed(f"{model.path}: {model.error}")
        live = model.live or {}
        if live.get("error") or live.get("import_error"):
            return failed(f"the tokenizer could not be loaded: {live.get('error') or live.get('import_error')}")
        trusted = model.live_result("trusted") or {}
        untrusted = model.live_result("untrusted") or {}
        if "error" in trusted:
            lacking = MISSING_PACKAGES.search(trusted["error"])
            packages = [n.strip(".") for n in lacking[1].split(", ")] if lacking else []
            # The untrusted load got further: if it could not render the template, one fix does both.
            if "jinja2" in str(untrusted.get("chat_template_error", "")):
                packages.append("jinja2")
            return failed(f"AutoTokenizer.from_pretrained(trust_remote_code=True) fails: {trusted['error'].splitlines()[-1]}",
                          remedy=install_remedy(ctx, packages) if packages else None, error=trusted["error"])
        info = {k: trusted.get(k) for k in ("class", "vocab_size", "len", "bos_token_id", "eos_token_id",
                                             "pad_token_id", "unk_token_id", "mask_token_id")}
        info["transformers"] = live.get("transformers")
        info["chat_template"] = trusted.get("chat_template")
        info["untrusted_class"] = untrusted.get("class")
        message = f"{trusted.get('class')}: vocab_size {trusted.get('vocab_size')}, len {trusted.get('len')}"
        warnings = []
        why = ""
        remedy = None
        if "error" not in untrusted and untrusted.get("class") != trusted.get("class"):
            warnings.append(f"without trust_remote_code it loads as {untrusted.get('class')} without an error")
            why = "a library that omits trust_remote_code gets another tokenizer and no warning"
        template_error = trusted.get("chat_template_error")
        if template_error:
            warnings.append(f"its chat template does not render: {template_error}")
            if "jinja2" in template_error:
                remedy = install_remedy(ctx, ["jinja2"])
        if warnings:
            return warned("; ".join([message, *warnings]), why=why, remedy=remedy, **info)
        return passed(message + "; chat template renders", **info)

    return per_model(ctx, judge)


@check(
    "model.mask-token",
    facts=("models",),
    title="A mask token for a DFlash drafter",
    requires=["python.venv"],
    why="DFlash trains with a mask token; falling back to the pad token quietly costs acceptance length",
)
def mask_token(ctx: CheckContext) -> CheckResult:
    def judge(model: ModelFacts) -> CheckResult:
        from envdoctor.modelfacts.model import ModelConfigError, choose_mask_token

        if model.error or ("tokenizer_config.json" not in model.json_files and not model.tokenizer_json):
            return skipped(f"no readable tokenizer_config.json or tokenizer.json in {model.path}")
        try:
            vocab = model.architecture().get("vocab_size")
        except ModelConfigError:
            vocab = None
        choice = choose_mask_token(model.tokenizer(), vocab)
        details = {"mask_token_id_candidate": choice.token_id, "source": choice.source}
        if choice.source == "tokenizer":
            return passed(f"mask token {choice.token} ({choice.token_id})", **details)
        details.update(candidates=choice.count, reserved_candidates=choice.reserved, unnamed_candidates=choice.unnamed)
        if choice.source in ("reserved", "unnamed"):
            return warned(f"{choice.message}: use mask_token_id {choice.token_id} (envdoctor facts reports it)", **details)
        if not ctx.spec.draft:  # only drafter training needs one: inform, never fail a serving job
            return passed(f"{choice.message} (matters only to drafter training: --draft or a drafter stage)",
                          drafter_only=True, **details)
        return failed(choice.message, remedy=Remedy(
            summary="add a mask token to the tokenizer and resize the embeddings before training", automatic=False),
            **details)

    return per_model(ctx, judge)
