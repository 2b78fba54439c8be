"""`python -m benchmarks cost`: the cost model's arithmetic on hand-made numbers, and the reading
of requests from context rows (the measurement runs the real oracles: `run` in the docs)."""

import pytest
from numpy.polynomial import Polynomial

from benchmarks.harness.cost_model import (
    K,
    MemSearcherFit,
    ReActFit,
    Request,
    crossing,
    fit_memsearcher,
    fit_react,
    measure,
    measured_crossing,
    requests_of,
    spans,
)


def test_spans_are_the_generated_runs_of_the_loss_mask():
    assert spans([1, 1, 0, 0, 1, 0, 1, 1, 1]) == [(0, 2), (4, 1), (6, 3)]
    assert spans([0, 0]) == []


def _row(turn, prompt_len, mask, final):
    return {
        "turn": turn,
        "prompt_len": prompt_len,
        "loss_mask": mask,
        "input_ids": [0] * (prompt_len + len(mask)),
        "is_final": final,
    }


def test_requests_and_per_question_costs_from_rows():
    # MemSearcher, one search: turn 0 action (3 tokens) on a 10-token prompt, tool response (4),
    # memory (2); turn 1 answer (2) on a 12-token prompt
    ms = [_row(0, 10, [1, 1, 1, 0, 0, 0, 0, 1, 1], False), _row(1, 12, [1, 1], True)]
    assert requests_of(ms, "memsearcher") == [
        Request(0, "action", 10, 3, False),
        Request(0, "memory", 17, 2, False),
        Request(1, "action", 12, 2, True),
    ]
    # ReAct, the same plan in one row: prompt 8, action 3, response 4, answer 2
    react = [_row(0, 8, [1, 1, 1, 0, 0, 0, 0, 1, 1], True)]
    assert requests_of(react, "react") == [Request(0, "action", 8, 3, False), Request(1, "action", 15, 2, True)]
    m, _ = measure({"q": ms}, "memsearcher", 1)
    assert (m.questions, m.searches, m.prefill, m.decode, m.learner) == (1, 1.0, 39.0, 7.0, 33.0)
    assert m.context_by_turn == [10.0, 12.0]
    r, _ = measure({"q": react, "p": react}, "react", 1)
    assert (r.questions, r.searches, r.prefill, r.decode, r.learner) == (2, 1.0, 23.0, 5.0, 17.0)


REACT = ReActFit(P=60, q=2, g=140, a=40, f=20, s=0)
MEMSEARCHER = MemSearcherFit(P=70, q=4, u=20, Q=250, qQ=1, v=20, w=25, x=15, a=40, f=20)


def test_the_model_by_hand_at_two_hops():
    r = {x: float(p(2)) for x, p in REACT.costs(K).items()}
    # prefill: 3 requests of 60 + 2*2 + 140 t, t = 0, 1, 2; decode: 2 searches and the answer;
    # learner: the last context and the answer
    assert r == {"prefill": 3 * 64 + 140 * 3, "decode": 2 * 40 + 20, "learner": 64 + 280 + 20}
    m = {x: float(p(2)) for x, p in MEMSEARCHER.costs(K).items()}
    # prefill: actions 78, 98, 118; rewrites 252, 272; decode: 2 x 40 + memories 25, 40 + 20;
    # learner: rows 252 + 25, 272 + 40, and 118 + 20
    assert m == {"prefill": 78 + 98 + 118 + 252 + 272, "decode": 80 + 25 + 40 + 20, "learner": 277 + 312 + 138}
    assert REACT.costs(K)["prefill"].coef.tolist() == [60.0, 132.0, 72.0]  # 72k^2 + 132k + 60
    assert MEMSEARCHER.costs(K)["prefill"].coef.tolist() == [70.0, 324.0, 25.0]  # 25k^2 + 324k + 70
    # skipped searches: n = k - s
    skip = ReActFit(P=60, q=2, g=140, a=40, f=20, s=1)
    assert float(skip.costs(K)["prefill"](3)) == 3 * 66 + 140 * 3  # 2 searches at 3 hops


def test_crossing_is_the_last_root_of_the_difference():
    # ReAct - MemSearcher = 25k^2 - 50k - 75 = 25 (k - 3)(k + 1): cheaper beyond 3 hops
    assert crossing(Polynomial([75, 100, 5]), Polynomial([0, 50, 30])) == pytest.approx(3.0, abs=1e-12)
    assert crossing(Polynomial([0, 0, 5]), Polynomial([0, 100, 1])) is None  # MemSearcher's grows faster: never
    assert crossing(Polynomial([0, 1, 1]), Polynomial([1, 2, 2])) == 0.0  # below at every horizon
    assert crossing(Polynomial([5, 1]), Polynomial([1, 1])) is None  # parallel lines, MemSearcher above
    # the hand-made model: 47k^2 - 192k - 10 = 0 at k = (192 + sqrt(192^2 + 40 * 47)) / 94
    k = crossing(MEMSEARCHER.costs(K)["prefill"], REACT.costs(K)["prefill"])
    assert k == pytest.approx((192 + (192**2 + 40 * 47) ** 0.5) / 94, abs=1e-12)


def test_measured_crossing_is_where_memsearcher_stays_cheaper():
    assert measured_crossing({2: 10, 3: 9, 4: 5}, {2: 8, 3: 10, 4: 6}) == (2, 3)
    assert measured_crossing({2: 10, 3: 5, 4: 7}, {2: 8, 3: 6, 4: 6}) is None  # not at the longest
    assert measured_crossing({2: 1, 3: 1}, {2: 2, 3: 2}) == (None, 2)
    assert measured_crossing({2: 3, 3: 1, 4: 5, 6: 1}, {2: 2, 3: 2, 4: 2, 6: 2}) == (4, 6)


def test_fits_recover_the_parameters_of_exact_requests():
    """Requests made by the model's own rules at 2 and 3 hops are fitted back to its numbers."""
    reqs_r, reqs_m = [], []
    for k in (2, 3):
        for t in range(k + 1):
            final = t == k
            reqs_r.append((k, Request(t, "action", 60 + 2 * k + 140 * t, 20 if final else 40, final)))
            reqs_m.append((k, Request(t, "action", 70 + 4 * k + 20 * t, 20 if final else 40, final)))
            if not final:
                reqs_m.append((k, Request(t, "memory", 250 + 1 * k + 20 * t, 25 + 15 * t, False)))
    r = fit_react(reqs_r, {2: 2.0, 3: 3.0})
    for got, want in zip(
        (r.P, r.q, r.g, r.a, r.f, r.s), (REACT.P, REACT.q, REACT.g, REACT.a, REACT.f, REACT.s), strict=True
    ):
        assert got == pytest.approx(want, abs=1e-9)
    m = fit_memsearcher(reqs_m)
    names = ("P", "q", "u", "Q", "qQ", "v", "w", "x", "a", "f")
    for name in names:
        assert getattr(m, name) == pytest.approx(getattr(MEMSEARCHER, name), abs=1e-9), name
    with pytest.raises(ValueError, match="too few requests to fit ReAct's prompts"):
        fit_react(reqs_r[:2], {2: 2.0})
