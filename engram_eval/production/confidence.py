"""Confidence of a search result: a documented score in [0, 1].

* **With a cross-encoder** (``rerank=True``): ``confidence = sigmoid(logit)`` of the
  cross-encoder's raw score for (query, memory text) -- the benchmark's score conversion
  (:func:`engram_eval.retrieval.rerank.sigmoid`).
* **Offline default** (no cross-encoder): a logistic (Platt-style) mapping of *absolute*
  signals of one (query, memory) pair -- never normalised per question, so a question whose
  answer is absent does not get a confident "best of a bad lot":

  ``confidence = sigmoid(b0 + b_dense * dense + b_terms * terms + b_time * time)``

  - ``dense``: cosine similarity of the query to the memory's best-matching piece;
  - ``terms``: the fraction of the query's content terms the memory contains
    (:func:`engram_eval.retrieval.passages.content_terms`, plural-aware matching; 0 when the
    query has no content term);
  - ``time``: +1 when the query names a time window and the memory's date lies in it, -1
    when it names one and the date lies outside, 0 otherwise (no window, no date).

  The coefficients are fitted by ``benchmarks/production_retrieval/calibrate.py`` on the dev
  fixture (every (question, memory) pair, label = memory is gold) and stored, with the data
  hash, model hash, settings and the expected calibration error, in the versioned package
  file ``calibration_v1.json`` (a hashed source).

The gate's cut-off (``min_confidence``, default 0.6) is a **relevance threshold, not a
probability of correctness**: the calibration set is small and synthetic, and a returned
memory is not checked for factual truth or completeness.

* **Calibrated on real sessions** (``calibration_v3.json``, :class:`ContextCalibration`,
  fitted by :mod:`engram_eval.production_eval.calibrate_real` on the tuning parts of LongMemEval
  and LoCoMo): a logistic score of absolute signals and per-question context
  (:data:`engram_eval.production.features.FEATURES_V3`), mapped to a probability that the
  memory is gold by an isotonic (or Platt) mapping fitted on out-of-fold scores:

  ``z = intercept + sum_k w_k * x_k``; ``confidence = interp(z, iso_x, iso_y)`` (linear
  between the isotonic steps, clipped at the ends: scikit-learn's ``IsotonicRegression``
  with ``out_of_bounds="clip"``), or ``sigmoid(a * z + b)`` for Platt.

  Stored as numbers, so search applies it without scikit-learn. Its recorded cut-off was
  chosen on the tuning parts for a stated target (see the file).

* **Calibrated per memory shape** (version 4, :class:`ShapeCalibration`, fitted by
  :func:`engram_eval.production_eval.calibrate_real.fit_shapes`): one such model per shape
  of :func:`engram_eval.data.records.corpus_shape` (``chat``, ``people``, ``short``), each
  with its feature set (by name, :data:`engram_eval.production.features.FEATURE_SETS`), the
  standardisation and logistic coefficients exactly as scikit-learn fitted them
  (``z = intercept + sum_k w_k * (x_k - mean_k) / scale_k``), its mapping, its cut-off and
  the hashes of its training data. Search takes the model of the shape of the memories it
  searches (a production store: ``short``); a shape the file has no model for is refused.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engram_eval.data._jsonio import read_json_document
from engram_eval.errors import ConfigError
from engram_eval.retrieval.passages import content_terms, terms_match
from engram_eval.retrieval.rerank import sigmoid

FEATURES = ("dense", "terms", "time")
CALIBRATION_KIND = "engram-eval/production-calibration"
_TOKEN = re.compile(r"[^\W_]+")  # the tokens passages.content_terms reads


def term_coverage(query: str, text: str) -> float:
    """Fraction of the query's content terms found in ``text`` (each term counted once)."""
    terms = content_terms(query)
    if not terms:
        return 0.0
    tokens = set(_TOKEN.findall(text.lower()))
    hit = sum(1 for t in terms if any(terms_match(t, tok) for tok in tokens))
    return hit / len(terms)


@dataclass(frozen=True)
class Calibration:
    """Logistic coefficients (``intercept`` and one weight per :data:`FEATURES` entry)."""

    intercept: float
    weights: tuple[float, ...]
    embedding_sha256: str
    settings: dict[str, Any]
    path: str = ""
    record: dict[str, Any] | None = None

    def confidence(self, features: Sequence[float]) -> float:
        z = self.intercept + sum(w * x for w, x in zip(self.weights, features, strict=True))
        return sigmoid(z)


@dataclass(frozen=True)
class ContextCalibration:
    """Calibration v3: a logistic score over :data:`~engram_eval.production.features.
    FEATURES_V3` (coefficients in raw feature units), then the stored isotonic steps or Platt
    pair. ``cutoff``: the cut-off chosen on the tuning parts (recorded, not applied here)."""

    intercept: float
    weights: tuple[float, ...]
    mapping: str  # "isotonic" | "platt"
    iso_x: tuple[float, ...]
    iso_y: tuple[float, ...]
    platt: tuple[float, float]
    cutoff: float | None
    embedding_sha256: str
    settings: dict[str, Any]
    path: str = ""
    record: dict[str, Any] | None = None
    #: the feature set the weights belong to (its name in FEATURE_SETS)
    feature_set: str = "v3"
    #: version 4: the standardisation the weights apply after (None: raw feature units)
    mean: tuple[float, ...] | None = None
    scale: tuple[float, ...] | None = None
    #: version 4: the memory shape this model was fitted for
    shape: str | None = None

    def scores(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        if self.mean is not None and self.scale is not None:
            x = (x - np.asarray(self.mean)) / np.asarray(self.scale)
        return self.intercept + x @ np.asarray(self.weights)

    def features(self, query: str, sig: Mapping[str, Any], cands: Sequence[int],
                 overrides: Mapping[int, Mapping[str, float]] | None = None) -> np.ndarray:
        """The candidates' rows of this model's feature set (search computes them here)."""
        from engram_eval.production.features import feature_set

        return feature_set(self.feature_set).compute(query, sig, cands, overrides)

    def map_scores(self, z: np.ndarray) -> np.ndarray:
        z = np.asarray(z, dtype=float)
        if self.mapping == "isotonic":
            return np.interp(z, np.asarray(self.iso_x), np.asarray(self.iso_y))
        a, b = self.platt
        return 1.0 / (1.0 + np.exp(-(a * z + b)))

    def confidences(self, x: np.ndarray) -> np.ndarray:
        """Confidence of each row of features (one row per candidate)."""
        return self.map_scores(self.scores(x))


@dataclass(frozen=True)
class ShapeCalibration:
    """Version 4: one :class:`ContextCalibration` per memory shape (module docstring)."""

    models: Mapping[str, ContextCalibration]
    embedding_sha256: str
    settings: dict[str, Any]
    path: str = ""
    record: dict[str, Any] | None = None

    def for_shape(self, shape: str) -> ContextCalibration:
        """The model fitted for ``shape`` (ConfigError naming the file and the shapes it
        holds when it has none)."""
        if shape not in self.models:
            raise ConfigError(f"{self.path}: no calibrated model for memory shape {shape!r} "
                              f"(this file holds {sorted(self.models)})")
        return self.models[shape]

    @property
    def cutoffs(self) -> dict[str, float | None]:
        """Each shape's recorded cut-off (chosen on its training data; not applied here)."""
        return {k: m.cutoff for k, m in self.models.items()}


def _shape_model(m: Any, p: Path, shape: str) -> ContextCalibration:
    """One shape's model of a version-4 file (every malformed field named)."""
    from engram_eval.data.records import SHAPES
    from engram_eval.production.features import feature_set

    where = f"{p}: shapes.{shape}"
    if shape not in SHAPES:
        raise ConfigError(f"{where}: unknown memory shape (known: {list(SHAPES)})")
    try:
        fs = feature_set(str(m["feature_set"]))
    except ConfigError as e:
        raise ConfigError(f"{where}.feature_set: {e}") from None
    except (KeyError, TypeError):
        raise ConfigError(f"{where}: missing feature_set") from None
    if tuple(m.get("features", ())) != fs.features:
        raise ConfigError(f"{where}.features: must be the columns of feature set {fs.name!r} "
                          f"{list(fs.features)}")
    try:
        d = len(fs.features)
        st, lg, mp = m["standardisation"], m["logistic"], m["mapping"]
        mean = tuple(float(v) for v in st["mean"])
        scale = tuple(float(v) for v in st["scale"])
        w = tuple(float(v) for v in lg["coefficients"])
        if not len(mean) == len(scale) == len(w) == d or not all(v > 0 for v in scale):
            raise ValueError(f"standardisation and coefficients need {d} values each "
                             "(scales > 0)")
        iso = mp.get("isotonic") or {}
        platt = mp.get("platt") or {}
        cutoff = m.get("cutoff")
        cal = ContextCalibration(
            float(lg["intercept"]), w, str(mp["method"]),
            tuple(float(v) for v in iso.get("x", ())), tuple(float(v) for v in iso.get("y", ())),
            (float(platt.get("a", 1.0)), float(platt.get("b", 0.0))),
            None if cutoff is None else float(cutoff["value"]), "", {}, str(p), dict(m),
            fs.name, mean, scale, shape)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ConfigError(f"{where}: malformed model: {e!r}") from None
    _check_mapping(cal, where)
    return cal


def _check_mapping(cal: ContextCalibration, where: str | Path) -> None:
    if cal.mapping not in ("isotonic", "platt") or (
            cal.mapping == "isotonic" and (len(cal.iso_x) < 1 or
                                           len(cal.iso_x) != len(cal.iso_y))):
        raise ConfigError(f"{where}: calibration mapping must be isotonic (with steps) or platt")


def _shape_calibration(doc: dict[str, Any], p: Path) -> ShapeCalibration:
    shapes = doc.get("shapes")
    if not isinstance(shapes, dict) or not shapes:
        raise ConfigError(f"{p}: a version-4 calibration needs 'shapes': a model per shape")
    models = {k: _shape_model(v, p, k) for k, v in shapes.items()}
    try:
        return ShapeCalibration(models, doc["embedding_model"]["sha256"], doc["settings"],
                                str(p), doc)
    except (KeyError, TypeError) as e:
        raise ConfigError(f"{p}: malformed version-4 calibration: {e!r}") from None


def _context_calibration(doc: dict[str, Any], p: Path) -> ContextCalibration:
    from engram_eval.production.features import FEATURES_V3

    if tuple(doc.get("features", ())) != FEATURES_V3:
        raise ConfigError(f"{p}: a version-3 calibration must have features {list(FEATURES_V3)}")
    try:
        c = doc["coefficients"]
        m = doc["mapping"]
        iso = m.get("isotonic") or {}
        platt = m.get("platt") or {}
        return ContextCalibration(
            float(c["intercept"]), tuple(float(c[f]) for f in FEATURES_V3), str(m["method"]),
            tuple(float(v) for v in iso.get("x", ())), tuple(float(v) for v in iso.get("y", ())),
            (float(platt.get("a", 1.0)), float(platt.get("b", 0.0))),
            None if doc.get("cutoff") is None else float(doc["cutoff"]["value"]),
            doc["embedding_model"]["sha256"], doc["settings"], str(p), doc)
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{p}: malformed version-3 calibration: {e!r}") from None


#: What :func:`load_calibration` returns.
AnyCalibration = Calibration | ContextCalibration | ShapeCalibration


def load_calibration(path: str | Path) -> AnyCalibration:
    p = Path(path)
    try:
        doc = read_json_document(p, what="a calibration file")
    except OSError as e:
        raise ConfigError(f"{p}: calibration file is not readable JSON: {e}") from None
    if doc.get("kind") == CALIBRATION_KIND and doc.get("version") == 4:
        return _shape_calibration(doc, p)
    if doc.get("kind") == CALIBRATION_KIND and doc.get("version") == 3:
        cal = _context_calibration(doc, p)
        _check_mapping(cal, p)
        return cal
    if doc.get("kind") != CALIBRATION_KIND or tuple(doc.get("features", ())) != FEATURES:
        raise ConfigError(f"{p}: not a production calibration for features {list(FEATURES)}")
    c = doc["coefficients"]
    return Calibration(float(c["intercept"]), tuple(float(c[f]) for f in FEATURES),
                       doc["embedding_model"]["sha256"], doc["settings"], str(p), doc)


def check_calibration(cal: AnyCalibration, embedding_sha256: str,
                      settings: dict[str, Any]) -> None:
    """Refuse a calibration fitted for other model files or other retrieval settings."""
    if cal.embedding_sha256 != embedding_sha256:
        raise ConfigError(
            f"{cal.path}: calibration was fitted for embedding model files "
            f"{cal.embedding_sha256[:16]}…, this run uses {embedding_sha256[:16]}…; fit one with "
            "benchmarks/production_retrieval/calibrate.py and pass --calibration FILE")
    # the model is compared by its files' hash above, not by the name or path it was given
    from engram_eval.production.settings import ProductionSettings
    from engram_eval.provenance.sidecar import diff

    try:  # a record in the older flat layout (calibration_v1.json) is compared in this one
        recorded = ProductionSettings.from_recorded(cal.settings).retrieval_part()
    except ConfigError as e:
        raise ConfigError(f"{cal.path}: its recorded settings are not production settings: "
                          f"{e}") from None
    d = diff(_effective({k: v for k, v in recorded.items() if k != "embedding_model"}),
             _effective({k: v for k, v in settings.items() if k != "embedding_model"}))
    if d:
        given = settings_file_for(cal.path)
        how = (f"pass --settings {given} to reproduce it" if given else
               "pass --settings with the settings it records to reproduce it")
        raise ConfigError(f"{cal.path}: calibration was fitted under other settings: "
                          + "; ".join(d[:5]) + f"; {how}")


def settings_file_for(calibration: str | Path) -> str | None:
    """The settings file packaged beside a calibration file (``calibration_X.json`` ->
    ``settings_X.json``, the settings it was fitted under), named as ``--settings`` takes it
    (relative to the package's root for a package file); None when there is none."""
    from engram_eval.io import package_root

    p = Path(calibration)
    if not p.name.startswith("calibration_"):
        return None
    s = p.with_name("settings_" + p.name.removeprefix("calibration_"))
    if not s.is_file():
        return None
    try:
        return s.resolve().relative_to(package_root()).as_posix()
    except ValueError:
        return str(s)


def _effective(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` without what cannot act: without a rerank anywhere, the rerank fields
    (model, backend, unit, blend...), the gate's ``rerank_confidence`` and a people override
    that keeps the rerank off. A calibration fitted before the rerank stage became the
    default therefore still matches the same settings with ``rerank`` false, whatever the
    rerank defaults are now. Likewise ``embedding_batch_isolated`` where no encoder is int8
    (an fp32 or bf16 vector does not depend on its batch)."""
    from dataclasses import fields as dc_fields

    from engram_eval.retrieval.settings import RetrievalSettings

    people = dict(settings.get("people_overrides") or {})
    if "int8" not in (settings.get("embedding_precision"), people.get("embedding_precision")):
        settings = {k: v for k, v in settings.items() if k != "embedding_batch_isolated"}
    if settings.get("rerank") or people.get("rerank"):
        return settings
    rerank_fields = {f.name for f in dc_fields(RetrievalSettings)
                     if f.metadata.get("group") == "rerank" and f.name != "rerank"}
    rerank_fields.add("rerank_confidence")  # the gate's source with a rerank
    out = {k: v for k, v in settings.items() if k not in rerank_fields}
    if "people_overrides" in settings:
        out["people_overrides"] = {k: v for k, v in people.items()
                                   if k not in rerank_fields and k != "rerank"}
    return out


# --------------------------------------------------------------------------- fitting


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1e-3,
                 iterations: int = 100) -> tuple[float, np.ndarray]:
    """Logistic regression by Newton's method (IRLS) with a small L2 penalty on the weights
    (not the intercept). Returns (intercept, weights). Deterministic."""
    n, d = x.shape
    a = np.hstack([np.ones((n, 1)), x])
    beta = np.zeros(d + 1)
    reg = np.full(d + 1, l2)
    reg[0] = 0.0
    for _ in range(iterations):
        z = a @ beta
        p = 1.0 / (1.0 + np.exp(-z))
        w = p * (1 - p)
        grad = a.T @ (p - y) + reg * beta
        hess = (a * w[:, None]).T @ a + np.diag(reg) + 1e-9 * np.eye(d + 1)
        step = np.linalg.solve(hess, grad)
        beta -= step
        if float(np.max(np.abs(step))) < 1e-10:
            break
    return float(beta[0]), beta[1:].copy()


def reliability(prob: Sequence[float], label: Sequence[int], bins: int = 10) -> dict[str, Any]:
    """Expected calibration error over ``bins`` equal-width bins, with the bin table:
    ECE = sum_b (n_b / n) * |mean(label in b) - mean(prob in b)|."""
    p = np.asarray(prob, dtype=float)
    y = np.asarray(label, dtype=float)
    edges = np.linspace(0, 1, bins + 1)
    table: list[dict[str, Any]] = []
    ece = 0.0
    for i in range(bins):
        lo, hi = edges[i], edges[i + 1]
        m = (p >= lo) & ((p < hi) if i < bins - 1 else (p <= hi))
        nb = int(m.sum())
        if nb:
            acc, conf = float(y[m].mean()), float(p[m].mean())
            ece += nb / len(p) * abs(acc - conf)
            table.append({"lo": float(lo), "hi": float(hi), "n": nb, "mean_confidence": conf,
                          "fraction_gold": acc})
        else:
            table.append({"lo": float(lo), "hi": float(hi), "n": 0, "mean_confidence": None,
                          "fraction_gold": None})
    return {"ece": ece, "bins": table, "n": int(len(p))}


def log_loss(prob: Sequence[float], label: Sequence[int]) -> float:
    eps = 1e-12
    return float(-np.mean([y * math.log(max(p, eps)) + (1 - y) * math.log(max(1 - p, eps))
                           for p, y in zip(prob, label, strict=True)]))
