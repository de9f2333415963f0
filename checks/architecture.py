"""Does the installed engine know the model? transformers, vLLM and SGLang, from files.

The probe section ``architecture`` reads the registries of the engines the environment has
(transformers' auto mappings, vLLM's model registry, SGLang's model folder) with ``ast`` on the
host; :mod:`envdoctor.modelfacts.engines` decides from them and ``config.json`` (nested
configs and ``auto_map`` included) whether and as what each engine would load the model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from envdoctor.checks.models import per_model
from envdoctor.engine.graph import CheckContext, check
from envdoctor.engine.results import CheckResult, Remedy, errored, failed, passed, skipped, warned
from envdoctor.inventory import parse_stage_command

if TYPE_CHECKING:
    from envdoctor.modelfacts.model import ModelFacts

SECTION = "architecture"


def stage_engines(ctx: CheckContext) -> dict[str, bool]:
    """Engine -> whether a stage that runs it passes --trust-remote-code itself."""
    from envdoctor.modelfacts.engines import engines_of_words

    found: dict[str, bool] = {}
    for command in ctx.spec.stage_commands:
        words = parse_stage_command(command).words
        for engine in engines_of_words(words):
            found[engine] = found.get(engine, False) or "--trust-remote-code" in words
    return found


@check(
    "model.architecture",
    facts=("models", SECTION),
    title="The installed engines know the model's architecture",
    requires=["python.venv"],
    why="an engine that does not know the architecture stops the job only after the weights are being "
    "read ('Model architectures [...] are not supported', 'Transformers does not recognize this architecture')",
)
def model_architecture(ctx: CheckContext) -> CheckResult:
    if not ctx.spec.models:
        return skipped("no model directories given (use --model DIR or models in envdoctor.toml)")
    if unread := ctx.section_failed(SECTION, "could not read the engines' registries"):
        return unread
    data = ctx.facts.section(SECTION)
    if not isinstance(data, dict):
        return skipped("the probe did not read the engines' registries")
    if not data.get("engines"):
        return skipped("the environment has none of transformers, vLLM and SGLang")
    staged = stage_engines(ctx)

    def judge(model: ModelFacts) -> CheckResult:
        return judge_one(ctx, data, model, staged)

    return per_model(ctx, judge)


def judge_one(ctx: CheckContext, data: dict, model: ModelFacts, staged: dict[str, bool]) -> CheckResult:
    from envdoctor.modelfacts.engines import ENGINES, ModelConfigError, judge_model

    consent = {e: ctx.spec.trust_remote_code or staged.get(e, False) for e in ENGINES}
    try:
        answers = judge_model(data, model, consent)
    except ModelConfigError as exc:
        return errored(f"config.json cannot be judged: {exc}", path=model.path)
    details = {"architecture": {e: a.to_json() for e, a in answers.items()}, "stage_engines": sorted(staged),
               "cache": data.get("cache")}
    sentences = [answers[e].sentence() for e in ENGINES if e in answers]
    if staged:
        blocking = [answers[e] for e in sorted(staged) if e in answers and not answers[e].ready]
        missing = [e for e in sorted(staged) if e not in answers]
        if missing:
            return failed(f"a stage runs {', '.join(missing)}, which the environment does not have; "
                          + "; ".join(sentences), **details)
        if blocking:
            return failed("; ".join(a.sentence() for a in blocking), remedy=remedy_for(blocking), **details)
        return passed("; ".join(sentences), **details)
    usable = [a for a in answers.values() if a.ready]
    could = [a for a in answers.values() if a.needs_consent]
    if not usable and not could:
        return failed("no installed engine loads it: " + "; ".join(sentences),
                      remedy=remedy_for(list(answers.values())), **details)
    if len(usable) < len(answers):
        return warned("; ".join(sentences) + " (no stage on this host names the engine it runs)",
                      remedy=remedy_for([a for a in answers.values() if not a.ready]), **details)
    return passed("; ".join(sentences), **details)


def remedy_for(answers: list) -> Remedy | None:
    if not answers:
        return None
    if any(a.needs_consent for a in answers):
        return Remedy(summary="pass --trust-remote-code (and to the engine) if the model's own code may run, "
                              "or install an engine version that knows the model", automatic=False)
    known = [a.known_in for a in answers if a.known_in]
    return Remedy(summary=f"install an engine that knows the model: {known[0]}" if known else
                  "install an engine version that knows the model (its release notes list the architectures)",
                  automatic=False)
