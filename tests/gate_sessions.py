"""Three small sessions and the new analyser, shared by the confidence-feature tests
(tests/retrieval/test_gate_features.py, tests/production/test_confidence_study.py): each
user turn is followed by an assistant turn, so user turns have even indexes."""

from __future__ import annotations

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
