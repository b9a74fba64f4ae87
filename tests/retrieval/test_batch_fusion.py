"""The batched scorer (engram_eval.retrieval.fusion: FusionSetting, SignalBatch): fusion and the
temporal step over many questions at once give, for each question, exactly the scores and the
order of the pipeline's per-question path (pipeline.rescore, run_pipeline), for RRF and convex
fusion (min-max, z-score), with and without the temporal step, and under the per-structure
overrides of a people's chat; small cases by formula."""

from __future__ import annotations

import hashlib
import itertools

import numpy as np
import pytest

from engram_eval.data.records import Session, Turn
from engram_eval.retrieval import fusion as F
from engram_eval.retrieval import pipeline as P
from engram_eval.retrieval.settings import SIGNALS, RetrievalSettings

# Questions of different corpus sizes (the batch pads them), with ties, sessions a signal does
# not inform, a signal constant over its corpus (dropped), a signal informing no session, a
# signal one question did not compute, negative z-scores, and unknown window membership (None).
QUESTIONS: list[tuple[dict[str, F.Signal], list[bool | None]]] = [
    ({"dense": F.Signal.of([0.3, 0.9, 0.3, 0.1]),
      "bm25_user": F.Signal.of([2.0, 0.0, 2.0, 7.5], [True, False, True, True]),
      "bm25_turn": F.Signal.of([1.0, 1.0, 1.0, 1.0])},
     [True, False, None, True]),
    ({"dense": F.Signal.of([0.2, 0.8]),
      "bm25_user": F.Signal.of([0.0, 0.0], [False, False]),
      "bm25_turn": F.Signal.of([0.0, 3.0], [False, True])},
     [False, True]),
    ({"dense": F.Signal.of([0.5, -0.2, 0.1, 0.7, 0.4]),
      "bm25_user": F.Signal.of([1.0, 4.0, 0.0, 2.5, 9.0], [True, True, False, True, True]),
      "bm25_assistant": F.Signal.of([0.0, 1.5, 3.0, 0.0, 0.5],
                                    [False, True, True, False, True]),
      "bm25_turn": F.Signal.of([3.0, 0.0, 1.0, 2.0, 0.0], [True, False, True, True, False])},
     [None, None, True, False, True]),
    ({"dense": F.Signal.of([0.4]), "bm25_user": F.Signal.of([1.0])}, [True]),
    ({"dense": F.Signal.of([0.6, 0.6, 0.1])}, [False, False, False]),  # dense only
]

NAMES = ("dense", "bm25_user", "bm25_assistant", "bm25_turn")
WEIGHTS = [(1.0, 0.3, 0.1, 0.15), (0.0, 1.0, 0.0, 0.5), (1.0, 1.0, 1.0, 1.0)]
METHODS = [("rrf", "minmax", 60.0), ("rrf", "minmax", 0.0), ("convex", "minmax", 60.0),
           ("convex", "zscore", 60.0)]
TEMPORAL = [(False, 1.25), (True, 1.25), (True, 3.0)]
SETTINGS = [F.FusionSetting(m, nm, k, tuple(zip(NAMES, w, strict=True)), t, b)
            for (m, nm, k), w, (t, b) in itertools.product(METHODS, WEIGHTS, TEMPORAL)]


def _batch() -> F.SignalBatch:
    return F.SignalBatch.of([s for s, _ in QUESTIONS], [[x is True for x in w]
                                                        for _, w in QUESTIONS])


def _settings_of(signals: dict[str, F.Signal], setting: F.FusionSetting) -> RetrievalSettings:
    """The run settings a question's pipeline would hold: its computed signals switched on."""
    base = RetrievalSettings(**{flag: name in signals for name, flag, _ in SIGNALS})
    return P.with_fusion_setting(base, setting)


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: (
    f"{s.fusion}-{s.normalisation}-k{s.rrf_k:g}-w{s.weights[0][1]:g},{s.weights[1][1]:g}"
    f"-t{int(s.temporal)}x{s.temporal_boost:g}"))
def test_batch_equals_the_per_question_pipeline_bit_for_bit(setting: F.FusionSetting) -> None:
    batch = _batch()
    final, orders = batch.final(setting), batch.orders(setting)
    for qi, (signals, in_window) in enumerate(QUESTIONS):
        n = len(in_window)
        ref_order, ref_final = P.rescore(signals, in_window, _settings_of(signals, setting))
        assert final[qi, :n].tobytes() == np.asarray(ref_final, dtype=np.float64).tobytes()
        assert orders[qi, :n].tolist() == ref_order
        assert np.all(final[qi, n:] == -np.inf)  # padding never ranks above a session


def test_rrf_and_boost_by_formula() -> None:
    s = F.FusionSetting("rrf", "minmax", 1.0, (("dense", 1.0), ("bm25_user", 2.0)), True, 1.5)
    signals, in_window = QUESTIONS[0]
    b = F.SignalBatch.of([signals], [[x is True for x in in_window]])
    # dense ranks 2, 1, 3, 4 (tie 0.3: corpus order); bm25_user ranks 2, -, 3, 1
    fused = [1 / (1 + 2) + 2 / (1 + 2), 1 / (1 + 1), 1 / (1 + 3) + 2 / (1 + 3),
             1 / (1 + 4) + 2 / (1 + 1)]
    assert b.fused(s)[0].tolist() == pytest.approx(fused, rel=1e-15)
    mult = [1.5, 1.0, 1.0, 1.5]  # in_window None counts as outside
    assert b.final(s)[0].tolist() == pytest.approx([f * m for f, m in zip(fused, mult,
                                                                          strict=True)])
    assert b.orders(s)[0].tolist() == [3, 0, 2, 1]


def test_zscore_shift_and_boost_by_formula() -> None:
    """Convex z-score fusion can go negative: the temporal step multiplies ``fused - min``."""
    d = F.Signal.of([1.0, 2.0, 6.0])
    u = F.Signal.of([0.0, 4.0, 2.0], [False, True, True])
    s = F.FusionSetting("convex", "zscore", 60.0, (("dense", 1.0), ("bm25_user", 3.0)),
                        True, 2.0)
    b = F.SignalBatch.of([{"dense": d, "bm25_user": u}], [[True, False, False]])
    sd = np.sqrt(((1 - 3) ** 2 + (2 - 3) ** 2 + (6 - 3) ** 2) / 3)
    zd = [(1 - 3) / sd, (2 - 3) / sd, (6 - 3) / sd]
    zu = [-1.0, 1.0, -1.0]  # informative 4, 2: mean 3, std 1; the uninformative gets the floor
    fused = [(1 * a + 3 * c) / 4 for a, c in zip(zd, zu, strict=True)]
    low = min(fused)
    assert b.fused(s)[0].tolist() == pytest.approx(fused, rel=1e-12)
    assert b.final(s)[0].tolist() == pytest.approx([(fused[0] - low) * 2.0, fused[1] - low,
                                                    fused[2] - low], rel=1e-12)


def test_a_signal_one_question_lacks_is_out_of_its_denominator() -> None:
    """Question 4 computed dense only: convex over dense and bm25_user is dense alone there."""
    s = F.FusionSetting("convex", "minmax", 60.0, (("dense", 1.0), ("bm25_user", 3.0)),
                        False, 1.0)
    got = _batch().fused(s)[4, :3].tolist()
    assert got == [1.0, 1.0, 0.0]  # min-max of 0.6, 0.6, 0.1 divided by dense's weight only


def test_setting_and_batch_refuse_bad_input() -> None:
    with pytest.raises(ValueError, match="fusion method"):
        F.FusionSetting("borda", "minmax", 60.0, (), False, 1.0)
    with pytest.raises(ValueError, match="rrf k"):
        F.FusionSetting("rrf", "minmax", -1.0, (), False, 1.0)
    with pytest.raises(ValueError, match="normalisation"):
        F.FusionSetting("convex", "rank", 60.0, (), False, 1.0)
    with pytest.raises(ValueError, match="covers 2 sessions, its corpus 3"):
        F.SignalBatch.of([{"dense": F.Signal.of([1.0, 2.0])}], lengths=[3])


# --------------------------------------------------------------------------- whole pipeline


def _encode(texts: list[str]) -> np.ndarray:
    """A deterministic stand-in encoder: unit vectors from each text's hash."""
    out = np.array([np.frombuffer(hashlib.sha256(t.encode()).digest()[:16], dtype=np.uint8)
                    for t in texts], dtype=np.float32) - 127.5
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def _corpus(chat: bool) -> tuple[Session, ...]:
    days = ["2023/05/01 (Mon) 10:00", "2023/05/06 (Sat) 11:00", "2023/05/06 (Sat) 18:00",
            "2023/04/20 (Thu) 09:00", "2023/05/03 (Wed) 12:00"]
    talk = [("I bought a red bike at the market", "a bike is a good buy"),
            ("we went hiking and I bought boots", "boots matter for hiking"),
            ("the market had fresh bread", "bread from the market is nice"),
            ("my sister visited and we cooked", "cooking together is fun"),
            ("I repaired the bike chain", "chains wear out")]
    roles = ("user", "assistant") if chat else ("Ann", "Ben")
    return tuple(Session(f"s{i}", d, (Turn(roles[0], a, 0), Turn(roles[1], b, 1)))
                 for i, (d, (a, b)) in enumerate(zip(days, talk, strict=True)))


SETTINGS_BY_STRUCTURE = RetrievalSettings(
    fusion="rrf", rrf_k=5.0, use_bm25_turn=True, use_bm25_prf=True, use_dense_rocchio=True,
    temporal=True, temporal_boost=1.5, rerank=False,
    people_overrides={"fusion": "convex", "normalisation": "zscore", "temporal_boost": 2.0,
                      "weight_bm25_turn": 0.7})


def test_the_pipeline_scores_are_the_batch_scores_under_per_structure_overrides() -> None:
    """Both structures' questions in one batch; each scored under its own effective setting
    (people's chats: the overrides) gives the pipeline's final scores and order exactly."""
    q, date = "what did I buy last Saturday at the market", "2023/05/08 (Mon) 12:00"
    states = []
    for chat in (True, False):
        corpus = P.build_corpus(_corpus(chat), SETTINGS_BY_STRUCTURE, encode=_encode)
        states.append(P.run_pipeline("q", q, date, SETTINGS_BY_STRUCTURE, corpus,
                                     encode=_encode))
    chat_st, people_st = states
    assert chat_st.settings.fusion == "rrf" and people_st.settings.fusion == "convex"
    assert any(people_st.in_window) and not all(people_st.in_window)
    batch = F.SignalBatch.of([st.signals for st in states],
                             [[x is True for x in st.in_window] for st in states])
    for qi, st in enumerate(states):
        setting = P.fusion_setting(st.settings)
        assert setting.fusion == ("rrf", "convex")[qi]
        assert batch.final(setting)[qi, : st.n].tobytes() == st.final.tobytes()
        assert batch.orders(setting)[qi, : st.n].tolist() == st.order
    # the other structure's setting ranks differently here: the overrides matter
    assert (batch.final(P.fusion_setting(chat_st.settings))[1, : people_st.n].tobytes()
            != people_st.final.tobytes())
