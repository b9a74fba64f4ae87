"""Production-confidence checks: a persisted memory store and confidence-gated search.

``MemoryStore`` (SQLite records + vectors), ``Engine`` (pinned settings and models),
``search`` through ``MemoryStore.search(query, now=..., limit=3, min_confidence=0.6)``,
and the fixture runner (:mod:`.runner`). See :mod:`.confidence` for what the confidence
score means: the gate's cut-off is a relevance threshold, not a probability of correctness.
"""

from engram_eval.production.settings import ProductionSettings
from engram_eval.production.store import Memory, MemoryStore

__all__ = ["Memory", "MemoryStore", "ProductionSettings"]
