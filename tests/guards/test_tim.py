"""TIM on golden scripted trajectories: the mitigation prompt and the myopia monitor."""

from __future__ import annotations

import pytest

from guards.chain import GuardChain
from guards.tim import PROMPT, answer_matches_output, precursor_phrases
from kernels.base import CellResult, Output
from tuiagent.backends.scripted import ScriptedBackend, load_script
from tuiagent.core import events as ev
from tuiagent.core.loop import Agent
from tuiagent.protocol import FLAG, PASS

CODE = "I will compute it.\n```python\nprint(6 * 7)\n```\n```output\n"
SHORT_ANSWER = "So \\boxed{42}."
DERIVED_ANSWER = ("The code agrees with the algebra: six groups of seven are six times seven, which is "
                  "forty two because six sevens make thirty five plus seven. Hence \\boxed{42}.")


def out(text: str) -> CellResult:
    return CellResult(outputs=(Output("stdout", text),))


async def run(write_script, canned_kernel, *turns, results=(), configs=None):
    backend = ScriptedBackend(load_script(write_script(*turns)))
    chain = GuardChain(configs or {}, {"tim", *(configs or {})})
    events = [e async for e in Agent(backend, canned_kernel(list(results)), guards=chain).stream("What is 6 times 7?")]
    verdicts = [e for e in events if isinstance(e, ev.GuardVerdict) and e.guard == "tim"]
    return backend, events, verdicts


async def test_prompt_injected_at_start(write_script, canned_kernel):
    backend, events, verdicts = await run(write_script, canned_kernel, SHORT_ANSWER, configs={"tim": {"prompt": True}})
    assert backend.prompts[0].endswith("What is 6 times 7?<|im_end|>\n<|im_start|>assistant\n" + PROMPT + "\n")
    assert verdicts[0].hook == "on_start" and verdicts[0].text == PROMPT
    assert any(isinstance(e, ev.ContextAppended) and e.source == "tim" for e in events)


async def test_prompt_off_by_default(write_script, canned_kernel):
    backend, _, verdicts = await run(write_script, canned_kernel, SHORT_ANSWER)
    assert backend.prompts[0].endswith("<|im_start|>assistant\n")
    assert [v.hook for v in verdicts] == ["on_finish"]


async def test_clean_run_passes(write_script, canned_kernel):
    _, _, (v,) = await run(write_script, canned_kernel, CODE, DERIVED_ANSWER, results=[out("42\n")])
    assert v.hook == "on_finish" and v.action == PASS
    assert v.data == {"flagged": False, "categories": [], "phrases": [], "tool_calls": 1,
                      "answer_from_tool": False, "words_after_output": 27}


async def test_answer_copied_from_tool_output_is_flagged(write_script, canned_kernel):
    _, _, (v,) = await run(write_script, canned_kernel, CODE, CODE, SHORT_ANSWER,
                           results=[out("6\n"), out("result: 42\n")])
    assert v.action == FLAG and v.data["flagged"] and v.data["answer_from_tool"]
    assert (v.data["tool_calls"], v.data["words_after_output"], v.data["categories"]) == (2, 1, [])


async def test_copied_answer_needs_min_calls_and_little_derivation(write_script, canned_kernel):
    _, _, (one_call,) = await run(write_script, canned_kernel, CODE, SHORT_ANSWER, results=[out("42\n")])
    assert one_call.action == PASS and one_call.data["answer_from_tool"] and one_call.data["tool_calls"] == 1
    _, _, (derived,) = await run(write_script, canned_kernel, CODE, CODE, DERIVED_ANSWER,
                                 results=[out("6\n"), out("42\n")])
    assert derived.action == PASS and not derived.data["answer_from_tool"]
    _, _, (relaxed,) = await run(write_script, canned_kernel, CODE, CODE, DERIVED_ANSWER,
                                 results=[out("6\n"), out("42\n")], configs={"tim": {"min_words_after": 50}})
    assert relaxed.action == FLAG


async def test_precursor_phrases_are_flagged(write_script, canned_kernel):
    turn = "Let's verify this numerically with code.\n```python\nprint(6 * 7)\n```\n```output\n"
    _, _, (v,) = await run(write_script, canned_kernel, turn, DERIVED_ANSWER, results=[out("42\n")])
    assert v.action == FLAG and not v.data["answer_from_tool"]
    assert v.data["categories"] == ["numerical/empirical checking", "verification via code"]
    assert v.data["phrases"] == ["Let's verify this numerically", "verify this numerically with code"]


async def test_monitor_off(write_script, canned_kernel):
    _, _, verdicts = await run(write_script, canned_kernel, SHORT_ANSWER, configs={"tim": {"monitor": False}})
    assert verdicts == []


@pytest.mark.parametrize("text, category", [
    ("To be safe, one checks numerically that the bound holds.", "numerical/empirical checking"),
    ("Let's verify numerically.", "numerical/empirical checking"),
    ("We can test it for a few small values.", "numerical/empirical checking"),
    ("Let's double-check with code.", "verification via code"),
    ("I will use Python to analyze the sequence.", "verification via code"),
    ("The results seem to be converging to 2.", "approximation/convergence"),
    ("Let me verify this pattern for n up to 10.", "approximation/convergence"),
    ("Let's check more values systematically.", "systematic search/enumeration"),
    ("An exhaustive check up to 1000 finds no counterexample.", "systematic search/enumeration"),
    ("We brute force all pairs.", "systematic search/enumeration"),
])
def test_table4_phrases(text, category):
    assert category in {cat for cat, _ in precursor_phrases(text)}


@pytest.mark.parametrize("text", [
    "We check that 3 + 4 = 7, so the sum is 7.",
    "By the quadratic formula the roots are 2 and 3.",
    "The geometric series has sum 1/(1 - r) for |r| < 1.",
    "Let me compute the product in Python.",
])
def test_ordinary_reasoning_has_no_precursors(text):
    assert precursor_phrases(text) == []


@pytest.mark.parametrize("answer, output, same", [
    ("42", "42", True),
    ("42", "The total is 42.\n", True),
    ("1,234", "1234", True),
    ("\\frac{1}{2}", "1/2", True),
    ("0.5", "1/2", True),
    ("x + 1", "x + 1\n", True),
    ("43", "42", False),
    ("42", "", False),
])
def test_answer_matches_output(answer, output, same):
    assert answer_matches_output(answer, output) is same


async def test_the_monitor_reads_text_that_prunetir_pruned(write_script, canned_kernel):
    """The precursor phrase sits in the fix-up prose of an error episode; STP prunes it from the
    working context, yet the monitor reads the whole trajectory and flags it, as the eval's metric does."""
    from tuiagent.eval.metrics import run_record

    failing = "I multiply.\n```python\nprint(six * 7)\n```\n```output\n"
    fixed = "The name was wrong; let's verify numerically again.\n```python\nprint(6 * 7)\n```\n```output\n"
    error = CellResult(outputs=(Output("error", "NameError: name 'six' is not defined"),), error=True)
    _, events, verdicts = await run(write_script, canned_kernel, failing, fixed, DERIVED_ANSWER,
                                    results=[error, out("42\n")], configs={"prunetir": {}})
    pruned = [e for e in events if isinstance(e, ev.ContextPruned)]
    assert len(pruned) == 1 and "verify numerically" in pruned[0].removed_text  # gone from the context
    (v,) = [v for v in verdicts if v.hook == "on_finish"]
    assert v.action == FLAG and v.data["phrases"] == ["let's verify numerically"]
    assert v.data["categories"] == ["numerical/empirical checking"] and v.data["tool_calls"] == 2
    assert run_record(events)["tim_flag"] is True  # the guard and the eval agree
