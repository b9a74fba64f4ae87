"""Stable question sharding: ``--shard I/N``.

A question belongs to shard ``int(sha256(question_id), 16) mod N`` (0-based ``I``), so the
assignment depends on the id alone: not on file order, the machine, or which other
questions are selected. Sharding is applied after ``question_ids`` and ``limit``. A sharded
run records in its sidecar's ``selection`` the shard (``index``, ``count``, ``rule``) and the
ordered ids of the whole (unsharded) selection, ``all_ids``; everything else in the sidecar
is what the unsharded run would record, so :mod:`engram_eval.runs.merge` can rebuild the
unsharded selection and check that every shard defines the same run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, TypeVar

from engram_eval.errors import ConfigError
from engram_eval.retrieval.settings import short_repr

RULE = "int(sha256(question_id utf-8).hexdigest(), 16) mod count"
#: The keys of a sidecar's ``selection.shard`` (:func:`shard_selection`).
SHARD_FIELDS = ("index", "count", "rule", "all_ids")
T = TypeVar("T")


def parse_shard(text: str) -> tuple[int, int] | None:
    """``"I/N"`` -> (I, N) with 0 <= I < N; ``""`` -> None."""
    if not text:
        return None
    try:
        i_text, n_text = text.split("/")
        index, count = int(i_text), int(n_text)
    except ValueError:
        raise ConfigError(f"config field shard={short_repr(text)}: must be I/N, e.g. 0/4") from None
    if count < 1 or not 0 <= index < count:
        raise ConfigError(f"config field shard={short_repr(text)}: need 0 <= I < N and N >= 1")
    return index, count


def shard_of(question_id: str, count: int) -> int:
    return int(hashlib.sha256(question_id.encode("utf-8")).hexdigest(), 16) % count


def apply_shard(items: Sequence[T], ids: Sequence[str], shard: tuple[int, int] | None
                ) -> list[T]:
    """The items (parallel to ``ids``) that belong to ``shard`` (all when None)."""
    if shard is None:
        return list(items)
    index, count = shard
    return [x for x, i in zip(items, ids, strict=True) if shard_of(i, count) == index]


def shard_selection(selection: dict[str, Any], all_ids: Sequence[str],
                    shard: tuple[int, int] | None) -> dict[str, Any]:
    """``selection`` (built for the shard's ids) with the shard and the whole selection's
    ids added (unchanged when not sharded)."""
    if shard is None:
        return selection
    out = dict(selection)
    out["shard"] = {"index": shard[0], "count": shard[1], "rule": RULE,
                    "all_ids": list(all_ids)}
    return out


def unsharded_selection(selection: dict[str, Any]) -> dict[str, Any]:
    """The selection the unsharded run records (inverse of :func:`shard_selection`)."""
    sh = selection.get("shard")
    if not sh:
        return dict(selection)
    out = {k: v for k, v in selection.items() if k != "shard"}
    out["ids"] = list(sh["all_ids"])
    out["n"] = len(sh["all_ids"])
    return out


def apply_to_metadata(meta: dict[str, Any], all_ids: Sequence[str],
                      shard: tuple[int, int] | None) -> dict[str, Any]:
    """Record the shard in a freshly built sidecar and recompute its fingerprint."""
    if shard is None:
        return meta
    from engram_eval.provenance.sidecar import fingerprint_of

    meta["selection"] = shard_selection(meta["selection"], all_ids, shard)
    meta["fingerprint"] = fingerprint_of(meta)
    return meta
