"""``run --questions FILE.jsonl``: question texts replaced by question_id (the haystack
stays), refusals, the file's hash in the fingerprint, any retriever, resume and verify."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engram_eval.cli import main as cli
from engram_eval.data import load_question_translations
from engram_eval.errors import DataError
from engram_eval.io import sha256_file
from engram_eval.runs import verify as V
from engram_eval.runs.config import RunConfig
from engram_eval.runs.runner import run

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "fixtures" / "longmemeval_tiny.json"
ZH = ROOT / "fixtures" / "longmemeval_tiny.questions_zh.jsonl"


def rows(out: Path) -> dict[str, dict]:
    return {r["question_id"]: r for r in map(json.loads, out.read_text().splitlines())}


def meta_of(out: Path) -> dict:
    return json.loads(Path(str(out) + ".metadata.json").read_text())


def cfg(**kw: object) -> RunConfig:
    return RunConfig(progress=False, **kw)  # type: ignore[arg-type]


def quiet(_: str) -> None:
    pass


def test_fixture_has_chinese_and_mixed_script_questions_for_every_tiny_question() -> None:
    texts = load_question_translations(ZH)
    assert len(texts) == 12
    assert texts["lme_t01"] == "我领养的小狗是什么品种？"  # Chinese only
    assert "Denver" in texts["lme_t05"]  # mixed script


def test_texts_are_replaced_and_the_file_hash_is_fingerprinted(tmp_path: Path) -> None:
    plain = run(cfg(retriever="memo-lexical"), TINY, tmp_path / "en.jsonl", echo=quiet)
    zh = run(cfg(retriever="memo-lexical", questions=str(ZH)), TINY, tmp_path / "zh.jsonl",
             echo=quiet)
    assert plain.fingerprint != zh.fingerprint
    sel = meta_of(tmp_path / "zh.jsonl")["selection"]["questions"]
    assert sel == {"name": ZH.name, "sha256": sha256_file(ZH), "allow_missing": False,
                   "entries": 12, "replaced": 12, "missing": 0, "unknown": 0}
    assert "questions" not in meta_of(tmp_path / "en.jsonl")["selection"]
    assert "questions" not in meta_of(tmp_path / "zh.jsonl")["config"]  # the path is not
    r = rows(tmp_path / "zh.jsonl")
    en = rows(tmp_path / "en.jsonl")
    # the haystack and the gold stay; the question the retriever saw is the Chinese one
    assert r["lme_t01"]["gold"] == en["lme_t01"]["gold"]
    assert sorted(r["lme_t01"]["ranked_session_ids"]) == sorted(en["lme_t01"]["ranked_session_ids"])
    assert r["lme_t01"]["trace"]["question"]["window"] == ["我领养的小狗是什么品种"]
    assert "denver" in r["lme_t05"]["trace"]["question"]["window"]
    # a pure-Chinese question finds nothing in an English haystack: every session unmatched
    assert {t["stage"] for t in r["lme_t01"]["trace"]["sessions"]} == {"unmatched"}


@pytest.mark.parametrize("retriever", ["flat-bm25", "dummy"])
def test_any_retriever_sees_the_replaced_text(tmp_path: Path, retriever: str) -> None:
    run(cfg(retriever=retriever), TINY, tmp_path / "en.jsonl", echo=quiet)
    run(cfg(retriever=retriever, questions=str(ZH)), TINY, tmp_path / "zh.jsonl", echo=quiet)
    en, zh = rows(tmp_path / "en.jsonl"), rows(tmp_path / "zh.jsonl")
    assert any(en[q]["ranked_session_ids"] != zh[q]["ranked_session_ids"] for q in en)


def _write(tmp_path: Path, entries: list[dict], name: str = "q.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries),
                 encoding="utf-8")
    return p


def test_unknown_and_missing_ids_are_refused_unless_allowed(tmp_path: Path) -> None:
    unknown = _write(tmp_path, [{"question_id": "nope", "question": "什么？"}], "u.jsonl")
    with pytest.raises(DataError, match="not in the dataset"):
        run(cfg(retriever="dummy", questions=str(unknown), question_ids=["lme_t01"]), TINY,
            tmp_path / "a.jsonl", echo=quiet)
    partial = _write(tmp_path, [{"question_id": "lme_t01", "question": "小狗？"}], "p.jsonl")
    with pytest.raises(DataError, match="have no text in the file"):
        run(cfg(retriever="dummy", questions=str(partial)), TINY, tmp_path / "b.jsonl",
            echo=quiet)
    assert not (tmp_path / "a.jsonl").exists() and not (tmp_path / "b.jsonl").exists()
    mixed = _write(tmp_path, [{"question_id": "lme_t01", "question": "小狗？"},
                              {"question_id": "nope", "question": "什么？"}], "m.jsonl")
    run(cfg(retriever="dummy", questions=str(mixed), allow_missing=True), TINY,
        tmp_path / "c.jsonl", echo=quiet)
    sel = meta_of(tmp_path / "c.jsonl")["selection"]["questions"]
    assert (sel["replaced"], sel["missing"], sel["unknown"], sel["allow_missing"]) == (1, 11, 1,
                                                                                       True)


def test_allow_missing_needs_questions(tmp_path: Path) -> None:
    from engram_eval.errors import ConfigError

    with pytest.raises(ConfigError, match="--questions"):
        run(cfg(retriever="dummy", allow_missing=True), TINY, tmp_path / "x.jsonl", echo=quiet)


def test_bad_jsonl_names_the_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text('{"question_id": "lme_t01", "question": "a"}\n\n{"question_id": "lme_t02"}\n')
    with pytest.raises(DataError, match="line 3"):
        load_question_translations(p)
    p.write_text('{"question_id": "lme_t01", "question": "a"}\nnot json\n')
    with pytest.raises(DataError, match="line 2"):
        load_question_translations(p)
    p.write_text('{"question_id": "lme_t01", "question": "a"}\n'
                 '{"question_id": "lme_t01", "question": "b"}\n')
    with pytest.raises(DataError, match="duplicate"):
        load_question_translations(p)


def test_resume_checks_the_file_and_verify_reranks_with_it(tmp_path: Path) -> None:
    out = tmp_path / "zh.jsonl"
    run(cfg(retriever="memo-lexical", questions=str(ZH), limit=4), TINY, out, echo=quiet)
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines[:2]))
    run(cfg(retriever="memo-lexical", questions=str(ZH), limit=4), TINY, out, resume=True,
        echo=quiet)
    def untimed(text: str) -> list[dict]:
        return [{k: v for k, v in json.loads(x).items() if k != "timing"}
                for x in text.splitlines()]

    assert untimed(out.read_text()) == untimed("".join(lines))
    other = _write(tmp_path, [{"question_id": q, "question": "别的"}
                              for q in load_question_translations(ZH)], "other.jsonl")
    from engram_eval.errors import ProvenanceError

    with pytest.raises(ProvenanceError, match="selection.questions"):
        run(cfg(retriever="memo-lexical", questions=str(other), limit=4), TINY, out,
            resume=True, echo=quiet)
    ok = V.verify(out, TINY, rerun=4, rerun_seed=0, questions_file=ZH)
    assert ok.ok, ok.format()
    assert any(n.startswith("rerun") and s == "ok" for n, s, _ in ok.checks), ok.format()
    skipped = V.verify(out, TINY, rerun=4, rerun_seed=0)
    assert any(n.startswith("rerun") and "pass that file" in d for n, _, d in skipped.checks)
    wrong = V.verify(out, TINY, rerun=4, rerun_seed=0, questions_file=other)
    assert not wrong.ok


def test_cli_run_questions_and_memo_flags(tmp_path: Path) -> None:
    out = tmp_path / "cli.jsonl"
    assert cli.main(["run", str(TINY), "--output", str(out), "--no-progress", "--retriever",
                     "memo-lexical", "--questions", str(ZH), "--memo-window", "4",
                     "--memo-window-order", "question"]) == 0
    meta = meta_of(out)
    assert meta["config"]["memo_window"] == 4
    assert meta["retriever"]["memo_window_order"] == "question"
    assert meta["selection"]["questions"]["sha256"] == sha256_file(ZH)
    assert meta["config_recorded"]["questions"] == str(ZH)
