"""Production search settings: the package's retrieval settings plus the gate's own fields.

:class:`ProductionSettings` inherits :class:`~engram_eval.retrieval.settings.RetrievalSettings`
(the one place where a retrieval default or bound lives), so production search ranks with the
package's default pipeline (the benchmark runner's, rerank stage included) unless told
otherwise, and adds the gate: how many candidates get a confidence, the focused-excerpt
retry, the result limit, the confidence cut-off (fixed, or the one the calibration records)
and the calibration file.

A calibration records the settings it was fitted under and refuses any other
(:func:`engram_eval.production.confidence.check_calibration`); the settings each packaged
calibration was fitted under are packaged beside it (``settings_vN.json``, passed with
``--settings``). The published production runs (results/production/) were made under the
settings they record, in the older flat layout (``piece_words``, ``weight_bm25``,
reciprocal-rank fusion of dense and memory BM25, torch embeddings);
:meth:`ProductionSettings.from_recorded` maps such a record onto these fields, and the
packaged ``calibration_v1.json`` was fitted under them, so the calibration check compares
both in this layout. A record that lacks a field was made before production took the
package's retrieval defaults, with that field's value in :data:`RECORD_LEGACY`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from engram_eval.errors import ConfigError
from engram_eval.retrieval.settings import GATE_GROUP, RetrievalSettings, _f

#: The package default gate: calibration v7, one model per memory shape (file format
#: version 4; PROVENANCE.md section 25), fitted under the package's default pipeline with the
#: pipeline's first result as each question's top result (issue 45: the gate decides whether
#: to answer, the pipeline the order; ``settings_v7.json`` records those settings), with the
#: cut-off each model records (``cutoff`` 'calibrated'), no excerpt retry, and people's chats
#: not gated (``people_gate`` off).
DEFAULT_CALIBRATION = "engram_eval/production/data/calibration_v7.json"
#: The settings calibration v6 (the default before v7, PROVENANCE.md section 21) was fitted
#: and measured under (the same pipeline; its record predates ``result_order`` and
#: ``people_gate``, so it reads back as most confident first, people's chats gated):
#: ``--settings`` this file.
RECORDED_SETTINGS_V6 = "engram_eval/production/data/settings_v6.json"
#: The settings calibration v5 (the default before v6, PROVENANCE.md section 19) was fitted
#: under (the same first stage, rerank by engram-ce-minilm-v3): ``--settings`` this file.
RECORDED_SETTINGS_V5 = "engram_eval/production/data/settings_v5.json"
#: The settings calibration v4 (the default before v5, PROVENANCE.md section 17) was fitted
#: under (the first stage before PROVENANCE.md section 14, no rerank): these reproduce it
#: (``--settings`` this file).
RECORDED_SETTINGS_V4 = "engram_eval/production/data/settings_v4.json"
#: The default before it (calibration v2, fitted on the synthetic dev fixture): these
#: settings reproduce it (``--settings`` this file).
RECORDED_SETTINGS_V2 = "engram_eval/production/data/settings_v2.json"
#: The settings the published production runs recorded (older flat layout; pass them with
#: ``--settings``) and the calibration fitted under them, which those settings name.
RECORDED_SETTINGS_V1 = "engram_eval/production/data/settings_v1.json"
RECORDED_CALIBRATION_V1 = "engram_eval/production/data/calibration_v1.json"
#: Where the package's calibration and settings files lived before they moved to ``data/``:
#: published runs, settings files and recorded commands name them there, and
#: :func:`data_file` still reads them under those names.
LEGACY_DATA_DIR = "engram_eval/production"


def data_file(path: str | Path) -> Path:
    """``path`` as given, or, when it is a package data file named by its place before the
    move (``engram_eval/production/NAME.json``, as published runs, the v3 settings files and
    recorded commands name them) and nothing is there, the file in ``data/``. A path that
    starts with ``engram_eval/`` is read from the package, wherever the process runs."""
    from engram_eval.io import package_root

    p = Path(path)
    if not p.is_absolute() and p.parts[:1] == ("engram_eval",):
        inside = package_root() / p
        if not inside.exists() and p.parent.as_posix() == LEGACY_DATA_DIR:
            moved = package_root() / LEGACY_DATA_DIR / "data" / p.name
            if moved.exists():
                return moved
        return inside
    return p


#: Gate fields (not retrieval settings). The excerpt retry changes confidences, so a
#: calibration depends on it; the others only cut what is returned.
GATE_FIELDS = ("candidates", "excerpt_retry", "excerpt_max_words", "rerank_confidence", "limit",
               "min_confidence", "cutoff", "calibration", "result_order", "people_gate")
_NOT_CALIBRATED = ("candidates", "limit", "min_confidence", "cutoff", "calibration",
                   "result_order", "people_gate")

#: A field a record predates -> the value that reproduces what it was made with, never a later
#: default (:meth:`ProductionSettings.from_recorded`): the gate's fixed cut-off and the
#: cross-encoder's sigmoid as the confidence with a rerank, and, where production's own
#: settings differed from the package's retrieval defaults before it took them, its values
#: then (the first stage before PROVENANCE.md section 14, no rerank, the people overrides of
#: calibrations v2-v4; records lacking them: the published runs, calibrations v1-v3).
RECORD_LEGACY: dict[str, Any] = {
    "result_order": "confidence", "people_gate": True, "cutoff": "fixed", "rerank_confidence": "sigmoid", "rerank_prior": "rank",
    "dense_turn_top_m": 1, "use_dense_rocchio": False, "use_bm25_prf": False,
    "lexical_stemmer": "none", "lexical_stopwords": "none", "normalisation": "minmax",
    "weight_bm25_user": 0.3, "weight_bm25_turn": 0.3, "weight_bm25_prf": 0.0,
    "weight_dense_rocchio": 0.0, "rerank": False,
    "people_overrides": {"normalisation": "zscore", "temporal": False,
                         "weight_bm25_user": 1.0, "rerank": False}}

#: (``embedding_batch_isolated`` is absent: every production record encodes in fp32, whose
#: vectors do not depend on their batch, so the field cannot act on them.)

#: (``result_order`` 'confidence': every record made before issue 45 -- the published
#: production runs and measurements, the calibrations' settings files -- returned the accepted
#: candidates most confident first.)

#: Production's ``people_overrides`` default (:class:`ProductionSettings`).
PRODUCTION_PEOPLE_OVERRIDES: dict[str, Any] = {"temporal": False, "weight_bm25_user": 1.0,
                                               "weight_bm25_prf": 0.0,
                                               "lexical_speaker": "prefix", "rerank": False}

#: The older flat record (published runs, calibration_v1.json) -> these field names.
_LEGACY_NAMES = {"piece_words": "dense_piece_words", "piece_overlap": "dense_piece_overlap",
                 "weight_bm25": "weight_bm25_user"}
#: What the older production search computed and did not record: dense and memory BM25
#: only, fused by the recorded method; no other signal.
_LEGACY_FIXED: dict[str, Any] = {"use_dense": True, "use_bm25_user": True,
                                 "use_bm25_assistant": False, "use_bm25_turn": False,
                                 "use_bm25_prf": False, "use_dense_rocchio": False,
                                 "dense_aggregate": "max", "normalisation": "minmax",
                                 "weight_bm25_assistant": 0.0, "weight_bm25_turn": 0.0}


@dataclass(frozen=True)
class ProductionSettings(RetrievalSettings):
    """Every setting of production search: the retrieval settings (package defaults) plus
    the gate. Validated on construction like its retrieval part."""

    # A memory is one user text (production.search.memory_sessions), so people_overrides
    # never act in production: they keep the package's people settings from before the
    # people's encoder (PROVENANCE.md section 22), the ones calibrations v5 and v6 were
    # fitted under, rather than load and record an encoder production search never uses.
    people_overrides: dict = _f(dict(PRODUCTION_PEOPLE_OVERRIDES),
                                "the retrieval settings' people_overrides; inert in production "
                                "search (every memory is one user text, so every haystack has "
                                "chat roles). YAML only.", group="fusion", cli=False)
    candidates: int = _f(10, "memories, best first after the retrieval pipeline, that get a "
                         "confidence", group=GATE_GROUP, lo=1, hi=10000)
    excerpt_retry: bool = _f(False, "a candidate the gate rejects tries one focused excerpt; "
                             "the larger confidence survives (calibration v2 was fitted with "
                             "it, v4 and v5 without)", group=GATE_GROUP)
    excerpt_max_words: int = _f(160, "excerpt length limit in words", group=GATE_GROUP, lo=8,
                                hi=2000)
    rerank_confidence: str = _f(
        "calibration", "with the rerank stage on, where the gate's confidence comes from: "
        "'calibration' = the calibration's model of the memory shape (a per-shape calibration, "
        "version 4 on; with an older one, the cross-encoder's sigmoid); 'sigmoid' = the "
        "sigmoid of the cross-encoder's logit of the memory text, uncalibrated (what "
        "production did with the rerank on before it took the package's default pipeline; a "
        "record without this field was made so)", group=GATE_GROUP,
        choices=("calibration", "sigmoid"))
    limit: int = _f(3, "result limit", group=GATE_GROUP, lo=1, hi=10000)
    min_confidence: float = _f(0.6, "confidence cut-off (a relevance threshold, not a "
                               "probability of correctness) under --cutoff fixed, and where "
                               "the calibration records none", group=GATE_GROUP, lo=0.0, hi=1.0)
    cutoff: str = _f("calibrated", "where the gate's cut-off comes from: 'calibrated' = the one the "
                     "calibration file records for the model it applies (version 3, and per "
                     "memory shape version 4: chosen on its training data for a stated "
                     "precision), min_confidence where it records none; 'fixed' = "
                     "min_confidence", group=GATE_GROUP, choices=("fixed", "calibrated"))
    calibration: str = _f("", "calibration file of the offline confidence (with a rerank: "
                          "applied when it is per memory shape, version 4 on, else the "
                          "cross-encoder's sigmoid is the confidence); '' = the packaged "
                          "default (DEFAULT_CALIBRATION: "
                          "engram_eval/production/data/calibration_v7.json, fitted under the "
                          "package defaults; the former defaults v6, v5, v4 and v2 under "
                          "--settings engram_eval/production/data/settings_v6.json, "
                          "settings_v5.json, settings_v4.json and settings_v2.json)",
                          group=GATE_GROUP)

    result_order: str = _f(
        "pipeline", "the order of the accepted results, and which candidate's confidence "
        "decides to answer: 'pipeline' = the retrieval pipeline's order; the first "
        "candidate's confidence decides answer or abstain, and each later candidate under "
        "the cut-off is dropped (the gate decides whether to answer, the pipeline the "
        "order); 'confidence' = the candidates at or above the cut-off, most confident "
        "first (what production did before issue 45; a record without this field was made "
        "so)", group=GATE_GROUP, choices=("pipeline", "confidence"))

    people_gate: bool = _f(
        False, "gate people's chats (memories of the 'people' shape) at their model's "
        "cut-off; off (the default since issue 45) = no gate for people's chats: the "
        "confidence is still given, every question is answered (cut-off 0), because no "
        "people model has separated right from wrong top results (held out: AUROC 0.594 "
        "under calibrations v5 and v6, PROVENANCE.md sections 19 and 21; the figure of "
        "section 25 under the people pipeline); a record without this field gated them",
        group=GATE_GROUP)

    def to_json(self) -> dict[str, Any]:
        """Every field but the runtime ones (batch size, cache)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.metadata["fingerprint"]}

    def replace(self, **changes: Any) -> ProductionSettings:
        return dataclasses.replace(self, **changes)

    def retrieval_part(self) -> dict[str, Any]:
        """The settings a calibration depends on (everything but the cut of the gate)."""
        d = self.to_json()
        for k in _NOT_CALIBRATED:
            d.pop(k)
        return d

    @classmethod
    def from_recorded(cls, record: Mapping[str, Any]) -> ProductionSettings:
        """Settings from a record: this layout, or the older flat one of the published runs
        and ``calibration_v1.json`` (detected by its ``piece_words`` key). A field the record
        lacks takes its value in :data:`RECORD_LEGACY` (what production used before the field
        was recorded), else the default. Unknown keys are an error naming them;
        ``calibration_sha256`` (written beside a record) is ignored."""
        names = {f.name for f in fields(cls)}
        d = {k: v for k, v in record.items() if k != "calibration_sha256"}
        if "piece_words" in d:
            d = {_LEGACY_NAMES.get(k, k): v for k, v in d.items()}
            d = {**_LEGACY_FIXED, **d}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ConfigError(f"production settings: unknown field(s) {unknown}")
        return cls(**{**RECORD_LEGACY, **d})
