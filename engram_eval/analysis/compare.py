"""Paired comparison of two runs over the same questions: ``engram-eval compare A B``.

Every number is computed from the rows' stored per-question metrics (the package's own metric
definitions stay the single source); nothing is re-scored here.

Refusals (ProvenanceError, nothing written): the runs were made over different dataset files
(dataset sha256 from each run's summary or sidecar; a run with neither is refused), over
different question sets, or with different gold for some question under the protocol; a row
without metrics for the protocol in one run but not the other; a torn rows file.

For each group (``overall`` and each question type) and each metric, with ``d_i = B_i - A_i``
over the group's ``n`` questions:

* ``delta`` = mean(d) (B minus A).
* Paired bootstrap interval (percentile, default 95%): a fresh
  ``numpy.random.default_rng(seed)`` per group draws ``idx = rng.integers(0, n, size=(n_boot,
  n))``; each replicate's delta is ``mean(d[idx[r]])``; the interval is
  ``numpy.quantile(replicates, [alpha/2, 1 - alpha/2])`` (linear interpolation). Resampling
  questions (not metrics) keeps every metric's replicate on the same question sample.
* Binary metrics are decided by NAME (``recall_any@k``, ``recall_all@k``, ``hit@k``), never by
  the values seen; a value other than 0/1 for such a metric is an error. For them, the exact
  McNemar test: with ``b`` = questions 1 in A and 0 in B (lost) and ``c`` = 0 in A and 1 in B
  (gained), ``p = binomtest(c, b + c, 0.5).pvalue`` (two-sided;
  ``= min(1, 2 * sum_{i<=min(b,c)} C(b+c, i) / 2^(b+c))``; 1.0 when ``b + c = 0``).
  ``significant`` = p < alpha. For other metrics ``significant`` = the interval excludes 0.
* Flipped questions (binary metrics, overall): ids gained (0 -> 1) and lost (1 -> 0).

Segment consistency (overall, each metric): the questions are cut into ``segments`` fixed
parts, by default ordered by ``sha256(question_id)`` (``--segment-by hash``; ``order`` keeps
the rows' question order), with ``numpy.array_split`` sizes. ``robust`` is True when the
overall delta is non-zero and no segment's delta has the opposite sign (a segment with delta
0 does not flip); a non-zero delta that flips in some segment is flagged not robust.

Segmented check (``compare_runs(..., segment_size=S)``, ``--segment-size S``), the
falsification test Memo applies to its own changes: the questions, in the rows' order of A
(the dataset's order), are cut into fixed consecutive segments of S questions (the last may
be shorter). For each segment and metric the report gives A's and B's means and ``delta``;
per metric, ``positive`` counts segments with delta > 0 and the verdict is ``every segment
positive`` only when all of them are (a segment with delta 0 is not positive), otherwise
``not every segment positive (k of N)``; ``falsified`` is True when the overall delta is
positive but some segment's is not (the change fails the check). The report gains the key
``segmented_check`` only when asked; without it the report is unchanged.

Clustered resampling (``compare_runs(..., cluster="id-prefix")``, ``--cluster id-prefix``).
The default, ``cluster="question"``, is everything above, and its report is exactly the one
described there (no key is added or changed). With ``"id-prefix"`` the unit of resampling and
of testing is a cluster of questions instead of a question, because questions that share a
conversation are not independent. The cluster of a question is its ``question_id`` up to (not
including) the first ``:`` (LoCoMo ``conv-26:q17`` -> ``conv-26``); if some compared question's
id has no ``:``, the comparison is refused (ConfigError naming the id).

In each group (``overall`` and each question type), the clusters that have questions in the
group are numbered ``g = 0 .. G-1`` in order of first appearance in the rows of A. For each
metric, ``S_g`` = sum of ``d_i`` over the group's questions in cluster g, and ``n_g`` = their
number. ``a``, ``b`` and ``delta`` are unchanged (``delta = sum_g S_g / sum_g n_g = mean(d)``).

* Cluster bootstrap interval: a fresh ``numpy.random.default_rng(seed)`` per group draws
  ``idx = rng.integers(0, G, size=(n_boot, G))``; with ``c[r, g]`` = the number of times
  cluster g occurs in ``idx[r]``, replicate r is the ratio
  ``sum_g c[r, g] * S_g / sum_g c[r, g] * n_g`` (a cluster drawn twice counts twice, in both
  sums). Every metric uses the same cluster draws. The interval is the same percentile rule
  (``numpy.quantile(replicates, [alpha/2, 1 - alpha/2])``).
* Significance, for EVERY metric (binary ones too): a sign-flip (randomisation) test on the
  cluster sums. For a sign vector ``e`` in ``{-1, +1}^G``, ``T(e) = |sum_g e_g * S_g|``; the
  observed value is ``T_obs = |sum_g S_g|``, and ``e`` counts when
  ``T(e) >= T_obs - 1e-12``.

  - ``G <= 16``: exact. All ``2^G`` vectors are enumerated (vector ``k`` has ``e_g = -1``
    where bit g of k is set), and ``p = count / 2^G``. The smallest p possible is
    ``2 / 2^G`` (``e`` and ``-e`` give the same T), so with 5 or fewer clusters no difference
    can reach p < 0.05.
  - ``G > 16``: Monte-Carlo. A fresh ``numpy.random.default_rng(seed)`` per group draws
    ``u = rng.random((100000, G))`` and sets ``e = -1`` where ``u < 0.5``, else ``+1``. The
    same vectors serve every metric of the group, and ``p = (1 + count) / (1 + 100000)``.
  - When every ``S_g`` is 0, ``p = 1``.

  ``significant`` = p < alpha, and the entry gets ``cluster_test`` = ``{"p", "clusters": G,
  "method": "exact sign-flip" | "monte-carlo sign-flip", "sign_vectors", "min_p"}`` (with
  ``"seed"`` for Monte-Carlo). Binary metrics still carry their ``mcnemar`` counts and p, but
  only as description: with clusters, the McNemar p does not decide anything.
* The report's ``settings`` gain ``resampling_unit`` (``"cluster (question id prefix before
  ':')"``), ``cluster``, ``clusters`` (G overall), ``significance`` and ``sign_flip``, and
  ``interval`` and ``binary_test`` describe the clustered procedure. Each group gains
  ``clusters``. Flips and segment consistency are still computed per question.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from engram_eval.errors import ConfigError, DataError, ProvenanceError
from engram_eval.io import printable
from engram_eval.runs.reader import FinishedRun

BINARY_METRIC = re.compile(r"^(recall_any|recall_all|hit)@\d+$")
HEADLINE = ("recall_any@1", "recall_any@5", "recall_all@5", "ndcg_any@5", "mrr")
KIND = "engram-eval compare report"
CLUSTER_MODES = ("question", "id-prefix")
CLUSTER_UNIT = "cluster (question id prefix before ':')"
SIGN_FLIP_EXACT_MAX = 16  # clusters up to which every sign vector is enumerated
SIGN_FLIP_DRAWS = 100000  # Monte-Carlo sign vectors above that
SIGN_FLIP_TOL = 1e-12
#: Most bootstrap replicates a comparison draws (``--bootstrap``): ten times the default.
#: At 10000 the Monte-Carlo error of an interval's ends is already far below their
#: distance; each replicate costs time (in every group) and memory for its deltas, so a
#: larger count is refused rather than run for hours or out of memory.
MAX_BOOTSTRAP = 100_000
#: Draw counts held at once (replicates x units): the draws are made in batches of this many
#: cells from the one generator, so memory does not grow with ``n_boot`` times ``n`` and
#: the replicates are the same as from one draw of ``(n_boot, n)``.
BATCH_CELLS = 1 << 21


def is_binary_metric(name: str) -> bool:
    return bool(BINARY_METRIC.match(name))


# -- statistics -----------------------------------------------------------------------------------
def mcnemar_exact(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """Exact McNemar test on paired 0/1 outcomes (see module doc)."""
    try:
        from scipy.stats import binomtest
    except ImportError:  # pragma: no cover - depends on the environment
        raise ConfigError("compare needs scipy for the exact McNemar test: "
                          "pip install 'scipy>=1.10'") from None

    lost = sum(1 for x, y in zip(a, b, strict=True) if x == 1 and y == 0)
    gained = sum(1 for x, y in zip(a, b, strict=True) if x == 0 and y == 1)
    n = lost + gained
    p = 1.0 if n == 0 else float(binomtest(gained, n, 0.5, alternative="two-sided").pvalue)
    return {"lost": lost, "gained": gained, "discordant": n, "p": min(1.0, p)}


def bootstrap_deltas(diffs: Any, n_boot: int, seed: int) -> Any:
    """Replicate means of each column of ``diffs`` (n x m) under one paired resample of rows.

    Draws exactly ``default_rng(seed).integers(0, n, size=(n_boot, n))`` and returns an
    ``(n_boot, m)`` array whose row r is ``diffs[idx[r]].mean(axis=0)``.
    """
    import numpy as np

    d = np.asarray(diffs, dtype=float)
    # counts[r, i] = how often question i was drawn in replicate r; mean = counts @ d / n
    return np.vstack([c @ d / d.shape[0] for c in draw_counts(d.shape[0], n_boot, seed)])


def draw_counts(n: int, n_boot: int, seed: int) -> Iterator[Any]:
    """The ``(n_boot, n)`` array of how often each of ``n`` units is drawn in each
    replicate, from exactly ``default_rng(seed).integers(0, n, size=(n_boot, n))``, as
    float arrays of consecutive replicates (rows) of at most :data:`BATCH_CELLS` cells
    (one row at least): the same draws, in bounded memory."""
    import numpy as np

    rng = np.random.default_rng(seed)
    step = max(1, BATCH_CELLS // max(1, n))
    for first in range(0, n_boot, step):
        b = min(step, n_boot - first)
        idx = rng.integers(0, n, size=(b, n))
        flat = (idx + (np.arange(b) * n)[:, None]).ravel()
        yield np.bincount(flat, minlength=b * n).reshape(b, n).astype(float)


def percentile_interval(replicates: Any, alpha: float) -> Any:
    import numpy as np

    return np.quantile(replicates, [alpha / 2, 1 - alpha / 2], axis=0)


def cluster_of(question_id: str) -> str:
    """The id-prefix cluster of a question: its id before the first ``:``."""
    head, sep, _ = question_id.partition(":")
    if not sep:
        raise ConfigError(f"--cluster id-prefix: question id {question_id!r} has no ':', so "
                          "it names no cluster (the cluster is the id before the first ':')")
    return head


def cluster_sums(diffs: Any, labels: Sequence[str]) -> tuple[list[str], Any, Any]:
    """Clusters in order of first appearance, their column sums of ``diffs`` (n x m) as a
    ``(G, m)`` array, and their sizes as a ``(G,)`` array."""
    import numpy as np

    d = np.asarray(diffs, dtype=float)
    keys = list(dict.fromkeys(labels))
    pos = {k: g for g, k in enumerate(keys)}
    which = np.array([pos[lab] for lab in labels], dtype=np.intp)
    sums = np.zeros((len(keys), d.shape[1]))
    np.add.at(sums, which, d)
    sizes = np.bincount(which, minlength=len(keys)).astype(float)
    return keys, sums, sizes


def cluster_bootstrap_deltas(sums: Any, sizes: Any, n_boot: int, seed: int) -> Any:
    """Ratio-estimator replicates under a resample of clusters (see module doc).

    Draws exactly ``default_rng(seed).integers(0, G, size=(n_boot, G))`` and returns an
    ``(n_boot, m)`` array whose row r is ``c[r] @ sums / (c[r] @ sizes)``, where ``c[r, g]``
    counts the draws of cluster g in replicate r.
    """
    import numpy as np

    s = np.asarray(sums, dtype=float)
    n = np.asarray(sizes, dtype=float)
    return np.vstack([(c @ s) / (c @ n)[:, None] for c in draw_counts(s.shape[0], n_boot, seed)])


def sign_flip_test(sums: Any, seed: int, *, n_flip: int = SIGN_FLIP_DRAWS,
                   exact_max: int = SIGN_FLIP_EXACT_MAX) -> tuple[Any, dict[str, Any]]:
    """Sign-flip test of each column of the cluster sums ``sums`` (G x m); see module doc.

    Returns the p-values (``(m,)`` array) and what was done: ``method``, ``sign_vectors``,
    ``min_p`` (and ``seed`` for Monte-Carlo).
    """
    import numpy as np

    s = np.asarray(sums, dtype=float)
    g, m = s.shape
    observed = np.abs(s.sum(axis=0)) - SIGN_FLIP_TOL
    all_zero = ~np.any(s != 0, axis=0)
    info: dict[str, Any]
    if g <= exact_max:
        k = np.arange(2 ** g, dtype=np.int64)
        signs = 1.0 - 2.0 * ((k[:, None] >> np.arange(g)) & 1)
        count = (np.abs(signs @ s) >= observed).sum(axis=0)
        p = count / 2 ** g
        info = {"method": "exact sign-flip", "sign_vectors": 2 ** g, "min_p": 2 / 2 ** g}
    else:
        if n_flip < 1:
            raise ConfigError("sign-flip test: n_flip must be >= 1")
        count = np.zeros(m, dtype=np.int64)
        if not all_zero.all():
            rng = np.random.default_rng(seed)
            # drawn in blocks of rows: the same numbers as one rng.random((n_flip, g)) call
            block = max(1, (1 << 20) // g)
            done = 0
            while done < n_flip:
                r = min(block, n_flip - done)
                signs = np.where(rng.random((r, g)) < 0.5, -1.0, 1.0)
                count += (np.abs(signs @ s) >= observed).sum(axis=0)
                done += r
        p = (1 + count) / (1 + n_flip)
        info = {"method": "monte-carlo sign-flip", "sign_vectors": n_flip,
                "min_p": 1 / (1 + n_flip), "seed": seed}
    return np.where(all_zero, 1.0, p), info


def segment_ids(ids: Sequence[str], n_segments: int, by: str) -> list[list[str]]:
    import numpy as np

    if by == "hash":
        order = sorted(ids, key=lambda i: (hashlib.sha256(i.encode("utf-8")).hexdigest(), i))
    elif by == "order":
        order = list(ids)
    else:
        raise ConfigError(f"--segment-by must be hash or order, got {by!r}")
    return [list(part) for part in np.array_split(np.array(order, dtype=object), n_segments)]


# -- the comparison -------------------------------------------------------------------------------
def _metrics_of(run: FinishedRun, protocol: str) -> dict[str, dict[str, float]]:
    out = {}
    for r in run.rows:
        m = r["metrics"].get(protocol) if isinstance(r["metrics"], dict) else None
        if m is not None:
            out[r["question_id"]] = m
    return out


def check_comparable(a: FinishedRun, b: FinishedRun, protocol: str) -> None:
    for run in (a, b):
        if run.dataset_sha256 is None:
            raise ProvenanceError(f"{run.path}: neither a summary nor a sidecar names the "
                                  "dataset's sha256; cannot show both runs used the same data")
    if a.dataset_sha256 != b.dataset_sha256:
        raise ProvenanceError(
            f"runs are over different datasets: {a.path} used {a.dataset_name} (sha256 "
            f"{a.dataset_sha256}), {b.path} used {b.dataset_name} (sha256 {b.dataset_sha256})")
    ia = [r["question_id"] for r in a.rows]
    ib = [r["question_id"] for r in b.rows]
    if set(ia) != set(ib):
        only_a = sorted(set(ia) - set(ib))
        only_b = sorted(set(ib) - set(ia))
        raise ProvenanceError(
            f"runs cover different question sets: {len(only_a)} only in {a.path} "
            f"({', '.join(only_a[:5])}), {len(only_b)} only in {b.path} "
            f"({', '.join(only_b[:5])})")
    rb = {r["question_id"]: r for r in b.rows}
    for ra in a.rows:
        qid = ra["question_id"]
        ga = (ra.get("gold") or {}).get(protocol)
        gb = (rb[qid].get("gold") or {}).get(protocol)
        if ga is not None and gb is not None and sorted(ga) != sorted(gb):
            raise ProvenanceError(f"question {qid}: gold under {protocol!r} differs between "
                                  f"{a.path} and {b.path}")
        if ra["question_type"] != rb[qid]["question_type"]:
            raise ProvenanceError(f"question {qid}: question_type differs between the runs")
        ma = ra["metrics"].get(protocol) if isinstance(ra["metrics"], dict) else None
        mb = rb[qid]["metrics"].get(protocol) if isinstance(rb[qid]["metrics"], dict) else None
        if (ma is None) != (mb is None):
            raise ProvenanceError(f"question {qid}: scored under {protocol!r} in only one of "
                                  "the runs")


def check_bootstrap(n_boot: int) -> None:
    """One :class:`ConfigError` when ``n_boot`` is not a count from 1 to
    :data:`MAX_BOOTSTRAP` (the bound stated)."""
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 1:
        raise ConfigError(f"--bootstrap must be an integer >= 1 (got {n_boot!r})")
    if n_boot > MAX_BOOTSTRAP:
        raise ConfigError(f"--bootstrap {n_boot} is more replicates than the limit of "
                          f"{MAX_BOOTSTRAP} (ten times the default 10000, whose intervals "
                          "are already stable to far below their width); time and memory "
                          "grow with the count")


def compare_runs(a: FinishedRun, b: FinishedRun, *, protocol: str = "answerable",
                 metrics: Sequence[str] | None = None, n_boot: int = 10000, seed: int = 0,
                 segments: int = 5, segment_by: str = "hash", alpha: float = 0.05,
                 cluster: str = "question", segment_size: int | None = None) -> dict[str, Any]:
    """The paired comparison report of runs A and B (see module doc); ``cluster`` is
    ``"question"`` (resample and test questions) or ``"id-prefix"`` (resample and test
    clusters of questions sharing the id prefix before ``:``)."""
    import numpy as np

    if cluster not in CLUSTER_MODES:
        raise ConfigError(f"--cluster must be one of {', '.join(CLUSTER_MODES)}, "
                          f"got {cluster!r}")
    check_bootstrap(n_boot)
    if segments < 1:
        raise ConfigError("--segments must be >= 1")
    if segment_size is not None and segment_size < 1:
        raise ConfigError("--segment-size must be >= 1")
    if not 0 < alpha < 1:
        raise ConfigError("alpha must be in (0, 1)")
    check_comparable(a, b, protocol)
    ma, mb = _metrics_of(a, protocol), _metrics_of(b, protocol)
    if not ma:
        raise ConfigError(f"no question is scored under protocol {protocol!r} in {a.path}")
    order = [r["question_id"] for r in a.rows if r["question_id"] in ma]
    types = {r["question_id"]: r["question_type"] for r in a.rows}
    clustered = cluster == "id-prefix"
    labels = [cluster_of(q) for q in order] if clustered else []
    first = ma[order[0]]
    names = list(metrics) if metrics else list(first)
    for qid in order:
        for run, m in ((a, ma[qid]), (b, mb[qid])):
            for name in names:
                v = m.get(name)
                if not isinstance(v, int | float) or isinstance(v, bool):
                    raise DataError(run.path, f"question_id={qid}", f"metrics.{protocol}.{name}",
                                    "missing or not a number")
                if is_binary_metric(name) and v not in (0, 1):
                    raise DataError(run.path, f"question_id={qid}", f"metrics.{protocol}.{name}",
                                    f"binary metric has value {v}")
    A = np.array([[float(ma[q][n]) for n in names] for q in order])
    B = np.array([[float(mb[q][n]) for n in names] for q in order])
    D = B - A
    groups: dict[str, list[int]] = {"overall": list(range(len(order)))}
    for i, q in enumerate(order):
        groups.setdefault(types[q], []).append(i)
    out_groups: dict[str, Any] = {}
    for g in ["overall", *sorted(k for k in groups if k != "overall")]:
        ix = groups[g]
        if clustered:
            keys, sums, sizes = cluster_sums(D[ix], [labels[i] for i in ix])
            reps = cluster_bootstrap_deltas(sums, sizes, n_boot, seed)
            pvals, flip_info = sign_flip_test(sums, seed)
        else:
            reps = bootstrap_deltas(D[ix], n_boot, seed)
        lo, hi = percentile_interval(reps, alpha)
        res: dict[str, Any] = {}
        for j, name in enumerate(names):
            entry: dict[str, Any] = {
                "a": float(A[ix, j].mean()), "b": float(B[ix, j].mean()),
                "delta": float(D[ix, j].mean()), "ci": [float(lo[j]), float(hi[j])],
                "binary": is_binary_metric(name)}
            if entry["binary"]:  # with clusters only descriptive: the cluster test decides
                entry["mcnemar"] = mcnemar_exact(A[ix, j].tolist(), B[ix, j].tolist())
            if clustered:
                entry["cluster_test"] = {"p": float(pvals[j]), "clusters": len(keys),
                                         **flip_info}
                entry["significant"] = bool(pvals[j] < alpha)
            elif entry["binary"]:
                entry["significant"] = entry["mcnemar"]["p"] < alpha
            else:
                entry["significant"] = bool(lo[j] > 0 or hi[j] < 0)
            res[name] = entry
        out_groups[g] = {"n": len(ix), **({"clusters": len(keys)} if clustered else {}),
                         "metrics": res}
    flips = {}
    for j, name in enumerate(names):
        if is_binary_metric(name):
            flips[name] = {"gained": [q for i, q in enumerate(order) if D[i, j] > 0],
                           "lost": [q for i, q in enumerate(order) if D[i, j] < 0]}
    segs = segment_ids(order, segments, segment_by)
    pos = {q: i for i, q in enumerate(order)}
    seg_out: dict[str, Any] = {}
    for j, name in enumerate(names):
        overall = float(D[:, j].mean())
        deltas = [float(D[[pos[q] for q in s], j].mean()) if s else 0.0 for s in segs]
        sign = (overall > 0) - (overall < 0)
        flipped = [k for k, d in enumerate(deltas) if sign and ((d > 0) - (d < 0)) == -sign]
        seg_out[name] = {"deltas": deltas, "flipped_segments": flipped,
                         "robust": bool(sign != 0 and not flipped),
                         "verdict": ("no difference" if sign == 0 else
                                     "robust" if not flipped else "not robust")}
    from engram_eval.io import sha256_file

    ov = out_groups["overall"]["metrics"]
    verdict = {
        "significantly_better": [n for n in names if ov[n]["significant"] and ov[n]["delta"] > 0],
        "significantly_worse": [n for n in names if ov[n]["significant"] and ov[n]["delta"] < 0],
        "not_robust": [n for n in names if seg_out[n]["verdict"] == "not robust"],
        "note": "overall only; one test per metric, no correction for multiple comparisons",
    }
    settings: dict[str, Any] = {
        "bootstrap": n_boot, "seed": seed, "confidence": 1 - alpha,
        "alpha": alpha, "interval": "paired bootstrap percentile",
        "segments": segments, "segment_by": segment_by,
        "binary_metrics": "by name: recall_any@k, recall_all@k, hit@k",
        "binary_test": "exact McNemar (scipy.stats.binomtest, two-sided)"}
    if clustered:
        settings.update({
            "interval": "cluster bootstrap percentile (clusters drawn with replacement; "
                        "replicate = sum of drawn cluster sums of d / sum of drawn cluster "
                        "sizes)",
            "binary_test": "sign-flip test on cluster sums, as for every metric; the exact "
                           "McNemar counts and p are reported but do not decide",
            "resampling_unit": CLUSTER_UNIT,
            "cluster": cluster,
            "clusters": out_groups["overall"]["clusters"],
            "significance": (f"every metric: sign-flip test on the cluster sums of d, p < "
                             f"alpha; exact over all 2^G sign vectors when G <= "
                             f"{SIGN_FLIP_EXACT_MAX}, else Monte-Carlo with "
                             f"{SIGN_FLIP_DRAWS} sign vectors from default_rng(seed)"),
            "sign_flip": {"exact_max_clusters": SIGN_FLIP_EXACT_MAX,
                          "monte_carlo_vectors": SIGN_FLIP_DRAWS,
                          "tolerance": SIGN_FLIP_TOL}})
    extra: dict[str, Any] = {}
    if segment_size is not None:
        extra["segmented_check"] = segmented_check(order, names, A, B, segment_size)
    return {
        "kind": KIND,
        "protocol": protocol,
        "direction": "delta = B - A",
        "a": a.describe(),
        "b": b.describe(),
        "dataset": {"name": a.dataset_name, "sha256": a.dataset_sha256},
        "n": len(order),
        "question_order": "rows of A",
        "settings": settings,
        "metrics": names,
        "groups": out_groups,
        "flips": flips,
        "segment_consistency": {"segments": [len(s) for s in segs], "by_metric": seg_out},
        "verdict": verdict,
        "generator": {"module": "engram_eval/analysis/compare.py",
                      "sha256": sha256_file(Path(__file__))},
        **extra,
    }


def segmented_check(order: Sequence[str], names: Sequence[str], A: Any, B: Any,
                    size: int) -> dict[str, Any]:
    """Fixed consecutive segments of ``size`` questions in ``order`` (module doc)."""
    bounds = [(i, min(i + size, len(order))) for i in range(0, len(order), size)]
    segs: list[dict[str, Any]] = []
    for k, (lo, hi) in enumerate(bounds):
        segs.append({"index": k, "questions": [lo + 1, hi], "n": hi - lo,
                     "first": order[lo], "last": order[hi - 1],
                     "metrics": {n: {"a": float(A[lo:hi, j].mean()),
                                     "b": float(B[lo:hi, j].mean()),
                                     "delta": float((B[lo:hi, j] - A[lo:hi, j]).mean())}
                                 for j, n in enumerate(names)}})
    by_metric: dict[str, Any] = {}
    for j, n in enumerate(names):
        deltas = [seg["metrics"][n]["delta"] for seg in segs]
        positive = sum(1 for d in deltas if d > 0)
        overall = float((B[:, j] - A[:, j]).mean())
        every = positive == len(deltas)
        by_metric[n] = {"deltas": deltas, "positive": positive, "segments": len(deltas),
                        "every_segment_positive": every,
                        "verdict": ("every segment positive" if every else
                                    f"not every segment positive ({positive} of "
                                    f"{len(deltas)})"),
                        "falsified": bool(overall > 0 and not every)}
    return {"segment_size": size, "order": "rows of A (consecutive, fixed)",
            "rule": "a segment is positive when its delta (B - A) > 0",
            "segments": segs, "by_metric": by_metric}


def format_report(rep: Mapping[str, Any], metrics: Sequence[str] | None = None) -> str:
    names = [m for m in (metrics or HEADLINE) if m in rep["metrics"]] or list(rep["metrics"])[:5]
    a, b = rep["a"], rep["b"]
    st = rep["settings"]
    conf = int(round(st["confidence"] * 100))
    unit = st.get("resampling_unit", "question")  # question-mode reports carry no such key
    clustered = unit != "question"
    lines = [f"compare protocol={rep['protocol']} n={rep['n']}  delta = B - A",
             f"  A: {a['path']} ({a['retriever']}, fingerprint {a['fingerprint']})",
             f"  B: {b['path']} ({b['retriever']}, fingerprint {b['fingerprint']})",
             f"  dataset {rep['dataset']['name']} sha256 {rep['dataset']['sha256']}"]
    if clustered:
        lines += [f"  resampling unit: {unit}, {st['clusters']} clusters overall",
                  f"  {conf}% cluster bootstrap ({st['bootstrap']} resamples, seed "
                  f"{st['seed']}); significance: sign-flip test on cluster sums for every "
                  "metric (McNemar not used)", ""]
    else:
        lines += ["  resampling unit: question",
                  f"  {conf}% paired bootstrap ({st['bootstrap']} resamples, seed "
                  f"{st['seed']}); exact McNemar p for binary metrics", ""]
    for g, gv in rep["groups"].items():
        lines.append(f"{printable(g)} (n={gv['n']}, {gv['clusters']} clusters)" if clustered
                     else f"{printable(g)} (n={gv['n']})")
        for n in names:
            e = gv["metrics"][n]
            if clustered:
                ct = e["cluster_test"]
                how = "exact" if ct["method"] == "exact sign-flip" else "Monte-Carlo"
                p = f"  sign-flip p={ct['p']:.4g} ({how})"
                if e["binary"]:
                    p += f" (+{e['mcnemar']['gained']}/-{e['mcnemar']['lost']} questions)"
            else:
                p = f"  McNemar p={e['mcnemar']['p']:.4g} (+{e['mcnemar']['gained']}/-" \
                    f"{e['mcnemar']['lost']})" if e["binary"] else ""
            star = " *" if e["significant"] else ""
            lines.append(f"  {n:<15} A={e['a']:.4f} B={e['b']:.4f} delta={e['delta']:+.4f} "
                         f"[{e['ci'][0]:+.4f}, {e['ci'][1]:+.4f}]{p}{star}")
    lines.append("")
    lines.append(f"segment consistency ({len(rep['segment_consistency']['segments'])} segments "
                 f"by {rep['settings']['segment_by']}):")
    for n in names:
        s = rep["segment_consistency"]["by_metric"][n]
        lines.append(f"  {n:<15} {s['verdict']:<13} "
                     + " ".join(f"{d:+.3f}" for d in s["deltas"]))
    if "segmented_check" in rep:
        sc = rep["segmented_check"]
        lines.append(f"segmented check ({len(sc['segments'])} fixed segments of "
                     f"{sc['segment_size']} questions in row order; B - A per segment):")
        for n in names:
            chk = sc["by_metric"][n]
            lines.append(f"  {n:<15} {chk['verdict']:<36} "
                         + " ".join(f"{d:+.3f}" for d in chk["deltas"]))
    v = rep["verdict"]
    lines.append(f"significantly better (overall): {', '.join(v['significantly_better']) or '-'}")
    lines.append(f"significantly worse (overall): {', '.join(v['significantly_worse']) or '-'}")
    lines.append(f"not robust across segments: {', '.join(v['not_robust']) or '-'}")
    for n in names:
        if n in rep["flips"]:
            f = rep["flips"][n]
            lines.append(f"flips {n}: gained {len(f['gained'])} {f['gained'][:10]}, lost "
                         f"{len(f['lost'])} {f['lost'][:10]}")
    return "\n".join(lines)
