"""``answer``: send every context row's messages to a chat endpoint, write LongMemEval's
hypothesis contract — ``{"question_id", "hypothesis"}`` per line, plus two content hashes
(:data:`ROW_FIELDS`: ``prompt_sha256`` of the messages sent, ``hypothesis_sha256`` of the
text written; LongMemEval's evaluator reads the first two keys and ignores the rest) — with
the run discipline of :mod:`engram_eval.qa.files` (refuse overwrite, verified resume,
torn-line repair) and bounded concurrency (``concurrency`` requests in flight, one writer).
``--resume`` keeps a row only when both hashes hold: the text is the one written, the prompt
is this question's in the context export (:func:`kept_row_problem`).

Rows are appended as answers arrive (so an interruption loses at most the requests in
flight); a resumed run asks only for the questions without a row. The sidecar records the
context export (fingerprint, rows hash), the endpoint (URL without credentials, the name of
the key variable), the model and its settings, and the source hashes; never the key.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram_eval.errors import ConfigError
from engram_eval.io import sha256_json
from engram_eval.provenance.sidecar import environment, package_versions, source_hashes
from engram_eval.provenance.sources import QA_ANSWER_SOURCES
from engram_eval.qa.client import ChatClient, ChatSettings, RetryPolicy, run_bounded
from engram_eval.qa.context import read_context
from engram_eval.qa.files import finish, open_output
from engram_eval.qa.prompts import sha256_text

KIND = "engram-eval/answers"
SCHEMA_VERSION = 1
FINGERPRINT_FIELDS = ("schema_version", "kind", "context", "endpoint", "chat", "sources",
                      "selection")
#: Exactly these fields per line: the hypothesis contract, then the content hashes.
ROW_FIELDS = ("question_id", "hypothesis", "prompt_sha256", "hypothesis_sha256")


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


def hypothesis_row(question_id: str, messages: Any, hypothesis: str) -> dict[str, Any]:
    """One line of the file (:data:`ROW_FIELDS`)."""
    return {"question_id": question_id, "hypothesis": hypothesis,
            "prompt_sha256": sha256_json(messages), "hypothesis_sha256": sha256_text(hypothesis)}


def kept_row_problem(row: Mapping[str, Any],
                     context: Mapping[str, Mapping[str, Any]]) -> tuple[str, str] | None:
    """``--resume``: ``(field, what)`` when a kept row's content no longer matches its
    record (:data:`engram_eval.qa.files.RowCheck`): its hypothesis against its
    ``hypothesis_sha256``, its ``prompt_sha256`` against the messages of its question in the
    context export (``context``: rows by question id)."""
    hyp = row["hypothesis"]
    if not isinstance(hyp, str):
        return "hypothesis", "not a string"
    if row["hypothesis_sha256"] != sha256_text(hyp):
        return "hypothesis", ("does not match its hypothesis_sha256 (the text was changed "
                              "after it was written)")
    ctx = context.get(row["question_id"])
    if ctx is None:
        return "question_id", "no row of the context export has it"
    if row["prompt_sha256"] != sha256_json(ctx["messages"]):
        return "prompt_sha256", ("not the sha256 of this question's messages in the context "
                                 "export (the row answers another prompt)")
    return None


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
    by_id = {r["question_id"]: r for r in rows}
    opened = open_output(out, meta, resume=resume, allowed_ids=ids, required=ROW_FIELDS,
                         check_row=lambda row: kept_row_problem(row, by_id), echo=echo)
    todo = [r for r in rows if r["question_id"] not in opened.done]
    written = 0
    finished = False
    progress = Progress(len(ids), len(opened.done), enabled=config.progress, desc="answers")
    try:
        with opened.writer() as writer:

            def write(result: tuple[str, str]) -> None:
                nonlocal written
                qid, text = result
                writer.write(hypothesis_row(qid, by_id[qid]["messages"], text))
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
