"""Render a report document (:mod:`engram_eval.report.build`) as one self-contained HTML page.

* The sections in the order a reader needs them (:func:`page_sections`): at a glance (the
  system, the data, the denominator, the headline metrics, the comparison's verdict, verified
  or not), the metrics, the comparison, the system's card and cost, the miss analysis, the
  questions, then the provenance (what was run, verify's checks).
* Static HTML for the header, the verify result, the metrics tables, the comparison and the
  miss analysis; every string passes :func:`esc` (``html.escape`` with quotes), every
  number is printed from the document (metric cells carry the exact value in
  ``data-value``, the text shows 3 decimals).
* The per-question data is one JSON data island (:func:`json_island`: ``json.dumps`` with
  ``<``, ``>`` and ``&`` written as ``\\u003c``, ``\\u003e``, ``\\u0026``, so no string can
  close the element or open a comment) read by the one inline script
  (:mod:`engram_eval.report.assets`), which sets texts with ``textContent`` only.
* A Content-Security-Policy meta tag allows nothing but the page's own style block and
  script (by sha256): no network, no other script, no inline event handler, even if a string
  escaped its escaping.
* Inline SVG bars: per protocol the overall recall and NDCG means with the random baseline;
  with a comparison, each metric's delta and interval.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

from engram_eval.report.assets import CSS, SCRIPT

MISS_CLASS_HELP = {
    "not_in_corpus": "the gold id is not among the ranked sessions",
    "not_discovered": "no signal ranks it within the candidate window",
    "lost_in_fusion": "a signal ranked it high but fusion did not (or, with a rerank, it "
                      "was outside the rerank candidates)",
    "lost_in_temporal": "in the fused top k, pushed out by the temporal step",
    "lost_in_rerank": "reranked, and ended outside the top k",
    "cut_by_window": "found by a signal, never within the top k at any stage",
    "untraced": "ranked below the traced sessions (--trace-sessions)",
}


def esc(x: Any) -> str:
    """Text for HTML (element content or a quoted attribute value)."""
    return html.escape("" if x is None else str(x), quote=True)


def json_island(obj: Any) -> str:
    """JSON safe inside ``<script type="application/json">``: ``<``, ``>``, ``&`` escaped
    (so ``</script>`` and ``<!--`` cannot occur). Non-ASCII stays UTF-8 (U+2028 and U+2029
    are harmless: the script reads the island with ``JSON.parse``, never as code); a lone
    surrogate, which UTF-8 cannot hold, becomes ``?`` when the page is written."""
    text = json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _sha(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def num(x: Any, digits: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool) or not isinstance(x, int | float):
        return esc(x)
    return f"{x:.{digits}f}"


def _metric_td(name: str, value: Any) -> str:
    if value is None:
        return f'<td class="na" data-metric="{esc(name)}">–</td>'
    return (f'<td class="num" data-metric="{esc(name)}" data-value="{esc(json.dumps(value))}">'
            f"{num(value)}</td>")


def _kv(rows: Iterable[tuple[str, str]], cls: str = "kv") -> str:
    body = "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="{cls}">{body}</table>'


def _code(x: Any) -> str:
    return f"<code>{esc(x)}</code>" if x not in (None, "") else '<span class="muted">–</span>'


# -- sections -------------------------------------------------------------------------------------
def run_block(r: Mapping[str, Any], title: str, gen: Mapping[str, Any] | None = None) -> str:
    ds = r["dataset"]
    ledger = r.get("ledger")
    rows: list[tuple[str, str]] = [
        ("result file", _code(r["path"])),
        ("dataset", f"{_code(ds.get('name'))} <span class=\"muted\">sha256</span> "
                    f"{_code(ds.get('sha256'))}"
                    + (f" <span class=\"muted\">format {esc(ds.get('format'))}, "
                       f"{esc(ds.get('size'))} bytes</span>" if ds.get("format") else "")),
        ("split part", esc(r.get("split"))),
        ("ledger label", (f"<strong>{esc(ledger.get('label'))}</strong> <span class=\"muted\">"
                          f"frozen manifest</span> {_code(ledger.get('manifest'))} "
                          f"<span class=\"muted\">(fingerprint "
                          f"{esc(str(ledger.get('manifest_fingerprint'))[:16])}…, frozen "
                          f"{esc(ledger.get('frozen_at'))}"
                          + (f"; held-out part {esc(ledger['heldout_part'])}"
                             if ledger.get("heldout_part") else "") + ")</span>")
         if ledger else '<span class="muted">no frozen manifest: not a held-out run, no '
                        'ledger entry</span>'),
        ("retriever", _code(r.get("retriever"))),
        ("settings differing from the defaults", _settings(r)),
        ("models", _models(r.get("models") or [])),
        ("engram-eval version", _code(r.get("version"))),
        ("commit", (f"not recorded by the run; it records the sha256 of its "
                    f"{esc((r.get('sources') or {}).get('n'))} source files, fingerprint "
                    f"{_code((r.get('sources') or {}).get('fingerprint'))}")
         if r.get("sources") else '<span class="muted">not recorded (no sidecar)</span>'),
        ("run fingerprint", _code(r.get("fingerprint"))),
        ("rows sha256", _code(r.get("rows_sha256"))),
        ("questions", f"{esc(r.get('n_rows'))} rows; protocols "
                      + ", ".join(_code(p) for p in r.get("protocols") or [])),
        ("created", esc(r.get("created_at") or "–")
         + (f" <span class=\"muted\">({esc(r['wall_seconds'])} s)</span>"
            if r.get("wall_seconds") is not None else "")),
        ("command", _code(" ".join(str(c) for c in r["command"])) if r.get("command")
         else '<span class="muted">–</span>'),
    ]
    if not r.get("has_sidecar"):
        rows.append(("sidecar", '<span class="muted">absent: only the summary describes '
                                "this run</span>"))
    if gen is not None:
        commit = gen.get("commit")
        rows.append(("report built by", f"engram-eval {esc(gen.get('version'))}"
                     + (f" at commit {_code(commit)}" + (" (with local changes)"
                                                          if gen.get("commit_dirty") else "")
                        if commit else "")))
    return f"<h3>{esc(title)}</h3>" + _kv(rows)


def _settings(r: Mapping[str, Any]) -> str:
    diff = r.get("settings")
    if diff is None:
        return '<span class="muted">unknown (no sidecar)</span>'
    if not diff:
        return "none: every recorded setting is the installed package's default"
    body = "".join(
        f"<tr><td><code>{esc(d['setting'])}</code></td><td>{_code(json.dumps(d['value']))}"
        f"</td><td>{_code(json.dumps(d['default']))}</td><td>{esc(d.get('source') or '')}"
        "</td></tr>" for d in diff)
    return ('<table class="settings"><thead><tr><th>setting</th><th>this run</th>'
            '<th>default</th><th>from</th></tr></thead>' + f"<tbody>{body}</tbody></table>")


def _models(models: Sequence[Mapping[str, Any]]) -> str:
    if not models:
        return '<span class="muted">none</span>'
    body = "".join(
        f"<tr><td>{esc(m.get('role'))}</td><td><code>{esc(m.get('name'))}</code></td>"
        f"<td>{esc(m.get('revision') or '')}</td><td><code>{esc(m.get('sha256'))}</code>"
        "</td></tr>" for m in models)
    return ('<table class="models"><thead><tr><th>role</th><th>name</th><th>revision</th>'
            f"<th>sha256</th></tr></thead><tbody>{body}</tbody></table>")


def _verdict_kind(v: Mapping[str, Any]) -> str:
    """``verified``, ``failed`` (a check failed) or ``not-verified``."""
    if v.get("verified"):
        return "verified"
    return "failed" if any(c[1] == "FAIL" for c in v.get("checks") or []) else "not-verified"


def _verdict_word(v: Mapping[str, Any]) -> str:
    return {"verified": "verified", "failed": "verify: a check failed",
            "not-verified": "not verified"}[_verdict_kind(v)]


def verify_block(v: Mapping[str, Any], title: str) -> str:
    kind = _verdict_kind(v)
    head = (f'<p data-verified="{"1" if v.get("verified") else "0"}">{esc(title)}: '
            f'<span class="badge b-{kind}">{esc(v["verdict"])}</span></p>')
    if not v.get("checks"):
        return head
    rows = "".join(
        f'<tr data-status="{esc(s)}"><td><span class="badge b-{esc(s.replace(" ", "-"))}">'
        f"{esc(s)}</span></td><td>{esc(n)}</td><td class=\"small\">{esc(d)}</td></tr>"
        for n, s, d in v["checks"])
    extra = (f'<p class="small muted">verify {esc(v.get("dataset"))}'
             + (f" --sources-at {esc(v['sources_at'])}" if v.get("sources_at") else "")
             + "</p>")
    return head + extra + f'<table class="checks"><tbody>{rows}</tbody></table>'


def metrics_section(m: Mapping[str, Any], columns: Sequence[str], protocol: str) -> str:
    out = []
    if m["source"] == "rows":
        out.append('<p class="muted">No summary file beside the run: the tables are its rows '
                   "summarised by engram_eval.scoring.summary.summarize_rows.</p>")
    else:
        out.append('<p class="muted small">From the run\'s summary file; per type, the random '
                   "baseline of that type's rows (engram_eval.scoring.summary). Italic rows: "
                   "the expected value of a uniformly random ranking of each question's "
                   "haystack. Click a protocol to open its table.</p>")
    for p, s in m["protocols"].items():
        out.append(f'<details class="protocol" id="metrics-{esc(p)}"'
                   + (" open" if p == protocol else "") + f'><summary><b>{esc(p)}</b> '
                   f"<span class=\"muted small\">n = {esc(s['n'])}, skipped "
                   f"{esc(s.get('n_skipped', 0))}: {esc(s.get('denominator'))}</span>"
                   "</summary>")
        out.append(_bars(p, s, columns))
        head = "".join(f'<th class="num">{esc(c)}</th>' for c in columns)
        rows = [_mrow("overall", "all questions", s["n"], s["metrics"], columns, "overall"),
                _mrow("overall", "random ranking", None, s.get("random_baseline") or {},
                      columns, "baseline")]
        for t, v in s["by_type"].items():
            rows.append(_mrow(t, t, v["n"], v["metrics"], columns, "type"))
            rows.append(_mrow(t, "random ranking", None, v.get("random_baseline") or {},
                              columns, "baseline"))
        out.append(f'<table class="metrics" data-protocol="{esc(p)}"><thead><tr>'
                   f'<th>question type</th><th class="num">n</th>{head}</tr></thead>'
                   f"<tbody>{''.join(rows)}</tbody></table></details>")
    extra = []
    if m.get("temporal_windows"):
        extra.append("temporal windows: " + ", ".join(
            f"{esc(k)} {esc(v)}" for k, v in m["temporal_windows"].items()))
    if m.get("unparsable_dates"):
        extra.append("unparsable dates: " + ", ".join(
            f"{esc(k)} {esc(v)}" for k, v in m["unparsable_dates"].items()))
    if extra:
        out.append('<p class="small muted">' + "; ".join(extra) + "</p>")
    return "".join(out)


def _mrow(group: str, label: str, n: Any, metrics: Mapping[str, Any], columns: Sequence[str],
          kind: str) -> str:
    cells = "".join(_metric_td(c, metrics.get(c)) for c in columns)
    attrs = f'data-group="{esc(group)}" data-row="{esc(kind)}"'
    cls = {"overall": "overall", "baseline": "baseline"}.get(kind, "")
    return (f'<tr class="{cls}" {attrs}><th>{esc(label)}</th>'
            f'<td class="num">{esc("" if n is None else n)}</td>{cells}</tr>')


def _bars(protocol: str, s: Mapping[str, Any], columns: Sequence[str]) -> str:
    """Horizontal bars of the overall means (0..1) with the random baseline as a tick."""
    names = [c for c in columns if c != "mrr" and isinstance(s["metrics"].get(c), int | float)]
    if not names:
        return ""
    rb = s.get("random_baseline") or {}
    w, lw, bw, h = 560, 110, 380, 18
    parts = [f'<svg role="img" aria-label="{esc(protocol)} overall means" width="{w}" '
             f'height="{h * len(names) + 8}" viewBox="0 0 {w} {h * len(names) + 8}">']
    for i, n in enumerate(names):
        y = 4 + i * h
        v = float(s["metrics"][n])
        parts.append(f'<text x="0" y="{y + 12}">{esc(n)}</text>'
                     f'<rect x="{lw}" y="{y + 2}" width="{bw}" height="{h - 6}" fill="#eef0f3"/>'
                     f'<rect x="{lw}" y="{y + 2}" width="{bw * max(0.0, min(1.0, v)):.1f}" '
                     f'height="{h - 6}" fill="#4f7cc9"/>'
                     f'<text x="{lw + bw + 6}" y="{y + 12}">{v:.3f}</text>')
        if isinstance(rb.get(n), int | float):
            x = lw + bw * max(0.0, min(1.0, float(rb[n])))
            parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y}" y2="{y + h - 2}" '
                         'stroke="#1d2430" stroke-width="2"><title>random ranking '
                         f"{float(rb[n]):.3f}</title></line>")
    parts.append("</svg>")
    return "".join(parts)


def compare_section(c: Mapping[str, Any], qids: Mapping[str, int]) -> str:
    st = c["settings"]
    conf = int(round(st["confidence"] * 100))
    unit = st.get("resampling_unit", "question")
    out = [f"<p>Paired comparison under <code>{esc(c['protocol'])}</code> over "
           f"{esc(c['n'])} questions: <strong>{esc(c['direction'])}</strong>, B = this run "
           f"({_code(c['b']['label'])}), A = the run compared against "
           f"({_code(c['a']['label'])}). {conf}% {esc(st['interval'])} intervals "
           f"({esc(st['bootstrap'])} resamples, seed {esc(st['seed'])}), resampling unit "
           f"{esc(unit)}; {esc(st['binary_test'])}. Computed by "
           "engram_eval.analysis.compare (as <code>engram-eval compare A B</code>).</p>"]
    out.append(_forest(c))
    ov = c["groups"]["overall"]
    rows = []
    for name in c["metrics"]:
        e = ov["metrics"][name]
        rows.append(
            f'<tr data-metric="{esc(name)}"><td><code>{esc(name)}</code></td>'
            f'<td class="num">{num(e["a"], 4)}</td><td class="num">{num(e["b"], 4)}</td>'
            + _delta_td("overall", name, e)
            + f'<td class="num">[{e["ci"][0]:+.4f}, {e["ci"][1]:+.4f}]</td>'
            f'<td class="small">{esc(_test_text(e))}</td>'
            f'<td>{"significant" if e["significant"] else ""}</td></tr>')
    out.append(f'<h3>overall <span class="muted small">n = {esc(ov["n"])}</span></h3>'
               '<table class="compare" data-group="overall"><thead><tr><th>metric</th>'
               '<th class="num">A</th><th class="num">B</th><th class="num">delta</th>'
               f'<th class="num">{conf}% interval</th><th>test</th><th></th></tr></thead>'
               f"<tbody>{''.join(rows)}</tbody></table>")
    head = "".join(f'<th class="num">{esc(m)}</th>' for m in c["metrics"])
    rows = []
    for g, gv in c["groups"].items():
        if g == "overall":
            continue
        cells = []
        for name in c["metrics"]:
            e = gv["metrics"][name]
            cells.append(_delta_td(g, name, e, interval=True))
        rows.append(f'<tr data-group="{esc(g)}"><th>{esc(g)}</th><td class="num">'
                    f'{esc(gv["n"])}</td>{"".join(cells)}</tr>')
    if rows:
        out.append("<h3>per question type <span class=\"muted small\">delta (B − A), "
                   f"{conf}% interval below; * significant ({esc(st['binary_test'])} for "
                   "binary metrics, else the interval)</span></h3>"
                   '<table class="compare-types"><thead><tr><th>type</th><th class="num">n'
                   f"</th>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")
    v = c["verdict"]
    out.append(_kv([
        ("significantly better (overall)", esc(", ".join(v["significantly_better"]) or "–")),
        ("significantly worse (overall)", esc(", ".join(v["significantly_worse"]) or "–")),
        ("not robust across segments", esc(", ".join(v["not_robust"]) or "–")),
        ("note", esc(v.get("note")))]))
    out.append("<h3>Questions gained and lost</h3>")
    for name, f in c["flips"].items():
        out.append(f'<div class="flips" data-metric="{esc(name)}"><p><code>{esc(name)}</code>: '
                   f"gained {len(f['gained'])}, lost {len(f['lost'])}</p>"
                   f"<p>gained: {_qlinks(f['gained'], qids)}</p>"
                   f"<p>lost: {_qlinks(f['lost'], qids)}</p></div>")
    out.append("<details><summary>as <code>engram-eval compare</code> prints it</summary>"
               f"<pre>{esc(c['text'])}</pre></details>")
    return "".join(out)


def _test_text(e: Mapping[str, Any]) -> str:
    if "cluster_test" in e:
        return f"sign-flip p={e['cluster_test']['p']:.4g}"
    if e.get("binary"):
        mc = e["mcnemar"]
        return f"McNemar p={mc['p']:.4g} (+{mc['gained']}/−{mc['lost']})"
    return "interval"


def _delta_td(group: str, name: str, e: Mapping[str, Any], interval: bool = False) -> str:
    sign = "pos" if e["delta"] > 0 else "neg" if e["delta"] < 0 else ""
    star = " *" if e["significant"] and interval else ""
    ci = (f'<span class="turn-how">[{e["ci"][0]:+.3f}, {e["ci"][1]:+.3f}]</span>'
          if interval else "")
    title = (f'A {e["a"]:.4f}, B {e["b"]:.4f}; {_test_text(e)}' if interval else "")
    return (f'<td class="num {sign}" data-group="{esc(group)}" data-metric="{esc(name)}" '
            f'data-value="{esc(json.dumps(e["delta"]))}"'
            + (f' title="{esc(title)}"' if title else "")
            + f'>{e["delta"]:+.4f}{star}{ci}</td>')


def _qlinks(ids: Sequence[str], qids: Mapping[str, int]) -> str:
    if not ids:
        return '<span class="muted">none</span>'
    return "".join(f'<a href="#q={esc(quote(i, safe=""))}" data-q="{esc(i)}">{esc(i)}</a>'
                   for i in ids if i in qids)


def _forest(c: Mapping[str, Any]) -> str:
    """Overall delta and interval per metric, on a common scale."""
    ov = c["groups"]["overall"]["metrics"]
    names = list(c["metrics"])
    if not names:
        return ""
    span = max([0.05] + [abs(x) for n in names for x in (*ov[n]["ci"], ov[n]["delta"])])
    w, lw, pw, h = 620, 120, 420, 20
    mid = lw + pw / 2

    def xpos(v: float) -> float:
        return mid + (v / span) * (pw / 2)

    hh = h * len(names) + 24
    parts = [f'<svg role="img" aria-label="delta per metric" width="{w}" height="{hh}" '
             f'viewBox="0 0 {w} {hh}">',
             f'<line x1="{mid}" x2="{mid}" y1="0" y2="{hh - 16}" stroke="#8a94a3"/>',
             f'<text x="{lw}" y="{hh - 4}">{-span:+.3f}</text>'
             f'<text x="{mid - 4}" y="{hh - 4}">0</text>'
             f'<text x="{lw + pw - 40}" y="{hh - 4}">{span:+.3f}</text>']
    for i, n in enumerate(names):
        e = ov[n]
        y = 6 + i * h + h / 2
        color = "#1f7a3a" if e["significant"] and e["delta"] > 0 else (
            "#b3261e" if e["significant"] and e["delta"] < 0 else "#4f7cc9")
        parts.append(f'<text x="0" y="{y + 4}">{esc(n)}</text>'
                     f'<line x1="{xpos(e["ci"][0]):.1f}" x2="{xpos(e["ci"][1]):.1f}" '
                     f'y1="{y}" y2="{y}" stroke="{color}" stroke-width="2"/>'
                     f'<circle cx="{xpos(e["delta"]):.1f}" cy="{y}" r="4" fill="{color}">'
                     f'<title>{esc(n)}: {e["delta"]:+.4f} [{e["ci"][0]:+.4f}, '
                     f'{e["ci"][1]:+.4f}]</title></circle>'
                     f'<text x="{lw + pw + 8}" y="{y + 4}">{e["delta"]:+.3f}</text>')
    parts.append("</svg>")
    return "".join(parts)


def misses_section(m: Mapping[str, Any], title: str) -> str:
    if "error" in m:
        return (f"<h3>{esc(title)}</h3><p class=\"muted\">Not available for this run: "
                f"{esc(m['error'])}</p>")
    classes = m["classes_order"]
    head = "".join(f'<th class="num" title="{esc(MISS_CLASS_HELP.get(c, ""))}">{esc(c)}</th>'
                   for c in classes)
    rows = []
    for t, v in m["by_type"].items():
        rows.append(f'<tr data-type="{esc(t)}"><th>{esc(t)}</th><td class="num">'
                    f'{esc(v["n_questions"])}</td>'
                    + "".join(f'<td class="num">{esc(v[c])}</td>' for c in classes) + "</tr>")
    rows.append('<tr class="overall" data-type=""><th>all</th><td class="num">'
                f'{esc(m["n_questions"])}</td>'
                + "".join(f'<td class="num">{esc(m["classes"][c])}</td>' for c in classes)
                + "</tr>")
    k = m["k"]
    return (f"<h3>{esc(title)}</h3><p>{esc(m['n_questions_missing_some_gold'])} of "
            f"{esc(m['n_questions'])} questions have gold outside the top {esc(k)} "
            f"({esc(m['n_questions_missing_all_gold'])} with none inside); "
            f"{esc(m['n_missed_gold_sessions'])} gold sessions missed, each classed by the "
            f"stage that lost it (candidate window {esc(m['window'])}, "
            f"{esc(m.get('window_source', ''))}). As <code>engram-eval analyze --k {esc(k)}"
            "</code> (engram_eval.analysis.analyze).</p>"
            f'<table class="misses"><thead><tr><th>type</th><th class="num">n</th>{head}'
            f"</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def questions_section(doc: Mapping[str, Any]) -> str:
    opts = "".join(f'<option value="{esc(t)}">{esc(t)}</option>' for t in doc["types"])
    outcomes = [("", "every outcome"), ("hit", "hit"), ("miss", "miss"),
                ("unscored", "unscored")]
    if doc.get("compare"):
        outcomes += [("gained", "gained"), ("lost", "lost")]
    out_opts = "".join(f'<option value="{v}">{esc(label)}</option>' for v, label in outcomes)
    k, p = doc["k"], doc["protocol"]
    depth = doc["depth"]
    return (f"<p class=\"small muted\">Outcome under <code>{esc(p)}</code> at k = {esc(k)}: "
            f"<b>hit</b> = every gold session in the top {esc(k)} (recall_all@{esc(k)} = 1), "
            f"<b>miss</b> = some gold outside it (the questions "
            f"<code>analyze</code> lists), <b>unscored</b> = no gold under the protocol"
            + (f"; <b>gained</b>/<b>lost</b> = compare's flips of recall_all@{esc(k)} "
               "(this run vs the run compared against)" if doc.get("compare") else "")
            + f". Each question lists its top {esc(depth) if depth else 'traced'} sessions "
            "and every gold session below them. Click a question to open it.</p>"
            '<div class="controls"><label>search <input type="search" id="q-search" '
            'placeholder="question id, text, type or gold session id" autocomplete="off">'
            '</label><label>type <select id="q-type"><option value="">every type</option>'
            f'{opts}</select></label><label>outcome <select id="q-outcome">{out_opts}'
            '</select></label><span id="q-count" class="muted"></span></div>'
            '<div id="q-list"></div>')


# -- the first screen and the system ---------------------------------------------------------------
#: The metrics the first screen shows (at the report's k), in this order, where the run has them.
HEADLINE = ("recall_any@{k}", "recall_all@{k}", "ndcg_any@{k}", "mrr")


def _ids_badge(label: Any) -> str:
    if not label:
        return ""
    kind = "failed" if label == "ids visible" else "verified"
    return f' <span class="badge b-{kind}" data-ids="{esc(label)}">{esc(label)}</span>'


def glance_section(doc: Mapping[str, Any]) -> str:
    """What a reader came for, on the first screen: the system, the data, the denominator,
    the headline metrics with the random ranking's, the comparison's verdict, verified or
    not. Every number is the document's (the summary's, compare's, verify's)."""
    run, v, k = doc["run"], doc["verify"], doc["k"]
    card = run.get("system") or {}
    protocol = doc["protocol"]
    s = doc["metrics"]["protocols"].get(protocol) or {}
    system = _code(run.get("retriever"))
    if card:
        what = (f"{card.get('distribution')} {card.get('version')}" if card.get("distribution")
                else card.get("url") or f"no distribution; {card.get('n_files')} source "
                "files hashed")
        system += f' <span class="muted">({esc(what)})</span>' + _ids_badge(card.get("ids"))
    ds = run["dataset"]
    data = (f"{_code(ds.get('name'))} <span class=\"muted\">({esc(run.get('split'))}; "
            f"sha256 {esc(str(ds.get('sha256'))[:16])}…)</span>, {esc(run['n_rows'])} questions")
    denominator = (f"{_code(protocol)}: n = {esc(s.get('n'))}, skipped "
                   f"{esc(s.get('n_skipped', 0))} <span class=\"muted\">"
                   f"({esc(s.get('denominator'))})</span>")
    rb = s.get("random_baseline") or {}
    cells = []
    for name in (h.format(k=k) for h in HEADLINE):
        value = (s.get("metrics") or {}).get(name)
        if isinstance(value, int | float):
            base = rb.get(name)
            cells.append(f'<span class="headline" data-metric="{esc(name)}" '
                         f'data-value="{esc(value)}"><b>{esc(name)}</b> {num(value)}'
                         + (f' <span class="muted small">random {num(base)}</span>'
                            if isinstance(base, int | float) else "") + "</span>")
    rows = [("system", system), ("data", data), ("denominator", denominator),
            ("headline metrics", " · ".join(cells) or "–")]
    c = doc.get("compare")
    if c:
        verdict = c["verdict"]
        better = ", ".join(verdict["significantly_better"]) or "none"
        worse = ", ".join(verdict["significantly_worse"]) or "none"
        rows.append(("comparison", f"against {_code(doc['against']['file'])} "
                     f"({esc(c['direction'])}, {esc(c['n'])} paired questions): "
                     f'<span class="pos">significantly better: {esc(better)}</span>; '
                     f'<span class="neg">significantly worse: {esc(worse)}</span>'
                     + (f'; <span class="muted">{esc(verdict.get("note"))}</span>'
                        if verdict.get("note") else "")
                     + ' <a href="#compare">details</a>'))
    rows.append(("verified", f'<span class="badge b-{_verdict_kind(v)}">'
                 f"{esc(_verdict_word(v))}</span> <span class=\"muted small\">"
                 f"{esc(v.get('verdict'))}</span> <a href=\"#verify\">checks</a>"))
    return _kv(rows, "kv glance")


def _cost_cell(x: Any) -> str:
    return esc(f"{x:g}") if isinstance(x, int | float) and not isinstance(x, bool) else "–"


def system_section(doc: Mapping[str, Any]) -> str:
    """The system's card (for a system from outside the package) and the run's cost per
    question (wall seconds; HTTP requests and bytes), with percentiles."""
    run = doc["run"]
    card = run.get("system")
    out = []
    if card:
        settings = card.get("settings")
        out.append(_kv([
            ("entry", _code(card.get("entry"))),
            ("distribution", esc(card.get("distribution") or "–") + " "
             + esc(card.get("version") or "")),
            ("server", (_code(card.get("url")) + " " + _code(card.get("server")))
             if card.get("url") else '<span class="muted">–</span>'),
            ("code", f"{esc(card.get('n_files'))} files hashed, list fingerprint "
                     f"{_code(card.get('files_fingerprint'))}"),
            ("settings", f"{_code(json.dumps(settings, sort_keys=True))} sha256 "
                         f"{_code(card.get('settings_sha256'))}"),
            ("ids the system saw", esc(card.get("ids")) + _ids_badge(card.get("ids"))
             + f' <span class="muted">salt {esc(repr(card.get("id_salt")))}, seed '
               f'{esc(card.get("id_seed"))}</span>')], "kv system-card"))
    else:
        out.append(f'<p class="muted">{_code(run.get("retriever"))} is one of the package\'s '
                   "own retrievers (its settings and sources: What was run).</p>")
    cost = run.get("cost") or {}
    if cost:
        head = "".join(f'<th class="num">{h}</th>'
                       for h in ("n", "p50", "p90", "p99", "max", "mean", "total"))
        body = "".join(
            f'<tr data-cost="{esc(name)}"><th>{esc(name)}</th>'
            + "".join(f'<td class="num">{_cost_cell(c.get(col))}</td>'
                      for col in ("n", "p50", "p90", "p99", "max", "mean", "total"))
            + "</tr>" for name, c in cost.items() if isinstance(c, Mapping))
        out.append('<table class="cost"><thead><tr><th>per question</th>'
                   f"{head}</tr></thead><tbody>{body}</tbody></table>"
                   '<p class="small muted">Wall time of indexing and ranking each question '
                   "(and, for a system behind HTTP, its requests and bytes), from the rows' "
                   "timing (engram_eval.scoring.summary.cost_summary); measured on the "
                   "machine that ran it, not reproduced by verify.</p>")
    return "".join(out)


# -- the page -------------------------------------------------------------------------------------
def page_sections(doc: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """The page's sections in order, each ``(id, title, html)``: what a reader came for
    first (at a glance, the metrics, the comparison, the system and its cost), then where the
    gold was lost, the questions, and the provenance (what was run, verify). A block is added
    by inserting its tuple here; the navigation follows the list."""
    run = doc["run"]
    columns = list(doc["metric_columns"])
    qids = {q["id"]: i for i, q in enumerate(doc["questions"])}
    v = doc["verify"]
    out = [("glance", "At a glance", glance_section(doc)),
           ("metrics", "Metrics", metrics_section(doc["metrics"], columns, doc["protocol"]))]
    if doc.get("compare"):
        out.append(("compare", "Comparison", compare_section(doc["compare"], qids)))
    if doc.get("audited"):
        out.append(("audited", "Audited labels", audited_section(doc["audited"], qids)))
    out.append(("system", "System and cost", system_section(doc)))
    misses = misses_section(doc["misses"], "this run")
    if doc.get("misses_against"):
        misses += misses_section(doc["misses_against"], "the run compared against")
    out.append(("misses", "Where the gold was lost", misses))
    out.append(("questions", "Questions", questions_section(doc)))
    what = run_block(run, "this run", doc.get("generator"))
    if doc.get("against"):
        what += run_block(doc["against"], "the run compared against")
    given = doc.get("dataset_given")
    if given and not given.get("matches"):
        what += (f'<p class="neg">The dataset given ({_code(given["path"])}, sha256 '
                 f"{_code(given['sha256'])}) is not the file the run used: its texts are "
                 "not shown.</p>")
    out.append(("run", "What was run", what))
    checks = verify_block(v, "this run")
    if doc.get("verify_against"):
        checks += verify_block(doc["verify_against"], "the run compared against")
    out.append(("verify", "Verify", checks))
    return out


def render(doc: Mapping[str, Any]) -> str:
    """The whole page (module doc): a title line, then :func:`page_sections` in order."""
    run = doc["run"]
    v = doc["verify"]
    sections = page_sections(doc)
    nav = "".join(f'<a href="#{esc(sid)}">{esc(title.lower())}</a>'
                  for sid, title, _ in sections)
    card = run.get("system") or {}
    body = [f"<nav>{nav}</nav><main>",
            f"<h1>Run report: <code>{esc(run['file'])}</code>{_ids_badge(card.get('ids'))}</h1>",
            f'<p class="muted">{esc(run.get("retriever"))} on {_code(run["dataset"]["name"])}'
            f" ({esc(run.get('split'))}), {esc(run['n_rows'])} questions; protocol "
            f"{_code(doc['protocol'])}, k = {esc(doc['k'])}; "
            f'<span class="badge b-{_verdict_kind(v)}">{esc(_verdict_word(v))}</span>'
            + (f" compared against {_code(doc['against']['file'])}" if doc.get("against")
               else "") + "</p>",
            (f'<p id="note">{esc(doc["note"])}</p>' if doc.get("note") else "")]
    for sid, title, html_ in sections:
        body.append(f'<section id="{esc(sid)}"><h2>{esc(title)}</h2>{html_}</section>')
    body.append(f'<p class="small muted">Built in {esc(doc.get("build_seconds"))} s by '
                "engram_eval.report. Every number above is the package's: summaries "
                "(engram_eval.scoring.summary), comparison (engram_eval.analysis.compare), "
                "miss analysis (engram_eval.analysis.analyze), verify "
                "(engram_eval.runs.verify); the question data holds the rows' own values "
                "(trace floats to 6 significant digits).</p></main>")
    island = {"protocol": doc["protocol"], "k": doc["k"], "depth": doc["depth"],
              "has_against": bool(doc.get("compare")),
              "has_text": any(q.get("text") is not None for q in doc["questions"]),
              "question_metrics": _question_metric_names(doc),
              "questions": doc["questions"]}
    script = SCRIPT
    csp = (f"default-src 'none'; style-src 'sha256-{_sha(CSS)}'; script-src "
           f"'sha256-{_sha(script)}'; img-src data:; base-uri 'none'; form-action 'none'")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{esc(csp)}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>engram-eval report: {esc(run['file'])}</title>"
            f"<style>{CSS}</style></head><body>"
            + "".join(body)
            + f'<script type="application/json" id="report-data">{json_island(island)}'
            f"</script><script>{script}</script></body></html>\n")


def _question_metric_names(doc: Mapping[str, Any]) -> list[str]:
    for q in doc["questions"]:
        if q.get("metrics"):
            return list(q["metrics"])
    return []


# -- audited labels (a gold overlay) --------------------------------------------------------------
def _hit_word(v: Any) -> str:
    return "–" if v is None else "hit" if v == 1 else "miss"


def _move_class(before: Any, after: Any) -> str:
    """``pos`` / ``neg`` for a miss that became a hit and back; none when the item enters or
    leaves the denominator."""
    if before is None or after is None or before == after:
        return ""
    return "pos" if after > before else "neg"


def audited_section(view: Mapping[str, Any], qids: Mapping[str, int]) -> str:
    """The "Audited labels" block of the document's ``audited`` part
    (:func:`engram_eval.report.audited.audited_view`): :func:`page_sections` places it after
    the comparison, in ``<section id="audited">``."""
    o = view["overlay"]
    k = view["k"]
    names = list(view["runs"][0]["metrics"])
    out = [f"<p>Gold overlay {_code(o['name'])} (sha256 {_code(o['sha256'])}, "
           f"{esc(o['format'])}, {esc(o['n_entries'])} entries): "
           f"{esc(o['n_selected_entries'])} name questions of this run; "
           f"<strong>{esc(o['n_evidence_changed'])}</strong> correct their evidence, "
           f"<strong>{esc(o['n_gold_changed'])}</strong> of them change the gold sessions under "
           f"protocol {_code(view['protocol'])}; left with no gold (out of the audited "
           f"denominator): {esc(len(o['no_gold'] or []))} "
           f"{_qlinks(o['no_gold'] or [], qids)}. Corrected pieces naming no turn: "
           f"{esc(', '.join(f'{q} {v}' for q, v in (o['unresolved'] or {}).items()) or 'none')}"
           ".</p>"]
    head = "".join(f'<th class="num">{esc(m)}</th>' for m in names)
    rows = []
    for part in view["runs"]:
        for which, key, n in (("dataset's evidence", "metrics", part["n"]),
                              ("audited evidence", "metrics_audited", part["n_audited"])):
            cells = "".join(f'<td class="num" data-metric="{esc(m)}">{num(part[key][m], 4)}'
                            "</td>" for m in names)
            rows.append(f"<tr><td>{_code(part['label'])}</td><td>{esc(which)}</td>"
                        f'<td class="num">{esc(n)}</td>{cells}</tr>')
    out.append('<table class="audited-metrics"><thead><tr><th>run</th><th>gold</th>'
               f'<th class="num">n</th>{head}</tr></thead><tbody>{"".join(rows)}</tbody>'
               "</table>")
    moved = view.get("verdict_moved")
    if moved:
        mrows = "".join(
            f'<tr data-metric="{esc(m)}"><td><code>{esc(m)}</code></td>'
            f'<td class="num">{v["delta"]:+.4f}</td><td>{esc(v["verdict"])}</td>'
            f'<td class="num">{v["delta_audited"]:+.4f}</td><td>{esc(v["verdict_audited"])}'
            f'</td><td>{"moved" if v["moved"] else ""}</td></tr>' for m, v in moved.items()
            if m in names)
        out.append("<h3>The comparison on both golds <span class=\"muted small\">delta = "
                   "this run − the run compared against</span></h3>"
                   '<table class="audited-compare"><thead><tr><th>metric</th><th class="num">'
                   "delta</th><th>verdict</th><th class=\"num\">delta, audited</th><th>verdict, "
                   f"audited</th><th></th></tr></thead><tbody>{mrows}</tbody></table>")
    labels = "".join(f"<th>{esc(p['label'])}: recall_all@{esc(k)}</th>" for p in view["runs"])
    irows = []
    for it in view["items"]:
        cells = "".join(
            "<td>–</td>" if v is None else
            f'<td class="{_move_class(v[0], v[1])}">{_hit_word(v[0])} → {_hit_word(v[1])}</td>'
            for v in it["verdicts"])
        irows.append(f'<tr data-q="{esc(it["question_id"])}"><td>'
                     f"{_qlinks([it['question_id']], qids) or esc(it['question_id'])}"
                     f" <span class=\"muted small\">{esc(it['key'])}</span></td>"
                     f"<td class=\"small\">{esc(', '.join(it['evidence'] or []) or '–')} → "
                     f"{esc(', '.join(it['evidence_audited'] or []) or '–')}</td>"
                     f"<td class=\"small\">{esc(', '.join(it['gold'] or []) or '–')} → "
                     f"{esc(', '.join(it['gold_audited'] or []) or '–')}</td>{cells}</tr>")
    out.append(f"<h3>Items whose gold changed <span class=\"muted small\">{len(irows)}; "
               "verdict = recall_all@k on the dataset's gold → on the audited gold</span></h3>"
               '<table class="audited-items"><thead><tr><th>question</th><th>evidence</th>'
               f"<th>gold sessions</th>{labels}</tr></thead><tbody>{''.join(irows)}</tbody>"
               "</table>")
    return "".join(out)
