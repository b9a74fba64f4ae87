"""An honest small memory system: BM25 (the ``bm25s`` library, Lù 2024) over each session's
text, user and assistant turns together. It reads text only, never ids, so opaque ids change
nothing for it.

Settings (``--system-config FILE``): ``k1`` (1.5), ``b`` (0.75), ``method`` (``lucene``;
bm25s's variants: robertson, atire, bm25l, bm25+, lucene), ``stopwords`` (``en`` or ``none``),
``roles`` (which turns are indexed: ``all``, ``user``).
"""

from __future__ import annotations

from typing import Any

DEFAULTS: dict[str, Any] = {"k1": 1.5, "b": 0.75, "method": "lucene", "stopwords": "en",
                            "roles": "all"}


class BM25sSystem:
    """index(haystack) / search(query): the system protocol of engram-eval."""

    def __init__(self, settings: dict[str, Any]) -> None:
        unknown = sorted(set(settings) - set(DEFAULTS))
        if unknown:
            raise ValueError(f"unknown settings {unknown}; known: {sorted(DEFAULTS)}")
        self.s = {**DEFAULTS, **settings}
        if self.s["roles"] not in ("all", "user"):
            raise ValueError("roles must be 'all' or 'user'")
        self.ids: list[str] = []
        self.model: Any = None

    def _tokens(self, texts: list[str]) -> Any:
        import bm25s

        stop = None if self.s["stopwords"] == "none" else self.s["stopwords"]
        return bm25s.tokenize(texts, stopwords=stop, show_progress=False)

    def index(self, haystack: dict[str, Any]) -> None:
        import bm25s

        self.ids = [s["id"] for s in haystack["sessions"]]
        texts = ["\n".join(t["content"] for t in s["turns"]
                           if self.s["roles"] == "all" or t["role"] == "user")
                 for s in haystack["sessions"]]
        self.model = bm25s.BM25(k1=self.s["k1"], b=self.s["b"], method=self.s["method"])
        self.model.index(self._tokens(texts), show_progress=False)

    def search(self, query: dict[str, Any]) -> list[dict[str, Any]]:
        tokens = self._tokens([query["question"]["text"]])
        vocab = {i: w for w, i in tokens.vocab.items()}
        words = [vocab[i] for i in tokens.ids[0]]
        scores = self.model.get_scores(words) if words else [0.0] * len(self.ids)
        # best first; ties by the order the sessions were given (deterministic)
        order = sorted(range(len(self.ids)), key=lambda i: (-float(scores[i]), i))
        return [{"id": self.ids[i], "score": float(scores[i])} for i in order]


def make_system(settings: dict[str, Any]) -> BM25sSystem:
    return BM25sSystem(dict(settings))
