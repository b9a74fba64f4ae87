"""``engram-eval report`` pages opened in a real browser: headless Chromium driven over the
Chrome DevTools Protocol, with the standard library only.

How: Chromium starts with ``--remote-debugging-pipe``, which speaks CDP over file
descriptors 3 (commands in) and 4 (replies and events out), one NUL-terminated JSON message
each; ``bash`` maps two of our pipes onto those numbers (``exec chromium ... 3<&R 4>&W``).
:class:`Browser` opens the page from disk (``file://``), records every console message,
uncaught exception, log entry, dialog and network request, evaluates expressions, types
with ``Input.insertText`` and clicks with real mouse events at an element's centre, and
takes a full-page screenshot (``Page.captureScreenshot``).

Every test skips, saying why, where Chromium is absent: Debian's ``chromium`` package
(``/usr/bin/chromium``; ``ENGRAM_EVAL_CHROMIUM`` names another binary). ``.ci/run``
installs it when it can. ``ENGRAM_EVAL_REPORT_SCREENSHOTS=DIR`` keeps the screenshots.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from test_report import (
    HOSTILE_DATE,
    HOSTILE_FILE,
    HOSTILE_ID,
    HOSTILE_QUESTION,
    HOSTILE_SESSION,
    HOSTILE_TURN,
    HOSTILE_TYPE,
    LME,
    build,
    check_metrics_equal_summary,
    make_runs,
)

from engram_eval.runs.reader import read_run


def chromium_binary() -> str | None:
    env = os.environ.get("ENGRAM_EVAL_CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None


CHROMIUM = chromium_binary()
BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or BASH is None,
    reason="headless Chromium not found: install Debian's chromium (apt-get install -y "
           "chromium; .ci/run does) or set ENGRAM_EVAL_CHROMIUM to a Chromium binary")

TIMEOUT = 60.0


class BrowserError(AssertionError):
    pass


class Browser:
    """One headless Chromium with one page, driven over CDP on a pipe (module doc)."""

    def __init__(self, binary: str, width: int = 1300, height: int = 900) -> None:
        self._dir = tempfile.mkdtemp(prefix="engram-chromium-")
        to_r, self._to_w = os.pipe()      # our commands -> Chromium's fd 3
        self._from_r, from_w = os.pipe()  # Chromium's fd 4 -> our replies
        # numbers >= 10 (close-on-exec), so that bash can map them onto 3 and 4
        a = fcntl.fcntl(to_r, fcntl.F_DUPFD_CLOEXEC, 10)
        b = fcntl.fcntl(from_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(to_r)
        os.close(from_w)
        args = [binary, "--headless", "--no-sandbox", "--disable-gpu",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", f"--user-data-dir={self._dir}",
                "--remote-debugging-pipe", f"--window-size={width},{height}", "about:blank"]
        self._log = open(Path(self._dir) / "stderr.txt", "wb")  # closed in close()
        self._proc = subprocess.Popen(
            [str(BASH), "-c", f'exec "$@" 3<&{a} 4>&{b} {a}<&- {b}>&-', "bash", *args],
            pass_fds=(a, b), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=self._log)
        os.close(a)
        os.close(b)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []
        self.session: str | None = None
        self.url = ""

    # -- protocol ------------------------------------------------------------------------------
    def send(self, method: str, params: dict[str, Any] | None = None, *,
             browser: bool = False) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if self.session and not browser:
            msg["sessionId"] = self.session
        os.write(self._to_w, json.dumps(msg).encode() + b"\0")
        reply = self._until(lambda m: m.get("id") == self._id, f"reply to {method}")
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def _until(self, done: Any, what: str, timeout: float = TIMEOUT) -> dict[str, Any]:
        end = time.monotonic() + timeout
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "method" in msg:
                    self.events.append(msg)
                    if msg["method"] == "Page.javascriptDialogOpening":  # never left open
                        os.write(self._to_w, json.dumps({
                            "id": 0, "sessionId": msg.get("sessionId"),
                            "method": "Page.handleJavaScriptDialog",
                            "params": {"accept": False}}).encode() + b"\0")
                if done(msg):
                    return msg
            left = end - time.monotonic()
            if left <= 0:
                raise BrowserError(f"Chromium: no {what} within {timeout} s")
            ready, _, _ = select.select([self._from_r], [], [], left)
            if ready:
                chunk = os.read(self._from_r, 1 << 20)
                if not chunk:
                    raise BrowserError(f"Chromium closed the pipe waiting for {what}: "
                                       + self.stderr()[-2000:])
                self._buf += chunk

    def stderr(self) -> str:
        self._log.flush()
        return (Path(self._dir) / "stderr.txt").read_text(errors="replace")

    # -- page ----------------------------------------------------------------------------------
    def open(self, url: str) -> None:
        """A new page at ``url``, after its load event, with every recorder on."""
        target = self.send("Target.createTarget", {"url": "about:blank"}, browser=True)
        att = self.send("Target.attachToTarget", {"targetId": target["targetId"],
                                                  "flatten": True}, browser=True)
        self.session = att["sessionId"]
        for domain in ("Runtime", "Page", "Log", "Network"):
            self.send(f"{domain}.enable")
        self.send("Emulation.setDeviceMetricsOverride", {"width": 1300, "height": 900,
                                                         "deviceScaleFactor": 1,
                                                         "mobile": False})
        self.url = url
        self.send("Page.navigate", {"url": url})
        self._until(lambda m: m.get("method") == "Page.loadEventFired"
                    and m.get("sessionId") == self.session, "load event")

    def eval(self, expression: str) -> Any:
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in res:
            raise BrowserError(f"{expression}: {res['exceptionDetails']}")
        return res["result"].get("value")

    def click(self, selector: str) -> None:
        """A real left click (mouse events) at the centre of the first match."""
        box = self.eval(f"(function(){{var e=document.querySelector({json.dumps(selector)});"
                        "if(!e)return null;e.scrollIntoView({block:'center'});"
                        "var r=e.getBoundingClientRect();"
                        "return [r.left+r.width/2, r.top+r.height/2];}())")
        if box is None:
            raise BrowserError(f"no element {selector}")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": box[0], "y": box[1],
                                                   "button": "left", "clickCount": 1})

    def type(self, selector: str, text: str) -> None:
        self.eval(f"document.querySelector({json.dumps(selector)}).focus()")
        self.send("Input.insertText", {"text": text})

    def screenshot(self, path: Path) -> bytes:
        shot = self.send("Page.captureScreenshot", {"format": "png",
                                                    "captureBeyondViewport": True})
        data = base64.b64decode(shot["data"])
        path.write_bytes(data)
        keep = os.environ.get("ENGRAM_EVAL_REPORT_SCREENSHOTS")
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, Path(keep) / path.name)
        return data

    # -- what the page did -----------------------------------------------------------------------
    def errors(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions, error log entries (a blocked
        resource or a CSP violation is one)."""
        out = []
        for e in self.events:
            m, p = e["method"], e.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append(json.dumps(p["exceptionDetails"])[:500])
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert",
                                                                       "warning"):
                out.append(f"console.{p['type']}: {json.dumps(p.get('args'))[:500]}")
            elif m == "Log.entryAdded" and p["entry"].get("level") in ("error", "warning"):
                out.append(f"log: {p['entry'].get('text')}")
        return out

    def dialogs(self) -> list[str]:
        return [e["params"].get("message", "") for e in self.events
                if e["method"] == "Page.javascriptDialogOpening"]

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events
                if e["method"] == "Network.requestWillBeSent"]

    def close(self) -> None:
        try:
            if self._proc.poll() is None:
                os.write(self._to_w, json.dumps({"id": -1, "method": "Browser.close"}).encode()
                         + b"\0")
                self._proc.wait(timeout=15)
        except (OSError, subprocess.TimeoutExpired):
            self._proc.kill()
            self._proc.wait(timeout=15)
        finally:
            for fd in (self._to_w, self._from_r):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._log.close()
            shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    runs = make_runs(tmp_path_factory.mktemp("browser-runs"))
    out = build(runs, tmp_path_factory.mktemp("browser-reports"))
    out.update({f"run:{k}": v for k, v in runs.items()})
    return out


def opened(path: Path, fragment: str = "", width: int = 1300) -> Browser:
    assert CHROMIUM is not None
    b = Browser(CHROMIUM, width=width)
    try:
        b.open(path.resolve().as_uri() + fragment)
        assert b.eval("document.documentElement.getAttribute('data-ready')") == "1", \
            b.errors()
    except BaseException:
        b.close()
        raise
    return b


VISIBLE = "Array.from(document.querySelectorAll('#q-list .q')).filter(e => !e.hidden)"


def test_the_page_renders_loads_nothing_and_screenshots(reports: dict[str, Path],
                                                        tmp_path: Path) -> None:
    for name in ("compare", "locomo", "nodata"):
        with opened(reports[name]) as b:
            assert b.errors() == [], b.errors()
            assert b.dialogs() == []
            assert set(b.requests()) == {b.url}  # the page itself: no other resource
            n = b.eval("document.querySelectorAll('#q-list .q').length")
            assert n == len(read_run(reports[f"run:{'locomo' if name == 'locomo' else 'lme'}"]
                                     ).rows)
            assert b.eval("document.getElementById('q-count').textContent") == \
                f"{n} of {n} questions shown"
            png = b.screenshot(tmp_path / f"report_{name}.png")
            assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000


def test_the_metrics_table_in_the_browser_is_the_summary(reports: dict[str, Path]) -> None:
    for name, run in (("compare", "run:lme"), ("locomo", "run:locomo")):
        with opened(reports[name]) as b:
            cells = b.eval(
                "Array.from(document.querySelectorAll('table.metrics td[data-metric]'))"
                ".map(td => ({protocol: td.closest('table').dataset.protocol,"
                " group: td.parentElement.dataset.group, row: td.parentElement.dataset.row,"
                " metric: td.dataset.metric, value: td.dataset.value || null,"
                " text: td.textContent}))")
            assert check_metrics_equal_summary(cells, reports[run]) > 50
            for c in cells:  # what is shown is the value to 3 decimals
                assert c["text"] == ("–" if c["value"] is None
                                     else f"{json.loads(c['value']):.3f}")
            assert b.errors() == []


def test_filters_and_search(reports: dict[str, Path]) -> None:
    from engram_eval.analysis.compare import compare_runs

    rows = read_run(reports["run:lme"]).rows
    miss = {r["question_id"] for r in rows
            if r["metrics"].get("answerable") and r["metrics"]["answerable"]["recall_all@5"] == 0}
    assert miss and len(miss) < len(rows)
    flips = compare_runs(read_run(reports["run:lme_flat"]), read_run(reports["run:lme"]),
                         protocol="answerable", n_boot=500)["flips"]["recall_all@5"]
    with opened(reports["compare"]) as b:
        def shown() -> set[str]:
            return set(b.eval(f"{VISIBLE}.map(e => e.querySelector('.q-id').textContent)"))

        b.eval("var s = document.getElementById('q-outcome'); s.value = 'miss';"
               "s.dispatchEvent(new Event('change'))")
        assert shown() == miss
        assert b.eval(f"{VISIBLE}.every(e => e.dataset.outcome === 'miss')")
        assert b.eval("document.getElementById('q-count').dataset.shown") == str(len(miss))
        for kind in ("gained", "lost"):
            b.eval(f"var s = document.getElementById('q-outcome'); s.value = '{kind}';"
                   "s.dispatchEvent(new Event('change'))")
            assert shown() == set(flips[kind])
        b.eval("var s = document.getElementById('q-outcome'); s.value = 'hit';"
               "s.dispatchEvent(new Event('change'))")
        hits = {r["question_id"] for r in rows
                if r["metrics"].get("answerable") and
                r["metrics"]["answerable"]["recall_all@5"] == 1}
        assert shown() == hits
        # type filter, then typed search on top of it
        b.eval("var s = document.getElementById('q-outcome'); s.value = '';"
               "s.dispatchEvent(new Event('change'));"
               "var t = document.getElementById('q-type'); t.value = 'multi-session';"
               "t.dispatchEvent(new Event('change'))")
        assert shown() == {r["question_id"] for r in rows
                           if r["question_type"] == "multi-session"}
        b.eval("var t = document.getElementById('q-type'); t.value = '';"
               "t.dispatchEvent(new Event('change'))")
        target = rows[3]
        b.type("#q-search", target["question_id"])
        assert shown() == {target["question_id"]}
        assert b.errors() == []


def test_a_question_drills_down(reports: dict[str, Path]) -> None:
    from engram_eval.analysis.analyze import analyze_rows
    from engram_eval.data.datasets import load_questions

    rows = read_run(reports["run:lme"]).rows
    rep = analyze_rows(rows, k=5, protocol="answerable")
    q = rep["questions"][0]  # a question with gold outside the top 5
    i = next(n for n, r in enumerate(rows) if r["question_id"] == q["question_id"])
    _, qs = load_questions(LME)
    question = next(x for x in qs if x.question_id == q["question_id"])
    with opened(reports["compare"]) as b:
        assert b.eval(f"document.querySelector('#q-{i} .q-body')") is None  # built on demand
        b.click(f"#q-{i} .q-head")
        assert b.eval(f"document.querySelector('#q-{i} .q-head').getAttribute('aria-expanded')"
                      ) == "true"
        body = f"document.querySelector('#q-{i} .q-body')"
        assert b.eval(f"{body}.querySelector('.q-question').textContent") == question.question
        sessions = b.eval(
            f"Array.from({body}.querySelectorAll('table.sessions tbody tr[data-session]'))"
            ".map(tr => [tr.dataset.session, tr.dataset.gold, tr.cells.length,"
            " tr.cells[0].textContent])")
        turns = b.eval(
            f"Array.from({body}.querySelectorAll('table.sessions tr[data-turn-of]'))"
            ".map(tr => [tr.dataset.turnOf, tr.querySelector('.turn-text').textContent])")
        row = rows[i]
        ranked = row["ranked_session_ids"]
        gold = set(row["gold"]["answerable"])
        listed = [s for s in sessions if int(s[3]) <= 10]
        assert [s[0] for s in listed] == ranked[:10]
        assert all((s[1] == "1") == (s[0] in gold) for s in sessions)
        assert gold <= {s[0] for s in sessions}  # gold below the top 10 listed too
        texts = {s.session_id: [t.content for t in s.turns] for s in question.sessions}
        assert [t[0] for t in turns] == [s[0] for s in sessions]  # a best turn each
        assert all(t[1] in texts[t[0]] for t in turns)  # the turn's own text
        # each missed gold session's class is analyze's
        classes = b.eval(f"Array.from({body}.querySelectorAll('table.gold-table tbody tr'))"
                         ".map(tr => [tr.cells[0].textContent,"
                         " tr.querySelector('[data-class]').getAttribute('data-class')])")
        want = {m["session_id"]: m["class"] for m in q["missed"]}
        for sid, cls in classes:
            assert cls == want.get(sid, "found")
        # clicking again closes it
        b.click(f"#q-{i} .q-head")
        assert b.eval(f"{body}.hidden") is True
        assert b.errors() == []
    # a deep link opens a question
    with opened(reports["compare"], "#q=" + quote(q["question_id"], safe="")) as b:
        assert b.eval(f"document.querySelector('#q-{i} .q-head')"
                      ".getAttribute('aria-expanded')") == "true"
        assert b.errors() == []


def test_hostile_strings_show_as_text(reports: dict[str, Path], tmp_path: Path) -> None:
    with opened(reports["hostile"], "#q=" + quote(HOSTILE_ID, safe="")) as b:
        i = b.eval("Array.from(document.querySelectorAll('#q-list .q'))"
                   f".findIndex(e => e.querySelector('.q-id').textContent === {json.dumps(HOSTILE_ID)})")
        assert i >= 0
        item = f"document.getElementById('q-{i}')"
        assert b.eval(f"{item}.querySelector('.q-head').getAttribute('aria-expanded')") == "true"
        assert b.eval(f"{item}.querySelector('.q-text').textContent") == HOSTILE_QUESTION
        assert b.eval(f"{item}.querySelector('.q-question').textContent") == HOSTILE_QUESTION
        assert b.eval(f"{item}.querySelector('.q-type').textContent") == HOSTILE_TYPE
        assert b.eval(f"{item}.dataset.type") == HOSTILE_TYPE
        gold = b.eval(f"Array.from({item}.querySelectorAll('tr[data-gold=\"1\"]'))"
                      ".map(tr => [tr.dataset.session, tr.cells[1].textContent,"
                      " Array.from(tr.nextElementSibling.querySelectorAll('.turn-text'))"
                      ".map(s => s.textContent)])")
        assert gold and all(g[0] == HOSTILE_SESSION for g in gold)
        assert gold[0][1] == "\u2605 " + HOSTILE_SESSION + HOSTILE_DATE
        assert HOSTILE_TURN in gold[0][2]
        assert HOSTILE_TYPE in b.eval("Array.from(document.querySelectorAll('#q-type option'))"
                                      ".map(o => o.value)")
        assert HOSTILE_FILE in b.eval("document.body.textContent")
        # nothing acted: no dialog, no attribute set, no element a string could have made
        assert b.dialogs() == []
        assert b.eval("document.documentElement.hasAttribute('data-pwned')") is False
        assert b.eval("document.scripts.length") == 2
        assert b.eval("document.querySelectorAll('img, textarea, iframe, object, embed, i,"
                      " body style, body link').length") == 0
        assert b.eval("document.querySelectorAll('svg').length === "
                      "document.querySelectorAll('#metrics svg, #compare svg').length")
        assert b.eval("Array.from(document.querySelectorAll('*')).filter(e =>"
                      " Array.from(e.attributes).some(a => a.name.startsWith('on'))).length") == 0
        assert b.errors() == [], b.errors()
        b.screenshot(tmp_path / "report_hostile.png")


#: What a reader sees first: the page at 1400 px wide, 900 px high (a laptop's window).
FIRST_SCREEN = "({glance: document.getElementById('glance').getBoundingClientRect().bottom," \
    " run: document.getElementById('run').getBoundingClientRect().top," \
    " height: window.innerHeight, headline: Array.from(document.querySelectorAll(" \
    "'#glance .headline')).map(e => [e.dataset.metric, JSON.parse(e.dataset.value)])," \
    " text: document.getElementById('glance').textContent})"


def test_the_first_screen_opens_on_what_a_reader_came_for(reports: dict[str, Path],
                                                          tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    import systems_helpers as H

    from engram_eval.cli import main as cli

    # a system from outside the package that saw the real ids, beside the package's own runs
    name = "py:" + H.importable(monkeypatch, H.LEAK_SRC) + ":make_system"
    leak = tmp_path / "leak.jsonl"
    assert cli.main(["run", str(LME), "--retriever", name, "--real-ids", "--output", str(leak),
                     "--no-progress"]) == 0
    page = tmp_path / "leak.html"
    assert cli.main(["report", str(leak), "--dataset", str(LME), "--output", str(page)]) == 0
    for path, run in ((reports["compare"], reports["run:lme"]), (page, leak)):
        summary = json.loads(Path(str(run) + ".summary.json").read_text())
        overall = summary["protocols"]["answerable"]["metrics"]
        with opened(path, width=1400) as b:
            b.send("Emulation.setDeviceMetricsOverride", {"width": 1400, "height": 900,
                                                          "deviceScaleFactor": 1,
                                                          "mobile": False})
            assert b.eval("window.innerWidth") == 1400
            screen = b.eval(FIRST_SCREEN)
            assert b.errors() == []
            # the whole at-a-glance block is on the first screen; provenance starts below it
            assert screen["glance"] <= screen["height"] < screen["run"], screen
            assert [m for m, _ in screen["headline"]] == ["recall_any@5", "recall_all@5",
                                                         "ndcg_any@5", "mrr"]
            assert all(overall[m] == v for m, v in screen["headline"])
            for words in ("system", "data", "denominator", "answerable: n = ", "verified"):
                assert words in screen["text"]
            if path == page:
                assert "ids visible" in b.eval("document.querySelector('h1').textContent")
                assert "engram_prefix_leak" in screen["text"] or "py:" in screen["text"]
                assert b.eval("document.querySelectorAll('#system tr[data-cost]').length") == 1
                assert "ids visible" in b.eval(
                    "document.querySelector('#system .system-card').textContent")
            else:
                assert "significantly better" in screen["text"]  # the comparison's verdict
            b.screenshot(tmp_path / f"first_screen_{path.stem}.png")
