"""The one run configuration: defaults, YAML, CLI overrides and validation.

Precedence: package defaults < ``--config file.yaml`` (never auto-loaded) < explicit CLI
values (including 0 / false). Every field carries help text; fields marked
``fingerprint=False`` are recorded in the sidecar but do not define the run (where a cache
lives, how big a batch is, whether a progress bar is drawn).
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from engram_eval.errors import ConfigError
from engram_eval.retrieval.flags import add_field_arguments, given_fields
from engram_eval.retrieval.settings import (
    GROUPS,
    RETRIEVER_GROUPS,
    SYSTEM_GROUP,
    MemoLexicalSettings,
    RetrievalSettings,
    SystemSettings,
    _f,
    short_repr,
)
from engram_eval.scoring.protocols import PROTOCOLS


@dataclass(frozen=True)
class RunConfig(RetrievalSettings, MemoLexicalSettings, SystemSettings):
    """Every setting of a retrieval run: the retrieval settings it inherits
    (:class:`~engram_eval.retrieval.settings.RetrievalSettings`, same field names, YAML keys
    and CLI flags), the ``memo-lexical`` settings
    (:class:`~engram_eval.retrieval.settings.MemoLexicalSettings`, recorded only in runs
    of that retriever: :data:`~engram_eval.retrieval.settings.RETRIEVER_GROUPS`), the
    settings of a system from outside the package
    (:class:`~engram_eval.retrieval.settings.SystemSettings`, recorded only in such runs) plus the
    selection and runtime settings of the run itself. Validated on construction, like its
    retrieval part."""

    retriever: str = _f("hybrid", "retrieval backend: hybrid, dense, bm25, flat-bm25, "
                        "memo-lexical, dummy; or a system from outside the package: an entry "
                        "point's name (group engram_eval.retrievers), py:MODULE:FACTORY, or "
                        "http (with --system-url)", group="selection")
    questions: str = _f("", "JSON/JSONL file of {question_id, question} (e.g. translated "
                        "questions): each selected question's text is replaced by its "
                        "question_id; the haystack stays. Its sha256 is recorded in the "
                        "fingerprint (selection.questions), not its path", group="selection",
                        fingerprint=False)
    allow_missing: bool = _f(False, "with --questions: keep the original text of selected "
                             "questions the file lacks and ignore file ids the dataset "
                             "lacks (both counted in the sidecar) instead of refusing",
                             group="selection", fingerprint=False)
    dataset_format: str = _f("auto", "dataset layout", group="selection",
                             choices=("auto", "longmemeval", "locomo"))
    protocols: list[str] = _f([], "scoring protocols (empty: answerable, official, "
                              "official_nonempty_gold, all for LongMemEval; locomo, "
                              "locomo_no_adversarial for LoCoMo)", group="selection", cli=False)
    limit: int | None = _f(None, "score only the first N selected questions (diagnostics)",
                           group="selection", lo=1)
    question_ids: list[str] = _f([], "score only these question ids (repeatable)",
                                 group="selection", cli=False)
    confidence_filter: bool = _f(False, "always false: ranking benchmarks apply no production "
                                 "confidence gate", group="selection", cli=False)
    # not part of the fingerprint
    threads: int = _f(0, "torch CPU threads (0: torch default)", group="runtime",
                      fingerprint=False, lo=0, hi=1024)
    progress: bool = _f(True, "draw a progress bar on stderr", group="runtime",
                        fingerprint=False)
    dummy_salt: str = _f("", "salt of the dummy retriever (tests)", group="runtime",
                         hidden=True)
    # scale (engram_eval.runs.shard, engram_eval.runs.executors)
    trace_sessions: int = _f(0, "per-session traces kept in each row, in rank order (0: all; "
                             "the ranking and every score are always complete; tune and "
                             "analyze need all)", group="selection", lo=0)
    shard: str = _f("", "run only shard I/N of the selected questions (stable: sha256 of the "
                    "question id mod N); join the shards with `engram-eval merge`",
                    group="selection", fingerprint=False)
    executor: str = _f("local", "where questions are ranked: this process, or Ray actors "
                       "(pip install engram-eval[ray])", group="runtime", fingerprint=False,
                       choices=("local", "ray"))
    ray_address: str = _f("", "Ray cluster to join (e.g. auto, ray://host:10001); empty: "
                          "start a local Ray instance", group="runtime", fingerprint=False)
    ray_workers: int = _f(2, "Ray actors (each loads the models once)", group="runtime",
                          fingerprint=False, lo=1, hi=4096)
    settings_sources: dict = _f({}, "where each rerank setting came from: 'explicit' (CLI "
                                "or YAML), the reranker's settings card ('card:NAME'), or the "
                                "generic rule for a model without a card; filled by "
                                "resolve_model_settings and recorded in the sidecar",
                                group="runtime", fingerprint=False, cli=False)

    def _validate(self) -> None:
        super()._validate()
        if self.confidence_filter:
            raise ConfigError("config field confidence_filter: ranking runs never filter by "
                              "confidence; it must be false")
        for p in self.protocols:
            if p not in PROTOCOLS:
                raise ConfigError(f"config field protocols: unknown protocol {short_repr(p)}")
        from engram_eval.runs.shard import parse_shard

        parse_shard(self.shard)  # I/N, 0 <= I < N

    def retrieval_settings(self) -> RetrievalSettings:
        """The retrieval part of this run (what a retriever is built from)."""
        return RetrievalSettings.of(self)

    # ------------------------------------------------------------------
    def validate(self) -> RunConfig:
        """Raise ConfigError naming the field for any out-of-range or unknown value (also
        done on construction; kept for callers that validate explicitly)."""
        self._validate()
        return self

    def _recorded(self, f: dataclasses.Field[Any]) -> bool:
        """A field of another retriever's group (``memo_*`` outside memo-lexical runs) is
        not recorded: it cannot change the ranking, and runs keep the sidecars they had."""
        if f.metadata["group"] == SYSTEM_GROUP:
            from engram_eval.retrieval.base import is_builtin

            return not is_builtin(self.retriever)
        owner = RETRIEVER_GROUPS.get(f.metadata["group"])
        return owner is None or owner == self.retriever

    def to_json(self) -> dict[str, Any]:
        whole = dataclasses.asdict(self)
        return {f.name: whole[f.name] for f in fields(self) if self._recorded(f)}

    def fingerprint_part(self) -> dict[str, Any]:
        """The fields that define the run (see module docstring)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.metadata["fingerprint"] and self._recorded(f)}

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str = "config") -> RunConfig:
        names = {f.name: f for f in fields(cls)}
        out: dict[str, Any] = {}
        for k, v in data.items():
            if not isinstance(k, str):
                raise ConfigError(f"{source}: config field name {short_repr(k)} is not a string")
            key = k.replace("-", "_")
            if key not in names:
                raise ConfigError(f"{source}: unknown config field {short_repr(k)}")
            out[key] = _coerce(names[key], v, source)
        try:
            return cls(**out).validate()
        except ConfigError as e:
            if str(e).startswith(f"{source}:"):
                raise
            raise ConfigError(f"{source}: {e}") from None

    @classmethod
    def from_yaml(cls, path: str | Path) -> RunConfig:
        data = read_yaml_mapping(path, "config", "a mapping of config fields")
        return cls.from_mapping(data, source=str(path))

    def replace(self, **changes: Any) -> RunConfig:
        return dataclasses.replace(self, **changes).validate()


def read_yaml_mapping(path: str | Path, what: str, expected: str) -> dict[str, Any]:
    """Read a YAML file whose top level must be a mapping (an empty file is ``{}``); an
    unreadable file, bad YAML or another top level is one :class:`ConfigError` naming the
    file and ``what`` it should hold (``expected`` describes the mapping)."""
    import yaml

    try:
        from engram_eval.io import read_regular_text

        try:
            text = read_regular_text(path, MAX_YAML_BYTES)  # a FIFO or device: one error
        except UnicodeDecodeError as e:
            raise ConfigError(f"{path}: cannot read {what}: not UTF-8 text (byte "
                              f"{e.start}: {e.reason})") from None
        except ValueError:
            raise ConfigError(f"{path}: {what} is over {MAX_YAML_BYTES} bytes; a config file "
                              f"is at most {MAX_YAML_BYTES}") from None
        loader = _strict_yaml_loader(path, what)(text)
        try:
            data = loader.get_single_data() or {}
        finally:
            loader.dispose()
    except ConfigError:
        raise
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: cannot read {what}: {_yaml_problem(e)}") from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise ConfigError(f"{path}: cannot read {what}: {str(e)[:200]}") from None
    except OSError as e:
        from engram_eval.io import input_problem

        # a missing file, a dangling link or a loop of links said as every input says it
        why = input_problem(path) if isinstance(e, FileNotFoundError) or \
            e.errno == errno.ELOOP else None
        raise ConfigError(f"{path}: cannot read {what}: {why or e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: {what} top level must be {expected}")
    bad = next((k for k in data if not isinstance(k, str)), _NO_KEY)
    if bad is not _NO_KEY:
        raise ConfigError(f"{path}: {what}: key {short_repr(bad)} is not a field name "
                          "(keys are strings)")
    _refuse_lone_surrogates(data, path, what)
    return data


def _refuse_lone_surrogates(data: Any, path: str | Path, what: str) -> None:
    """A string holding a lone surrogate (``"\\ud800"``: not text, and no UTF-8 output can
    hold it) is one :class:`ConfigError` naming the key. The nesting is bounded
    (:data:`MAX_YAML_DEPTH`) and aliases are refused, so the walk is small."""
    todo: list[tuple[str, Any]] = [("", data)]
    while todo:
        key, value = todo.pop()
        items: list[tuple[str, Any]] = []
        if isinstance(value, dict):
            items = [(f"{key}.{k}" if key else str(k), v) for k, v in value.items()]
            items += [(key or "(top level)", k) for k in value]
        elif isinstance(value, (list, tuple, set)):
            items = [(f"{key}[{i}]", v) for i, v in enumerate(value)]
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ConfigError(f"{path}: {what}: key {short_repr(key or '(top level)')}: "
                                  f"a lone surrogate {value[e.start]!r} at character "
                                  f"{e.start} is not text (UTF-8 cannot hold it)") from None
        todo.extend(items)


_NO_KEY = object()


def _yaml_problem(e: Exception) -> str:
    """A YAML error in one line: ``line L, column C: problem`` (PyYAML's own text spans
    several lines and quotes the offending source)."""
    if getattr(e, "reason", None) is not None and getattr(e, "position", None) is not None:
        return f"character {e.position}: {e.reason}"  # type: ignore[attr-defined]  # ReaderError
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    problem = getattr(e, "problem", None) or getattr(e, "context", None) or str(e)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return where + " ".join(str(problem).split())[:200]


#: A config or grid file larger than this is refused before it is parsed.
MAX_YAML_BYTES = 1 << 20
#: Deepest nesting of a config file's YAML (the composer recurses once per level).
MAX_YAML_DEPTH = 32


def _strict_yaml_loader(path: str | Path, what: str) -> Any:
    """A ``yaml.SafeLoader`` subclass for config files: anchors and aliases (the way to make a
    few hundred bytes expand to gigabytes), duplicate keys and nesting deeper than
    :data:`MAX_YAML_DEPTH` are each one :class:`ConfigError` naming the file, the line and the
    key; nothing is expanded to say so."""
    import yaml

    def where(mark: Any, keys: list[str]) -> str:
        key = ".".join(keys) or "(top level)"
        return f"{path}: {what}: line {mark.line + 1}: key {short_repr(key)}"

    class StrictLoader(yaml.SafeLoader):
        _keys: list[str]
        _depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            keys = self.__dict__.setdefault("_keys", [])
            pushed = isinstance(index, yaml.ScalarNode)  # composing the value of this key
            if pushed:
                keys.append(str(index.value))
            self._depth += 1
            try:
                event = self.peek_event()
                if isinstance(event, yaml.AliasEvent):
                    raise ConfigError(f"{where(event.start_mark, keys)}: YAML alias "
                                      f"*{str(event.anchor)[:40]} refused (config files may "
                                      "not use anchors or aliases)")
                anchor = getattr(event, "anchor", None)
                if anchor is not None:
                    raise ConfigError(f"{where(event.start_mark, keys)}: YAML anchor "
                                      f"&{str(anchor)[:40]} refused (config files may not "
                                      "use anchors or aliases)")
                if self._depth > MAX_YAML_DEPTH:
                    raise ConfigError(f"{where(event.start_mark, keys)}: nested deeper than "
                                      f"{MAX_YAML_DEPTH} levels")
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1
                if pushed:
                    keys.pop()

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            first: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    line = first.get(key)
                except TypeError:
                    continue  # unhashable: SafeLoader's own error follows
                if line is not None:
                    raise ConfigError(f"{path}: {what}: line {key_node.start_mark.line + 1}: "
                                      f"duplicate key {short_repr(key)} (first at line "
                                      f"{line})")
                first[key] = key_node.start_mark.line + 1
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def _coerce(f: dataclasses.Field[Any], v: Any, source: str) -> Any:
    t = str(f.type)
    if v is None:
        if "None" in t:
            return None
        raise ConfigError(f"{source}: config field {f.name} may not be null")
    if t == "bool":
        if isinstance(v, bool):
            return v
        raise ConfigError(f"{source}: config field {f.name}={short_repr(v)}: must be true or false")
    if t.startswith("int"):
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"{source}: config field {f.name}={short_repr(v)}: must be an integer")
        return v
    if t == "float":
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ConfigError(f"{source}: config field {f.name}={short_repr(v)}: must be a number")
        return float(v)
    if t == "str":
        if not isinstance(v, str):
            raise ConfigError(f"{source}: config field {f.name}={short_repr(v)}: must be a string")
        return v
    if t.startswith("list"):
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise ConfigError(f"{source}: config field {f.name}: must be a list of strings")
        return list(v)
    return v  # pragma: no cover


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one option per CLI-settable field, in argument groups by pipeline stage
    (selection, dense, lexical, fusion, temporal, rerank, coverage, runtime); every default
    is None so that only explicit values override the YAML/defaults. Test-only fields
    (``--dummy-salt``) are accepted but hidden from ``--help``."""
    groups = add_field_arguments(parser, RunConfig, {g: _GROUP_HELP[g] for g in GROUPS})
    groups["selection"].add_argument("--question-id", dest="question_ids", action="append",
                                     default=None,
                                     help="score only this question id (repeatable)")
    groups["selection"].add_argument("--protocol", dest="protocols", action="append",
                                     default=None,
                                     help="scoring protocol (repeatable; default: all that "
                                     "apply)")
    # Names used by the documented interface.
    groups["coverage"].add_argument("--no-preserve-prior-coverage", dest="preserve_prior",
                                    action="store_false", default=None, help=argparse.SUPPRESS)


_GROUP_HELP = {
    "selection": "what is run and scored",
    "dense": "dense retrieval over user pieces",
    "lexical": "BM25 signals and pseudo-relevance feedback",
    "fusion": "how the signals are combined",
    "temporal": "the question's time window",
    "rerank": "cross-encoder rerank and passage fallback",
    "coverage": "prior-leader coverage after a rerank",
    "memo": "memo-lexical: Memo's session search on SQLite FTS5 (only that retriever reads "
            "these)",
    "system": "a memory system from outside the package (entry point, py:MODULE:FACTORY, "
              "http): its settings, the ids it sees, the HTTP limits",
    "runtime": "caches, batches, threads (not part of the fingerprint)",
}


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """Defaults < the reranker's settings card < --config YAML < explicit CLI values."""
    explicit: set[str] = set()
    base = RunConfig()
    if getattr(args, "config", None):
        data = read_yaml_mapping(args.config, "config", "a mapping of config fields")
        base = RunConfig.from_mapping(data, source=str(args.config))
        explicit = {str(k).replace("-", "_") for k in data}
    changes = given_fields(args, RunConfig)
    try:
        config = dataclasses.replace(base, **changes).validate()
    except TypeError as e:  # pragma: no cover
        raise ConfigError(str(e)) from e
    return resolve_model_settings(config, explicit | set(changes))


def with_system_settings(config: RunConfig) -> RunConfig:
    """``config`` with ``system_settings`` read from ``system_config`` (a JSON or YAML file
    holding a mapping; JSON is YAML), the file then left out (the settings, not the path,
    define the run). No file: ``config`` as it is. A file given beside settings already set,
    a file that is not a mapping, or values JSON cannot hold: one :class:`ConfigError`
    naming the file."""
    import json

    if not config.system_config:
        return config
    path = config.system_config
    if config.system_settings:
        raise ConfigError(f"--system-config {path}: the system's settings are already given "
                          "(system_settings in the config); give one or the other")
    data = read_yaml_mapping(path, "system settings", "a mapping of the system's settings")
    try:
        json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{path}: system settings: a value JSON cannot hold ({e}); "
                          "settings are recorded in the sidecar as JSON") from None
    return config.replace(system_settings=data, system_config="")


def resolve_model_settings(config: RunConfig, explicit: set[str]) -> RunConfig:
    """``config`` with its reranker's chosen settings applied to every rerank field the user
    did not give (``explicit``: CLI flags and YAML keys), and ``settings_sources`` saying
    where each came from (:func:`engram_eval.retrieval.settings.apply_model_card`); an
    encoder given explicitly serves every structure
    (:func:`engram_eval.retrieval.settings.encoder_given`). A run
    rebuilt from a sidecar (``verify --rerun``, the frozen manifest) is not resolved again:
    its recorded values are the resolved ones."""
    from engram_eval.retrieval.models import model_settings_card, resolve_model
    from engram_eval.retrieval.settings import apply_model_card, encoder_given

    # an encoder given explicitly serves every structure (the default people's encoder
    # applies only where none was given)
    config = encoder_given(config, explicit)
    if not config.reranks_any() or config.retriever not in ("hybrid", "dense", "bm25"):
        return config
    card, label = model_settings_card(resolve_model(config.reranker_model, "reranker"))
    resolved, origins = apply_model_card(config, card, explicit, label)
    assert isinstance(resolved, RunConfig)
    return resolved.replace(settings_sources=origins)
