"""The report page's inline CSS and script (no external resource of any kind).

The script reads the JSON data island (``<script type="application/json"
id="report-data">``), builds the question list and, on demand, a question's drill-down.
It creates every element with ``document.createElement`` and sets every dataset string
with ``textContent`` (never as markup), so a question or session text containing markup
shows as text. ``tests/report/test_report.py`` checks that the script holds none of
:data:`FORBIDDEN_IN_SCRIPT`.

Interaction: the search box (question id, text, type, gold session ids), the type and the
outcome filters (hit, miss, unscored; gained, lost with a comparison); clicking a question
opens its drill-down; ``#q=<question id>`` (URL-encoded) in the address opens that
question, as do the question links of the comparison.
"""

from __future__ import annotations

#: Markup sinks the script must never use (checked by the tests).
FORBIDDEN_IN_SCRIPT = ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write",
                       "eval(", "Function(", "setAttribute('on", 'setAttribute("on')

CSS = """
:root { --fg:#1d2430; --muted:#5b6675; --line:#d8dde4; --bg:#ffffff; --soft:#f4f6f9;
  --gold:#fff4c2; --goldline:#c9a400; --hit:#1f7a3a; --miss:#b3261e; --gain:#1f5fb3;
  --lose:#b35c00; --unscored:#6b7280; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  color: var(--fg); background: var(--bg); margin: 0; }
main { max-width: 1280px; margin: 0 auto; padding: 12px 24px 48px; }
h1 { font-size: 22px; margin: 16px 0 4px; } h2 { font-size: 18px; margin: 28px 0 8px;
  border-bottom: 1px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
nav { position: sticky; top: 0; background: var(--bg); border-bottom: 1px solid var(--line);
  padding: 6px 24px; z-index: 2; font-size: 13px; }
nav a { margin-right: 14px; color: var(--gain); text-decoration: none; }
code, .mono, td.num, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas,
  monospace; font-size: 12.5px; }
.muted { color: var(--muted); } .small { font-size: 12px; }
table { border-collapse: collapse; margin: 4px 0 10px; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 8px; text-align: left;
  vertical-align: top; }
thead th { background: var(--soft); font-weight: 600; white-space: nowrap; }
td.num, th.num { text-align: right; white-space: nowrap; }
td.na { color: var(--muted); text-align: center; }
table.kv th { width: 220px; font-weight: 600; background: var(--soft); }
table.kv td { word-break: break-all; }
table.glance td { word-break: normal; }
.headline { display: inline-block; white-space: nowrap; margin-right: 10px; }
tr.baseline td, tr.baseline th { color: var(--muted); font-style: italic; font-weight: normal;
  border-bottom-color: #eef0f3; }
tr.overall th, tr.overall td { font-weight: 600; }
.badge { display: inline-block; padding: 0 7px; border-radius: 9px; font-size: 12px;
  font-weight: 600; color: #fff; margin-right: 4px; white-space: nowrap; }
.b-hit { background: var(--hit); } .b-miss { background: var(--miss); }
.b-unscored { background: var(--unscored); } .b-gained { background: var(--gain); }
.b-lost { background: var(--lose); } .b-ok { background: var(--hit); }
.b-FAIL { background: var(--miss); } .b-not-checked, .b-not-verified { background: var(--unscored); }
.b-verified { background: var(--hit); } .b-failed { background: var(--miss); }
.controls { display: flex; flex-wrap: wrap; gap: 10px; align-items: center;
  background: var(--soft); padding: 8px 10px; border: 1px solid var(--line);
  border-radius: 6px; position: sticky; top: 31px; z-index: 1; }
.controls input[type=search] { width: 340px; padding: 4px 6px; }
.controls select { max-width: 260px; }
.q { border: 1px solid var(--line); border-radius: 6px; margin: 6px 0; background: #fff;
  scroll-margin-top: 90px; }
.q[hidden] { display: none; }
.q-head { display: flex; gap: 10px; align-items: baseline; width: 100%; text-align: left;
  border: 0; background: none; padding: 6px 10px; cursor: pointer; font: inherit;
  color: inherit; }
.q-head:hover { background: var(--soft); }
.q-id { font-family: ui-monospace, monospace; font-size: 12.5px; min-width: 150px; }
.q-type { color: var(--muted); min-width: 170px; font-size: 12.5px; }
.q-text { flex: 1; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.q-gold { color: var(--muted); font-size: 12px; white-space: nowrap; }
.q-body { padding: 4px 12px 12px; border-top: 1px solid var(--line); overflow-x: auto; }
.q-question { font-size: 15px; margin: 8px 0; white-space: pre-wrap; }
tr.gold td { background: var(--gold); } tr.gold td.sid { border-left: 4px solid var(--goldline); }
tr.sep td { background: var(--soft); color: var(--muted); font-style: italic; }
tr.turnrow td { border-bottom: 1px solid var(--line); padding-top: 0; }
tr.turnrow td.turn { white-space: pre-wrap; word-break: break-word; font-size: 12.5px;
  max-width: 1100px; }
tr.turnrow + tr td, table.sessions tbody tr:first-child td { border-top: 1px solid var(--line); }
table.sessions tr[data-session] td { border-bottom: 0; }
tr.gold + tr.turnrow.gold td.turn { background: var(--gold); }
.turn-how { display: block; color: var(--muted); font-size: 11px; font-style: italic; }
.cls { font-weight: 600; }
.pos { color: var(--hit); } .neg { color: var(--miss); }
svg text { font: 11px system-ui, sans-serif; fill: var(--fg); }
details > summary { cursor: pointer; color: var(--gain); }
details.protocol { margin: 10px 0; } details.protocol > summary { color: var(--fg);
  font-size: 15px; }
table.compare-types td .turn-how { font-style: normal; }
table.metrics th { white-space: nowrap; }
pre { background: var(--soft); padding: 8px; overflow-x: auto; white-space: pre; }
.flips a { margin-right: 8px; font-family: ui-monospace, monospace; font-size: 12px; }
"""

SCRIPT = r"""
(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('report-data').textContent);
  var Q = data.questions;
  var list = document.getElementById('q-list');
  var search = document.getElementById('q-search');
  var typeSel = document.getElementById('q-type');
  var outSel = document.getElementById('q-outcome');
  var count = document.getElementById('q-count');

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  function fmt(x) {
    if (x === null || x === undefined) { return '\u2013'; }
    if (typeof x === 'number') {
      if (x !== 0 && (Math.abs(x) >= 10000 || Math.abs(x) < 0.001)) { return x.toPrecision(4); }
      return x.toFixed(4);
    }
    if (typeof x === 'boolean') { return x ? 'yes' : 'no'; }
    return String(x);
  }
  function rank(x) { return x === null || x === undefined ? '\u2013' : String(x); }
  function cell(row, text, cls) { var td = el('td', cls || null, text); row.appendChild(td); return td; }
  function th(row, text, cls) { var h = el('th', cls || null, text); row.appendChild(h); return h; }
  function badge(kind, text) { return el('span', 'badge b-' + kind, text); }
  function table(cls, heads) {
    var t = el('table', cls); var hr = el('tr'); var thead = el('thead');
    heads.forEach(function (h) { th(hr, h); });
    thead.appendChild(hr); t.appendChild(thead); t.appendChild(el('tbody'));
    return t;
  }

  var items = Q.map(function (q, i) {
    var item = el('div', 'q');
    item.id = 'q-' + i;
    item.setAttribute('data-index', String(i));
    item.setAttribute('data-outcome', q.outcome);
    item.setAttribute('data-flip', q.flip);
    item.setAttribute('data-type', q.type);
    var head = el('button', 'q-head');
    head.type = 'button';
    head.setAttribute('aria-expanded', 'false');
    head.appendChild(el('span', 'q-id', q.id));
    head.appendChild(el('span', 'q-type', q.type));
    var badges = el('span', 'q-badges');
    badges.appendChild(badge(q.outcome, q.outcome));
    if (q.flip) { badges.appendChild(badge(q.flip, q.flip)); }
    head.appendChild(badges);
    head.appendChild(el('span', 'q-text', q.text === null ? '(question text: give --dataset)' : q.text));
    var ranks = q.gold ? q.gold.map(function (g) { return rank(q.gold_ranks[g]); }) : [];
    head.appendChild(el('span', 'q-gold', q.gold ? 'gold at ' + (ranks.join(', ') || '\u2013') : 'no gold'));
    head.addEventListener('click', function () { toggle(i); });
    item.appendChild(head);
    list.appendChild(item);
    var hay = [q.id, q.text || '', q.type].concat(q.gold || []).join(' ').toLowerCase();
    return { item: item, head: head, q: q, hay: hay, body: null };
  });

  function apply() {
    var s = search.value.trim().toLowerCase();
    var t = typeSel.value;
    var o = outSel.value;
    var shown = 0;
    items.forEach(function (it) {
      var q = it.q;
      var ok = (!s || it.hay.indexOf(s) >= 0) && (!t || q.type === t) &&
               (!o || q.outcome === o || q.flip === o);
      it.item.hidden = !ok;
      if (ok) { shown += 1; }
    });
    count.textContent = shown + ' of ' + items.length + ' questions shown';
    count.setAttribute('data-shown', String(shown));
  }

  function toggle(i, forceOpen) {
    var it = items[i];
    var open = forceOpen === true ? true : !it.body || it.body.hidden;
    if (open && !it.body) { it.body = detail(it.q); it.item.appendChild(it.body); }
    if (it.body) { it.body.hidden = !open; }
    it.head.setAttribute('aria-expanded', open ? 'true' : 'false');
    it.item.classList.toggle('open', open);
  }

  function kvTable(pairs) {
    var t = el('table', 'kv');
    pairs.forEach(function (p) {
      var r = el('tr'); th(r, p[0]); cell(r, p[1]); t.appendChild(r);
    });
    return t;
  }

  function metricsTable(q) {
    var names = data.question_metrics;
    var t = table('qmetrics', ['run'].concat(names));
    var body = t.tBodies[0];
    [['this run', q.metrics], ['against', q.metrics_against]].forEach(function (p) {
      if (p[0] === 'against' && !data.has_against) { return; }
      var r = el('tr'); th(r, p[0]);
      names.forEach(function (n) { cell(r, p[1] ? fmt(p[1][n]) : '\u2013', 'num'); });
      body.appendChild(r);
    });
    return t;
  }

  function goldTable(q) {
    var heads = ['gold session', 'final rank'];
    if (data.has_against) { heads.push('rank in against'); }
    heads.push('where it was lost (top ' + data.k + ')');
    if (data.has_against) { heads.push('lost in against'); }
    var t = table('gold-table', heads);
    var body = t.tBodies[0];
    var cls = {}, clsB = {};
    (q.misses || []).forEach(function (m) { cls[m.session_id] = m; });
    (q.misses_against || []).forEach(function (m) { clsB[m.session_id] = m; });
    (q.gold || []).forEach(function (g) {
      var r = el('tr', 'gold'); cell(r, g, 'sid mono'); cell(r, rank(q.gold_ranks[g]), 'num');
      if (data.has_against) { cell(r, rank(q.gold_ranks_against ? q.gold_ranks_against[g] : null), 'num'); }
      var m = cls[g];
      var td = cell(r, m ? m['class'] : 'in the top ' + data.k, m ? 'cls' : 'muted');
      td.setAttribute('data-class', m ? m['class'] : 'found');
      if (m) {
        var parts = [];
        Object.keys(m.signal_ranks || {}).forEach(function (s) { parts.push(s + ' ' + rank(m.signal_ranks[s])); });
        parts.push('fused ' + rank(m.fused_rank)); parts.push('temporal ' + rank(m.temporal_rank));
        parts.push('rerank ' + rank(m.rerank_rank));
        if (m.moved_by_coverage) { parts.push('moved by coverage'); }
        td.appendChild(el('span', 'turn-how', 'ranks: ' + parts.join(', ')));
      }
      if (data.has_against) { var mb = clsB[g]; cell(r, mb ? mb['class'] : 'in the top ' + data.k, mb ? 'cls' : 'muted'); }
      body.appendChild(r);
    });
    return t;
  }

  function sessionTable(q) {
    var heads = ['rank', 'session', 'score'];
    q.signals.forEach(function (s) { heads.push(s + ' (rank)'); });
    heads = heads.concat(['fused (rank)', 'temporal \u00d7 (rank)', 'rerank raw (rank)']);
    var t = table('sessions', heads);
    var body = t.tBodies[0];
    var sepDone = false;
    q.sessions.forEach(function (s) {
      if (s.below_depth && !sepDone) {
        var sr = el('tr', 'sep'); var sc = cell(sr, 'gold sessions ranked below the top ' + depthShown(q));
        sc.colSpan = heads.length; body.appendChild(sr); sepDone = true;
      }
      var r = el('tr', s.gold ? 'gold' : '');
      r.setAttribute('data-session', s.id);
      r.setAttribute('data-gold', s.gold ? '1' : '0');
      cell(r, s.rank, 'num');
      var sid = cell(r, (s.gold ? '\u2605 ' : '') + s.id, 'sid mono');
      if (s.date) { sid.appendChild(el('span', 'turn-how', s.date)); }
      cell(r, fmt(s.score), 'num');
      if (s.untraced) {
        var u = cell(r, 'not traced (run with --trace-sessions 0 to trace every session)', 'muted');
        u.colSpan = q.signals.length + 3;
      } else {
        (s.signals || []).forEach(function (v) { cell(r, fmt(v[0]) + ' (' + rank(v[1]) + ')', 'num'); });
        cell(r, 'fused' in s ? fmt(s.fused) + ' (' + rank(s.fused_rank) + ')' : '\u2013', 'num');
        var temp = 'temporal' in s ? fmt(s.temporal) + ' (' + rank(s.temporal_rank) + ')' : '\u2013';
        if (s.in_window === true) { temp += ' in window'; }
        cell(r, temp, 'num');
        var rr = s.reranked ? fmt(s.raw_score) + ' (' + rank(s.rerank_rank) + ')' : 'not reranked';
        if (s.moved_by_coverage) { rr += ', moved by coverage'; }
        var rc = cell(r, rr, s.reranked ? 'num' : 'muted');
        if (s.other) { rc.appendChild(el('span', 'turn-how', s.other)); }
      }
      body.appendChild(r);
      if (data.has_text && (s.turn || s.evidence)) {
        var tr2 = el('tr', 'turnrow' + (s.gold ? ' gold' : ''));
        tr2.setAttribute('data-turn-of', s.id);
        cell(tr2, '');
        var tc = cell(tr2, '', 'turn');
        tc.colSpan = heads.length - 1;
        if (s.turn) {
          tc.appendChild(el('span', 'turn-how', 'best turn: ' + s.turn.role + ' turn ' + s.turn.index + ', ' + s.turn.how));
          tc.appendChild(el('div', 'turn-text', s.turn.text));
        }
        if (s.evidence) {
          tc.appendChild(el('span', 'turn-how', 'evidence turn ' + s.evidence.index + ' (dataset):'));
          tc.appendChild(el('div', 'turn-text evidence', s.evidence.text));
        }
        body.appendChild(tr2);
      }
    });
    return t;
  }

  function depthShown(q) {
    var n = 0;
    q.sessions.forEach(function (s) { if (!s.below_depth) { n += 1; } });
    return n;
  }

  function detail(q) {
    var b = el('div', 'q-body');
    b.appendChild(el('div', 'q-question', q.text === null ? '(question text not shown: give --dataset)' : q.text));
    var tw = q.time_window ? JSON.stringify(q.time_window) : '\u2013';
    b.appendChild(kvTable([
      ['question id', q.id], ['type', q.type], ['question date', q.date || '\u2013'],
      ['sessions in the haystack', rank(q.n_sessions)], ['traced sessions', rank(q.traced)],
      ['temporal status', q.temporal_status || '\u2013'], ['time window', tw]]));
    b.appendChild(el('h3', null, 'Metrics (' + data.protocol + ')'));
    b.appendChild(metricsTable(q));
    b.appendChild(el('h3', null, 'Gold sessions and the stage that lost them'));
    if (q.gold) { b.appendChild(goldTable(q)); } else {
      b.appendChild(el('p', 'muted', 'No gold under ' + data.protocol + ': not scored.'));
    }
    b.appendChild(el('h3', null, 'Top sessions with every stage (\u2605 gold)'));
    b.appendChild(sessionTable(q));
    if (q.top_against) {
      b.appendChild(el('h3', null, 'Top sessions of the run compared against'));
      var ol = el('ol', 'against-top');
      q.top_against.forEach(function (p) { var li = el('li', p[1] ? 'gold mono' : 'mono', (p[1] ? '\u2605 ' : '') + p[0]); ol.appendChild(li); });
      b.appendChild(ol);
    }
    return b;
  }

  function openById(id) {
    for (var i = 0; i < items.length; i += 1) {
      if (items[i].q.id === id) {
        search.value = ''; typeSel.value = ''; outSel.value = ''; apply();
        toggle(i, true);
        items[i].item.scrollIntoView();
        return true;
      }
    }
    return false;
  }
  function fromHash() {
    var h = window.location.hash;
    if (h.indexOf('#q=') === 0) {
      var id;
      try { id = decodeURIComponent(h.slice(3)); } catch (e) { return; }
      openById(id);
    }
  }

  search.addEventListener('input', apply);
  typeSel.addEventListener('change', apply);
  outSel.addEventListener('change', apply);
  window.addEventListener('hashchange', fromHash);
  apply();
  fromHash();
  document.documentElement.setAttribute('data-ready', '1');
}());
"""
