"""Three small sessions, their traces as a reranked run writes them, and the new analyser,
shared by the confidence-feature tests (tests/retrieval/test_gate_features.py,
tests/production/test_confidence_study.py): each user turn is followed by an assistant turn,
so user turns have even indexes."""

from __future__ import annotations

from typing import Any

from engram_eval.data.records import Session, Turn
from engram_eval.retrieval.analyzer import Analyzer

NEW = Analyzer("word", "snowball-english", "en-v1")


def session(sid: str, *texts: str) -> Session:
    turns = []
    for k, t in enumerate(texts):
        turns.append(Turn("user", t, 2 * k))
        turns.append(Turn("assistant", "ok, noted", 2 * k + 1))
    return Session(sid, "2023/05/01 (Mon) 10:00", tuple(turns))


S1 = session("s1", "I bought two books with Alice.", "Alice went to Paris to buy books.")
S2 = session("s2", "We talked about gardening.")
S3 = session("s3", "Nothing about that here.", "Books, books and more books.")
#: The traces of S1, S2, S3 in that order: S1 and S2 reranked (their first user turn the best),
#: S3 not.
TRACES: list[dict[str, Any]] = [
    {"dense": 0.5, "dense_rank": 1, "bm25_turn_rank": 1, "fused": 2.0, "fused_rank": 2,
     "reranked": True, "rerank_rank": 1, "base_raw_score": 3.0, "rerank_turn": 0},
    {"dense": 0.2, "dense_rank": 2, "bm25_turn_rank": 2, "fused": 1.0, "fused_rank": 1,
     "reranked": True, "rerank_rank": 2, "base_raw_score": 1.0, "rerank_turn": 0},
    {"dense": 0.1, "dense_rank": 3, "bm25_turn_rank": None, "fused": 0.0, "fused_rank": 3,
     "reranked": False, "rerank_rank": None},
]
