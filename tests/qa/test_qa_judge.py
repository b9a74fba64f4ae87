"""judge: LongMemEval's judge protocol through the real ``openai`` client against a scripted
server on 127.0.0.1 — the per-type prompt choice, temperature 0, the "yes" label, the
sidecar (judge model, template hashes), the report (overall, task-averaged, abstention,
split by retrieval evidence) and one judge model per table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import TINY_LONGMEMEVAL
from fake_openai import FakeServer
from run_files import edit_line

from engram_eval.data.datasets import load_questions
from engram_eval.errors import ProvenanceError
from engram_eval.provenance.sidecar import sidecar_path
from engram_eval.qa import prompts
from engram_eval.qa.answer import AnswerConfig, answer
from engram_eval.qa.client import RetryPolicy
from engram_eval.qa.context import ContextConfig, export_context, read_context
from engram_eval.qa.judge import JudgeConfig, judge, label_of, report_path
from engram_eval.qa.report import build_report

pytest.importorskip("openai")

KEY = "sk-judge-test-7c4d2e"
FAST = RetryPolicy(attempts=3, base_delay=0.01)
WRONG = {"lme_t04", "lme_t11_abs"}  # the scripted judge says "no" to these


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


@pytest.fixture(scope="module")
def questions() -> dict:
    return {q.question_id: q for q in load_questions(TINY_LONGMEMEVAL)[1]}


@pytest.fixture(scope="module")
def hypotheses(pristine: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("qa")
    ctx = d / "ctx.k2.jsonl"
    export_context(pristine, TINY_LONGMEMEVAL, ctx, ContextConfig(2), echo=lambda m: None,
                   progress=False)
    mp = pytest.MonkeyPatch()
    mp.setenv("OPENAI_API_KEY", KEY)
    with FakeServer(lambda body, n: "Answer: something") as server:
        answer(ctx, d / "hyp.jsonl", AnswerConfig(base_url=server.base_url, model="reader-1",
                                                  retry=FAST, progress=False),
               echo=lambda m: None)
    mp.undo()
    return d / "hyp.jsonl"


def judge_reply(questions: dict):
    by_text = {q.question: q.question_id for q in questions.values()}

    def reply(body: dict, n: int) -> str:
        text = body["messages"][0]["content"]
        qtext = text.split("Question: ", 1)[1].split("\n", 1)[0]
        return "No." if by_text[qtext] in WRONG else "Yes, it is."
    return reply


def test_prompt_choice_per_question_type() -> None:
    assert prompts.judge_template_name("single-session-user", "q1") == "default"
    assert prompts.judge_template_name("multi-session", "q1") == "default"
    assert prompts.judge_template_name("single-session-assistant", "q1") == "default"
    assert prompts.judge_template_name("temporal-reasoning", "q1") == "temporal-reasoning"
    assert prompts.judge_template_name("knowledge-update", "q1") == "knowledge-update"
    assert (prompts.judge_template_name("single-session-preference", "q1")
            == "single-session-preference")
    assert prompts.judge_template_name("temporal-reasoning", "q1_abs") == "abstention"
    with pytest.raises(ValueError, match="no judge prompt"):
        prompts.judge_template_name("open-domain", "q1")
    assert "off by one" in prompts.JUDGE_TEMPORAL
    assert "earlier value" in prompts.JUDGE_KNOWLEDGE_UPDATE
    assert "Rubric" in prompts.JUDGE_PREFERENCE
    assert "cannot be answered" in prompts.JUDGE_ABSTENTION


def test_label_is_yes_in_the_reply() -> None:
    assert label_of("Yes.") and label_of("yes") and label_of("YES, correct")
    assert not label_of("No.") and not label_of("no")


def test_judge_end_to_end(hypotheses: Path, questions: dict, tmp_path: Path) -> None:
    out = tmp_path / "judged.jsonl"
    with FakeServer(judge_reply(questions)) as server:
        got = judge(hypotheses, TINY_LONGMEMEVAL, out,
                    JudgeConfig(base_url=server.base_url, judge_model="judge-x", retry=FAST,
                                progress=False), echo=lambda m: None)
    assert got.n_written == 12
    sent = {}
    for s in server.seen:
        assert s.body["model"] == "judge-x" and s.body["temperature"] == 0.0
        assert s.body["max_tokens"] == 10
        text = s.body["messages"][0]["content"]
        qid = next(i for i, q in questions.items() if f"Question: {q.question}\n" in text)
        sent[qid] = text
        assert f"Correct answer: {questions[qid].answer}" in text or qid.endswith("_abs") \
            or questions[qid].question_type == "single-session-preference"
    assert "off by one" in sent["lme_t08"] and "off by one" not in sent["lme_t01"]
    assert "earlier value" in sent["lme_t06"]
    assert "Rubric" in sent["lme_t03"]
    assert "cannot be answered" in sent["lme_t10_abs"] and "cannot be answered" in sent[
        "lme_t11_abs"]
    rows = {json.loads(x)["question_id"]: json.loads(x) for x in out.read_text().splitlines()}
    assert {q for q, r in rows.items() if not r["label"]} == WRONG
    assert rows["lme_t11_abs"]["template"] == "abstention"
    meta = json.loads(sidecar_path(out).read_text())
    assert meta["judge"]["model"] == "judge-x" and meta["judge"]["temperature"] == 0.0
    assert meta["templates_sha256"] == {n: prompts.sha256_text(t)
                                        for n, t in prompts.JUDGE_TEMPLATES.items()}
    assert meta["hypotheses"]["reader_model"] == "reader-1"
    rep = json.loads(report_path(out).read_text())
    assert rep["judge_model"] == "judge-x" and rep["n"] == 12
    assert rep["overall_accuracy"] == round(10 / 12, 4)
    assert rep["task_averaged_accuracy"] == round((1 + 1 + 1 + 0.5 + 1 + 2 / 3) / 6, 4)
    assert rep["abstention_accuracy"]["accuracy"] == 0.5
    # split by retrieval: recall_all@2 of each question's context (the package's metric)
    ctx_rows = read_context(hypotheses.parent / "ctx.k2.jsonl")[0]
    ev = {r["question_id"]: r["evidence"]["recall_all@2"] for r in ctx_rows}
    found = [q for q, v in ev.items() if v == 1.0]
    by_ev = rep["by_evidence"]
    assert by_ev["metric"] == "recall_all@2"
    assert by_ev["overall"]["found"]["n"] == len(found)
    assert by_ev["overall"]["no gold"]["n"] == 2
    assert by_ev["overall"]["found"]["correct"] == len([q for q in found if q not in WRONG])
    assert (by_ev["overall"]["found"]["n"] + by_ev["overall"]["missed"]["n"]
            + by_ev["overall"]["no gold"]["n"]) == 12
    # resume under another judge model is refused: one file, one judge
    with FakeServer(judge_reply(questions)) as server:
        with pytest.raises(ProvenanceError, match="judge-x"):
            judge(hypotheses, TINY_LONGMEMEVAL, out,
                  JudgeConfig(base_url=server.base_url, judge_model="judge-y", retry=FAST,
                              progress=False), resume=True, echo=lambda m: None)
    for p in tmp_path.rglob("*"):
        assert KEY.encode() not in p.read_bytes()


def test_report_never_mixes_judge_models() -> None:
    rows = [{"question_id": "a", "question_type": "t", "abstention": False, "label": True,
             "judge_model": "j1"},
            {"question_id": "b", "question_type": "t", "abstention": False, "label": False,
             "judge_model": "j2"}]
    with pytest.raises(ProvenanceError, match="never mixes judge models"):
        build_report(rows, None, k=None, judge_model="j1")


def test_judge_refuses_an_unfinished_hypothesis_file(hypotheses: Path, tmp_path: Path) -> None:
    import shutil

    hyp = tmp_path / "hyp.jsonl"
    shutil.copyfile(hypotheses, hyp)
    shutil.copyfile(sidecar_path(hypotheses), sidecar_path(hyp))
    hyp.write_text("".join(hyp.read_text().splitlines(keepends=True)[:-1]))
    with pytest.raises(ProvenanceError, match="not those its sidecar recorded"):
        judge(hyp, TINY_LONGMEMEVAL, tmp_path / "j.jsonl",
              JudgeConfig(base_url="http://127.0.0.1:9/v1", judge_model="j", progress=False),
              echo=lambda m: None)


# --------------------------------------------------------------------------- resume re-checks
def _judged(hypotheses: Path, questions: dict, out: Path) -> JudgeConfig:
    with FakeServer(judge_reply(questions)) as server:
        cfg = JudgeConfig(base_url=server.base_url, judge_model="judge-x", retry=FAST,
                          progress=False)
        judge(hypotheses, TINY_LONGMEMEVAL, out, cfg, echo=lambda m: None)
    return cfg


def test_rows_record_the_prompt_and_reply_hashes(hypotheses: Path, questions: dict,
                                                 tmp_path: Path) -> None:
    from engram_eval.io import sha256_json
    from engram_eval.qa.judge import ROW_FIELDS, judge_messages

    out = tmp_path / "judged.jsonl"
    _judged(hypotheses, questions, out)
    hyps = {json.loads(x)["question_id"]: json.loads(x)["hypothesis"]
            for x in hypotheses.read_text().splitlines()}
    for line in out.read_text().splitlines():
        row = json.loads(line)
        assert list(row) == list(ROW_FIELDS)
        q = questions[row["question_id"]]
        assert row["prompt_sha256"] == sha256_json(judge_messages(q, hyps[q.question_id])[1])
        assert row["reply_sha256"] == prompts.sha256_text(row["reply"])


@pytest.mark.parametrize(("edit", "match"), [
    (lambda r: r.__setitem__("reply", r["reply"] + " (edited)"), r"field 'reply': does not match its reply_sha256"),
    (lambda r: r.__setitem__("label", not r["label"]), r"field 'label': (True|False); the "),
    (lambda r: r.__setitem__("question_type", "forged-type"), r"field 'question_type'"),
    (lambda r: r.__setitem__("prompt_sha256", "0" * 64), r"field 'prompt_sha256': the messages"),
    (lambda r: r.__setitem__("extra", 1), r"field 'extra': not a field engram-eval writes"),
    (lambda r: (r.pop("prompt_sha256"), r.pop("reply_sha256")),
     r"field 'prompt_sha256': missing: .*start a new output"),
])
def test_resume_refuses_a_kept_judgement_whose_content_changed(
        hypotheses: Path, questions: dict, tmp_path: Path, edit, match: str) -> None:
    out = tmp_path / "judged.jsonl"
    cfg = _judged(hypotheses, questions, out)
    out.write_text("".join(out.read_text().splitlines(keepends=True)[:5]))  # interrupted
    edit_line(out, 3, edit)
    before = out.read_bytes()
    with pytest.raises(ProvenanceError, match=r"line 4 \(question '[^']+'\): " + match) as e:
        judge(hypotheses, TINY_LONGMEMEVAL, out, cfg, resume=True, echo=lambda m: None)
    assert str(out) in str(e.value) and out.read_bytes() == before


def test_resume_keeps_untouched_judgements(hypotheses: Path, questions: dict,
                                          tmp_path: Path) -> None:
    out = tmp_path / "judged.jsonl"
    with FakeServer(judge_reply(questions)) as server:  # one endpoint (its URL is recorded)
        cfg = JudgeConfig(base_url=server.base_url, judge_model="judge-x", retry=FAST,
                          progress=False)
        judge(hypotheses, TINY_LONGMEMEVAL, out, cfg, echo=lambda m: None)
        kept = out.read_text().splitlines(keepends=True)[:5]
        out.write_text("".join(kept))
        asked = len(server.seen)
        got = judge(hypotheses, TINY_LONGMEMEVAL, out, cfg, resume=True, echo=lambda m: None)
    assert got.n_written == 7 and len(server.seen) - asked == 7
    assert out.read_text().splitlines(keepends=True)[:5] == kept


def test_judge_refuses_a_hypothesis_edited_against_its_hash(hypotheses: Path,
                                                            tmp_path: Path) -> None:
    """Without its sidecar (so no rows hash to compare), a hypothesis row's own
    hypothesis_sha256 still tells an edited text."""
    hyp = tmp_path / "hyp.jsonl"
    hyp.write_text(hypotheses.read_text())
    edit_line(hyp, 2, lambda r: r.__setitem__("hypothesis", "forged"))
    with pytest.raises(ProvenanceError, match="field 'hypothesis' does not match its "
                       "hypothesis_sha256"):
        judge(hyp, TINY_LONGMEMEVAL, tmp_path / "j.jsonl",
              JudgeConfig(base_url="http://127.0.0.1:9/v1", judge_model="j", progress=False),
              echo=lambda m: None)
