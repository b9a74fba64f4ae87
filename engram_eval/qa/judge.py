"""``judge``: LongMemEval's judge protocol over a hypothesis file.

Each question gets one yes/no prompt chosen by its type (:func:`engram_eval.qa.prompts.
judge_template_name`: ``_abs`` questions the abstention prompt, temporal reasoning forgives an
off-by-one count, knowledge update accepts an old value mentioned beside the updated one,
preference questions are judged against their rubric), sent at temperature 0; the label is
whether ``"yes"`` occurs in the lower-cased reply. Rows are judged with the run discipline
of :mod:`engram_eval.qa.files`; the sidecar records the judge model, the endpoint (no key)
and the sha256 of every prompt template. At the end ``<output>.report.json`` holds the
report of :mod:`engram_eval.qa.report`, split by retrieval evidence when the hypotheses'
context export can be found (its sidecar names it; ``--context`` overrides) and verified.

Each row records ``prompt_sha256`` (the messages sent: the question, its gold answer, the
template and the hypothesis) and ``reply_sha256``; ``--resume`` keeps a row only when every
field re-derives from the dataset, the hypotheses and its reply (:func:`kept_row_problem`).
A hypothesis row that records ``hypothesis_sha256`` (written by ``answer``) must match it.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram_eval.data._jsonio import read_json_document
from engram_eval.data.datasets import open_source
from engram_eval.data.records import Question
from engram_eval.errors import ConfigError, DataError, ProvenanceError
from engram_eval.io import (
    already_exists,
    atomic_write,
    dump_json,
    input_problem,
    sha256_file,
    sha256_json,
)
from engram_eval.provenance.sidecar import environment, sidecar_path, source_hashes
from engram_eval.provenance.sources import QA_JUDGE_SOURCES
from engram_eval.qa import prompts
from engram_eval.qa.client import ChatClient, ChatSettings, RetryPolicy, run_bounded
from engram_eval.qa.files import finish, open_output
from engram_eval.qa.report import build_report, format_report
from engram_eval.runs.rows import scan_rows

KIND = "engram-eval/judgement"
SCHEMA_VERSION = 1
FINGERPRINT_FIELDS = ("schema_version", "kind", "hypotheses", "dataset", "judge", "endpoint",
                      "templates_sha256", "sources", "selection")
ROW_FIELDS = ("question_id", "question_type", "abstention", "template", "judge_model",
              "label", "reply", "prompt_sha256", "reply_sha256")
LABEL_RULE = "'yes' in reply.lower()"


@dataclass(frozen=True)
class JudgeConfig:
    base_url: str
    judge_model: str
    max_tokens: int | None = 10
    concurrency: int = 4
    key_env: str = "OPENAI_API_KEY"
    retry: RetryPolicy = RetryPolicy()
    timeout: float = 120.0
    progress: bool = True

    def validate(self) -> None:
        if not self.judge_model:
            raise ConfigError("--judge-model is required (a judged accuracy names its judge)")
        if self.concurrency < 1:
            raise ConfigError(f"--concurrency must be at least 1 (got {self.concurrency})")


@dataclass(frozen=True)
class JudgeOutcome:
    output: Path
    fingerprint: str
    n_written: int
    report: dict[str, Any]


def default_output(hypotheses: str | Path, judge_model: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-._" else "_" for c in judge_model)
    h = Path(hypotheses)
    return h.with_name(h.name.removesuffix(".jsonl") + f".judged.{safe}.jsonl")


def label_of(reply: str) -> bool:
    return "yes" in reply.lower()


def read_hypotheses(path: str | Path) -> tuple[list[dict[str, Any]], str, dict[str, Any] | None]:
    """Rows (each with a string ``hypothesis``), rows hash, and the sidecar when present."""
    scan = scan_rows(path, required=("question_id", "hypothesis"))
    if scan.torn_bytes:
        raise ProvenanceError(f"{path}: the last line is torn; finish the answer run with "
                              "--resume first")
    for r in scan.rows:
        if not isinstance(r["hypothesis"], str):
            raise ProvenanceError(f"{path}: question {r['question_id']!r}: 'hypothesis' is "
                                  "not a string")
        if "hypothesis_sha256" in r and r["hypothesis_sha256"] != prompts.sha256_text(
                r["hypothesis"]):
            raise ProvenanceError(f"{path}: question {r['question_id']!r}: field "
                                  "'hypothesis' does not match its hypothesis_sha256 (the "
                                  "text was changed after it was written)")
    side = sidecar_path(path)
    # a dangling link at the sidecar is not "no sidecar": reading it says so
    meta = read_json_document(side, what="a sidecar") if os.path.lexists(side) else None
    if meta is not None:
        done = [e for e in meta.get("runs", []) if e.get("completed")]
        if not done or done[-1].get("rows_sha256") != scan.sha256:
            raise ProvenanceError(f"{path}: its rows are not those its sidecar recorded at the "
                                  "end of a completed answer run (unfinished, or changed "
                                  "since)")
    return scan.rows, scan.sha256, meta


def find_context(hyp: Path, meta: dict[str, Any] | None,
                 explicit: str | Path | None) -> Path | None:
    if explicit:
        return Path(explicit)
    if not meta or not isinstance(meta.get("context"), dict):
        return None
    rel = meta["context"].get("path")
    cand = (hyp.resolve().parent / rel) if rel else None
    return cand if cand is not None and cand.exists() else None


def judge_messages(q: Question, hypothesis: str) -> tuple[str, list[dict[str, str]]]:
    name = prompts.judge_template_name(q.question_type, q.question_id)
    text = prompts.render_judge(name, question=q.question, answer=q.answer,
                                hypothesis=hypothesis)
    return name, [{"role": "user", "content": text}]


def judge(hypotheses: str | Path, dataset: str | Path, output: str | Path | None,
          config: JudgeConfig, *, context: str | Path | None = None, resume: bool = False,
          echo: Callable[[str], None] = print, command: Sequence[str] | None = None,
          sleep: Callable[[float], None] = time.sleep) -> JudgeOutcome:
    from engram_eval.qa.context import read_context
    from engram_eval.runs.progress import Progress

    config.validate()
    t0 = time.time()
    hyp = Path(hypotheses)
    out = Path(output) if output else default_output(hyp, config.judge_model)
    hrows, hsha, hmeta = read_hypotheses(hyp)
    ds = Path(dataset)
    why = input_problem(ds)
    if why:
        raise DataError(ds, "(file)", "(file)", f"dataset {why}")
    ds_sha = sha256_file(ds)
    ctx_path = find_context(hyp, hmeta, context)
    evidence: dict[str, float | None] | None = None
    ctx_desc: dict[str, Any] | None = None
    if ctx_path is not None:
        crows, cmeta, csha = read_context(ctx_path)
        if (cmeta.get("dataset") or {}).get("sha256") != ds_sha:
            raise ProvenanceError(f"{ctx_path}: the context export was made over another "
                                  f"dataset than {ds}")
        if hmeta and (hmeta.get("context") or {}).get("rows_sha256") not in (None, csha):
            raise ProvenanceError(f"{ctx_path}: not the context export {hyp} was answered from "
                                  "(rows hash differs from the one its sidecar records)")
        k = cmeta["top_k"]
        evidence = {r["question_id"]: r["evidence"][f"recall_all@{k}"] for r in crows}
        ctx_desc = {"path": os.path.relpath(ctx_path.resolve(), out.resolve().parent),
                    "fingerprint": cmeta["fingerprint"], "rows_sha256": csha, "top_k": k}
    source = open_source(ds)
    hyp_by_id = {r["question_id"]: r["hypothesis"] for r in hrows}
    unknown = sorted(set(hyp_by_id) - set(source.ids))
    if unknown:
        raise ProvenanceError(f"{hyp}: {len(unknown)} question id(s) are not in {ds}, e.g. "
                              f"{unknown[:3]}")
    ids = [i for i in source.ids if i in hyp_by_id]  # dataset order
    if evidence is not None:
        missing = [i for i in ids if i not in evidence]
        if missing:
            raise ProvenanceError(f"{ctx_path}: no context row for {len(missing)} judged "
                                  f"question(s), e.g. {missing[:3]}")
    settings = ChatSettings(config.judge_model, 0.0, config.max_tokens, None)
    client = ChatClient(config.base_url, settings, key_env=config.key_env, retry=config.retry,
                        timeout=config.timeout, sleep=sleep)
    meta: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION, "kind": KIND,
        "hypotheses": {"path": os.path.relpath(hyp.resolve(), out.resolve().parent),
                       "name": hyp.name, "rows_sha256": hsha,
                       "fingerprint": (hmeta or {}).get("fingerprint"),
                       "reader_model": ((hmeta or {}).get("chat") or {}).get("model")},
        "dataset": {"path": str(ds.resolve()), "name": ds.name, "sha256": ds_sha,
                    "n_questions": source.n},
        "judge": {**settings.to_json(), "label_rule": LABEL_RULE,
                  "protocol": "LongMemEval judge protocol: one yes/no prompt per question "
                              "type; _abs questions get the abstention prompt"},
        "endpoint": {k: v for k, v in client.describe().items() if k != "retry"},
        "templates_sha256": prompts.judge_template_hashes(),
        "sources": source_hashes(QA_JUDGE_SOURCES),
        "selection": {"n": len(ids), "ids": ids},
        "context": ctx_desc,
        "recorded": {"concurrency": config.concurrency, "retry": client.describe()["retry"]},
        "environment": environment(),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "fingerprint_fields": list(FINGERPRINT_FIELDS),
        "runs": [],
    }

    # the questions of the rows a resume keeps, without their haystacks
    asked = ({q.question_id: dataclasses.replace(q, sessions=())
              for q in source.iter_questions(ids)} if resume else {})

    def check_row(row: Mapping[str, Any]) -> tuple[str, str] | None:
        q = asked.get(row["question_id"])
        if q is None:
            return "question_id", f"not a question of {ds.name} with a hypothesis in {hyp.name}"
        return kept_row_problem(row, q, hyp_by_id[q.question_id], config.judge_model)

    if not resume and report_path(out).exists():
        raise ProvenanceError(already_exists(report_path(out)))
    opened = open_output(out, meta, resume=resume, allowed_ids=ids, required=ROW_FIELDS,
                         check_row=check_row, echo=echo)
    written = 0
    finished = False
    todo = [i for i in ids if i not in opened.done]
    progress = Progress(len(ids), len(opened.done), enabled=config.progress, desc="judged")
    try:
        with opened.writer() as writer:

            def write(row: dict[str, Any]) -> None:
                nonlocal written
                writer.write(row)
                written += 1
                progress.update(1)

            run_bounded(lambda q: _judge_one(client, q, hyp_by_id[q.question_id]),
                        source.iter_questions(todo), config.concurrency, write)
        finished = True
    finally:
        progress.close()
        scan = finish(opened, resume=resume, started=t0, command=command, written=written,
                      finished=finished, extra={"usage": client.counters.to_json()}, ids=ids,
                      required=ROW_FIELDS)
        opened.close()
    assert scan is not None
    report = build_report(scan.rows, evidence, k=ctx_desc["top_k"] if ctx_desc else None,
                          judge_model=config.judge_model)
    report.update({"fingerprint": opened.fingerprint, "rows_sha256": scan.sha256,
                   "dataset": ds.name, "dataset_sha256": ds_sha,
                   "hypotheses": hyp.name, "reader_model": meta["hypotheses"]["reader_model"],
                   "context": ctx_desc})
    atomic_write(report_path(out), dump_json(report))
    echo(format_report(report))
    return JudgeOutcome(out, opened.fingerprint, written, report)


def report_path(output: str | Path) -> Path:
    return Path(str(output) + ".report.json")


def judgement_row(q: Question, hypothesis: str, judge_model: str, reply: str
                  ) -> dict[str, Any]:
    """One line of the file (:data:`ROW_FIELDS`): everything but ``reply`` follows from the
    question, the hypothesis, the judge model and the reply."""
    name, messages = judge_messages(q, hypothesis)
    return {"question_id": q.question_id, "question_type": q.question_type,
            "abstention": prompts.is_abstention(q.question_id), "template": name,
            "judge_model": judge_model, "label": label_of(reply), "reply": reply,
            "prompt_sha256": sha256_json(messages), "reply_sha256": prompts.sha256_text(reply)}


def kept_row_problem(row: Mapping[str, Any], q: Question, hypothesis: str,
                     judge_model: str) -> tuple[str, str] | None:
    """``--resume``: ``(field, what)`` for the first field of a kept row that differs from
    what :func:`judgement_row` gives for its question, hypothesis, judge model and reply
    (the reply itself against its ``reply_sha256``); ``None`` when the row may be kept."""
    reply = row["reply"]
    if not isinstance(reply, str):
        return "reply", "not a string"
    if row["reply_sha256"] != prompts.sha256_text(reply):
        return "reply", "does not match its reply_sha256 (changed after it was written)"
    try:
        want = judgement_row(q, hypothesis, judge_model, reply)
    except ValueError as e:  # no judge prompt for the question's type
        return "template", str(e)
    for field in ROW_FIELDS:
        if row[field] != want[field] or type(row[field]) is not type(want[field]):
            why = ("the messages differ from those the question, its hypothesis and the "
                   "template give" if field == "prompt_sha256" else
                   f"{row[field]!r}; the dataset, the hypotheses and the reply give "
                   f"{want[field]!r}")
            return field, why
    return None


def _judge_one(client: ChatClient, q: Question, hypothesis: str) -> dict[str, Any]:
    _, messages = judge_messages(q, hypothesis)
    reply = client.complete(messages, what=f"question {q.question_id}")
    return judgement_row(q, hypothesis, client.settings.model, reply.text)
