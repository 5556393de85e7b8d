"""ATTC on golden scripted trajectories: code-block confidence, trust / rethink / timeout, n/a
(canned kernel results), and the reference's sentences and timeouts through the real kernel."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from guards.attc.guard import OUR_SENTENCES, REF_SENTENCES, block_confidence
from guards.base import SettingsError
from guards.chain import GuardChain
from kernels.base import CellResult, Output
from kernels.jupyter import JupyterKernel
from tuiagent.backends.scripted import ScriptedBackend
from tuiagent.core import events as ev
from tuiagent.core.loop import Agent
from tuiagent.protocol import INJECT, PASS, RunSettings, Token, TokenLP

TRUST, RETHINK, TIMEOUT = (REF_SENTENCES[k] for k in ("trust", "rethink", "timeout"))

ANSWER = [Token("So the answer is ", -0.3), Token("\\boxed{42}.", -0.1)]
OUT_42 = CellResult(outputs=(Output("stdout", "42\n"),))


def code_turn(
    prose_lp: float = -0.01,
    code_lps: tuple[float, ...] = (-0.01,) * 5,
    after_lp: float = -0.5,
    code: str = "print(6 * 7)",
) -> list[Token]:
    """Prose, then a code block of five tokens (fences included), then the output fence (the stop)."""
    pieces = ["```python", "\n", code, "\n", "```"]
    return (
        [Token("Let me think hard.", prose_lp), Token("\n", prose_lp)]
        + [Token(p, lp) for p, lp in zip(pieces, code_lps)]
        + [Token("\n", after_lp), Token("```output", -0.01)]
    )


async def run(turns, results=(OUT_42,), configs=None, canned_kernel=None, kernel=None, settings=None):
    backend = ScriptedBackend(turns)
    kernel = kernel or canned_kernel(list(results))
    chain = GuardChain(configs or {}, {"attc"})
    events = [e async for e in Agent(backend, kernel, guards=chain, settings=settings).stream("What is 6 times 7?")]
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
    turn = [
        Token("Compute.\n", -5.0),
        Token("```python\n", -0.1),
        Token("print(6 * 7)\n```", -0.1),
        Token("\n```output", -4.0),
    ]
    backend, events, (v,), _ = await run([turn, ANSWER], canned_kernel=canned_kernel)
    deltas = [(e.text, e.logprob) for e in events if isinstance(e, ev.TokenDelta) and e.turn == 1]
    assert deltas[-2:] == [("print(6 * 7)\n```", -0.1), ("\n", -4.0)]  # the cut really happened
    assert v.data["tokens"] == 2 and v.data["confidence"] == pytest.approx(math.exp(-0.1))


async def test_cut_token_straddling_the_opening_fence_counts(canned_kernel):
    # "Compute.\n```" is held back whole (its "```" could start the stop string) and released with
    # its logprob when "python" shows it is not the stop; it straddles the opening fence, so it counts.
    turn = [
        Token("Compute.\n```", -1.0),
        Token("python\n", -0.1),
        Token("print(6 * 7)\n", -0.1),
        Token("```\n", -0.1),
        Token("```output", -0.01),
    ]
    _, events, (v,), _ = await run([turn, ANSWER], canned_kernel=canned_kernel)
    deltas = [(e.text, e.logprob) for e in events if isinstance(e, ev.TokenDelta) and e.turn == 1]
    assert deltas[:2] == [("Compute.\n```", -1.0), ("python\n", -0.1)]
    assert v.data["tokens"] == 4 and v.data["mean_logprob"] == pytest.approx((-1.0 - 0.3) / 4)


def test_straddling_token_is_part_of_the_block():
    text_tokens = [
        TokenLP("Hi.", -9.0),
        TokenLP("\n```python", -0.5),
        TokenLP("\nx = 1", -0.5),
        TokenLP("\n```", -0.5),
        TokenLP("\n", -9.0),
    ]
    text = "".join(t.text for t in text_tokens)
    conf, mean, n = block_confidence(text, text_tokens)
    assert (n, mean) == (3, pytest.approx(-0.5))
    assert block_confidence("no code here", [TokenLP("no code here", -0.1)]) == (None, None, 0)


async def test_missing_logprobs_is_na_and_injects_nothing(canned_kernel):
    turn = [Token(t.text, None) for t in code_turn()]
    backend, _, (v,), notes = await run([turn, ANSWER], canned_kernel=canned_kernel)
    assert v.action == PASS and v.data["confidence"] is None and v.data["decision"] == "n/a"
    assert notes == [] and backend.prompts[1].endswith("```output\n42\n```\n")


async def test_timeout_sentence_comes_before_the_confidence(canned_kernel):
    timed_out = CellResult(outputs=(Output("error", "Execution timed out after 5 s"),), error=True, timed_out=True)
    backend, _, (v,), _ = await run([code_turn(), ANSWER], results=(timed_out,), canned_kernel=canned_kernel)
    assert v.data["decision"] == "timeout" and v.data["timed_out"] and v.text == TIMEOUT
    assert backend.prompts[1].endswith("```\n" + TIMEOUT + "\n")
    # [ref] the executor's status decides first: a timeout gets its sentence without logprobs too
    turn = [Token(t.text, None) for t in code_turn()]
    _, _, (na,), _ = await run([turn, ANSWER], results=(timed_out,), canned_kernel=canned_kernel)
    assert (na.action, na.data["confidence"], na.data["decision"], na.text) == (INJECT, None, "timeout", TIMEOUT)


async def test_timeout_in_the_output_text_is_not_a_timeout(canned_kernel):
    said = CellResult(outputs=(Output("stdout", "Execution Timeout\n"),))  # text only: the kernel did not time out
    _, _, (v,), _ = await run([code_turn(), ANSWER], results=(said,), canned_kernel=canned_kernel)
    assert (v.data["decision"], v.data["timed_out"], v.text) == ("trust", False, TRUST)


async def test_our_wording_is_a_setting(canned_kernel):
    lps = (-0.01, -0.01, -2.0, -0.01, -0.01)
    backend, _, (v,), _ = await run(
        [code_turn(code_lps=lps), ANSWER], configs={"attc": {"wording": "ours"}}, canned_kernel=canned_kernel
    )
    assert v.text == OUR_SENTENCES["rethink"] and "I am not sure this code is right" in v.text
    assert backend.prompts[1].endswith("```output\n42\n```\n" + OUR_SENTENCES["rethink"] + "\n")
    with pytest.raises(SettingsError, match=r"attc\.wording must be one of \['ref', 'ours'\]"):
        GuardChain({"attc": {"wording": "paraphrase"}}, {"attc"})


def test_the_reference_sentences_verbatim():
    """The strings of 00Dreamer00/ATTC math_eval_confident.py (commit 77adefb), without their line ends."""
    assert REF_SENTENCES == {
        "trust": "I should believe the code execution result above and now I will give the answer based on it.",
        "rethink": "I should consider optimizing the code or reflect on whether to change my reasoning path.",
        "timeout": "Code execution timed out. Perhaps I should consider optimizing the code or reflect on whether "
        "to change my reasoning path.",
    }


# -- through the real kernel ----------------------------------------------------------------------


@pytest.fixture
async def kernel(tmp_path: Path):
    async with JupyterKernel(images_dir=tmp_path / "images") as k:
        yield k


async def test_real_kernel_trust_then_rethink_sentences_verbatim_in_the_context(kernel):
    turns = [code_turn(code="x = 6 * 7\nprint(x)"), code_turn(code="print(x + 0)", code_lps=(-0.3,) * 5), ANSWER]
    backend, events, verdicts, notes = await run(turns, kernel=kernel)
    assert [v.data["decision"] for v in verdicts] == ["trust", "rethink"]
    assert backend.prompts[1].endswith("```output\n42\n```\n" + TRUST + "\n")
    assert backend.prompts[2].endswith("```output\n42\n```\n" + RETHINK + "\n")
    assert [n.text for n in notes] == [TRUST + "\n", RETHINK + "\n"] and events[-1].answer == "42"


@pytest.mark.parametrize("lps, decision", [((-0.01,) * 5, "trust"), ((-0.3,) * 5, "rethink")])
async def test_real_kernel_a_printed_timeout_is_not_a_timeout(kernel, lps, decision):
    turn = code_turn(code="print('timeout = 30 seconds', 6*7)", code_lps=lps)
    backend, events, (v,), _ = await run([turn, ANSWER], kernel=kernel)
    (result,) = [e for e in events if isinstance(e, ev.ToolResult)]
    assert result.shown == "timeout = 30 seconds 42" and not result.timed_out
    assert (v.data["decision"], v.data["timed_out"]) == (decision, False)
    assert backend.prompts[1].endswith("```output\ntimeout = 30 seconds 42\n```\n" + REF_SENTENCES[decision] + "\n")


async def test_real_kernel_a_cell_past_the_exec_timeout_gets_the_timeout_sentence(kernel):
    turn = code_turn(code="import time\ntime.sleep(60)")
    backend, events, (v,), _ = await run([turn, ANSWER], kernel=kernel, settings=RunSettings(exec_timeout_s=1.0))
    (result,) = [e for e in events if isinstance(e, ev.ToolResult)]
    assert result.timed_out and result.executed
    assert (v.data["decision"], v.data["timed_out"], v.text) == ("timeout", True, TIMEOUT)
    assert backend.prompts[1].endswith("```\n" + TIMEOUT + "\n")


async def test_threshold_from_settings(canned_kernel):
    lps = (-0.5,) * 5  # conf = 0.607: rethink at 0.97, trust at 0.5
    _, _, (default,), _ = await run([code_turn(code_lps=lps), ANSWER], canned_kernel=canned_kernel)
    _, _, (low,), _ = await run(
        [code_turn(code_lps=lps), ANSWER], configs={"attc": {"threshold": 0.5}}, canned_kernel=canned_kernel
    )
    assert (default.data["decision"], low.data["decision"]) == ("rethink", "trust")
    assert low.data["threshold"] == 0.5


def test_bad_threshold_is_a_clear_error():
    with pytest.raises(SettingsError, match=r"attc\.threshold = 2.* \(0, 1\]"):
        GuardChain({"attc": {"threshold": 2}}, {"attc"})
    with pytest.raises(SettingsError, match=r"attc\.threshold must be a number"):
        GuardChain({"attc": {"threshold": "high"}}, {"attc"})


# The reference code's reading, one setting away [ref: math_eval_confident.py calculate_code_prob_avg,
# which scores full_text.find("```python"), the first block, over the tokens whose start lies in it].
TWO_BLOCKS = [
    Token("First try.\n", -0.01),
    Token("```python", -2.0),
    Token("\nprint(6 + 7)\n", -2.0),
    Token("```", -2.0),
    Token("\nNo, a product.\n", -0.01),
    Token("```python", -0.01),
    Token("\nprint(6 * 7)\n", -0.01),
    Token("```", -0.01),
    Token("\n", -0.5),
    Token("```output", -0.01),
]


async def test_the_block_scored_is_the_last_one_or_the_references_first(canned_kernel):
    _, _, (last,), _ = await run([TWO_BLOCKS, ANSWER], canned_kernel=canned_kernel)
    assert last.data["decision"] == "trust" and last.data["mean_logprob"] == pytest.approx(-0.01)
    _, _, (first,), _ = await run(
        [TWO_BLOCKS, ANSWER], configs={"attc": {"block": "first"}}, canned_kernel=canned_kernel
    )
    assert first.data["decision"] == "rethink" and first.data["mean_logprob"] == pytest.approx(-2.0)


async def test_the_references_token_rule_counts_tokens_that_start_in_the_block(canned_kernel):
    turn = [
        Token("Compute.\n```", -1.0),  # straddles the opening fence: overlaps it, starts before it
        Token("python\n", -0.1),
        Token("print(6 * 7)\n", -0.1),
        Token("```\n", -0.1),
        Token("```output", -0.01),
    ]
    _, _, (overlap,), _ = await run([turn, ANSWER], canned_kernel=canned_kernel)
    _, _, (start,), _ = await run([turn, ANSWER], configs={"attc": {"tokens": "start"}}, canned_kernel=canned_kernel)
    assert overlap.data["tokens"] == 4 and start.data["tokens"] == 3
    assert start.data["mean_logprob"] == pytest.approx(-0.1)
