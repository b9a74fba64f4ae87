"""Production search settings, pinned here (independent of the benchmark defaults).

The benchmark's :class:`~engram_eval.runs.config.RunConfig` defaults are tuned for ranking recall
and may change; production confidence is calibrated for *these* settings, so they live in
their own frozen dataclass. Changing any of them invalidates the packaged calibration
(``calibration_v1.json`` records the settings it was fitted under and the check refuses a
mismatch).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from engram_eval.errors import ConfigError

#: Files that can change a production result (hashed into manifests and outputs).
SOURCE_MODULES = (
    "engram_eval/provenance/frozen.py",
    "engram_eval/io.py",
    "engram_eval/retrieval/models.py",
    "engram_eval/production/__init__.py",
    "engram_eval/production/settings.py",
    "engram_eval/production/store.py",
    "engram_eval/production/search.py",
    "engram_eval/production/confidence.py",
    "engram_eval/production/calibration_v1.json",
    "engram_eval/production/fixture.py",
    "engram_eval/production/runner.py",
    "engram_eval/schemas/production_fixture.schema.json",
    "engram_eval/data/records.py",
    "engram_eval/retrieval/bm25.py",
    "engram_eval/retrieval/dense.py",
    "engram_eval/retrieval/embeddings.py",
    "engram_eval/retrieval/fusion.py",
    "engram_eval/retrieval/temporal.py",
    "engram_eval/retrieval/passages.py",
    "engram_eval/retrieval/rerank.py",
    "engram_eval/retrieval/hybrid.py",  # token_counter
    "benchmarks/production_retrieval/run.py",
)
DEFAULT_CALIBRATION = "engram_eval/production/calibration_v1.json"


@dataclass(frozen=True)
class ProductionSettings:
    """Every setting of production search. ``limit`` and ``min_confidence`` are the gate."""

    embedding_model: str = "all-MiniLM-L6-v2"
    embedding_backend: str = "sentence_transformers"
    embedding_precision: str = "fp32"
    piece_words: int = 128
    piece_overlap: int = 16
    bm25_k1: float = 1.5
    bm25_b: float = 0.75
    fusion: str = "rrf"
    rrf_k: float = 60.0
    weight_dense: float = 1.0
    weight_bm25: float = 1.0
    temporal: bool = True
    temporal_boost: float = 1.25
    candidates: int = 10
    rerank: bool = False
    reranker_model: str = "BAAI/bge-reranker-base"
    reranker_backend: str = "sentence_transformers"
    rerank_max_length: int = 512
    excerpt_retry: bool = True
    excerpt_max_words: int = 160
    limit: int = 3
    min_confidence: float = 0.6
    #: calibration file (offline confidence); "" = the packaged calibration_v1.json
    calibration: str = ""

    def __post_init__(self) -> None:
        checks = [
            ("piece_words", 8 <= self.piece_words <= 512),
            ("piece_overlap", 0 <= self.piece_overlap < self.piece_words),
            ("bm25_k1", 0 <= self.bm25_k1 <= 10), ("bm25_b", 0 <= self.bm25_b <= 1),
            ("fusion", self.fusion == "rrf"), ("rrf_k", 0 <= self.rrf_k <= 1000),
            ("weight_dense", self.weight_dense >= 0), ("weight_bm25", self.weight_bm25 >= 0),
            ("temporal_boost", 1 <= self.temporal_boost <= 10),
            ("candidates", self.candidates >= 1), ("limit", self.limit >= 1),
            ("min_confidence", 0 <= self.min_confidence <= 1),
            ("excerpt_max_words", self.excerpt_max_words >= 8),
            ("embedding_backend", self.embedding_backend in ("sentence_transformers",
                                                             "flag_embedding")),
            ("reranker_backend", self.reranker_backend in ("sentence_transformers",
                                                           "flag_embedding")),
            ("embedding_precision", self.embedding_precision in ("fp32", "bf16")),
        ]
        for name, ok in checks:
            if not ok:
                raise ConfigError(f"production setting {name}={getattr(self, name)!r} is out of "
                                  "range")

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> ProductionSettings:
        return dataclasses.replace(self, **changes)

    def retrieval_part(self) -> dict[str, Any]:
        """The settings the calibration depends on (everything but the gate itself)."""
        d = self.to_json()
        for k in ("limit", "min_confidence", "calibration", "candidates"):
            d.pop(k)
        return d
