"""ATTC on golden scripted trajectories: code-block confidence, trust / rethink / timeout, n/a."""

from __future__ import annotations

import math

import pytest

from guards.attc import RETHINK, TIMEOUT, TRUST, block_confidence
from guards.base import SettingsError
from guards.chain import GuardChain
from kernels.base import CellResult, Output
from tuiagent.backends.scripted import ScriptedBackend
from tuiagent.core import events as ev
from tuiagent.core.loop import Agent
from tuiagent.protocol import INJECT, PASS, Token, TokenLP

ANSWER = [Token("So the answer is ", -0.3), Token("\\boxed{42}.", -0.1)]
OUT_42 = CellResult(outputs=(Output("stdout", "42\n"),))


def code_turn(prose_lp: float = -0.01, code_lps: tuple[float, ...] = (-0.01,) * 5, after_lp: float = -0.5) -> list[Token]:
    """Prose, then a code block of five tokens (fences included), then the output fence (the stop)."""
    pieces = ["```python", "\n", "print(6 * 7)", "\n", "```"]
    return ([Token("Let me think hard.", prose_lp), Token("\n", prose_lp)]
            + [Token(p, lp) for p, lp in zip(pieces, code_lps)]
            + [Token("\n", after_lp), Token("```output", -0.01)])


async def run(turns, results=(OUT_42,), configs=None, canned_kernel=None):
    backend = ScriptedBackend(turns)
    kernel = canned_kernel(list(results))
    chain = GuardChain(configs or {}, {"attc"})
    events = [e async for e in Agent(backend, kernel, guards=chain).stream("What is 6 times 7?")]
    verdicts = [e for e in events if isinstance(e, ev.GuardVerdict) and e.guard == "attc"]
    notes = [e for e in events if isinstance(e, ev.ContextAppended) and e.source == "attc"]
    return backend, events, verdicts, notes


async def test_trust_when_code_is_confident(canned_kernel):
    backend, events, verdicts, notes = await run([code_turn(), ANSWER], canned_kernel=canned_kernel)
    (v,) = verdicts
    assert (v.hook, v.action, v.data["decision"], v.data["tokens"]) == ("on_tool_result", INJECT, "trust", 5)
    assert v.data["confidence"] == pytest.approx(math.exp(-0.01))
    assert v.data["mean_logprob"] == pytest.approx(-0.01) and v.data["threshold"] == 0.97
    assert v.text == TRUST and [n.text for n in notes] == [TRUST + "\n"]
    # the sentence continues the assistant's turn right after the output block
    assert backend.prompts[1].endswith("```output\n42\n```\n" + TRUST + "\n")
    assert events[-1].answer == "42"


async def test_rethink_on_a_low_logprob_code_token(canned_kernel):
    lps = (-0.01, -0.01, -2.0, -0.01, -0.01)
    backend, _, (v,), _ = await run([code_turn(code_lps=lps), ANSWER], canned_kernel=canned_kernel)
    assert v.data["decision"] == "rethink" and v.text == RETHINK
    assert v.data["confidence"] == pytest.approx(math.exp(sum(lps) / 5))
    assert backend.prompts[1].endswith("```output\n42\n```\n" + RETHINK + "\n")


async def test_prose_and_trailing_tokens_do_not_count(canned_kernel):
    turn = code_turn(prose_lp=-9.0, code_lps=(-0.001,) * 5, after_lp=-7.0)
    _, _, (v,), _ = await run([turn, ANSWER], canned_kernel=canned_kernel)
    assert v.data["tokens"] == 5 and v.data["decision"] == "trust"
    assert v.data["confidence"] == pytest.approx(math.exp(-0.001))


async def test_cut_token_counts_once(canned_kernel):
    # "print(6 * 7)\n```" is held back whole by the stop matcher (its "```" could start the stop
    # string); the stop starts inside the next token, "\n```output", which is cut to "\n" (outside
    # the block) and keeps its logprob.
    turn = [Token("Compute.\n", -5.0), Token("```python\n", -0.1), Token("print(6 * 7)\n```", -0.1),
            Token("\n```output", -4.0)]
    backend, events, (v,), _ = await run([turn, ANSWER], canned_kernel=canned_kernel)
    deltas = [(e.text, e.logprob) for e in events if isinstance(e, ev.TokenDelta) and e.turn == 1]
    assert deltas[-2:] == [("print(6 * 7)\n```", -0.1), ("\n", -4.0)]  # the cut really happened
    assert v.data["tokens"] == 2 and v.data["confidence"] == pytest.approx(math.exp(-0.1))


async def test_cut_token_straddling_the_opening_fence_counts(canned_kernel):
    # "Compute.\n```" is held back whole (its "```" could start the stop string) and released with
    # its logprob when "python" shows it is not the stop; it straddles the opening fence, so it counts.
    turn = [Token("Compute.\n```", -1.0), Token("python\n", -0.1), Token("print(6 * 7)\n", -0.1),
            Token("```\n", -0.1), Token("```output", -0.01)]
    _, events, (v,), _ = await run([turn, ANSWER], canned_kernel=canned_kernel)
    deltas = [(e.text, e.logprob) for e in events if isinstance(e, ev.TokenDelta) and e.turn == 1]
    assert deltas[:2] == [("Compute.\n```", -1.0), ("python\n", -0.1)]
    assert v.data["tokens"] == 4 and v.data["mean_logprob"] == pytest.approx((-1.0 - 0.3) / 4)


def test_straddling_token_is_part_of_the_block():
    text_tokens = [TokenLP("Hi.", -9.0), TokenLP("\n```python", -0.5), TokenLP("\nx = 1", -0.5),
                   TokenLP("\n```", -0.5), TokenLP("\n", -9.0)]
    text = "".join(t.text for t in text_tokens)
    conf, mean, n = block_confidence(text, text_tokens)
    assert (n, mean) == (3, pytest.approx(-0.5))
    assert block_confidence("no code here", [TokenLP("no code here", -0.1)]) == (None, None, 0)


async def test_missing_logprobs_is_na_and_injects_nothing(canned_kernel):
    turn = [Token(t.text, None) for t in code_turn()]
    backend, _, (v,), notes = await run([turn, ANSWER], canned_kernel=canned_kernel)
    assert v.action == PASS and v.data["confidence"] is None and v.data["decision"] == "n/a"
    assert notes == [] and backend.prompts[1].endswith("```output\n42\n```\n")


@pytest.mark.parametrize("result", [
    CellResult(outputs=(Output("error", "TimeoutError: cell ran past 5 s"),), error=True, timed_out=True),
    CellResult(outputs=(Output("stdout", "Execution Timeout\n"),)),  # matched in the text, any case
])
async def test_timeout_sentence(canned_kernel, result):
    backend, _, (v,), _ = await run([code_turn(), ANSWER], results=(result,), canned_kernel=canned_kernel)
    assert v.data["decision"] == "timeout" and v.data["timed_out"] and v.text == TIMEOUT
    assert backend.prompts[1].endswith("```\n" + TIMEOUT + "\n")


async def test_threshold_from_settings(canned_kernel):
    lps = (-0.5,) * 5  # conf = 0.607: rethink at 0.97, trust at 0.5
    _, _, (default,), _ = await run([code_turn(code_lps=lps), ANSWER], canned_kernel=canned_kernel)
    _, _, (low,), _ = await run([code_turn(code_lps=lps), ANSWER], configs={"attc": {"threshold": 0.5}},
                                canned_kernel=canned_kernel)
    assert (default.data["decision"], low.data["decision"]) == ("rethink", "trust")
    assert low.data["threshold"] == 0.5


def test_bad_threshold_is_a_clear_error():
    with pytest.raises(SettingsError, match=r"attc\.threshold = 2.* \(0, 1\]"):
        GuardChain({"attc": {"threshold": 2}}, {"attc"})
    with pytest.raises(SettingsError, match=r"attc\.threshold must be a number"):
        GuardChain({"attc": {"threshold": "high"}}, {"attc"})
