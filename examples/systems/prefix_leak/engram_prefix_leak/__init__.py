"""A "memory system" that reads no text: it ranks first every session whose id starts with
``answer_`` (LongMemEval_S names each evidence session so), the others after, each group in
the order it was given.

It exists to show what engram-eval's opaque ids guard against: run with ``--real-ids`` it
scores recall_all@5 near 1 on LongMemEval_S; with the default opaque ids (a salted hash of
each id, in a shuffled order) no id starts with ``answer_`` and it ranks at chance.
"""

from __future__ import annotations

from typing import Any

PREFIX = "answer_"


class PrefixLeak:
    """index(haystack) / search(query): the system protocol of engram-eval."""

    def __init__(self, prefix: str = PREFIX) -> None:
        self.prefix = prefix
        self.ids: list[str] = []

    def index(self, haystack: dict[str, Any]) -> None:
        self.ids = [s["id"] for s in haystack["sessions"]]

    def search(self, query: dict[str, Any]) -> list[dict[str, Any]]:
        leaked = [i for i in self.ids if i.startswith(self.prefix)]
        rest = [i for i in self.ids if not i.startswith(self.prefix)]
        return ([{"id": i, "score": 1.0} for i in leaked]
                + [{"id": i, "score": 0.0} for i in rest])


def make_system(settings: dict[str, Any]) -> PrefixLeak:
    unknown = sorted(set(settings) - {"prefix"})
    if unknown:
        raise ValueError(f"unknown settings {unknown}; this system takes only 'prefix'")
    return PrefixLeak(str(settings.get("prefix", PREFIX)))
