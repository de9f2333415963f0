"""Would the installed transformers, vLLM and SGLang load this model, and as what?

Decided from files: the model's ``config.json`` (``model_type``, ``architectures``, nested
configs, ``auto_map``) and each engine's registry tables as the probe's ``architecture``
section read them on the host (``envdoctor/probe/host/scan/engine_registry.py``). The rules follow
the engines' own resolution:

- transformers (``AutoConfig``/``AutoModel*``): with ``trust_remote_code`` and an ``auto_map``
  the model's own code wins; else the ``model_type`` must be in ``CONFIG_MAPPING_NAMES`` and
  in an ``AutoModel*`` table; else only the model's code could load it (consent needed).
- vLLM: the config from its own ``_CONFIG_REGISTRY`` or else transformers'; an architecture
  of ``config.json`` in its registry; else its Transformers backend (a transformers class of
  that name, or the model's ``auto_map`` with consent), whose fit only loading tells. A
  registered architecture whose config only the model's ``auto_map`` describes (InternLM2) is
  supported with the consent it needs (``needs_consent``): the engine serves it natively once
  ``--trust-remote-code`` lets the config load.
- SGLang: the same, with the ``EntryClass`` of its ``srt/models`` modules, and the model types
  its ``get_config`` rewrites when transformers does not know them (0.5.3 builds a
  ``deepseek_v32`` config as ``deepseek_v3``, architectures ``DeepseekV3ForCausalLM``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envdoctor.modelfacts.engine_history import versions_that_know
from envdoctor.modelfacts.model import ModelConfigError, ModelFacts

ENGINES = ("transformers", "vllm", "sglang")
ENGINE_NAMES = {"transformers": "transformers", "vllm": "vLLM", "sglang": "SGLang"}
#: transformers' tables, in the order a generation job looks in them, with their Auto class.
AUTO_CLASSES = (
    ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "AutoModelForCausalLM"),
    ("MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "AutoModelForImageTextToText"),
    ("MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES", "AutoModelForMultimodalLM"),
    ("MODEL_FOR_VISION_2_SEQ_MAPPING_NAMES", "AutoModelForVision2Seq"),
    ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "AutoModelForSeq2SeqLM"),
    ("MODEL_MAPPING_NAMES", "AutoModel"),
)


@dataclass(frozen=True)
class EngineSupport:
    """One engine's answer for one model."""

    engine: str
    version: str
    #: None when the registry could not be read.
    supported: bool | None
    #: The class it loads the model as ("vllm.model_executor.models.kimi_k25.KimiK25ForConditionalGeneration").
    as_class: str | None = None
    #: registry | auto_map (remote code) | transformers backend | ...
    via: str = ""
    #: Where the config class comes from.
    config: str = ""
    #: It would load only through the model's own code, and that needs --trust-remote-code. With
    #: ``supported`` True: the engine serves the model itself once the model's config loads with that
    #: consent (vLLM's InternLM2ForCausalLM for a config only its auto_map describes).
    needs_consent: bool = False
    reason: str = ""
    #: The versions that know the model, where the history table says.
    known_in: str = ""
    #: False for the Transformers-backend paths: whether the class fits shows only at load.
    certain: bool = True

    @property
    def title(self) -> str:
        return f"{ENGINE_NAMES.get(self.engine, self.engine)} {self.version}"

    @property
    def ready(self) -> bool:
        """Supported as things stand: no consent still to give."""
        return bool(self.supported) and not self.needs_consent

    def sentence(self) -> str:
        if self.supported and self.needs_consent:
            return f"{self.title} loads it as {self.as_class} via {self.via} once {self.reason}"
        if self.supported:
            caveat = "" if self.certain else f" ({self.reason})" if self.reason else ""
            return f"{self.title} loads it as {self.as_class} via {self.via}{caveat}"
        tail = f"; {self.known_in}" if self.known_in else ""
        return f"{self.title}: {self.reason}{tail}"

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "supported": self.supported, "as": self.as_class, "via": self.via or None,
                "config": self.config or None, "needs_trust_remote_code": self.needs_consent,
                "reason": self.reason or None, "known_in": self.known_in or None, "certain": self.certain}


@dataclass(frozen=True)
class ModelKeys:
    """What config.json says that decides support."""

    model_type: str | None
    architectures: tuple[str, ...]
    text_model_type: str | None
    #: auto_map of config.json: Auto class -> "module.Class".
    auto_map: Mapping[str, str]
    #: The code files those entries name, with their sha256 (what trust_remote_code runs).
    code: Mapping[str, str | None]

    def remote_model(self) -> tuple[str, str] | None:
        for auto in ("AutoModelForCausalLM", "AutoModelForImageTextToText", "AutoModel"):
            if auto in self.auto_map:
                return auto, self.auto_map[auto]
        return next(((k, v) for k, v in self.auto_map.items() if k.startswith("AutoModel")), None)

    def files_text(self) -> str:
        return ", ".join(f"{name} (sha256 {(digest or '?')[:12]})" for name, digest in self.code.items()) or "none listed"


def model_keys(model: ModelFacts) -> ModelKeys:
    """ModelConfigError when config.json cannot describe an architecture."""
    arch = model.architecture()
    config = model.json_files.get("config.json") or {}
    auto_map = config.get("auto_map") if isinstance(config.get("auto_map"), dict) else {}
    refs = {str(k): (v[0] if isinstance(v, list) and v else v) for k, v in auto_map.items()}
    refs = {k: v.split("--", 1)[-1] for k, v in refs.items() if isinstance(v, str) and v}
    files = {ref.get("file") for ref in model.auto_map if ref.get("from") == "config.json"}
    code = {c.name: c.sha256 for c in model.code if c.name in files}
    return ModelKeys(arch.model_type, arch.architectures, arch.text_model_type, refs, code)


def _transformers_class(part: Mapping[str, Any], keys: ModelKeys) -> tuple[str, str] | None:
    """(Auto class, model class) transformers maps the model type to, the config's own first."""
    tables = (part.get("models") or {}).get(keys.model_type or "") or {}
    candidates = [(auto, tables[name]) for name, auto in AUTO_CLASSES if name in tables]
    candidates += [(name, value) for name, value in tables.items() if name not in dict(AUTO_CLASSES)]
    for auto, value in candidates:
        for cls in value if isinstance(value, list) else [value]:
            if cls in keys.architectures:
                return auto, cls
    if candidates:
        auto, value = candidates[0]
        return auto, value[0] if isinstance(value, list) else value
    return None


def judge_transformers(part: Mapping[str, Any], keys: ModelKeys, consent: bool) -> EngineSupport:
    version = str(part.get("version") or "")
    if part.get("error"):
        return EngineSupport("transformers", version, None, reason=str(part["error"]))
    known = versions_that_know("transformers", keys.model_type, keys.architectures)
    config_class = (part.get("config_types") or {}).get(keys.model_type or "")
    remote = keys.remote_model()
    if consent and "AutoConfig" in keys.auto_map and remote:
        return EngineSupport("transformers", version, True, f"{remote[1]} (the model's code)", "auto_map (remote code)",
                             f"auto_map {keys.auto_map['AutoConfig']}", reason=f"runs {keys.files_text()}")
    if config_class:
        found = _transformers_class(part, keys)
        if found:
            return EngineSupport("transformers", version, True, found[1], f"{found[0]} (model_type {keys.model_type})",
                                 f"transformers {config_class}")
        return EngineSupport("transformers", version, False, config=f"transformers {config_class}",
                             reason=f"knows the config of model type {keys.model_type} but maps no model class to it",
                             known_in=known)
    if "AutoConfig" in keys.auto_map:
        return EngineSupport("transformers", version, False, via="auto_map (remote code)", needs_consent=True,
                             reason=f"does not know model type {keys.model_type}; only the model's own code loads it: "
                                    f"--trust-remote-code would run {keys.files_text()}", known_in=known)
    what = f"model type {keys.model_type}" if keys.model_type else "a config without model_type"
    return EngineSupport("transformers", version, False, reason=f"does not recognize {what}", known_in=known)


@dataclass(frozen=True)
class ConfigPath:
    """How an engine reaches a model's config."""

    #: Where the config class comes from; None when the engine cannot build one.
    config: str | None
    #: Only the model's own code would build it, and that needs consent.
    needs_consent: bool = False
    #: The architectures the engine's config loader puts in the config instead of config.json's.
    architectures: tuple[str, ...] = ()


def _known_config(engine: str, part: Mapping[str, Any], transformers_part: Mapping[str, Any] | None,
                  model_type: str) -> str | None:
    own = (part.get("config_types") or {}).get(model_type)
    if own:
        return f"{ENGINE_NAMES[engine]} {own}"
    native = ((transformers_part or {}).get("config_types") or {}).get(model_type)
    return f"transformers {native}" if native else None


def _config_path(engine: str, part: Mapping[str, Any], keys: ModelKeys, transformers_part: Mapping[str, Any] | None,
                 consent: bool) -> ConfigPath:
    """Where the engine's config comes from: its own config class, the model's code (with consent),
    transformers', or what the engine's config loader rewrites the model type to when neither knows
    it (SGLang 0.5.3's get_config builds a deepseek_v32 config as deepseek_v3)."""
    model_type = keys.model_type or ""
    own = (part.get("config_types") or {}).get(model_type)
    if own:
        return ConfigPath(f"{ENGINE_NAMES[engine]} {own}")
    if "AutoConfig" in keys.auto_map and consent:
        return ConfigPath(f"auto_map {keys.auto_map['AutoConfig']}")  # trust_remote_code: the model's code wins
    known = _known_config(engine, part, transformers_part, model_type)
    if known:
        return ConfigPath(known)
    rewrite = (part.get("rewrites") or {}).get(model_type)
    if isinstance(rewrite, Mapping) and rewrite.get("model_type"):
        target = _known_config(engine, part, transformers_part, str(rewrite["model_type"]))
        if target:
            how = f"{ENGINE_NAMES[engine]}'s config loader ({rewrite.get('by') or 'get_config'}) rewrites model " \
                  f"type {model_type} to {rewrite['model_type']}: {target}"
            return ConfigPath(how, architectures=tuple(str(a) for a in rewrite.get("architectures") or ()))
    return ConfigPath(None, "AutoConfig" in keys.auto_map)


def judge_server(engine: str, part: Mapping[str, Any], keys: ModelKeys, transformers_part: Mapping[str, Any] | None,
                 consent: bool) -> EngineSupport:
    """vLLM or SGLang: the config, then the architecture, then the Transformers backend."""
    version = str(part.get("version") or "")
    if part.get("error"):
        return EngineSupport(engine, version, None, reason=str(part["error"]))
    known = versions_that_know(engine, keys.model_type, keys.architectures)
    path = _config_path(engine, part, keys, transformers_part, consent)
    config, config_consent = path.config, path.needs_consent
    registered = part.get("architectures") or {}
    looked_up = path.architectures or keys.architectures  # what the engine's config says, after its rewrite
    native = next(((a, registered[a]) for a in looked_up if registered.get(a)), None)
    archs = ", ".join(keys.architectures) or "(none)"
    if native is None:
        previously = part.get("previously") or {}
        gone = next(((a, previously[a]) for a in keys.architectures if a in previously), None)
        if gone:
            return EngineSupport(engine, version, False, reason=f"{gone[0]} was removed after {ENGINE_NAMES[engine]} "
                                 f"{gone[1]}", known_in=f"{ENGINE_NAMES[engine]} {gone[1]} and earlier load it")
        return backend(engine, version, part, keys, transformers_part, config, config_consent, consent, known, archs)
    arch, target = native
    as_class = _registered_class(engine, arch, target)
    if config is None and config_consent:
        # Served natively once the model's config loads, which only its own code does: consent.
        return EngineSupport(engine, version, True, as_class, f"registry ({arch})",
                             f"auto_map {keys.auto_map['AutoConfig']}", needs_consent=True,
                             reason=f"--trust-remote-code lets its config load (model type {keys.model_type} is "
                                    f"known to neither it nor transformers; that runs {keys.files_text()})")
    if config is None:
        return EngineSupport(engine, version, False, as_class, "registry",
                             reason=f"registers {arch}, but its config (model type {keys.model_type}) is known to "
                                    "neither it nor transformers", known_in=known)
    return EngineSupport(engine, version, True, as_class, f"registry ({arch})", config)


def _registered_class(engine: str, arch: str, target: Any) -> str:
    """The dotted class a registry entry names: vLLM's (module, class), where the module is
    relative to vllm.model_executor.models (``qwen3``) or absolute (``vllm.models.deepseek_v32``
    in 0.3x); SGLang's module of srt/models."""
    package = {"vllm": "vllm.model_executor.models.", "sglang": "sglang.srt.models."}[engine]
    if isinstance(target, list) and len(target) >= 2:
        module = str(target[0])
        module = module if module.startswith(engine.split(".")[0] + ".") else package + module
        return f"{module}.{target[1]}"
    return f"{package}{target}.{arch}"


def backend(engine: str, version: str, part: Mapping[str, Any], keys: ModelKeys,
            transformers_part: Mapping[str, Any] | None, config: str | None, config_consent: bool, consent: bool,
            known: str, archs: str) -> EngineSupport:
    """An architecture the engine does not register: its Transformers backend, if anything."""
    name = ENGINE_NAMES[engine]
    unknown = f"does not register {archs}"
    if not part.get("transformers_backend"):
        return EngineSupport(engine, version, False, reason=unknown, known_in=known)
    classes = (transformers_part or {}).get("classes") or {}
    in_transformers = next((a for a in keys.architectures if classes.get(a)), None)
    remote = keys.remote_model()
    caveat = "its Transformers backend; whether the class fits it shows only at load"
    if config is None:
        return EngineSupport(engine, version, False, needs_consent=config_consent,
                             reason=unknown + (f"; its Transformers backend needs the model's code: "
                                               f"--trust-remote-code would run {keys.files_text()}"
                                               if config_consent else ""), known_in=known)
    if in_transformers:
        return EngineSupport(engine, version, True, f"transformers {in_transformers}", "Transformers backend", config,
                             reason=caveat, certain=False)
    if remote and consent:
        return EngineSupport(engine, version, True, f"{remote[1]} (the model's code)",
                             "Transformers backend with auto_map (remote code)", config,
                             reason=f"{caveat}; runs {keys.files_text()}", certain=False)
    if remote:
        return EngineSupport(engine, version, False, via="Transformers backend with auto_map", config=config,
                             needs_consent=True, reason=f"{unknown}; its Transformers backend could load the model's "
                             f"own code: --trust-remote-code would run {keys.files_text()}", known_in=known)
    return EngineSupport(engine, version, False, reason=f"{unknown}, and transformers has no class of that name for "
                         f"{name}'s Transformers backend", known_in=known)


def judge_model(section: Mapping[str, Any], model: ModelFacts, consent: Mapping[str, bool]) -> dict[str, EngineSupport]:
    """Each installed engine's answer for one model (ModelConfigError when config.json is unusable).
    ``consent``: per engine, whether the model's own code may run (--trust-remote-code, or the
    stage passes it to the engine)."""
    keys = model_keys(model)
    engines = section.get("engines") or {}
    answers: dict[str, EngineSupport] = {}
    transformers_part = engines.get("transformers") if isinstance(engines.get("transformers"), Mapping) else None
    if transformers_part is not None:
        answers["transformers"] = judge_transformers(transformers_part, keys, consent.get("transformers", False))
    for engine in ("vllm", "sglang"):
        part = engines.get(engine)
        if isinstance(part, Mapping):
            # The engine builds a config it does not own with the installed transformers.
            answers[engine] = judge_server(engine, part, keys, transformers_part, consent.get(engine, False))
    return answers


def engines_of_words(words: Sequence[str]) -> set[str]:
    """The engines a stage's command words name (`-m vllm.entrypoints...`, `vllm serve`,
    `-m sglang.launch_server`); a Python command naming neither loads with transformers."""
    found = set()
    for word in words:
        base = word.rsplit("/", 1)[-1]
        for engine in ("vllm", "sglang"):
            if base == engine or base.startswith(engine + "."):
                found.add(engine)
    return found or {"transformers"}


__all__ = ["EngineSupport", "ModelConfigError", "judge_model", "engines_of_words", "ENGINES", "ENGINE_NAMES"]
