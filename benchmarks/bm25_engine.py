#!/usr/bin/env python
"""Build + score time of BM25Index's engine: rank-bm25's ``BM25Okapi`` (the old engine) against
:class:`engram_eval.retrieval.bm25.SparseOkapi` (not a test: it measures, and checks that both
give the very same scores).

For each corpus of the first ``--questions`` LongMemEval questions (user documents per session,
assistant documents per session, user turns) and of the first ``--conversations`` LoCoMo
conversations (every turn is user text there: sessions, turns), it times, ``--repeats`` times
and interleaved: the analysis of the documents (shared by both engines), then each engine's
build plus the scoring of the question (LongMemEval) or of ``--locomo-queries`` questions
(LoCoMo: one index serves every question of a conversation). Medians are reported.

    nice -n 19 python benchmarks/bm25_engine.py --lme DATA.json.gz --locomo locomo10.json
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from rank_bm25 import BM25Okapi  # noqa: E402

from engram_eval.data.records import assistant_document, has_chat_roles, user_turns  # noqa: E402
from engram_eval.retrieval.analyzer import WORD, Analyzer  # noqa: E402
from engram_eval.retrieval.bm25 import SparseOkapi  # noqa: E402
from engram_eval.retrieval.flags import ArgumentParser, output_file  # noqa: E402


def _median_s(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def corpora(lme: str | None, locomo: str | None, n_questions: int, n_conversations: int,
            n_queries: int) -> list[tuple[str, list[str], list[str]]]:
    """``(name, documents, queries)`` of each corpus measured."""
    out: list[tuple[str, list[str], list[str]]] = []
    if lme:
        from engram_eval.data.longmemeval import load_longmemeval

        for q in load_longmemeval(lme).questions[:n_questions]:
            sess, roles = q.sessions, has_chat_roles(q.sessions)
            out.append((f"lme {q.question_id} user", ["\n".join(t.content for t in user_turns(s, roles))
                                                      for s in sess], [q.question]))
            out.append((f"lme {q.question_id} assistant",
                        [assistant_document(s, roles) for s in sess], [q.question]))
            out.append((f"lme {q.question_id} turn",
                        [t.content for s in sess for t in user_turns(s, roles)], [q.question]))
    if locomo:
        from engram_eval.data.locomo import load_locomo

        seen: dict[tuple[str, ...], list[str]] = {}
        sessions: dict[tuple[str, ...], Any] = {}
        for q in load_locomo(locomo).questions:
            key = tuple(s.session_id for s in q.sessions)
            if key not in seen and len(seen) == n_conversations:
                continue
            seen.setdefault(key, []).append(q.question)
            sessions[key] = q.sessions
        for key, questions in seen.items():
            sess, roles = sessions[key], has_chat_roles(sessions[key])
            qs = questions[:n_queries]
            name = key[0].rsplit(":", 1)[0] if ":" in key[0] else key[0]
            out.append((f"locomo {name} session",
                        ["\n".join(t.content for t in user_turns(s, roles)) for s in sess], qs))
            out.append((f"locomo {name} turn",
                        [t.content for s in sess for t in user_turns(s, roles)], qs))
    return out


def measure(name: str, docs: Sequence[str], queries: Sequence[str], analyzer: Analyzer,
            k1: float, b: float, repeats: int) -> dict[str, Any]:
    tokens = [analyzer.analyze(d) for d in docs]
    qtoks = [analyzer.analyze(q) for q in queries]
    if not any(tokens):
        return {"corpus": name, "docs": len(docs), "skipped": "no tokens"}

    def old() -> list[np.ndarray]:
        e = BM25Okapi(tokens, k1=k1, b=b)
        return [np.asarray(e.get_scores(q), dtype=np.float64) for q in qtoks]

    def new() -> list[np.ndarray]:
        e = SparseOkapi(tokens, k1=k1, b=b)
        return [e.get_scores(q) for q in qtoks]

    for a, c in zip(old(), new(), strict=True):  # the scores are the same floats
        if not np.array_equal(a, c):
            raise AssertionError(f"{name}: scores differ by {np.abs(a - c).max()}")
    t_old: list[float] = []
    t_new: list[float] = []
    for _ in range(repeats):  # interleaved, so background load hits both alike
        t_old.append(_median_s(old, 1))
        t_new.append(_median_s(new, 1))
    analyse = _median_s(lambda: [analyzer.analyze(d) for d in docs], max(3, repeats // 3))
    mo, mn = statistics.median(t_old), statistics.median(t_new)
    return {"corpus": name, "docs": len(docs), "tokens": sum(map(len, tokens)),
            "queries": len(qtoks), "analyse_ms": analyse * 1e3, "old_ms": mo * 1e3,
            "new_ms": mn * 1e3, "engine_speedup": mo / mn,
            "index_speedup": (analyse + mo) / (analyse + mn)}


def main(argv: Sequence[str] | None = None) -> int:
    p = ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--lme", help="LongMemEval JSON(.gz)")
    p.add_argument("--locomo", help="locomo10.json")
    p.add_argument("--questions", type=int, default=3)
    p.add_argument("--conversations", type=int, default=1)
    p.add_argument("--locomo-queries", type=int, default=20)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--analyser", default="word", choices=("word", "full"),
                   help="word: the default analyser; full: unicode + snowball + en-v1")
    p.add_argument("--k1", type=float, default=1.5)
    p.add_argument("--b", type=float, default=0.75)
    p.add_argument("--output", type=output_file,
                   help="write the rows as JSON here (must not exist)")
    a = p.parse_args(argv)
    analyzer = WORD if a.analyser == "word" else Analyzer("unicode", "snowball-english", "en-v1")
    rows = [measure(n, d, q, analyzer, a.k1, a.b, a.repeats)
            for n, d, q in corpora(a.lme, a.locomo, a.questions, a.conversations,
                                   a.locomo_queries)]
    print(f"{'corpus':42} {'docs':>5} {'tokens':>7} {'q':>3} {'analyse':>8} {'old':>8} "
          f"{'new':>8} {'engine x':>8} {'index x':>8}")
    for r in rows:
        if "skipped" in r:
            print(f"{r['corpus']:42} {r['docs']:>5} skipped: {r['skipped']}")
            continue
        print(f"{r['corpus']:42} {r['docs']:>5} {r['tokens']:>7} {r['queries']:>3} "
              f"{r['analyse_ms']:>6.2f}ms {r['old_ms']:>6.2f}ms {r['new_ms']:>6.2f}ms "
              f"{r['engine_speedup']:>8.2f} {r['index_speedup']:>8.2f}")
    if a.output:
        with open(a.output, "x", encoding="utf-8") as f:
            json.dump({"repeats": a.repeats, "analyser": a.analyser, "k1": a.k1, "b": a.b,
                       "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
