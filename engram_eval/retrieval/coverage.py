"""Prior-leader coverage (stage 5 of :mod:`engram_eval.retrieval.pipeline`, :func:`coverage_stage`).

Within the first ``result_k`` results, keep the rerank winner at rank 1 and make sure the
best prior (hybrid, pre-rerank) candidate is present: when it is not, it is moved to the
window's last slot (``result_k``) and everything from that slot down shifts by one. Scores
are left unchanged, so after a move the list is no longer sorted by score; the trace marks
the moved session. With ``result_k < 2`` nothing can be added next to the winner and the
ranking is returned unchanged. This step directly lifts recall_any@result_k, which is why
reports show results with and without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def preserve_prior_leader(ranking: Sequence[T], leader: T, result_k: int) -> tuple[list[T], bool]:
    """Return (new ranking, moved?). ``leader`` must occur in ``ranking`` exactly once."""
    items = list(ranking)
    if result_k < 2 or leader not in items:
        return items, False
    pos = items.index(leader)
    window = min(result_k, len(items))
    if pos < window:
        return items, False
    items.pop(pos)
    items.insert(window - 1, leader)
    return items, True
