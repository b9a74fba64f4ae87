"""``answer``: send every context row's messages to a chat endpoint, write LongMemEval's
hypothesis contract — one ``{"question_id", "hypothesis"}`` per line — with the run
discipline of :mod:`engram_eval.qa.files` (refuse overwrite, verified resume, torn-line
repair) and bounded concurrency (``concurrency`` requests in flight, one writer).

Rows are appended as answers arrive (so an interruption loses at most the requests in
flight); a resumed run asks only for the questions without a row. The sidecar records the
context export (fingerprint, rows hash), the endpoint (URL without credentials, the name of
the key variable), the model and its settings, and the source hashes; never the key.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram_eval.errors import ConfigError, ProvenanceError
from engram_eval.provenance.sidecar import environment, package_versions, source_hashes
from engram_eval.provenance.sources import QA_ANSWER_SOURCES
from engram_eval.qa.client import ChatClient, ChatSettings, RetryPolicy, run_bounded
from engram_eval.qa.context import read_context
from engram_eval.qa.files import finish, open_output
from engram_eval.runs.rows import RowWriter

KIND = "engram-eval/answers"
SCHEMA_VERSION = 1
FINGERPRINT_FIELDS = ("schema_version", "kind", "context", "endpoint", "chat", "sources",
                      "selection")
#: The hypothesis contract: exactly these fields per line.
ROW_FIELDS = ("question_id", "hypothesis")


@dataclass(frozen=True)
class AnswerConfig:
    base_url: str
    model: str
    temperature: float = 0.0
    max_tokens: int | None = None
    seed: int | None = None
    concurrency: int = 4
    key_env: str = "OPENAI_API_KEY"
    retry: RetryPolicy = RetryPolicy()
    timeout: float = 300.0
    limit: int | None = None
    progress: bool = True

    def validate(self) -> None:
        if not self.model:
            raise ConfigError("--model is required")
        if self.concurrency < 1:
            raise ConfigError(f"--concurrency must be at least 1 (got {self.concurrency})")
        if self.retry.attempts < 1:
            raise ConfigError("--attempts must be at least 1")
        if self.limit is not None and self.limit < 1:
            raise ConfigError("--limit must be at least 1")

    def settings(self) -> ChatSettings:
        return ChatSettings(self.model, self.temperature, self.max_tokens, self.seed)


@dataclass(frozen=True)
class AnswerOutcome:
    output: Path
    fingerprint: str
    n_written: int
    n_total: int
    counters: dict[str, Any]


def check_hypothesis_row(row: dict[str, Any]) -> None:
    if set(row) != set(ROW_FIELDS) or not isinstance(row["hypothesis"], str):
        raise ProvenanceError(f"row {row.get('question_id')!r}: a hypothesis row is exactly "
                              "{'question_id', 'hypothesis': str}")


def answer(context: str | Path, output: str | Path, config: AnswerConfig, *,
           resume: bool = False, echo: Callable[[str], None] = print,
           command: Sequence[str] | None = None,
           sleep: Callable[[float], None] = time.sleep) -> AnswerOutcome:
    from engram_eval.runs.progress import Progress

    config.validate()
    t0 = time.time()
    rows, cmeta, crows_sha = read_context(context)
    if config.limit is not None:
        rows = rows[:config.limit]
    ids = [r["question_id"] for r in rows]
    client = ChatClient(config.base_url, config.settings(), key_env=config.key_env,
                        retry=config.retry, timeout=config.timeout, sleep=sleep)
    out = Path(output)
    meta: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "kind": KIND,
        "context": {"path": os.path.relpath(Path(context).resolve(), out.resolve().parent),
                    "name": Path(context).name, "fingerprint": cmeta["fingerprint"],
                    "rows_sha256": crows_sha, "top_k": cmeta.get("top_k"),
                    "run_fingerprint": (cmeta.get("run") or {}).get("fingerprint")},
        "endpoint": {k: v for k, v in client.describe().items() if k != "retry"},
        "chat": config.settings().to_json(),
        "sources": source_hashes(QA_ANSWER_SOURCES),
        "selection": {"limit": config.limit, "n": len(ids), "ids": ids},
        "recorded": {"concurrency": config.concurrency, "timeout": config.timeout,
                     "retry": client.describe()["retry"]},
        "packages": {**package_versions(), "openai": _version("openai")},
        "environment": environment(),
        "dataset": cmeta.get("dataset"),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "fingerprint_fields": list(FINGERPRINT_FIELDS),
        "runs": [],
    }
    opened = open_output(out, meta, resume=resume, allowed_ids=ids, required=ROW_FIELDS,
                         check_row=check_hypothesis_row, echo=echo)
    todo = [r for r in rows if r["question_id"] not in opened.done]
    written = 0
    finished = False
    progress = Progress(len(ids), len(opened.done), enabled=config.progress, desc="answers")
    try:
        with RowWriter(out) as writer:

            def write(result: tuple[str, str]) -> None:
                nonlocal written
                writer.write({"question_id": result[0], "hypothesis": result[1]})
                written += 1
                progress.update(1)

            run_bounded(lambda r: _one(client, r), todo, config.concurrency, write)
        finished = True
    finally:
        progress.close()
        finish(opened, resume=resume, started=t0, command=command, written=written,
               finished=finished, extra={"usage": client.counters.to_json()}, ids=ids,
               required=ROW_FIELDS)
        opened.close()
    return AnswerOutcome(out, opened.fingerprint, written, len(ids), client.counters.to_json())


def _one(client: ChatClient, row: dict[str, Any]) -> tuple[str, str]:
    reply = client.complete(row["messages"], what=f"question {row['question_id']}")
    return row["question_id"], reply.text.strip()


def _version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None
