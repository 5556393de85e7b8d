"""TIM's monitor on the paper's cases, through the real loop and a real Jupyter kernel (the
outputs are Python's own): computation after a derivation is not TIM (section 2); a phrase in a
code comment is not the model's reasoning; a run that derives nothing, reads its answer off the
tool and announces numeric checks is flagged, with its evidence."""

from __future__ import annotations

import pytest
import pytest_asyncio

from guards.chain import GuardChain
from guards.tim.guard import TIM
from kernels.jupyter import JupyterKernel
from tuiagent.backends.scripted import ScriptedBackend, load_script
from tuiagent.core import events as ev
from tuiagent.core.loop import Agent
from tuiagent.eval.metrics import run_record
from tuiagent.protocol import FLAG, PASS, Span, VerdictRecord

pytestmark = pytest.mark.asyncio(loop_scope="module")

DERIVE = (
    "Pair the terms from both ends: 1 + 100 = 101, 2 + 99 = 101, and so on up to 50 + 51 = 101. "
    "The 100 terms make 50 such pairs, so the sum is 50 · 101.\n"
)
COMPUTE = "```python\nprint(50 * 101)\n```\n```output\n"
CHECK = "Check with the formula n(n+1)/2 for n = 100.\n```python\nn = 100\nprint(n * (n + 1) // 2)\n```\n```output\n"
ANSWER = "Both give \\boxed{5050}."

COUNT = "```python\n# brute force over all values\nprint(sum(1 for n in range(1, 101) if n % 7 == 0))\n```\n```output\n"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def kernel():
    async with JupyterKernel(memory_limit_mb=1024) as k:
        yield k


async def solve(write_script, kernel, problem, *turns, configs=None):
    backend = ScriptedBackend(load_script(write_script(*turns)))
    chain = GuardChain(configs or {}, {"tim", *(configs or {})})
    events = [e async for e in Agent(backend, kernel, guards=chain).stream(problem)]
    (v,) = [e for e in events if isinstance(e, ev.GuardVerdict) and e.guard == "tim" and e.hook == "on_finish"]
    return v, events


def card(v: ev.GuardVerdict) -> str:
    d = TIM.display(VerdictRecord(v.guard, v.hook, v.action, v.reason, v.text, v.data, v.turn))
    assert d is not None
    return "\n".join("".join(s.text for s in line if isinstance(s, Span)) for line in d.lines)


async def test_derive_then_compute_is_not_flagged(write_script, kernel):
    """Issue 27's run: the sum derived by pairing terms, 50 * 101 computed, checked with n(n+1)/2,
    answered 5050. The answer repeats the tool, but a derivation came first: not TIM."""
    v, events = await solve(
        write_script, kernel, "What is 1 + 2 + ... + 100?", DERIVE + "I compute it.\n" + COMPUTE, CHECK, ANSWER
    )
    outputs = [e.shown for e in events if isinstance(e, ev.ToolResult)]
    assert outputs == ["5050", "5050"]  # the kernel computed both
    assert v.action == PASS and (v.data["score"], v.data["level"], v.data["indicators"]) == (0, "none", [])
    assert v.data["answer_call"] == 2 and v.data["derived"] == "before" and v.data["words_before"] >= 15
    assert "derivation: " in card(v) and "before the computation" in card(v) and "repeats call 2's output" in card(v)
    assert "no sign of tool-induced myopia · 0 of 3 indicators" in card(v) and "none signal" not in card(v)
    # the same calls and answer without the derivation: read off the tool
    bare, _ = await solve(
        write_script, kernel, "What is 1 + 2 + ... + 100?", "I compute it.\n" + COMPUTE, CHECK, ANSWER
    )
    assert bare.action == FLAG and bare.data["indicators"] == ["no derivation", "answer read off the tool"]


async def test_a_precursor_phrase_in_a_code_comment_is_not_flagged(write_script, kernel):
    v, events = await solve(
        write_script,
        kernel,
        "How many multiples of 7 are there from 1 to 100?",
        "I count them.\n" + COUNT,
        "So \\boxed{14}.",
    )
    assert [e.shown for e in events if isinstance(e, ev.ToolResult)] == ["14"]
    assert v.data["phrases"] == [] and "precursor phrases" not in v.data["indicators"]
    # the same phrase in the prose is the model's reasoning: with no derivation, it flags
    said, _ = await solve(
        write_script,
        kernel,
        "How many multiples of 7 are there from 1 to 100?",
        "I brute force over all values.\n" + COUNT,
        "So \\boxed{14}.",
    )
    assert (
        said.action == FLAG
        and said.data["phrases"] == ["brute force"]
        and "precursor phrases" in said.data["indicators"]
    )


async def test_tool_induced_myopia_is_flagged_with_its_evidence(write_script, kernel):
    """No derivation, two calls, the answer read off the last output, Table 4 phrases before each call."""
    first = (
        "Let's brute force it with code.\n```python\nprint(sum(1 for n in range(1, 1001) "
        "if (n * n + n + 1) % 7 == 0))\n```\n```output\n"
    )
    second = (
        "Let's double-check with code.\n```python\ncount = 0\nfor n in range(1, 1001):\n"
        "    if (n**2 + n + 1) % 7 == 0:\n        count += 1\nprint(count)\n```\n```output\n"
    )
    v, events = await solve(
        write_script,
        kernel,
        "How many n from 1 to 1000 make n^2 + n + 1 divisible by 7?",
        first,
        second,
        "\\boxed{286}",
    )
    assert [e.shown for e in events if isinstance(e, ev.ToolResult)] == ["286", "286"]
    assert v.action == FLAG and (v.data["score"], v.data["level"]) == (3, "strong")
    assert v.data["indicators"] == ["no derivation", "answer read off the tool", "precursor phrases"]
    assert v.data["precursors"] == [
        {"category": "systematic search/enumeration", "phrase": "brute force", "turn": 1, "after_call": 0},
        {"category": "verification via code", "phrase": "double-check with code", "turn": 2, "after_call": 1},
    ]
    assert (v.data["answer_call"], v.data["words_before"], v.data["words_after"], v.data["derived"]) == (
        2,
        0,
        0,
        "none",
    )
    assert card(v).splitlines() == [
        "TIM ⚑ tool-induced myopia flagged · strong signal, 3 of 3 indicators (a hint, not proof)",
        "derivation: 0 words before call 2's output, 0 after (none)",
        "answer: repeats call 2's output",
        "phrases: “brute force” (turn 1, before any call); “double-check with code” (turn 2, after call 1)",
    ]
    record = run_record(events)  # the eval's metric reads the same
    assert (record["tim_flag"], record["tim_level"], record["tim_categories"]) == (
        True,
        "strong",
        ["systematic search/enumeration", "verification via code"],
    )


async def test_the_mitigation_sentence_is_the_papers_verbatim(write_script, kernel):
    """Section 6.1: "after each problem statement, we inject the following instruction as a
    model-generated message"."""
    sentence = (
        "We should treat code snippets and their execution results only as helpful hints, and derive "
        "the solution through mathematical reasoning."
    )
    backend = ScriptedBackend(load_script(write_script(DERIVE + COMPUTE, ANSWER)))
    chain = GuardChain({"tim": {"prompt": True}}, {"tim"})
    events = [e async for e in Agent(backend, kernel, guards=chain).stream("What is 1 + 2 + ... + 100?")]
    assert backend.prompts[0].endswith(
        "What is 1 + 2 + ... + 100?<|im_end|>\n<|im_start|>assistant\n" + sentence + "\n"
    )
    assert [e.text for e in events if isinstance(e, ev.ContextAppended) and e.source == "tim"] == [sentence + "\n"]
