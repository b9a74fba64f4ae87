"""VERIFIED means re-checked, not re-read (issue 15, item 3).

Three ways a result used to end VERIFIED although what it claims no longer held:

(a) rows edited on disk during an interrupted run, then ``--resume``: every kept row now
    passes verify's per-row checks against the dataset before anything is written;
(b) ``merge`` of a shard that fails its own ``verify``: every shard is verified in full
    (``--dataset`` is required) before anything is written;
(c) cached vectors overwritten in the cache database: every entry carries a checksum, and
    ``verify --rerun K`` re-ranks K seeded-sampled questions with the cache off, so even a
    consistent overwrite (checksum rewritten too) is caught.

Plus: ``verify`` checks that scores never increase down a ranking, and ``--rerun`` refuses
when the model files that resolve now are not the recorded ones. Every test works in its
own temporary directories and checks that nothing outside them was created or changed.
"""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from engram_eval.cli import main as cli
from engram_eval.errors import CacheError, ProvenanceError
from engram_eval.provenance.sidecar import sidecar_path, summary_path
from engram_eval.retrieval.cache import CACHE_FILE, VectorCache
from engram_eval.runs import verify as V
from engram_eval.runs.config import RunConfig
from engram_eval.runs.merge import merge
from engram_eval.runs.rows import rows_sha256
from engram_eval.runs.runner import run
from engram_eval.scoring import protocols as P
from engram_eval.scoring.summary import build_summary

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "fixtures" / "longmemeval_tiny.json"
N_QUESTIONS = 12


# --------------------------------------------------------------------------- helpers
def _snapshot() -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file the package could touch outside a test's temp dirs:
    fixtures, published results, and the default cache directory."""
    out = {}
    for base in (ROOT / "fixtures", ROOT / "results"):
        for p in base.rglob("*"):
            if p.is_file():
                st = p.stat()
                out[str(p)] = (st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture(autouse=True)
def nothing_outside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Offline, the default cache pointed into the temp dir (it must stay unused), and no
    file outside the temp dirs created or changed."""
    for k, v in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"),
                 ("TOKENIZERS_PARALLELISM", "false")):
        monkeypatch.setenv(k, v)
    default_cache = tmp_path / "default-cache"
    monkeypatch.setenv("ENGRAM_EVAL_CACHE", str(default_cache))
    before = _snapshot()
    yield
    assert _snapshot() == before
    assert not default_cache.exists()  # --rerun never used (or made) a cache


def _cfg(**kw: object) -> RunConfig:
    kw.setdefault("rerank", False)  # runs of the first stage: these tests check verify/resume
    return RunConfig(progress=False, **kw)  # type: ignore[arg-type]


def _run(cfg: RunConfig, out: Path, **kw: object) -> None:
    run(cfg, FIXTURE, out, echo=lambda m: None, **kw)  # type: ignore[arg-type]


def _rows(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(x) for x in path.read_text().splitlines()]


def _write_rows(path: Path, rows: list[dict]) -> None:  # type: ignore[type-arg]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def _rescore(row: dict) -> None:  # type: ignore[type-arg]
    """Recompute a row's metrics from its (edited) ranking, as a careful forger would."""
    for p, g in row["gold"].items():
        if g is not None:
            row["metrics"][p] = P.metrics_for_gold(p, g, row["ranked_session_ids"],
                                                   row.get("haystack_entries"))


def _launder(result: Path) -> None:
    """Rewrite the summary and the sidecar's rows hash to match edited rows (``runs`` is
    not part of the fingerprint): what an editor who knows the format can do."""
    rows = _rows(result)
    meta = json.loads(sidecar_path(result).read_text())
    digest = rows_sha256(result)
    summary = build_summary(rows, meta["protocols"], fingerprint=meta["fingerprint"],
                            dataset=meta["dataset"]["name"],
                            dataset_sha256=meta["dataset"]["sha256"],
                            retriever=meta["config"]["retriever"], rows_sha256=digest)
    summary_path(result).write_text(json.dumps(summary, indent=2))
    meta["runs"][-1]["rows_sha256"] = digest
    sidecar_path(result).write_text(json.dumps(meta, indent=2))


def _swap_top_two(row: dict) -> None:  # type: ignore[type-arg]
    """Swap the first two sessions (scores left in place, so they still never increase),
    their traces with them (each trace's final score set to its new rank's score), and
    recompute the metrics: the row passes every per-row check."""
    ids = row["ranked_session_ids"]
    ids[0], ids[1] = ids[1], ids[0]
    traces = row["trace"]["sessions"]
    traces[0], traces[1] = traces[1], traces[0]
    _trace_scores(row)
    _rescore(row)


def _trace_scores(row: dict) -> None:  # type: ignore[type-arg]
    """Each session trace's ``final_score`` set to the row's score at its rank, as a careful
    forger would."""
    for t, score in zip(row["trace"]["sessions"], row["scores"], strict=False):
        if "final_score" in t:
            t["final_score"] = score


def _failed(rep: V.VerifyReport) -> dict[str, str]:
    return {n: d for n, s, d in rep.checks if s == V.FAIL}


def _files(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- (a) resume
def _interrupted(tmp_path: Path) -> Path:
    """A bm25 run of the tiny fixture cut after 5 rows plus a torn sixth line and no
    summary: what a crash leaves."""
    out = tmp_path / "run.jsonl"
    _run(_cfg(retriever="bm25"), out)
    lines = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(b"".join(lines[:5]) + lines[5][:40])
    summary_path(out).unlink()
    return out


def _edit_line(out: Path, n: int, fn) -> None:  # type: ignore[no-untyped-def]
    """Apply ``fn`` to row ``n`` (1-based) of an interrupted result, torn tail kept."""
    data = out.read_bytes()
    lines = data.split(b"\n")
    row = json.loads(lines[n - 1])
    fn(row)
    lines[n - 1] = json.dumps(row, ensure_ascii=False).encode()
    out.write_bytes(b"\n".join(lines))


def _foreign_session(row: dict) -> None:  # type: ignore[type-arg]
    row["ranked_session_ids"][-1] = "not_in_this_haystack"


def _repeated_session(row: dict) -> None:  # type: ignore[type-arg]
    row["ranked_session_ids"][-1] = row["ranked_session_ids"][0]


def _score_goes_up(row: dict) -> None:  # type: ignore[type-arg]
    row["scores"][2] = row["scores"][0] + 1.0


def _metric_edited(row: dict) -> None:  # type: ignore[type-arg]
    row["metrics"]["answerable"]["recall_all@5"] = 1.0 - row["metrics"]["answerable"][
        "recall_all@5"]


def _gold_edited(row: dict) -> None:  # type: ignore[type-arg]
    row["gold"]["all"] = row["ranked_session_ids"][:1]
    _rescore(row)


@pytest.mark.parametrize("edit,check,detail", [
    (_foreign_session, V.GOLD, "does not cover the corpus"),
    (_repeated_session, V.GOLD, "repeats session"),
    (_score_goes_up, V.SCORES, "rank 3 scores"),
    (_metric_edited, V.METRICS, "recall_all@5"),
    (_gold_edited, V.GOLD, "gold[all] differs from the dataset"),
])
def test_resume_refuses_a_kept_row_edited_on_disk(tmp_path: Path, edit, check: str,  # type: ignore[no-untyped-def]
                                                  detail: str) -> None:
    out = _interrupted(tmp_path)
    _edit_line(out, 3, edit)
    qid = json.loads(out.read_bytes().split(b"\n")[2])["question_id"]
    before = _files(tmp_path)
    with pytest.raises(ProvenanceError) as e:
        _run(_cfg(retriever="bm25"), out, resume=True)
    msg = str(e.value)
    assert msg.startswith(f"{out}: line 3 (question {qid!r}) fails the check '{check}'"), msg
    assert detail in msg and "nothing was written" in msg
    assert _files(tmp_path) == before  # torn tail not repaired, no row, no summary, no entry


def test_resume_of_untouched_rows_still_works_and_verifies(tmp_path: Path) -> None:
    out = _interrupted(tmp_path)
    _run(_cfg(retriever="bm25"), out, resume=True)
    rep = V.verify(out, FIXTURE)
    assert rep.verified, rep.format()


def test_resume_cli_names_file_line_question_and_check(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    out = _interrupted(tmp_path)
    _edit_line(out, 2, _foreign_session)
    before = _files(tmp_path)
    code = cli.main(["run", str(FIXTURE), "--retriever", "bm25", "--output", str(out),
                     "--resume", "--no-progress", "--no-rerank"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert f"{out}: line 2 (question 'lme_t02') fails the check '{V.GOLD}'" in err[0]
    assert _files(tmp_path) == before


def test_a_consistent_edit_survives_resume_but_not_rerun(tmp_path: Path) -> None:
    """Swapping two sessions and recomputing the metrics passes every per-row check (the
    row was never hashed: the run was interrupted); only re-ranking can tell."""
    out = _interrupted(tmp_path)
    _edit_line(out, 1, _swap_top_two)
    _run(_cfg(retriever="bm25"), out, resume=True)
    assert V.verify(out, FIXTURE).verified
    rep = V.verify(out, FIXTURE, rerun=N_QUESTIONS, rerun_seed=0)
    bad = _failed(rep)
    assert list(bad) == [V.rerun_name(N_QUESTIONS, 0)], rep.format()
    assert "question 'lme_t01': rank 1" in bad[V.rerun_name(N_QUESTIONS, 0)]


# --------------------------------------------------------------------------- (b) merge
@pytest.fixture
def shards(tmp_path: Path) -> list[Path]:
    outs = []
    for i in range(3):
        out = tmp_path / f"shard{i}.jsonl"
        _run(_cfg(retriever="dummy", shard=f"{i}/3"), out)
        outs.append(out)
    return outs


def test_merge_refuses_a_shard_that_fails_its_own_verify(shards: list[Path],
                                                        tmp_path: Path) -> None:
    rows = _rows(shards[1])
    _swap_top_two(rows[0])  # every per-row check passes; the shard's rows hash does not
    _write_rows(shards[1], rows)
    summary_path(shards[1]).unlink()  # and an edited shard may drop its summary
    assert not V.verify(shards[1], FIXTURE).ok
    before = _files(tmp_path)
    target = tmp_path / "merged.jsonl"
    with pytest.raises(ProvenanceError) as e:
        merge(shards, target, dataset=FIXTURE)
    msg = str(e.value)
    assert msg.startswith(f"merge: shard 1/3 {shards[1]} does not verify against {FIXTURE}")
    assert f"[FAIL] {V.ROWS_HASH}" in msg and "nothing was written" in msg
    assert _files(tmp_path) == before


def test_merge_refuses_a_laundered_shard_with_a_bad_row(shards: list[Path],
                                                        tmp_path: Path) -> None:
    rows = _rows(shards[2])
    rows[0]["ranked_session_ids"][-1] = "not_in_this_haystack"
    _rescore(rows[0])
    _write_rows(shards[2], rows)
    _launder(shards[2])  # rows hash and summary rewritten: only the dataset can tell
    before = _files(tmp_path)
    with pytest.raises(ProvenanceError, match=r"shard 2/3 .*\[FAIL\] gold re-derived from "
                       r"the dataset: .*does not cover the corpus"):
        merge(shards, tmp_path / "merged.jsonl", dataset=FIXTURE)
    assert _files(tmp_path) == before


def test_merge_needs_the_dataset(shards: list[Path], tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "merged.jsonl"
    with pytest.raises(ProvenanceError, match=r"--dataset FILE"):
        merge(shards, target)
    with pytest.raises(SystemExit):
        cli.main(["merge", *map(str, shards), "--output", str(target)])
    assert "--dataset" in capsys.readouterr().err
    assert not target.exists()
    assert cli.main(["merge", *map(str, shards), "--output", str(target),
                     "--dataset", str(FIXTURE)]) == 0
    assert V.verify(target, FIXTURE).verified


# --------------------------------------------------------------------------- scores order
def test_verify_fails_a_score_that_goes_up(result: Path) -> None:
    rows = _rows(result)
    rows[4]["scores"][3] = rows[4]["scores"][1] + 0.5
    _write_rows(result, rows)
    _launder(result)  # so that the score order is the only thing wrong
    rep = V.verify(result, FIXTURE)
    bad = _failed(rep)
    assert list(bad) == [V.SCORES], rep.format()
    assert bad[V.SCORES].startswith(f"{rows[4]['question_id']}: rank 4 scores")
    assert f"[FAIL] {V.SCORES}" in rep.format() and rep.exit_code == 1


# --------------------------------------------------------------------------- --rerun
@pytest.fixture
def bm25_run(tmp_path: Path) -> Path:
    out = tmp_path / "bm25.jsonl"
    _run(_cfg(retriever="bm25"), out)
    return out


def test_rerun_ok_on_a_seeded_sample(bm25_run: Path, capsys: pytest.CaptureFixture[str]
                                     ) -> None:
    ids = json.loads(sidecar_path(bm25_run).read_text())["selection"]["ids"]
    rep = V.verify(bm25_run, FIXTURE, rerun=3, rerun_seed=7)
    assert rep.verified, rep.format()
    name, status, detail = rep.checks[-1]
    assert name == V.rerun_name(3, 7) and name.startswith("rerun K=3 (seed 7, cache off)")
    assert status == V.OK and detail.startswith(", ".join(random.Random(7).sample(ids, 3)))
    code = cli.main(["verify", str(bm25_run), "--dataset", str(FIXTURE), "--rerun", "3",
                     "--rerun-seed", "7"])
    out = capsys.readouterr().out
    assert code == 0 and f"[ok] {V.rerun_name(3, 7)}" in out and "VERIFIED" in out
    # without a seed one is drawn and printed
    assert cli.main(["verify", str(bm25_run), "--dataset", str(FIXTURE), "--rerun", "2"]) == 0
    assert "[ok] rerun K=2 (seed " in capsys.readouterr().out


def test_rerun_needs_the_dataset(bm25_run: Path) -> None:
    rep = V.verify(bm25_run, rerun=2, rerun_seed=1)
    assert rep.ok and not rep.verified and V.rerun_name(2, 1) in rep.not_checked


def test_rerun_catches_a_laundered_score_and_ranking(bm25_run: Path) -> None:
    """Rows edited and the rows hash and summary rewritten to match: every re-reading check
    passes; re-ranking the questions catches a changed score and a changed order."""
    pristine = {p: p.read_bytes() for p in (bm25_run, sidecar_path(bm25_run),
                                            summary_path(bm25_run))}
    name = V.rerun_name(N_QUESTIONS, 3)
    rows = _rows(bm25_run)
    # the first question whose second score is clear of the third: lowered by half the gap
    # (order kept), well over the tolerance
    k = next(i for i, r in enumerate(rows) if r["scores"][1] - r["scores"][2] > 1e-2)
    rows[k]["scores"][1] -= (rows[k]["scores"][1] - rows[k]["scores"][2]) / 2
    _trace_scores(rows[k])
    _write_rows(bm25_run, rows)
    _launder(bm25_run)
    assert V.verify(bm25_run, FIXTURE).verified  # re-reading cannot tell
    detail = _failed(V.verify(bm25_run, FIXTURE, rerun=N_QUESTIONS, rerun_seed=3))[name]
    assert detail.startswith(f"question {rows[k]['question_id']!r}: rank 2 (")
    assert "recorded score" in detail and "> tolerance" in detail

    for p, data in pristine.items():
        p.write_bytes(data)
    rows = _rows(bm25_run)
    _swap_top_two(rows[8])
    _write_rows(bm25_run, rows)
    _launder(bm25_run)
    assert V.verify(bm25_run, FIXTURE).verified
    rep = V.verify(bm25_run, FIXTURE, rerun=N_QUESTIONS, rerun_seed=3)
    assert rep.exit_code == 1 and list(_failed(rep)) == [name]
    ids = rows[8]["ranked_session_ids"]
    assert _failed(rep)[name].startswith(f"question {rows[8]['question_id']!r}: rank 1: "
                                         f"recorded {ids[0]!r}")
    assert f"rerun {ids[1]!r}" in _failed(rep)[name]


# --------------------------------------------------------------------------- (c) the cache
@pytest.fixture
def model_copy(tiny_embedding_model: str, tmp_path: Path) -> Path:
    """A private copy of the tiny embedding model (tests may change its files)."""
    dst = tmp_path / "model"
    shutil.copytree(tiny_embedding_model, dst)
    return dst


def _dense(model: Path, cache: Path) -> RunConfig:
    return _cfg(retriever="dense", embedding_model=str(model),
                embedding_backend="sentence_transformers", cache_dir=str(cache))


def _overwrite_vectors(cache: Path, *, fix_checksums: bool) -> int:
    """Replace every cached vector by a random unit vector (optionally with a matching
    checksum, which is what someone who knows the format can do)."""
    from engram_eval.retrieval.cache import _vector_sum

    db = sqlite3.connect(str(cache / CACHE_FILE))
    rng = np.random.default_rng(0)
    rows = db.execute("SELECT k, dim FROM vec").fetchall()
    for k, dim in rows:
        v = rng.standard_normal(dim).astype(np.float32)
        blob = (v / np.linalg.norm(v)).astype(np.float32).tobytes()
        if fix_checksums:
            db.execute("UPDATE vec SET v = ?, sum = ? WHERE k = ?", (blob, _vector_sum(dim, blob), k))
        else:
            db.execute("UPDATE vec SET v = ? WHERE k = ?", (blob, k))
    db.commit()
    db.close()
    return len(rows)


def test_overwritten_cache_vectors_are_caught(model_copy: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "cache"
    first = tmp_path / "first.jsonl"
    _run(_dense(model_copy, cache), first)
    assert V.verify(first, FIXTURE).verified
    assert _overwrite_vectors(cache, fix_checksums=False) > 0

    # an overwritten value: one clear error naming the cache file, the key and the way out
    second = tmp_path / "second.jsonl"
    argv = ["run", str(FIXTURE), "--retriever", "dense", "--embedding-model", str(model_copy),
            "--embedding-backend", "sentence_transformers", "--cache-dir", str(cache),
            "--no-rerank", "--output", str(second), "--no-progress"]
    assert cli.main(argv) == 2
    err = [x for x in capsys.readouterr().err.splitlines() if "error" in x]  # not the
    assert len(err) == 1 and str(cache / CACHE_FILE) in err[0], err      # loaders' bars
    assert err[0].startswith("engram-eval run: error: ")
    assert "does not match its checksum" in err[0] and "--no-use-cache" in err[0]
    assert f"delete the cache directory {cache}" in err[0]
    with pytest.raises(CacheError) as e:
        _run(_dense(model_copy, cache), tmp_path / "third.jsonl")
    assert e.value.path == str(cache / CACHE_FILE) and e.value.key in str(e.value)
    # --no-use-cache goes around it, and gives the first run's rankings
    fourth = tmp_path / "fourth.jsonl"
    assert cli.main([*argv[:-3], "--output", str(fourth), "--no-progress",
                     "--no-use-cache"]) == 0
    assert [r["ranked_session_ids"] for r in _rows(fourth)] == \
        [r["ranked_session_ids"] for r in _rows(first)]


def test_consistently_overwritten_cache_is_caught_by_rerun(model_copy: Path,
                                                           tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    _run(_dense(model_copy, cache), first)
    _overwrite_vectors(cache, fix_checksums=True)
    _run(_dense(model_copy, cache), second)  # served the forged vectors
    a, b = _rows(first), _rows(second)
    assert [r["ranked_session_ids"] for r in a] != [r["ranked_session_ids"] for r in b]
    fp = [json.loads(sidecar_path(x).read_text())["fingerprint"] for x in (first, second)]
    assert fp[0] == fp[1]
    assert V.verify(second, FIXTURE).verified  # re-reading the rows cannot tell
    rep = V.verify(second, FIXTURE, rerun=N_QUESTIONS, rerun_seed=0)
    detail = _failed(rep)[V.rerun_name(N_QUESTIONS, 0)]
    assert detail.startswith("question '") and "rank " in detail
    rep = V.verify(first, FIXTURE, rerun=N_QUESTIONS, rerun_seed=0)
    assert rep.verified, rep.format()  # the honest run re-ranks identically, cache off


def test_rerun_refuses_other_model_files(model_copy: Path, tmp_path: Path) -> None:
    out = tmp_path / "dense.jsonl"
    _run(_dense(model_copy, tmp_path / "cache"), out)
    cfg = model_copy / "config.json"
    cfg.write_text(cfg.read_text() + "\n")  # same model, other bytes
    rep = V.verify(out, FIXTURE, rerun=2, rerun_seed=0)
    detail = _failed(rep)[V.rerun_name(2, 0)]
    assert detail.startswith("refusing to re-run: the model files that resolve now are not "
                             "the recorded ones")
    assert "config.json" in detail


def test_a_cache_from_before_checksums_is_left_alone(tmp_path: Path) -> None:
    old = tmp_path / "cache.sqlite3"
    db = sqlite3.connect(str(old))
    db.execute("CREATE TABLE vec (k TEXT PRIMARY KEY, dim INTEGER, v BLOB)")
    db.execute("INSERT INTO vec VALUES ('x', 4, ?)", (np.zeros(4, np.float32).tobytes(),))
    db.commit()
    db.close()
    before = old.read_bytes()
    cache = VectorCache(tmp_path)
    assert cache.get_vectors(["x"]) == {}  # not read: no checksum to trust
    cache.put_vectors({"x": np.ones(4, dtype=np.float32)})
    np.testing.assert_array_equal(cache.get_vectors(["x"])["x"], np.ones(4, np.float32))
    cache.close()
    assert old.read_bytes() == before


def test_an_overwritten_score_is_caught(tmp_path: Path) -> None:
    cache = VectorCache(tmp_path)
    cache.put_scores({"a": 0.25, "b": 0.5})
    db = sqlite3.connect(str(tmp_path / CACHE_FILE))
    db.execute("UPDATE score SET v = 0.9 WHERE k = 'b'")
    db.commit()
    db.close()
    assert cache.get_scores(["a"]) == {"a": 0.25}
    with pytest.raises(CacheError, match=r"cache entry b \(score\) does not match its "
                       r"checksum.*--no-use-cache"):
        cache.get_scores(["a", "b"])
    cache.close()


def test_rerun_rebuilds_a_run_that_predates_a_field_with_its_legacy_value(
        bm25_run: Path) -> None:
    """A sidecar recorded before ``people_overrides`` existed is re-executed with no
    overrides (the behaviour it was made with), not with today's people defaults."""
    from engram_eval.retrieval.settings import LEGACY_VALUES, PEOPLE_DEFAULTS, RetrievalSettings

    assert RetrievalSettings().people_overrides == PEOPLE_DEFAULTS != {}
    meta = json.loads(sidecar_path(bm25_run).read_text())
    described = json.loads(json.dumps(meta["retriever"]))
    for group in described.values():  # an old sidecar describes no such field either
        if isinstance(group, dict):
            for k in (*LEGACY_VALUES, "stemmer_library", "stopwords_sha256"):
                group.pop(k, None)  # + what the analyser fields add to the description
    old = dict(meta, retriever=described,
               config={k: v for k, v in meta["config"].items() if k not in LEGACY_VALUES})
    assert V.rerun_retriever(old).settings.people_overrides == {}
    assert V.rerun_retriever(old).settings.rerank_prior == "rank"  # the rule before the field
    assert V.rerun_retriever(meta).settings.people_overrides == meta["config"]["people_overrides"]


X86_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu sse4_2 avx f16c avx2 fma

processor\t: 1
model name\t: another block, not read
flags\t\t: avx512_vnni
"""


def test_cpu_records_the_vector_instructions_of_the_first_processor(tmp_path: Path) -> None:
    from engram_eval.provenance.sidecar import VECTOR_CPU_FLAGS, cpu

    info = tmp_path / "cpuinfo"
    info.write_text(X86_CPUINFO)
    assert cpu(info) == {"model": "AMD EPYC", "vector_flags": ["fma", "avx2"]}
    info.write_text("model name\t: x\nflags\t\t: " + " ".join(reversed(VECTOR_CPU_FLAGS)) + "\n")
    assert cpu(info)["vector_flags"] == list(VECTOR_CPU_FLAGS)  # in the constant's order
    assert cpu(tmp_path / "absent")["vector_flags"] is None  # unknown, not "none"


def test_a_failed_int8_rerun_names_both_cpus_vector_instructions(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from engram_eval.provenance import sidecar as S

    monkeypatch.setattr(S, "cpu", lambda: {"model": "here", "vector_flags": ["avx2"]})
    int8 = {"rerank": True, "reranker_backend": "onnx", "reranker_precision": "int8"}
    unrecorded = {"config": int8, "environment": {}}
    note = V._int8_cpu_note(unrecorded)
    assert "the run's not recorded, this CPU's avx2;" in note and "int8 ONNX" in note
    other = {"config": int8, "environment": {"cpu": {"vector_flags": ["avx2", "avx512_vnni"]}}}
    assert "the run's avx2, avx512_vnni, this CPU's avx2;" in V._int8_cpu_note(other)
    same = {"config": int8, "environment": {"cpu": {"vector_flags": ["avx2"]}}}
    assert V._int8_cpu_note(same) == ""
    for precision in ("fp32", "fp16"):
        assert V._int8_cpu_note({"config": {**int8, "reranker_precision": precision}}) == ""
    assert V._int8_cpu_note({"config": {**int8, "rerank": False}}) == ""
