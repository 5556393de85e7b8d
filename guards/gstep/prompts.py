"""The tool-use tax's judge prompts of its own (whether a distractor variant keeps its answer, asked
before the runs; Type F of the A-F taxonomy); registered with the judge through the
``tuiagent.judge_prompts`` entry point. The gold-steps prompt (Type A) stays with the
judge (``core.judge_prompts``): the TIM protocol asks it too."""

from __future__ import annotations

from tuiagent.core.judge_prompts import JudgePrompt, parse_yes_no

# [ours] The tool-use-tax paper (arXiv 2605.00136) requires a distractor to leave the answer unchanged
# but its copy here prints no check (Appendix F's workflow is missing): the judge is asked this.
ANSWER_UNCHANGED_PROMPT = (
    "Two versions of a math word problem follow. The second was written from the first by adding a "
    "sentence that must not change the answer. The correct answer to the first is {answer}.\n\n"
    "Problem 1:\n{original}\n\nProblem 2:\n{variant}\n\n"
    "Is the correct answer to Problem 2 still {answer}? Reply with one word: yes or no."
)

# [ours] Type F of the tool-use tax (section 2.4): "the model follows a coherent but incorrect
# computation plan despite adequate evidence and functioning tools"; the paper prints no prompt.
PLAN_MISMATCH_PROMPT = (
    "A model solved the math word problem below and its final answer is wrong, although its tool calls "
    "worked. Compare its solution with the reference. Did it follow a coherent computation plan that is "
    "the wrong plan for this problem (for example a different operation, a step left out, or an answer to "
    "another question)?\n\nProblem:\n{question}\n\nReference solution:\n{reference}\n\n"
    "Model's solution:\n{solution}\n\nReply with one word: yes or no."
)

PROMPTS = (
    JudgePrompt(
        "answer_unchanged",
        1,
        ANSWER_UNCHANGED_PROMPT,
        "[ours] a distractor variant keeps its answer (tool-use tax, arXiv 2605.00136)",
        parse_yes_no,
        3,
        ("original", "variant", "answer"),
    ),
    JudgePrompt(
        "plan_mismatch",
        1,
        PLAN_MISMATCH_PROMPT,
        "[ours] Type F, planning mismatch (tool-use tax, arXiv 2605.00136, section 2.4)",
        parse_yes_no,
        3,
        ("question", "reference", "solution"),
    ),
)
