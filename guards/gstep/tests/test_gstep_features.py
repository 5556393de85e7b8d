"""G-STEP's 120 features: two small trajectories computed by hand, md5 bins checked by hand, and the
online (RunView) and offline (record) paths giving the same input."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest

import guards.gstep.guard as gstep_module
from guards.chain import GuardChain
from guards.gstep.features import (
    DEFINITIONS,
    FEATURE_NAMES,
    N_FEATURES,
    NUMERIC_NAMES,
    GateInput,
    answer_value,
    features,
    hashed,
    normalise_code,
    numbers,
)
from guards.gstep.training import gate_input_from_record, record_from_events
from kernels.base import CellResult, Output
from tuiagent.backends.scripted import ScriptedBackend, load_script
from tuiagent.core.loop import Agent
from tuiagent.protocol import RunSettings

# Trajectory A: two good calls, then the answer.
A_TURNS = [
    {"text": "Half of 48 is needed.\n```python\nx = 48 / 2\nprint(x)\n```", "stop": "stop"},
    {"text": "So May is 24. Then total:\n```python\nprint(48 + 24)  # total\n```", "stop": "stop"},
    {"text": "The total is \\boxed{72}", "stop": "eos"},
]
A_CALLS = [["x = 48 / 2\nprint(x)", "24.0", False, True], ["print(48 + 24)  # total", "72", False, True]]

# Trajectory B: an error, repeated outputs, a budget note (not executed), a wrong answer.
B_TURNS = [
    {"text": "Step 1: compute the cost.\n```python\nprint(3 * 2.5)\n```", "stop": "stop"},
    {"text": "Maybe I need the total; next:\n```python\nprint(total)\n```", "stop": "stop"},
    {"text": "Retry:\n```python\nprint(7.5)\n```", "stop": "stop"},
    {"text": "```python\nprint( 7.5 )\n```", "stop": "stop"},
    {"text": "One more check.\n```python\nprint(7.5)\n```", "stop": "stop"},
    {"text": "It costs about 7.5 dollars each, so two cost \\boxed{15}", "stop": "eos"},
]
B_CALLS = [
    ["print(3 * 2.5)", "7.5", False, True],
    ["print(total)", "NameError: name 'total' is not defined", True, True],
    ["print(7.5)", "7.5", False, True],
    ["print( 7.5 )", "7.5\n", False, True],
    ["print(7.5)", "The tool budget is used up: no more code will run.", False, False],
]


def record(turns, calls, max_tool_calls=4):
    return {"tool": {"turns": turns, "calls": calls, "max_tool_calls": max_tool_calls, "final_text": turns[-1]["text"]}}


def test_layout():
    assert N_FEATURES == 120 and len(FEATURE_NAMES) == 120 and len(NUMERIC_NAMES) == 24
    assert set(DEFINITIONS) == set(NUMERIC_NAMES)
    assert NUMERIC_NAMES[0] == "turn_index" and NUMERIC_NAMES[-1] == "expression_complexity"


def test_trajectory_a_by_hand():
    inp = gate_input_from_record(record(A_TURNS, A_CALLS))
    assert inp.reasoning == "Half of 48 is needed.\n\nSo May is 24. Then total:\n\nThe total is "
    assert (inp.turn_index, inp.budget, len(inp.calls)) == (3, 2, 2)
    expected = [
        3,  # turn_index
        2,  # successful_calls
        0,  # error_count
        2,  # budget_remaining: 4 - 2
        math.log(49),  # last_two_output_diff: log1p(|72 - 24|)
        0,  # output_stagnation
        1,  # output_is_numeric
        math.log10(73),  # last_output_magnitude
        1,  # pred_matches_last_success: 72 == 72
        1,  # pred_matches_any_tool_output
        0,  # last_success_in_reasoning: 72 not in (48, 24)
        math.log(49),  # reasoning_lastnum_vs_last_success_diff: log1p(|24 - 72|)
        0,  # pred_in_reasoning: the reasoning stops before \boxed{72}
        0.5,  # tool_output_in_reasoning_frac: 24 is in the reasoning, 72 is not
        14,  # reasoning_length (words)
        1,  # reasoning_step_count: "Then"
        0,  # reasoning_has_uncertainty
        2,  # n_numbers_in_reasoning: 48, 24
        0,
        0,
        0,  # retrieval features
        2,  # n_distinct_outputs
        0,  # all_outputs_same
        2,  # expression_complexity: "print ( 48 + 24 )": one '+', one call
    ]
    # Appendix I.2.2: "The reasoning text yields a 64-dimensional vector, and the last tool output
    # yields a 32-dimensional vector" -- the default; a gate trained on the final text asks for "final"
    reasoning_tokens = ["half", "of", "48", "is", "needed.", "so", "may", "is", "24.", "then", "total", "the", "total"]
    counts = np.zeros(64)
    for token in [*reasoning_tokens, "is"]:
        counts[int(hashlib.md5(token.encode()).hexdigest(), 16) % 64] += 1
    np.testing.assert_allclose(features(inp)[24:88], counts / np.linalg.norm(counts), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="text_bins"):
        features(inp, "question")
    vec = features(inp, "final")
    np.testing.assert_allclose(vec[:24], expected, rtol=0, atol=1e-12)
    # final text "The total is \boxed{72}": tokens the, total, is, boxed, 72 ->
    # md5 mod 64 = 23, 30, 41, 48, 29 (md5("the") = 8fc42c6d...4357, md5("72") = 32bb90e8...f21d)
    assert int("8fc42c6ddf9966db3b09e84365034357", 16) % 64 == 23
    assert int("32bb90e8976aab5298d5da10fe66f21d", 16) % 64 == 29
    final = vec[24:88]
    assert set(np.flatnonzero(final)) == {23, 29, 30, 41, 48}
    np.testing.assert_allclose(final[[23, 29, 30, 41, 48]], 1 / math.sqrt(5))
    # last successful output "72": md5 mod 32 = 29
    out = vec[88:]
    assert np.flatnonzero(out).tolist() == [29] and out[29] == pytest.approx(1.0)


def test_trajectory_b_by_hand():
    inp = gate_input_from_record(record(B_TURNS, B_CALLS))
    assert inp.reasoning == (
        "Step 1: compute the cost.\n\nMaybe I need the total; next:\n\nRetry:\n\n"
        "One more check.\n\nIt costs about 7.5 dollars each, so two cost "
    )
    assert (inp.turn_index, inp.budget, len(inp.calls)) == (6, 0, 4)  # the budget note is no call
    expected = [
        6,  # turn_index
        3,  # successful_calls
        1,  # error_count (NameError)
        0,  # budget_remaining: 4 - 5 handled blocks, floored at 0
        0,  # last_two_output_diff: |7.5 - 7.5|
        1,  # output_stagnation: "7.5" == "7.5\n" normalised
        1,  # output_is_numeric
        math.log10(8.5),  # last_output_magnitude
        0,  # pred_matches_last_success: 15 != 7.5
        0,  # pred_matches_any_tool_output
        1,  # last_success_in_reasoning: 7.5
        0,  # reasoning_lastnum_vs_last_success_diff: last number 7.5
        0,  # pred_in_reasoning: 15 is not in it
        1.0,  # tool_output_in_reasoning_frac: 3 of 3
        24,  # reasoning_length
        3,  # reasoning_step_count: "Step 1", "next", one ';'
        1,  # reasoning_has_uncertainty: "Maybe"
        2,  # n_numbers_in_reasoning: 1, 7.5
        0,
        0,
        0,
        1,  # n_distinct_outputs
        1,  # all_outputs_same
        1,  # expression_complexity: "print ( 7.5 )": one call, no operator
    ]
    vec = features(inp, "final")
    np.testing.assert_allclose(vec[:24], expected, rtol=0, atol=1e-12)
    # "it" and "boxed" collide: md5 mod 64 = 48 for both (2f3e3aba...f6f0 and 0d149b90...75f0)
    assert hashlib.md5(b"it").hexdigest() == "0d149b90e7394297301c90191ae775f0"
    assert int("2f3e3aba4608b6c748b182f722c8f6f0", 16) % 64 == int("0d149b90e7394297301c90191ae775f0", 16) % 64 == 48
    final = vec[24:88]
    assert final[48] == pytest.approx(2 / math.sqrt(13))  # 11 tokens, 10 bins, one count of 2
    assert final[17] == pytest.approx(1 / math.sqrt(13))  # "costs"
    assert np.count_nonzero(final) == 10
    out = vec[88:]
    assert np.flatnonzero(out).tolist() == [5]  # "7.5" -> 0d640498...d945 mod 32 = 5


def test_helpers():
    assert hashed("", 8).tolist() == [0.0] * 8
    assert numbers("x2 costs 1,234.5 or -3 and 2e3.") == [1234.5, -3.0, 2000.0]
    assert answer_value("\\$1,200") == 1200 and answer_value("\\frac{3}{4}") == 0.75
    assert answer_value("18\\%") == 18 and answer_value("3.5 \\text{ hours}") == 3.5 and answer_value("x") is None
    assert normalise_code("x=1  # set\nprint( x )\n") == normalise_code("x = 1\n\nprint(x)")
    assert normalise_code("x=1\nprint(x)") != normalise_code("x=2\nprint(x)")
    empty = features(GateInput(turn_index=1, calls=(), reasoning="", final_text="no answer", budget=4))
    assert empty[:24].tolist() == [1, 0, 0, 4] + [0] * 20


async def test_online_and_offline_inputs_are_the_same(write_script, canned_kernel, monkeypatch, constant_gate):
    """The guard's features (from the RunView) equal the trainer's (from the compact record) on a real loop run."""
    captured = []
    original = gstep_module.gate_input_from_view
    monkeypatch.setattr(
        gstep_module, "gate_input_from_view", lambda v, budget: captured.append(original(v, budget)) or captured[-1]
    )
    for turns, calls in ((A_TURNS, A_CALLS), (B_TURNS, B_CALLS)):
        script = write_script(*[t["text"] + ("\n```output\n" if t["stop"] == "stop" else "") for t in turns])
        results = [
            CellResult(outputs=(Output("error", c[1]),), error=True)
            if c[2]
            else CellResult(outputs=(Output("stdout", c[1] + "\n"),))
            for c in calls
            if c[3]
        ]
        captured.clear()
        agent = Agent(
            ScriptedBackend(load_script(script)),
            canned_kernel(results),
            guards=GuardChain({"gstep": {"weights": constant_gate(0.01)}}, {"gstep"}),
            settings=RunSettings(),
        )
        events = [e async for e in agent.stream("q", gold="72")]
        offline = gate_input_from_record(record_from_events(0, "q", "72", "m", events, events))
        assert len(captured) == 1
        assert captured[0] == offline
        np.testing.assert_array_equal(features(captured[0]), features(offline))
        assert features(offline)[:24].tolist() == features(gate_input_from_record(record(turns, calls)))[:24].tolist()


async def test_blocks_not_run_use_none_of_the_budget_online_and_offline(
    write_script, canned_kernel, monkeypatch, constant_gate
):
    """A declined block and a guard's skip are not calls: budget_remaining counts executed calls only,
    the same way in the guard and in the trainer (which reads the loop's compact record)."""
    captured = []
    original = gstep_module.gate_input_from_view
    monkeypatch.setattr(
        gstep_module, "gate_input_from_view", lambda v, budget: captured.append(original(v, budget)) or captured[-1]
    )
    script = write_script(
        "Try.\n```python\nprint(1)\n```\n```output\n",
        "Again.\n```python\nprint(math.factorial(12))\n```\n```output\n",
        "Now.\n```python\nprint(math.factorial(12) // 2)\n```\n```output\n",
        "So \\boxed{42}",
    )
    answers = iter([False, True])  # the first block necessity skips; the user declines the next one

    async def approve(code: str) -> bool:
        return next(answers)

    # a gate trained at the run's budget of 2: its frame is the record's
    chain = GuardChain(
        {"gstep": {"weights": constant_gate(0.01, budget=2)}, "necessity": {"mode": "enforce"}}, {"gstep", "necessity"}
    )
    agent = Agent(
        ScriptedBackend(load_script(script)),
        canned_kernel([CellResult(outputs=(Output("stdout", "42\n"),))]),
        guards=chain,
        settings=RunSettings(max_tool_calls=2),
        approve=approve,
    )
    events = [e async for e in agent.stream("q", gold="42")]
    skipped = [e for e in events if type(e).__name__ == "ToolResult" and not e.executed]
    assert len(skipped) == 2  # skipped by necessity (enforce), declined by the user
    offline = gate_input_from_record(record_from_events(0, "q", "42", "m", events, events))
    assert captured == [offline] and offline.budget == 1  # 2 - one executed call
    assert features(offline)[3] == 1.0


def test_a_gate_says_what_its_text_bins_hash():
    from guards.gstep.guard import Gate, GateError

    args = (np.zeros(N_FEATURES), np.ones(N_FEATURES), [(np.zeros((N_FEATURES, 1)), np.zeros(1))])
    assert Gate(*args).text_bins == "final"  # a file from before text_bins was recorded hashed the final text
    assert Gate(*args, meta={"text_bins": "reasoning"}).text_bins == "reasoning"
    with pytest.raises(GateError, match="text_bins"):
        Gate(*args, meta={"text_bins": "question"})
