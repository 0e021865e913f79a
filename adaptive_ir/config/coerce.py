"""Reading a config: YAML files (with the line of every key), ``--set`` values, and their checks, into a `Config`.

Every value is checked against its key's type first (ours from the schema, the seed's from ``legacy.py``), then the
seed's keys are translated to ours (``seed.translate``), then the cross-field checks run on the built `Config`.
Unknown keys are errors, never silently ignored; every error names the file and line (or the ``--set`` flag) and
the key, with a suggestion for a misspelt name.
"""

from __future__ import annotations

import difflib
import logging
import math
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

import yaml

from adaptive_ir.common.errors import ConfigError, where
from adaptive_ir.config.legacy import SEED_KEYS, spelled, translate, warn_unused
from adaptive_ir.config.origins import Origins
from adaptive_ir.config.schema import CONFIG_DIR, DEVICE_PATTERN, SECTIONS, Config

log = logging.getLogger(__name__)


def _accepted() -> dict[str, dict[str, Any]]:
    """Section -> key -> type of every key a config may set: ours (admitting the seed's spellings), then the seed's."""
    accepted = {section: {key: spelled(f"{section}.{key}", hint)
                          for key, hint in get_type_hints(cls, include_extras=True).items()}
                for section, cls in SECTIONS.items()}
    for section, keys in SEED_KEYS.items():
        accepted.setdefault(section, {}).update(keys)
    return accepted


ACCEPTED = _accepted()


def load_config(path_or_name: str, overrides: Mapping[str, object] | None = None) -> Config:
    """Load a YAML config (a path, or a bare name from `configs/`), apply dotted overrides, validate."""
    path = _find(path_or_name)
    text = path.read_text(encoding="utf-8")
    try:
        # Composing keeps the line of every key so errors can point at it.
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"{where(path, mark.line + 1 if mark else None)}: malformed YAML: {problem}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where(path)}: expected a mapping of sections (system:, data:, ...), got {raw!r}")
    return _build(raw, Origins(str(path), _key_lines(root, path)), overrides, warn=True)


def dotted_keys(overrides: Mapping[str, object]) -> dict[str, object]:
    """Keyword overrides as dotted config keys: ``section.key`` as it is, or spelled ``section__key`` (a valid
    Python keyword, as the Python API and the envs take them)."""
    return {key.replace("__", "."): value for key, value in overrides.items()}


def build_config(raw: dict, source: str, overrides: Mapping[str, object] | None = None, warn: bool = False) -> Config:
    """A Config from plain sections (a stored config, a checkpoint's), dotted ``overrides`` applied (as ``--set``),
    validated; errors name ``source``. ``warn``: report unused and duplicated keys (done once, at first load)."""
    return _build(raw, Origins(source, {}), overrides, warn)


def config_from_dict(d: dict[str, Any], source: str = "<checkpoint>") -> Config:
    """Rebuild and re-validate a config from `config_to_dict` output. Warnings were shown when it was first loaded."""
    return _build(d, Origins(source, {}), None, warn=False)


def _find(path_or_name: str) -> Path:
    path = Path(path_or_name)
    if path.is_file():
        return path
    if len(path.parts) == 1:
        for candidate in (CONFIG_DIR / path, CONFIG_DIR / f"{path_or_name}.yaml"):
            if candidate.is_file():
                return candidate
    available = ", ".join(sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))) or "none"
    raise ConfigError(f"{path_or_name}: config file not found (shipped configs in {CONFIG_DIR}: {available})")


def _key_lines(root: yaml.Node | None, path: Path) -> dict[str, int]:
    """1-based line of every section and section.key; PyYAML would silently keep the last of a duplicate key."""
    lines: dict[str, int] = {}

    def add(key: str, node: yaml.Node) -> None:
        line = node.start_mark.line + 1
        if key in lines:
            raise ConfigError(f"{where(path, line, key)}: duplicate key (first set on line {lines[key]})")
        lines[key] = line

    if isinstance(root, yaml.MappingNode):
        for sec_node, body in root.value:
            add(str(sec_node.value), sec_node)
            if isinstance(body, yaml.MappingNode):
                for key_node, _ in body.value:
                    add(f"{sec_node.value}.{key_node.value}", key_node)
    return lines


def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f"did you mean '{close[0]}'?" if close else f"expected one of: {', '.join(choices)}"


def _build(raw: dict, origins: Origins, overrides: Mapping[str, object] | None, warn: bool) -> Config:
    """The Config of ``raw`` (section -> key -> value) with ``overrides`` (``--set``) applied; see the module
    docstring."""
    values: dict[str, dict[str, Any]] = {name: {} for name in ACCEPTED}
    for section, body in raw.items():
        section = str(section)
        if section not in ACCEPTED:
            raise ConfigError(f"{origins(section)}: unknown section '{section}'; {_suggest(section, list(ACCEPTED))}")
        if body is None:  # "training:" with nothing under it
            continue
        if not isinstance(body, dict):
            raise ConfigError(f"{origins(section)}: a section must be a mapping of keys, got {body!r}")
        for key, value in body.items():
            dotted = f"{section}.{key}"
            origins.given[dotted] = origins(dotted)
            values[section][str(key)] = _convert_or_raise(value, _hint(dotted, origins(dotted)), origins(dotted))

    for dotted, value in (overrides or {}).items():
        flag = f"--set {dotted}={value}"
        section, _, key = dotted.partition(".")
        if not key:
            raise ConfigError(f"{flag}: expected section.key=value, e.g. training.batch_size=64")
        if section not in ACCEPTED:
            raise ConfigError(f"{flag}: unknown section '{section}'; {_suggest(section, list(ACCEPTED))}")
        hint = _hint(dotted, flag)
        values[section][key] = _convert_or_raise(_from_cli(value, hint), hint, flag)
        origins.given[dotted] = flag

    ours = translate(values, origins, warn)
    cfg = Config(**{name: SECTIONS[name](**ours[name]) for name in SECTIONS}, source=origins.source)
    _validate(cfg, origins)
    if warn:
        warn_unused(values, origins)
    return cfg


def _hint(dotted: str, location: str) -> Any:
    """The type of section.key, or a ConfigError naming the unknown key."""
    section, _, key = dotted.partition(".")
    hints = ACCEPTED[section]
    if key not in hints:
        raise ConfigError(f"{location}: unknown key '{key}' in section '{section}'; {_suggest(key, list(hints))}")
    return hints[key]


def _from_cli(value: object, hint: Any) -> object:
    """Give a command-line string its YAML type ("64" → 64, "true" → True, "null" → None)."""
    if not isinstance(value, str):
        return value
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError:
        return value
    # A string field keeps the text as typed ("--set data.data_dir=2024" names a folder, not a number).
    if parsed is not None and _accepts_str(hint):
        return value
    return parsed


def _accepts_str(hint: Any) -> bool:
    origin = get_origin(hint)
    if origin is Annotated or origin in (Union, types.UnionType):
        return any(_accepts_str(a) for a in get_args(hint))
    return hint is str or (origin is Literal and all(isinstance(a, str) for a in get_args(hint)))


class _Mismatch(Exception):
    """A value does not fit a type hint."""


def _convert_or_raise(value: object, hint: Any, location: str) -> Any:
    try:
        return _convert(value, hint)
    except _Mismatch:
        raise ConfigError(f"{location}: expected {_describe(hint)}, got {value!r}") from None


def _convert(value: object, hint: Any) -> Any:
    """`value` as the type `hint` describes, or _Mismatch."""
    origin, args = get_origin(hint), get_args(hint)
    if origin is Annotated:
        value = _convert(value, args[0])
        if not all(rule.admits(value) for rule in args[1:]):
            raise _Mismatch
        return value
    if origin in (Union, types.UnionType):  # only `X | None` is used
        if value is None:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(value, inner)
    if origin is Literal:
        if isinstance(value, str) and value in args:
            return value
    elif origin is list:
        if isinstance(value, list):
            return [_convert(v, args[0]) for v in value]
    elif origin is dict:
        if isinstance(value, dict):
            return {_convert(k, args[0]): _convert(v, args[1]) for k, v in value.items()}
    elif hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        # PyYAML reads 3e-4 (no dot) as a string, so numeric strings count as numbers.
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            try:
                number = float(value)
            except ValueError:
                raise _Mismatch from None
            if math.isfinite(number):
                return number
    elif hint is str:
        if isinstance(value, str):
            return value
    raise _Mismatch


def _describe(hint: Any) -> str:
    origin, args = get_origin(hint), get_args(hint)
    if origin is Annotated:
        return " ".join([_describe(args[0]), *(rule.describe() for rule in args[1:])])
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in args if a is not type(None)) + " or null"
    if origin is Literal:
        return "one of " + ", ".join(args)
    if origin is list:
        return f"a list of ({_describe(args[0])})"
    if origin is dict:
        return f"a mapping of ({_describe(args[0])}): ({_describe(args[1])})"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}[hint]


def _validate(cfg: Config, origins: Origins) -> None:
    """Checks that involve more than one field's type."""

    def fail(dotted: str, message: str) -> None:
        raise ConfigError(f"{origins(dotted)}: {message}")

    if not DEVICE_PATTERN.fullmatch(cfg.system.device):
        fail("system.device", f"{cfg.system.device!r} is not a device; use auto, cpu, cuda, cuda:N or mps")
    # data_dir / ir_datasets_id / embeddings.path are checked where they are used (data, embeddings), whose
    # messages say where to get the files.

    data = cfg.data
    if data.also_train_on and data.dataset_type in ("default", "ir_datasets"):
        fail("data.also_train_on", f"lists folders, which dataset_type {data.dataset_type!r} does not read; use "
             "a folder format (beir, trec, msmarco, ...) for data_dir and every folder listed")
    if data.also_train_on and cfg.embeddings.type == "lsa":
        fail("data.also_train_on", "LSA embeddings are fitted on one corpus and mean something else on another; "
             "set embeddings.type: sentence-transformers to train on several collections")
    if data.also_train_share is not None and not data.also_train_on:
        fail("data.also_train_share", "is set but data.also_train_on lists no collection")

    mining = cfg.candidate_mining
    if not mining.methods:
        fail("candidate_mining.methods", "needs at least one of tfidf, bm25_contrib, rm3")
    if mining.min_candidates > mining.max_candidates:
        fail(
            "candidate_mining.min_candidates", f"{mining.min_candidates} exceeds max_candidates={mining.max_candidates}"
        )
    if mining.reranker_query_adapt and mining.reranker_query_path is None:
        fail("candidate_mining.reranker_query_adapt", "adapts the query encoder at reranker_query_path, which is "
             "null; set reranker_query_path to a query encoder (scripts/distill_query_encoder.py), or adapt 0")

    retrieval = cfg.retrieval
    if retrieval.bm25_scoring == "lucene" and retrieval.idf != "lucene":
        fail("retrieval.idf", f"{retrieval.idf!r} cannot go with bm25_scoring: lucene (Lucene's BM25 has Lucene's "
             "IDF only); set idf: lucene or bm25_scoring: bm25s")
    if mining.stem_variants and retrieval.stemmer != "none":
        fail("candidate_mining.stem_variants", f"the index already stems (retrieval.stemmer: {retrieval.stemmer}): "
             "its terms are stems, so a query word has no variants to add; set stem_variants: false")

    if retrieval.expansion_weights is not None and len(set(retrieval.expansion_weights)) != len(
            retrieval.expansion_weights):
        fail("retrieval.expansion_weights", f"{retrieval.expansion_weights} repeats a weight: two actions would be "
             "the same rewrite; list each weight once")

    agent = cfg.rl_agent
    if agent.hidden_dim % agent.num_heads:
        fail("rl_agent.num_heads", f"hidden_dim={agent.hidden_dim} must be divisible by num_heads={agent.num_heads}")

    training = cfg.training
    if training.num_epochs == 0 and not training.init_from:
        fail("training.num_epochs", "0 trains nothing; it only makes sense with training.init_from (use a policy "
             "trained elsewhere as it is)")
    if training.reward_weights is not None and not any(training.reward_weights.values()):
        fail("training.reward_weights", "needs at least one positive weight (recall, mrr)")
    episodes = -(-training.episodes_per_update // training.collect_batch_size) * training.collect_batch_size
    if episodes != training.episodes_per_update:
        log.warning("training.episodes_per_update: %d is not a multiple of training.collect_batch_size (%d); each "
                    "update rolls out %d episodes (whole lockstep rounds)", training.episodes_per_update,
                    training.collect_batch_size, episodes)
    needed = episodes * agent.max_steps_per_episode
    if needed > training.buffer_size:
        fail("training.buffer_size", f"{training.buffer_size} cannot hold the {episodes} episodes of an update × "
             f"max_steps_per_episode {agent.max_steps_per_episode} = {needed} transitions; lower "
             "training.episodes_per_update or rl_agent.max_steps_per_episode, or raise training.buffer_size")
