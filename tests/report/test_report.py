"""``engram-eval report``: the page's content, escaping, size and the CLI, without a browser
(tests/report/test_report_browser.py opens the same pages in headless Chromium).

The helpers at the top (:func:`make_runs`, :func:`hostile_dataset`, :func:`build`) are
shared with the browser tests."""

from __future__ import annotations

import json
import re
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from engram_eval.cli import main as cli
from engram_eval.data.records import Question, Session, Turn
from engram_eval.report import page as P
from engram_eval.report.assets import FORBIDDEN_IN_SCRIPT, SCRIPT
from engram_eval.report.build import build_report
from engram_eval.report.questions import question_entries
from engram_eval.runs.reader import read_run

ROOT = Path(__file__).resolve().parents[2]
LME = ROOT / "fixtures" / "longmemeval_tiny.json"
LOCOMO = ROOT / "fixtures" / "locomo_tiny.json"

#: Strings a dataset may hold that must show as text. The ones that would act set
#: ``data-pwned`` on <html> (or open a dialog), which the browser tests look for.
PWN = "document.documentElement.setAttribute('data-pwned','1')"
HOSTILE_QUESTION = (f'<script>alert(1)</script><script>{PWN}</script> What breed is the '
                    'puppy I adopted? </textarea></title></style> "onload="alert(2)" & '
                    "&amp; &lt;b&gt; <!-- ]]> \u2028 end")
HOSTILE_TURN = (f'</textarea><img src=x onerror="{PWN}"><svg onload=alert(3)> '
                "</script><script>alert(4)</script> I adopted a Border collie puppy named "
                'Biscuit. "onload="alert(5)')
HOSTILE_ID = "lme_<b>h1</b>&\"'#%/?"
HOSTILE_TYPE = f"single-session-user<img src=x onerror=\"{PWN}\">"
HOSTILE_SESSION = "answer_<i>x</i>\"onload=\"alert(6)"
HOSTILE_DATE = "</script><script>alert(7)</script>"
HOSTILE_FILE = "h<i>\"'&.json"


def run_tiny(data: Path, out: Path, retriever: str) -> Path:
    from engram_eval.runs import runner
    from engram_eval.runs.config import RunConfig

    runner.run(RunConfig(retriever=retriever, rerank=False, progress=False), data, out,
               echo=lambda m: None)
    return out


def hostile_dataset(directory: Path) -> Path:
    """The first three questions of the tiny LongMemEval fixture with markup and script in
    the question, its id and type, a gold session's id, a date and a turn's text."""
    data = json.loads(LME.read_text())[:3]
    q = data[0]
    gold = q["answer_session_ids"][0]
    q["question"] = HOSTILE_QUESTION
    q["question_id"] = HOSTILE_ID
    q["question_type"] = HOSTILE_TYPE
    i = q["haystack_session_ids"].index(gold)
    q["haystack_session_ids"][i] = HOSTILE_SESSION
    q["answer_session_ids"] = [HOSTILE_SESSION]
    q["haystack_dates"][i] = HOSTILE_DATE
    turn = next(t for t in q["haystack_sessions"][i] if t["role"] == "user")
    turn["content"] = HOSTILE_TURN
    turn["has_answer"] = True
    path = directory / HOSTILE_FILE
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def make_runs(directory: Path) -> dict[str, Path]:
    """Finished runs on the bundled fixtures and the hostile one (bm25 and flat-bm25, no
    rerank: seconds)."""
    directory.mkdir(parents=True, exist_ok=True)
    hostile = hostile_dataset(directory)
    return {
        "lme": run_tiny(LME, directory / "lme_bm25.jsonl", "bm25"),
        "lme_flat": run_tiny(LME, directory / "lme_flat.jsonl", "flat-bm25"),
        "locomo": run_tiny(LOCOMO, directory / "locomo_bm25.jsonl", "bm25"),
        "hostile": run_tiny(hostile, directory / "hostile.jsonl", "bm25"),
        "hostile_data": hostile,
    }


def build(runs: dict[str, Path], directory: Path) -> dict[str, Path]:
    """The reports the tests open, written by the CLI."""
    out = {"compare": directory / "compare.html", "locomo": directory / "locomo.html",
           "hostile": directory / "hostile.html", "nodata": directory / "nodata.html"}
    args = {
        "compare": [str(runs["lme"]), "--against", str(runs["lme_flat"]), "--dataset", str(LME),
                    "--bootstrap", "500"],
        "locomo": [str(runs["locomo"]), "--dataset", str(LOCOMO)],
        "hostile": [str(runs["hostile"]), "--dataset", str(runs["hostile_data"])],
        "nodata": [str(runs["lme"])],
    }
    for name, a in args.items():
        assert cli.main(["report", *a, "--output", str(out[name])]) == 0
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_runs(tmp_path_factory.mktemp("report-runs"))


@pytest.fixture(scope="module")
def reports(runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build(runs, tmp_path_factory.mktemp("reports"))


# --------------------------------------------------------------------------- page parsing
class Page(HTMLParser):
    """Every start tag with its attributes, the text of each element with an id, and the
    raw content of each <script>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.scripts: list[tuple[dict[str, str], str]] = []
        self._script: dict[str, str] | None = None
        self._buf: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.append((tag, a))
        if tag == "script":
            self._script, self._buf = a, []

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._script is not None:
            self.scripts.append((self._script, "".join(self._buf)))
            self._script = None

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            self._buf.append(data)


def parse(path: Path) -> Page:
    p = Page()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def island(page: Page) -> dict[str, Any]:
    [(_, text)] = [(a, t) for a, t in page.scripts if a.get("id") == "report-data"]
    return json.loads(text)


def metric_cells(page: Page) -> list[dict[str, str]]:
    """Each metric cell of the metrics tables as {protocol, group, row, metric, value} (the
    cell's table and row found by walking the start tags in order)."""
    out, protocol, group, row = [], "", "", ""
    for tag, a in page.tags:
        if tag == "table":
            protocol = a.get("data-protocol", "") if "metrics" in a.get("class", "") else ""
        elif tag == "tr" and protocol:
            group, row = a.get("data-group", ""), a.get("data-row", "")
        elif tag == "td" and protocol and "data-metric" in a:
            out.append({"protocol": protocol, "group": group, "row": row,
                        "metric": a["data-metric"], "value": a.get("data-value")})
    return out


def expected_cells(summary_path: Path, rows: list[dict[str, Any]]) -> dict[tuple, Any]:
    """What each metric cell must hold: the summary's numbers; per type, the random baseline
    summarize_rows gives that type's rows."""
    from engram_eval.report.build import SHOWN_METRICS
    from engram_eval.scoring.summary import summarize_rows

    s = json.loads(summary_path.read_text())
    want: dict[tuple, Any] = {}
    for p, ps in s["protocols"].items():
        for m in SHOWN_METRICS:
            want[(p, "overall", "overall", m)] = ps["metrics"].get(m)
            want[(p, "overall", "baseline", m)] = ps["random_baseline"].get(m)
            for t, tv in ps["by_type"].items():
                want[(p, t, "type", m)] = tv["metrics"].get(m)
                rt = [r for r in rows if r["question_type"] == t]
                rb = summarize_rows(rt, [p])["protocols"][p]["random_baseline"]
                want[(p, t, "baseline", m)] = rb.get(m)
    return want


def check_metrics_equal_summary(cells: list[dict[str, Any]], run: Path) -> int:
    """Every metric cell equals the summary (value None: the cell says '–'); returns the
    number of cells checked."""
    rows = read_run(run).rows
    want = expected_cells(Path(str(run) + ".summary.json"), rows)
    got = {(c["protocol"], c["group"], c["row"], c["metric"]):
           (None if c["value"] in (None, "") else json.loads(c["value"])) for c in cells}
    assert set(got) == set(want)
    for key, v in want.items():
        assert got[key] == v, key
    return len(got)


# --------------------------------------------------------------------------- tests
def test_the_metrics_tables_are_the_summary(reports: dict[str, Path],
                                            runs: dict[str, Path]) -> None:
    for name, run in (("compare", runs["lme"]), ("locomo", runs["locomo"])):
        cells = metric_cells(parse(reports[name]))
        n = check_metrics_equal_summary(cells, run)
        protocols = json.loads(Path(str(run) + ".summary.json").read_text())["protocols"]
        assert {c["protocol"] for c in cells} == set(protocols)  # every denominator scored
        assert n > 50


def test_the_page_is_self_contained(reports: dict[str, Path]) -> None:
    for path in reports.values():
        text = path.read_text(encoding="utf-8")
        page = parse(path)
        for tag, a in page.tags:
            assert tag not in ("link", "iframe", "img", "object", "embed", "base")
            assert not a.get("src"), (tag, a)
            href = a.get("href")
            assert href is None or href.startswith("#"), (tag, a)
        assert not re.search(r"@import|url\(|https?://", P.CSS)
        assert [a.get("type") for a, _ in page.scripts] == ["application/json", None]
        csp = next(a["content"] for t, a in page.tags
                   if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
        assert "default-src 'none'" in csp and "unsafe" not in csp
        head = text.split("<body>")[0]
        assert "http://" not in head and "https://" not in head


def test_the_script_never_writes_markup() -> None:
    for sink in FORBIDDEN_IN_SCRIPT:
        assert sink not in SCRIPT, sink


def test_the_json_island_escapes_markup() -> None:
    obj = {"a": "</script><!-- <b>&amp;</b> \u2028", "b": ["\ud800 lone"]}
    text = P.json_island(obj)
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == obj
    page = P.json_island(obj).encode("utf-8", errors="replace")  # as the page is written
    assert json.loads(page.decode("utf-8"))["a"] == obj["a"]


def test_hostile_strings_never_reach_the_markup(reports: dict[str, Path],
                                                runs: dict[str, Path]) -> None:
    path = reports["hostile"]
    text = path.read_text(encoding="utf-8")
    for s in (HOSTILE_QUESTION, HOSTILE_TURN, HOSTILE_ID, HOSTILE_TYPE, HOSTILE_SESSION,
              HOSTILE_DATE, "<script>alert", "</textarea>", "<img", "<svg onload", "<i>"):
        assert s not in text, s
    page = parse(path)
    assert [t for t, _ in page.tags].count("script") == 2
    assert not any(k.startswith("on") for _, a in page.tags for k in a)
    data = island(page)
    [q] = [q for q in data["questions"] if q["id"] == HOSTILE_ID]
    assert q["text"] == HOSTILE_QUESTION and q["type"] == HOSTILE_TYPE
    assert q["gold"] == [HOSTILE_SESSION]
    [s] = [s for s in q["sessions"] if s["id"] == HOSTILE_SESSION]
    assert s["gold"] and s["date"] == HOSTILE_DATE
    assert HOSTILE_TURN in (s["turn"]["text"], (s.get("evidence") or {}).get("text"))
    # the type is an <option> value and a table header: escaped, and read back intact
    assert ("option", {"value": HOSTILE_TYPE}) in page.tags
    assert HOSTILE_FILE not in text and P.esc(HOSTILE_FILE) in text  # the dataset's name


def test_outcomes_flips_and_misses_are_the_package_s(reports: dict[str, Path],
                                                     runs: dict[str, Path]) -> None:
    from engram_eval.analysis.analyze import analyze_rows
    from engram_eval.analysis.compare import compare_runs

    data = island(parse(reports["compare"]))
    rows = read_run(runs["lme"]).rows
    rep = analyze_rows(rows, k=5, protocol="answerable")
    missed = {q["question_id"]: q["missed"] for q in rep["questions"]}
    outcome = {q["id"]: q["outcome"] for q in data["questions"]}
    assert {i for i, o in outcome.items() if o == "miss"} == set(missed)
    assert sum(o == "unscored" for o in outcome.values()) == sum(
        r["metrics"].get("answerable") is None for r in rows)
    for q in data["questions"]:
        assert [m["class"] for m in q["misses"]] == [m["class"] for m in missed.get(q["id"], [])]
    cmp = compare_runs(read_run(runs["lme_flat"]), read_run(runs["lme"]), protocol="answerable",
                       n_boot=500)
    flips = cmp["flips"]["recall_all@5"]
    assert {q["id"] for q in data["questions"] if q["flip"] == "gained"} == set(flips["gained"])
    assert {q["id"] for q in data["questions"] if q["flip"] == "lost"} == set(flips["lost"])
    # the comparison table's deltas are compare's, unrounded
    page = parse(reports["compare"])
    deltas = {(a["data-group"], a["data-metric"]): json.loads(a["data-value"])
              for tag, a in page.tags
              if tag == "td" and "data-group" in a and "data-value" in a}
    assert len(deltas) == len(cmp["groups"]) * 5  # every group, compare's 5 headline metrics
    for (g, m), d in deltas.items():
        assert d == cmp["groups"][g]["metrics"][m]["delta"]


def test_sessions_traces_and_turns(reports: dict[str, Path]) -> None:
    from engram_eval.data.datasets import load_questions

    data = island(parse(reports["compare"]))
    _, qs = load_questions(LME)
    by_id = {q.question_id: q for q in qs}
    for q in data["questions"]:
        top = [s for s in q["sessions"] if not s.get("below_depth")]
        assert [s["rank"] for s in top] == list(range(1, len(top) + 1))
        assert len(top) == min(10, q["n_sessions"])
        for s in q["sessions"]:
            assert s["gold"] == (s["id"] in (q["gold"] or []))
            assert len(s["signals"]) == len(q["signals"]) == 4  # bm25: user, assistant, turn, feedback
            assert "fused_rank" in s and "temporal_rank" in s
            session = next(x for x in by_id[q["id"]].sessions if x.session_id == s["id"])
            assert s["date"] == session.date
            assert s["turn"]["text"] in [t.content for t in session.turns] or \
                s["turn"]["text"].endswith("more characters]")
        # gold below the listed depth is listed after it
        for g, rank in q["gold_ranks"].items():
            assert rank is None or any(s["id"] == g for s in q["sessions"])
    assert data["has_text"] and data["has_against"]


def test_without_the_dataset_the_page_says_not_verified(reports: dict[str, Path]) -> None:
    text = reports["nodata"].read_text(encoding="utf-8")
    assert "not verified (no --dataset given" in text
    data = island(parse(reports["nodata"]))
    assert all(q["text"] is None and "turn" not in s
               for q in data["questions"] for s in q["sessions"])
    assert not data["has_text"] and not data["has_against"]


def test_verify_runs_with_the_dataset(runs: dict[str, Path]) -> None:
    doc = build_report(runs["lme"], dataset=LME)
    v = doc["verify"]
    assert v["ran"] and v["checks"]
    names = [c[0] for c in v["checks"]]
    assert "dataset sha256" in names and "gold re-derived from the dataset" in names
    # a dataset other than the run's: verify fails its hash check and no text is shown
    doc = build_report(runs["lme"], dataset=LOCOMO)
    assert not doc["verify"]["verified"] and not doc["dataset_given"]["matches"]
    assert all(q["text"] is None for q in doc["questions"])


def test_each_run_verifies_at_its_own_commit(runs: dict[str, Path],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """--sources-at goes to the run's verify and --against-sources-at (default: the same) to
    the compared run's: two runs published by different commits each verify at theirs."""
    import engram_eval.runs.verify as V

    seen: dict[str, str | None] = {}
    real = V.verify

    def spy(path: Any, dataset: Any, *, sources_at: str | None = None, **kw: Any) -> Any:
        seen[Path(path).name] = sources_at
        return real(path, dataset, **kw)

    monkeypatch.setattr(V, "verify", spy)
    build_report(runs["lme"], against=runs["lme_flat"], dataset=LME, n_boot=50,
                 sources_at="c1", against_sources_at="c2")
    assert seen == {"lme_bm25.jsonl": "c1", "lme_flat.jsonl": "c2"}
    doc = build_report(runs["lme"], against=runs["lme_flat"], dataset=LME, n_boot=50,
                       sources_at="c1")
    assert seen == {"lme_bm25.jsonl": "c1", "lme_flat.jsonl": "c1"}
    assert doc["verify_against"]["sources_at"] == "c1"


def test_a_note_shows_under_the_title_as_text(runs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "note.html"
    assert cli.main(["report", str(runs["lme"]), "--note", HOSTILE_QUESTION,
                     "--output", str(out), "--no-sidecar"]) == 0
    text = out.read_text(encoding="utf-8")
    assert f'<p id="note">{P.esc(HOSTILE_QUESTION)}</p>' in text
    assert HOSTILE_QUESTION not in text and "<script>alert" not in text
    assert [t for t, _ in parse(out).tags].count("script") == 2
    assert "note" not in build_report(runs["lme"])


def test_header_says_what_was_run(runs: dict[str, Path]) -> None:
    doc = build_report(runs["lme"])
    r = doc["run"]
    assert r["retriever"] == "bm25" and r["dataset"]["name"] == LME.name
    assert r["split"] == "full file" and r["ledger"] is None
    assert {d["setting"]: d["value"] for d in r["settings"]} == {"rerank": False}
    assert r["version"] and r["sources"]["n"] > 10 and len(r["fingerprint"]) == 64
    assert r["protocols"] == ["answerable", "official", "official_nonempty_gold", "all"]


def test_trace_depth_bounds_the_page(runs: dict[str, Path]) -> None:
    full = build_report(runs["lme"], dataset=LME, depth=0)
    two = build_report(runs["lme"], dataset=LME, depth=2)
    for q in two["questions"]:
        listed = [s for s in q["sessions"] if not s.get("below_depth")]
        below = [s for s in q["sessions"] if s.get("below_depth")]
        assert len(listed) == 2 and all(s["gold"] and s["rank"] > 2 for s in below)
    assert len(P.json_island(two["questions"])) < len(P.json_island(full["questions"])) / 2


def test_rerank_stages_and_the_cross_encoder_s_turn() -> None:
    turns = (Turn("user", "nothing here", 0), Turn("assistant", "sure", 1),
             Turn("user", "my puppy is a border collie", 2, has_answer=True))
    q = Question("q1", "t", "What breed is my puppy?", "collie", "2023/05/28 (Sun) 10:05",
                 (Session("s1", "2023/05/01 (Mon) 10:00", turns),
                  Session("s2", "2023/05/02 (Tue) 10:00", (Turn("user", "hello", 0),))),
                 ("s1",))
    trace = {"bm25_user": 2.5, "bm25_user_rank": 1, "fused": 0.9, "fused_rank": 1,
             "temporal": 1.0, "in_window": None, "temporal_rank": 1, "reranked": True,
             "rerank_rank": 2, "raw_score": 1.2345678912, "rerank_turn": 0,
             "base_raw_score": 1.2345678912, "final_score": 0.5, "corpus_index": 0,
             "moved_by_coverage": True, "matched_phrase": "<b>puppy</b>"}
    row = {"question_id": "q1", "question_type": "t", "ranked_session_ids": ["s2", "s1"],
           "scores": [0.7, 0.5], "gold": {"answerable": ["s1"]},
           "metrics": {"answerable": {"recall_all@1": 0.0, "recall_all@5": 1.0}},
           "trace": {"question": {"signals": ["bm25_user"]},
                     "sessions": [{"bm25_user": 1.0, "bm25_user_rank": 2}, trace]}}
    [e] = question_entries([row], protocol="answerable", k=5, depth=1,
                           questions={"q1": q}, metric_names=["recall_all@5"])
    assert e["outcome"] == "hit" and e["gold_ranks"] == {"s1": 2}
    s2, s1 = e["sessions"]
    assert not s2["gold"] and s2["turn"]["text"] == "hello"
    assert s1["below_depth"] and s1["gold"] and s1["rank"] == 2
    assert s1["signals"] == [[2.5, 1]] and s1["reranked"] and s1["rerank_rank"] == 2
    assert s1["raw_score"] == 1.23457 and s1["moved_by_coverage"]
    assert s1["turn"]["index"] == 0 and "cross-encoder" in s1["turn"]["how"]
    assert s1["evidence"]["index"] == 2  # the evidence turn, since it is not the best turn
    assert "matched_phrase" in s1["other"]
    # without a traced rerank turn: the user turn sharing the most question words
    del trace["rerank_turn"]
    [e] = question_entries([row], protocol="answerable", k=5, depth=2, questions={"q1": q})
    assert e["sessions"][1]["turn"]["index"] == 2 and "evidence" not in e["sessions"][1]
    # a run written with --trace-sessions 1: the gold session below is listed, untraced
    row["trace"]["sessions"] = row["trace"]["sessions"][:1]
    [e] = question_entries([row], protocol="answerable", k=5, depth=1, questions={"q1": q})
    assert e["traced"] == 1 and e["sessions"][1]["untraced"] and e["sessions"][1]["gold"]


def test_cli_refuses_to_overwrite_and_writes_a_sidecar(runs: dict[str, Path],
                                                       tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    assert cli.main(["report", str(runs["lme"]), "--output", str(out)]) == 0
    side = json.loads(Path(str(out) + ".metadata.json").read_text())
    assert side["generator"]["path"] == "engram_eval/report/build.py"
    assert [i["rows_sha256"] for i in side["inputs"]] == [read_run(runs["lme"]).rows_sha256]
    assert cli.main(["report", str(runs["lme"]), "--output", str(out)]) == 2
    assert cli.main(["report", str(runs["lme"]), "--against", str(runs["locomo"]),
                     "--output", str(tmp_path / "x.html")]) == 2  # other dataset: refused
    assert not (tmp_path / "x.html").exists()


def test_a_500_question_report_is_small_and_fast(runs: dict[str, Path], tmp_path: Path) -> None:
    """504 questions: the tiny bm25 run's rows 42 times over (new ids), its dataset likewise
    with every turn 1,500 characters long; the report with the dataset (turn texts) at the
    default depth. (The rows are copied rather than ranked again, to keep the test fast: a
    summary names the copied dataset's sha256, so the page shows its texts.)"""
    from engram_eval.io import sha256_file
    from engram_eval.scoring.summary import build_summary

    data = json.loads(LME.read_text())
    rows = read_run(runs["lme"]).rows
    big, big_rows = [], []
    for c in range(42):
        for q in data:
            q2 = json.loads(json.dumps(q))
            q2["question_id"] = f"{q['question_id']}_c{c}"
            for sess in q2["haystack_sessions"]:
                for t in sess:
                    t["content"] = (t["content"] + " ") * (1 + 1500 // max(1, len(t["content"])))
            big.append(q2)
        big_rows += [{**r, "question_id": f"{r['question_id']}_c{c}"} for r in rows]
    path = tmp_path / "big.json"
    path.write_text(json.dumps(big))
    run = tmp_path / "big.jsonl"
    run.write_text("".join(json.dumps(r) + "\n" for r in big_rows))
    summary = build_summary(big_rows, list(big_rows[0]["metrics"]), fingerprint="0" * 64,
                            dataset=path.name, dataset_sha256=sha256_file(path),
                            retriever="bm25", rows_sha256=sha256_file(run))
    Path(str(run) + ".summary.json").write_text(json.dumps(summary))
    t0 = time.perf_counter()
    doc = build_report(run, dataset=path, n_boot=1000)
    page = P.render(doc).encode("utf-8")
    seconds = time.perf_counter() - t0
    assert len(doc["questions"]) == 504 and doc["dataset_given"]["matches"]
    assert all(s.get("turn") for q in doc["questions"] for s in q["sessions"])
    assert len(page) < 10_000_000, len(page)
    assert seconds < 30, seconds  # about 2 s on a quiet 2-core machine; generous under load
