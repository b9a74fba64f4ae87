"""Where the questions of a run are ranked: in this process, or on a Ray cluster.

An executor turns the questions still to do into result rows, **in the order given**; the
runner (the driver) alone writes them, so exclusive creation, the output lock, ordering
and ``--resume`` work the same whatever the executor. The executor is not part of the run
fingerprint: rows are the same apart from the timing fields (and, as between any two
processes, float32 embeddings may differ in their last bits with batch composition, which
can move a score by ~1e-7 but has not been seen to change a ranking).

* ``local`` (default): one retriever in this process, the questions in turn.
* ``ray`` (``--executor ray [--ray-address ADDR] [--ray-workers N]``): ``N`` actors, each
  building the retriever once from the run's config (so each loads its models once) and
  ranking whole questions as tasks; at most two questions per actor are in flight, and
  results are handed back in the selection's order. Each actor checks, before any work,
  that its source files and resolved model files hash to what the driver recorded in
  the sidecar (on a multi-machine cluster, a node with other code or weights is refused).
  Without ``--ray-address`` a local Ray instance is started with ``N`` CPUs; with one
  (``auto`` or ``ray://host:10001``) the driver joins that cluster. Ray is optional:
  ``pip install engram-eval[ray]``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from engram_eval.data.records import Question
from engram_eval.errors import ConfigError, ProvenanceError

EXECUTORS = ("local", "ray")
#: Environment every Ray worker runs with (nothing is ever downloaded).
WORKER_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
              "TOKENIZERS_PARALLELISM": "false"}


def compute_row(retriever: Any, question: Question, protocols: Sequence[str],
                trace_sessions: int = 0) -> dict[str, Any]:
    """Rank one question and build its row (``trace_sessions`` > 0 keeps only that many
    per-session traces, in rank order; the ranking and every score stay)."""
    from engram_eval.runs.rows import make_row

    t0 = time.perf_counter()
    retriever.index(question.sessions)
    ranking = retriever.rank(question)
    ranking.check_complete(question.sessions)
    qtrace = retriever.question_trace(question) if hasattr(retriever, "question_trace") else {}
    seconds = time.perf_counter() - t0
    cost = retriever.question_cost() if hasattr(retriever, "question_cost") else {}
    row = make_row(question, ranking, protocols, qtrace, seconds, cost)
    if trace_sessions and trace_sessions > 0:
        row["trace"]["sessions"] = row["trace"]["sessions"][:trace_sessions]
    return row


def merge_stats(stats: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Sum the numeric model counters of several retrievers (``{stage: {counter: n}}``)."""
    out: dict[str, dict[str, Any]] = {}
    for s in stats:
        for stage, counters in s.items():
            if not isinstance(counters, Mapping):
                continue
            agg = out.setdefault(stage, {})
            for k, v in counters.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    agg[k] = agg.get(k, 0) + v
    return out


class LocalExecutor:
    name = "local"

    def __init__(self, retriever: Any, protocols: Sequence[str], trace_sessions: int = 0) -> None:
        self.retriever = retriever
        self.protocols = list(protocols)
        self.trace_sessions = trace_sessions

    def rows(self, questions: Iterable[Question]) -> Iterator[dict[str, Any]]:
        for q in questions:
            yield compute_row(self.retriever, q, self.protocols, self.trace_sessions)

    def stats(self) -> dict[str, Any]:
        return self.retriever.stats() if hasattr(self.retriever, "stats") else {}

    def describe(self) -> dict[str, Any]:
        return {"executor": self.name}

    def close(self) -> None:
        pass


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError("--executor ray needs Ray, which is not installed: "
                          "pip install 'engram-eval[ray]'  (or: pip install 'ray>=2.9')"
                          ) from None
    return ray


class _Worker:
    """The body of a Ray actor: one retriever, built once, ranking whole questions."""

    def __init__(self, config: Any, protocols: Sequence[str], trace_sessions: int,
                 threads: int) -> None:
        from engram_eval.retrieval import base as retrieval_base

        if threads:
            try:
                import torch

                torch.set_num_threads(threads)
            except ImportError:  # pragma: no cover
                pass
        self.retriever = retrieval_base.create(config.retriever, config)
        self.protocols = list(protocols)
        self.trace_sessions = trace_sessions

    def identity(self) -> dict[str, Any]:
        from engram_eval.provenance.sidecar import source_hashes
        from engram_eval.provenance.sources import run_sources

        sources = run_sources(self.retriever.source_modules())
        return {"sources": source_hashes(sources),
                "models": {m.role: m.sha256 for m in self.retriever.models()},
                "retriever": self.retriever.describe()}

    def row(self, question: Question) -> dict[str, Any]:
        return compute_row(self.retriever, question, self.protocols, self.trace_sessions)

    def stats(self) -> dict[str, Any]:
        return self.retriever.stats() if hasattr(self.retriever, "stats") else {}


class RayExecutor:
    name = "ray"

    def __init__(self, config: Any, protocols: Sequence[str], meta: Mapping[str, Any], *,
                 address: str = "", workers: int = 2, trace_sessions: int = 0) -> None:
        ray = _ray()
        self.ray = ray
        self.workers = max(1, int(workers))
        self.address = address
        self._started = False
        if not ray.is_initialized():
            env = {"env_vars": dict(WORKER_ENV)}
            if address:
                ray.init(address=address, runtime_env=env, log_to_driver=False)
            else:
                ray.init(num_cpus=self.workers, runtime_env=env, include_dashboard=False,
                         log_to_driver=False)
            self._started = True
        actor_cls = ray.remote(num_cpus=1)(_Worker)
        threads = int(getattr(config, "threads", 0) or 0)
        self.actors = [actor_cls.remote(config, list(protocols), trace_sessions, threads)
                       for _ in range(self.workers)]
        want_sources = dict(meta["sources"])
        want_models = {m["role"]: m["sha256"] for m in meta["models"]}
        for ident in ray.get([a.identity.remote() for a in self.actors]):
            if ident["retriever"] != meta["retriever"]:  # a system's version or files
                self.close()
                raise ProvenanceError("a Ray worker's retriever describes itself otherwise "
                                      "than the driver's (another version or other files of "
                                      "the system, or other settings); install the same on "
                                      "every node")
            if ident["sources"] != want_sources or ident["models"] != want_models:
                self.close()
                bad = sorted(k for k in set(want_sources) | set(ident["sources"])
                             if want_sources.get(k) != ident["sources"].get(k))
                bad += sorted(k for k in set(want_models) | set(ident["models"])
                              if want_models.get(k) != ident["models"].get(k))
                raise ProvenanceError("a Ray worker's code or model files differ from the "
                                      "driver's (" + ", ".join(bad[:8]) + "); install the "
                                      "same engram-eval and models on every node")

    def rows(self, questions: Iterable[Question]) -> Iterator[dict[str, Any]]:
        """Rows in the order of ``questions`` (any iterable, consumed lazily: the runner
        streams them); up to two tasks per actor in flight."""
        ray = self.ray
        pending: deque[Any] = deque()
        it = iter(enumerate(questions))
        limit = 2 * len(self.actors)

        def submit() -> bool:
            nxt = next(it, None)
            if nxt is None:
                return False
            i, q = nxt
            pending.append(self.actors[i % len(self.actors)].row.remote(q))
            return True

        while len(pending) < limit and submit():
            pass
        while pending:
            row = ray.get(pending.popleft())
            submit()
            yield row

    def stats(self) -> dict[str, Any]:
        try:
            per_actor = self.ray.get([a.stats.remote() for a in self.actors])
        except Exception:  # pragma: no cover - a dead actor: no counters
            return {}
        return merge_stats(per_actor)

    def describe(self) -> dict[str, Any]:
        return {"executor": self.name, "workers": self.workers,
                "ray_address": self.address or "(local instance)"}

    def close(self) -> None:
        for a in getattr(self, "actors", []):
            try:
                self.ray.kill(a)
            except Exception:  # pragma: no cover
                pass
        self.actors = []
        if self._started:
            self.ray.shutdown()
            self._started = False


def make_executor(config: Any, retriever: Any, protocols: Sequence[str],
                  meta: Mapping[str, Any]) -> LocalExecutor | RayExecutor:
    kind = getattr(config, "executor", "local") or "local"
    trace = int(getattr(config, "trace_sessions", 0) or 0)
    if kind == "local":
        return LocalExecutor(retriever, protocols, trace)
    if kind == "ray":
        return RayExecutor(config, protocols, meta, address=getattr(config, "ray_address", ""),
                           workers=int(getattr(config, "ray_workers", 2) or 2),
                           trace_sessions=trace)
    raise ConfigError(f"config field executor={kind!r}: must be one of {list(EXECUTORS)}")
