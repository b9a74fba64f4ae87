"""The production-fixture runner: validate / freeze, gated search per case, scoring, output.

Order of a run (``run_fixture``):

1. Validate the fixture and split it (:func:`.fixture.load_fixture`): the search path gets
   the gold-free view, the gold lookup waits for scoring.
2. Refuse an existing output (or sidecar / summary) before anything else is written.
3. Build the current manifest (sources under ``source_root``, fixture, model files,
   settings -- no model is loaded). A held-out fixture refuses to run without
   ``frozen_source``; a given manifest must match (every difference named). Held-out is
   decided by content, not only by the fixture's own ``heldout`` field: a fixture whose file
   or any case's memories and questions match a known held-out fixture's is held out
   (:func:`heldout_match`), so an edited copy saying ``"heldout": false`` is refused.
4. Held-out fixtures: record the run in the ledger and take its label (``held-out
   measurement`` or ``regression check``, :mod:`engram_eval.provenance.frozen`).
5. Per case: a new store under ``work_dir``, ``add()`` the memories, close, reopen, search
   every query (``search`` never receives gold).
6. Rebuild the manifest and fail if any source, model file, setting or the fixture changed
   during the run (nothing is written then).
7. Score with the gold lookup; write output, summary and sidecar with exclusive creation.

Scores: per fixture, *answerable hits* (questions with gold where a gold memory was
returned), *absent-answer abstentions* (questions without gold where nothing was returned),
*non-gold memories returned* (every returned memory not in the question's gold, absent-answer
questions included), *precision* = gold returned / all returned. The gate's cut-off is a
relevance threshold, not a probability of correctness.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram_eval.errors import ProvenanceError
from engram_eval.io import already_exists, sha256_file
from engram_eval.production.search import Engine, SearchResponse
from engram_eval.production.store import MemoryStore
from engram_eval.production_eval.fixture import (
    CaseView,
    FixtureView,
    GoldLookup,
    load_fixture,
    read_document,
)
from engram_eval.provenance import frozen as F
from engram_eval.provenance.heldout import HeldoutMatch, fixture_heldout
from engram_eval.provenance.records import (
    json_text,
    publish,
    refuse_existing,
    sidecar_path,
    summary_path,
)
from engram_eval.provenance.sources import production_sources
from engram_eval.retrieval.sources import SEARCH_SOURCES

RUNNER = "production_retrieval"
OUTPUT_KIND = "engram-eval/production-run"
DEV_LABEL = "development measurement (fixture not held out)"
#: Files that can change a production result (hashed into manifests and outputs).
SOURCES = tuple(production_sources(SEARCH_SOURCES))


def effective_settings(engine: Engine, source_root: str | Path) -> dict[str, Any]:
    """The settings a run records: every field, and the calibration the gate applies, hashed
    and named (a file under ``source_root``, such as the packaged default or a recorded
    package calibration, by its path relative to it, so a record names it the same
    wherever the checkout is and whichever file is the default)."""
    s = engine.settings.to_json()
    if engine.applies_calibration():  # the calibration the gate applies: named and hashed
        cal = engine.calibration_path()
        s["calibration_sha256"] = sha256_file(cal)
        try:
            s["calibration"] = cal.resolve().relative_to(Path(source_root).resolve()).as_posix()
        except ValueError:
            s["calibration"] = str(cal)
    return s


def current_manifest(fixture: str | Path, engine: Engine, source_root: str | Path) -> dict[str, Any]:
    """The manifest of a run of ``fixture`` with ``engine`` from the sources under
    ``source_root`` (nothing is loaded)."""
    return F.build_manifest(runner=RUNNER, input_path=fixture, input_kind="fixture",
                            sources=F.hash_sources(SOURCES, source_root),
                            models=engine.models(),
                            settings=effective_settings(engine, source_root),
                            purpose="production-confidence check")


def validate_only(fixture: str | Path, engine: Engine, source_root: str | Path,
                  freeze_to: str | Path | None = None) -> dict[str, Any]:
    """Validate ``fixture`` (and the calibration); with ``freeze_to``, write the manifest
    with exclusive creation. Returns the manifest."""
    load_fixture(fixture)
    if engine.applies_calibration():
        engine.calibration()
    manifest = current_manifest(fixture, engine, source_root)
    if freeze_to is not None:
        F.freeze(freeze_to, manifest)
    return manifest


def heldout_match(fixture: str | Path, source_root: str | Path,
                  ledger: str | Path | None = None) -> HeldoutMatch | None:
    """Why ``fixture`` is held out, or None: its own ``heldout`` field, or its file hash or a
    case's content matching a held-out fixture known under the package root, ``source_root``
    (``results/``, ``fixtures/production/``) or the ledger -- so a copy with ``"heldout":
    false`` edited in is still held out (:func:`engram_eval.provenance.heldout.fixture_heldout`).
    """
    root = Path(source_root)
    return fixture_heldout(fixture, read_document(fixture),
                           roots=[root / "results", root / "fixtures" / "production"],
                           ledger=ledger)


def store_path(work_dir: str | Path, fixture_name: str, case_id: str) -> Path:
    """``WORK_DIR/FIXTURE_NAME/CASE_ID.sqlite``, refused (ProvenanceError) unless it lies
    inside ``work_dir`` once resolved (symbolic links followed): a name is a name, never a
    path (the fixture loader checks the names too, :data:`.fixture.NAME_PATTERN`)."""
    root = Path(work_dir).resolve()
    p = (root / fixture_name / f"{case_id}.sqlite").resolve()
    if not p.is_relative_to(root) or p.parent == root or p == root:
        raise ProvenanceError(f"fixture {fixture_name!r}, case {case_id!r}: the case's store "
                              f"would be {p}, outside the work directory {root}; fixture names "
                              "and case ids must be plain names")
    return p


def _outputs(output: Path) -> list[Path]:
    return [output, summary_path(output), sidecar_path(output)]


def search_case(engine: Engine, case: CaseView, store_path: Path) -> list[dict[str, Any]]:
    """Write the case's memories into a new store, reopen it, search each query. Receives
    the gold-free view only."""
    store = MemoryStore.create(store_path, engine)
    try:
        store.add(case.memories)
    finally:
        store.close()
    rows = []
    with MemoryStore.open(store_path, engine) as reopened:
        for q in case.queries:
            t0 = time.perf_counter()
            resp: SearchResponse = reopened.search(q.query, now=q.now)
            rows.append({"case_id": case.case_id, "question_id": q.question_id,
                         "query": q.query, "now": q.now,
                         "accepted": [{"id": r.id, "confidence": r.confidence}
                                      for r in resp.results],
                         "time_window": resp.question["time_window"],
                         "candidates": list(resp.candidates),
                         "seconds": round(time.perf_counter() - t0, 6)})
    return rows


def score(rows: Sequence[dict[str, Any]], gold: GoldLookup) -> dict[str, Any]:
    """Add gold and outcome to each row (in place) and return the fixture summary."""
    answerable = hits = absent = abstained = returned = gold_returned = 0
    for r in rows:
        g = set(gold(r["question_id"]))
        ids = [a["id"] for a in r["accepted"]]
        r["gold"] = sorted(g)
        r["non_gold_returned"] = [i for i in ids if i not in g]
        returned += len(ids)
        gold_returned += sum(1 for i in ids if i in g)
        if g:
            answerable += 1
            r["outcome"] = "hit" if g & set(ids) else "miss"
            hits += r["outcome"] == "hit"
        else:
            absent += 1
            r["outcome"] = "abstained" if not ids else "false_accept"
            abstained += r["outcome"] == "abstained"
    return {"questions": len(rows), "answerable": answerable, "answerable_hits": hits,
            "absent_answer": absent, "absent_answer_abstentions": abstained,
            "memories_returned": returned, "gold_memories_returned": gold_returned,
            "non_gold_memories_returned": returned - gold_returned,
            "precision": (gold_returned / returned) if returned else None,
            "precision_note": "gold memories returned / all memories returned (None when "
                              "nothing was returned)",
            "threshold_note": "min_confidence is a relevance threshold, not a probability of "
                              "correctness"}


def run_fixture(fixture: str | Path, output: str | Path, work_dir: str | Path, engine: Engine,
                source_root: str | Path, *, frozen_source: str | Path | None = None,
                ledger: str | Path | None = None, command: Sequence[str] | None = None,
                on_case: Callable[[str], None] | None = None) -> dict[str, Any]:
    """See the module docstring. Returns the output document."""
    t_start = time.time()
    started = datetime.now(UTC).isoformat(timespec="microseconds")
    view, gold = load_fixture(fixture)
    out = Path(output)
    # a name too long, a parent that is a file, a link (dangling or not) where an output goes
    # or an existing output: refused before anything is written
    refuse_existing(_outputs(out), hint="choose a new output name",
                    length_hint="choose a shorter --output name")
    stores = {case.case_id: store_path(work_dir, view.name, case.case_id)
              for case in view.cases}
    for sp in stores.values():
        if sp.exists():
            raise ProvenanceError(already_exists(sp, "use a fresh --work-dir"))
    manifest = current_manifest(fixture, engine, source_root)
    frozen_doc = None
    lpath = ledger or F.default_ledger(source_root)
    held = heldout_match(fixture, source_root, lpath)
    heldout = held is not None
    if held is not None and frozen_source is None:
        why = "" if held.key == manifest["input"]["sha256"] else f" ({held.describe()})"
        raise ProvenanceError(
            f"{fixture}: fixture {view.name!r} is held out{why}; it runs only under a frozen "
            "manifest: freeze one first (--validate-only --freeze-source MANIFEST), then pass "
            "--frozen-source MANIFEST")
    if frozen_source is not None:
        frozen_doc = F.check_frozen(frozen_source, manifest)
    if engine.applies_calibration():
        engine.calibration()  # after the manifest check, so a changed model is named there
    if held is not None:
        assert frozen_doc is not None
        label = F.ledger_record(lpath, frozen_doc, output=str(out), started_at=started,
                                key=held.key)
    else:
        label = DEV_LABEL
    rows: list[dict[str, Any]] = []
    search_view: FixtureView = view
    for case in search_view.cases:
        rows.extend(search_case(engine, case, stores[case.case_id]))
        if on_case is not None:
            on_case(case.case_id)
    after = current_manifest(fixture, engine, source_root)
    changed = F.differences(manifest, after)
    if changed:
        raise ProvenanceError(f"{fixture}: sources, models, settings or the fixture changed "
                              "during the run; nothing was written:\n  " + "\n  ".join(changed))
    summary = score(rows, gold)
    per_case: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        per_case.setdefault(r["case_id"], []).append(
            {"question_id": r["question_id"], "accepted": r["accepted"], "gold": r["gold"],
             "outcome": r["outcome"]})
    head = {"fixture": manifest["input"], "fixture_name": view.name, "heldout": heldout,
            "label": label, "manifest_fingerprint": manifest["fingerprint"],
            "source_fingerprint": manifest["source_fingerprint"],
            "frozen_manifest": (None if frozen_doc is None else
                                {"path": str(frozen_source),
                                 "fingerprint": frozen_doc["fingerprint"],
                                 "created_at": frozen_doc["created_at"]})}
    doc = {"kind": OUTPUT_KIND, **head, "summary": summary, "cases": per_case,
           "questions": rows, "settings": manifest["settings"],
           "confidence": engine.describe()["confidence"]}
    side = {"kind": OUTPUT_KIND + "/metadata", **head, "manifest": manifest,
            "models": [m.to_json() for m in engine.models()],
            "environment": _environment(), "command": list(command) if command else None,
            "started_at": started,
            "finished_at": datetime.now(UTC).isoformat(timespec="microseconds"),
            "wall_seconds": round(time.time() - t_start, 3),
            "output_sha256": None}
    text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    import hashlib

    side["output_sha256"] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    publish([(out, text), (summary_path(out), json_text({**head, "summary": summary})),
             (sidecar_path(out), json_text(side))],
            hint="nothing was kept of this run's output; free space (or fix the file system) "
                 "and run again")
    return doc


def _environment() -> dict[str, Any]:
    from engram_eval.provenance.sidecar import environment, package_versions

    return {**environment(), "packages": package_versions(), "host": socket.gethostname()}
