"""The one run configuration: defaults, YAML, CLI overrides and validation.

Precedence: package defaults < ``--config file.yaml`` (never auto-loaded) < explicit CLI
values (including 0 / false). Every field carries help text; fields marked
``fingerprint=False`` are recorded in the sidecar but do not define the run (where a cache
lives, how big a batch is, whether a progress bar is drawn).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from engram_eval.errors import ConfigError

LONGMEMEVAL_PROTOCOLS = ("answerable", "official", "all")


def _f(default: Any, help: str, *, fingerprint: bool = True, choices: Sequence[Any] | None = None,
       lo: float | None = None, hi: float | None = None, cli: bool = True) -> Any:
    meta = {"help": help, "fingerprint": fingerprint, "choices": choices, "lo": lo, "hi": hi,
            "cli": cli}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class RunConfig:
    """Every setting of a retrieval run (see the help text of each field)."""

    retriever: str = _f("hybrid", "retrieval backend: hybrid, dense, bm25, flat-bm25, dummy")
    dataset_format: str = _f("auto", "dataset layout", choices=("auto", "longmemeval", "locomo"))
    protocols: list[str] = _f([], "scoring protocols (empty: answerable, official, all for "
                              "LongMemEval; locomo for LoCoMo)", cli=False)
    limit: int | None = _f(None, "score only the first N selected questions (diagnostics)", lo=1)
    question_ids: list[str] = _f([], "score only these question ids (repeatable)", cli=False)
    # dense
    use_dense: bool = _f(True, "dense retrieval over user text")
    embedding_backend: str = _f("sentence_transformers", "embedding backend",
                                choices=("sentence_transformers", "flag_embedding"))
    embedding_model: str = _f("all-MiniLM-L6-v2", "embedding model: name (bundled or HF cache) or "
                              "local path")
    embedding_precision: str = _f("fp32", "embedding inference precision", choices=("fp32", "bf16"))
    dense_piece_words: int = _f(128, "user text is embedded in pieces of at most this many words "
                                "(each user turn, long turns split into windows); no truncation",
                                lo=8, hi=512)
    dense_piece_overlap: int = _f(16, "word overlap between windows of one long turn", lo=0, hi=256)
    dense_aggregate: str = _f("max", "session score from its piece similarities",
                              choices=("max", "max_mean"))
    # lexical
    use_bm25_user: bool = _f(True, "BM25 over user text")
    use_bm25_assistant: bool = _f(True, "BM25 over assistant text")
    bm25_k1: float = _f(1.5, "BM25 k1", lo=0.0, hi=10.0)
    bm25_b: float = _f(0.75, "BM25 b", lo=0.0, hi=1.0)
    # fusion
    rrf_k: float = _f(60.0, "reciprocal-rank-fusion constant k (score = sum w / (k + rank))",
                      lo=0.0, hi=1000.0)
    weight_dense: float = _f(1.0, "fusion weight of the dense user ranking", lo=0.0, hi=10.0)
    weight_bm25_user: float = _f(1.0, "fusion weight of the user BM25 ranking", lo=0.0, hi=10.0)
    weight_bm25_assistant: float = _f(0.5, "fusion weight of the assistant BM25 ranking",
                                      lo=0.0, hi=10.0)
    # temporal
    temporal: bool = _f(True, "boost sessions dated inside the question's time window")
    temporal_boost: float = _f(1.25, "multiplier for sessions inside the time window",
                               lo=1.0, hi=10.0)
    # rerank
    rerank: bool = _f(False, "rerank the top candidates with a cross-encoder")
    reranker_backend: str = _f("sentence_transformers", "cross-encoder backend",
                               choices=("sentence_transformers", "flag_embedding"))
    reranker_model: str = _f("BAAI/bge-reranker-base", "cross-encoder: HF id in the local cache "
                             "or a local path")
    rerank_candidates: int = _f(35, "how many fused candidates are reranked", lo=1, hi=10000)
    rerank_max_length: int = _f(512, "cross-encoder max input tokens", lo=16, hi=8192)
    fusion_alpha: float = _f(0.0, "blend of the prior (fused) rank into the reranked score",
                             lo=0.0, hi=1.0)
    passage_fallback: bool = _f(True, "retry long documents with a focused excerpt when every "
                                "base sigmoid score is under passage_floor")
    passage_floor: float = _f(0.001, "activation floor of the passage fallback", lo=0.0, hi=1.0)
    passage_max_words: int = _f(160, "excerpt length limit in words", lo=8, hi=2000)
    # coverage
    preserve_prior: bool = _f(True, "keep the best hybrid candidate inside the first result_k")
    result_k: int = _f(5, "window of the prior-leader coverage step", lo=1, hi=1000)
    confidence_filter: bool = _f(False, "always false: ranking benchmarks apply no production "
                                 "confidence gate", cli=False)
    # not part of the fingerprint
    batch_size: int = _f(16, "encoding batch size (16 measured fastest on 2 CPU cores)", fingerprint=False, lo=1, hi=4096)
    use_cache: bool = _f(True, "reuse embeddings cached by (model files, precision, text)",
                         fingerprint=False)
    cache_dir: str = _f("", "embedding cache directory (default ~/.cache/engram-eval)",
                        fingerprint=False)
    threads: int = _f(0, "torch CPU threads (0: torch default)", fingerprint=False, lo=0, hi=1024)
    progress: bool = _f(True, "draw a progress bar on stderr", fingerprint=False)
    dummy_salt: str = _f("", "salt of the dummy retriever (tests)")

    # ------------------------------------------------------------------
    def validate(self) -> RunConfig:
        """Raise ConfigError naming the field for any out-of-range or unknown value."""
        for f in fields(self):
            v = getattr(self, f.name)
            m = f.metadata
            if m.get("choices") and v not in m["choices"]:
                raise ConfigError(f"config field {f.name}={v!r}: must be one of {list(m['choices'])}")
            if v is None:
                continue
            if isinstance(f.default, bool) or f.type == "bool":
                if not isinstance(v, bool):
                    raise ConfigError(f"config field {f.name}={v!r}: must be true or false")
                continue
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                if m.get("lo") is not None and v < m["lo"]:
                    raise ConfigError(f"config field {f.name}={v!r}: must be >= {m['lo']}")
                if m.get("hi") is not None and v > m["hi"]:
                    raise ConfigError(f"config field {f.name}={v!r}: must be <= {m['hi']}")
        if self.confidence_filter:
            raise ConfigError("config field confidence_filter: ranking runs never filter by "
                              "confidence; it must be false")
        if self.dense_piece_overlap >= self.dense_piece_words:
            raise ConfigError("config field dense_piece_overlap: must be smaller than "
                              "dense_piece_words")
        for p in self.protocols:
            if p not in (*LONGMEMEVAL_PROTOCOLS, "locomo"):
                raise ConfigError(f"config field protocols: unknown protocol {p!r}")
        return self

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def fingerprint_part(self) -> dict[str, Any]:
        """The fields that define the run (see module docstring)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.metadata["fingerprint"]}

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str = "config") -> RunConfig:
        names = {f.name: f for f in fields(cls)}
        out: dict[str, Any] = {}
        for k, v in data.items():
            key = k.replace("-", "_")
            if key not in names:
                raise ConfigError(f"{source}: unknown config field {k!r}")
            out[key] = _coerce(names[key], v, source)
        return cls(**out).validate()

    @classmethod
    def from_yaml(cls, path: str | Path) -> RunConfig:
        import yaml

        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"{path}: cannot read config: {e}") from e
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: top level must be a mapping of config fields")
        return cls.from_mapping(data, source=str(path))

    def replace(self, **changes: Any) -> RunConfig:
        return dataclasses.replace(self, **changes).validate()


def _coerce(f: dataclasses.Field[Any], v: Any, source: str) -> Any:
    t = str(f.type)
    if v is None:
        if "None" in t:
            return None
        raise ConfigError(f"{source}: config field {f.name} may not be null")
    if t == "bool":
        if isinstance(v, bool):
            return v
        raise ConfigError(f"{source}: config field {f.name}={v!r}: must be true or false")
    if t.startswith("int"):
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"{source}: config field {f.name}={v!r}: must be an integer")
        return v
    if t == "float":
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ConfigError(f"{source}: config field {f.name}={v!r}: must be a number")
        return float(v)
    if t == "str":
        if not isinstance(v, str):
            raise ConfigError(f"{source}: config field {f.name}={v!r}: must be a string")
        return v
    if t.startswith("list"):
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise ConfigError(f"{source}: config field {f.name}: must be a list of strings")
        return list(v)
    return v  # pragma: no cover


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one option per CLI-settable field; every default is None so that only explicit
    values override the YAML/defaults."""
    for f in fields(RunConfig):
        m = f.metadata
        if not m["cli"]:
            continue
        opt = "--" + f.name.replace("_", "-")
        t = str(f.type)
        help_text = m["help"] + f" (default: {f.default!r})"
        if t == "bool":
            parser.add_argument(opt, dest=f.name, action=argparse.BooleanOptionalAction,
                                default=None, help=help_text)
        else:
            kind: Any = {"int": int, "float": float, "str": str}.get(t.split(" ")[0], str)
            parser.add_argument(opt, dest=f.name, type=kind, default=None, help=help_text,
                                choices=m["choices"])
    parser.add_argument("--question-id", dest="question_ids", action="append", default=None,
                        help="score only this question id (repeatable)")
    parser.add_argument("--protocol", dest="protocols", action="append", default=None,
                        help="scoring protocol (repeatable; default: all that apply)")
    # Names used by the documented interface.
    parser.add_argument("--no-preserve-prior-coverage", dest="preserve_prior",
                        action="store_false", default=None, help=argparse.SUPPRESS)


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """Defaults < --config YAML < explicit CLI values."""
    base = RunConfig.from_yaml(args.config) if getattr(args, "config", None) else RunConfig()
    changes = {}
    for f in fields(RunConfig):
        v = getattr(args, f.name, None)
        if v is not None:
            changes[f.name] = v
    try:
        return dataclasses.replace(base, **changes).validate()
    except TypeError as e:  # pragma: no cover
        raise ConfigError(str(e)) from e
