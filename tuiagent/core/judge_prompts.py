"""The judge's prompts, each with its source, a version (part of the cache key) and a strict parser.

A parser takes the judge's reply and returns a value, or ``UNPARSEABLE`` when the reply does not say
what the prompt asks for in the form it asks for; the judge counts those. The papers' prompts are
verbatim, and ATTC's audits are its reference code's; where a paper does not print where its inputs
go, the layout after the prompt is ours. A paper's package may register its own prompts through the
``tuiagent.judge_prompts`` entry point (the necessity judge's is ``guards.necessity.judging``).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tuiagent import plugins
from tuiagent.core import judge_schemas
from tuiagent.core.judge_schemas import Schema
from tuiagent.protocol import JudgeReply

UNPARSEABLE = "unparseable"


@dataclass(frozen=True)
class JudgePrompt:
    """A question for the judge: ``template`` with ``{inputs}``; ``pair`` names the two inputs a
    pairwise prompt swaps for its second order (None: a single question); ``schema``: the JSON schema of
    the reply the prompt asks for, for a judge that constrains its replies (``core.judge_schemas``; None:
    the reply is not JSON)."""

    id: str
    version: int
    template: str
    source: str
    parse: Callable[[JudgeReply], Any]
    max_tokens: int
    inputs: tuple[str, ...]
    pair: tuple[str, str] | None = None
    schema: Schema | None = None

    def render(self, **inputs: str) -> str:
        missing = set(self.inputs) - set(inputs)
        extra = set(inputs) - set(self.inputs)
        if missing or extra:
            raise ValueError(
                f"judge prompt {self.id!r} takes {', '.join(self.inputs)}; "
                f"missing {sorted(missing)}, unexpected {sorted(extra)}"
            )
        return self.template.format(**{k: str(v).strip() for k, v in inputs.items()})


_FENCE = re.compile(r"^```(?:json)?\s*\n(.*?)\n?```$", re.DOTALL)


def json_object(text: str) -> dict[str, Any] | None:
    """The reply as one JSON object (optionally in a ```json fence, nothing else around it); None otherwise."""
    text = text.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def parse_correctness(reply: JudgeReply) -> Any:
    """true / false from the JSON's "true_false" boolean."""
    data = json_object(reply.text)
    verdict = None if data is None else data.get("true_false")
    return verdict if isinstance(verdict, bool) else UNPARSEABLE


def parse_win_rate(reply: JudgeReply) -> Any:
    """ "A" or "B" from the JSON's "best_solution"."""
    data = json_object(reply.text)
    best = None if data is None else data.get("best_solution")
    return best if best in ("A", "B") else UNPARSEABLE


def parse_miss_rate(reply: JudgeReply) -> Any:
    """{"gold_steps", "missing_steps"} (counts) from the JSON's two lists of {"step": int, ...}: at least
    one gold step, and every missing step one of the gold steps (else the reply contradicts itself)."""
    data = json_object(reply.text)
    if data is None:
        return UNPARSEABLE
    gold, missing = data.get("gold_steps"), data.get("missing_steps")
    if not isinstance(gold, list) or not isinstance(missing, list) or not gold:
        return UNPARSEABLE
    steps = [s.get("step") if isinstance(s, dict) else None for s in gold]
    absent = [s.get("step") if isinstance(s, dict) else None for s in missing]
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in steps + absent):
        return UNPARSEABLE
    if len(set(steps)) != len(steps) or len(set(absent)) != len(absent) or not set(absent) <= set(steps):
        return UNPARSEABLE
    return {"gold_steps": len(steps), "missing_steps": len(absent)}


ERROR_TYPES = ("logic", "assumption", "creativity", "algebra_arithmetic")


def parse_error_types(reply: JudgeReply) -> Any:
    """{type: bool} for the four error types and "none_of_the_above", from each one's "exists" ("yes" or
    "no"); "none_of_the_above" must be "yes" exactly when the four are "no", as the prompt asks."""
    data = json_object(reply.text)
    if data is None:
        return UNPARSEABLE
    said: dict[str, bool] = {}
    for key in (*ERROR_TYPES, "none_of_the_above"):
        entry = data.get(key)
        exists = entry.get("exists") if isinstance(entry, dict) else None
        if exists not in ("yes", "no"):
            return UNPARSEABLE
        said[key] = exists == "yes"
    if said["none_of_the_above"] == any(said[k] for k in ERROR_TYPES):
        return UNPARSEABLE
    return said


# [paper] "Spurious Tool Use" (arXiv 2609.16268), Appendix A.3, "Answer correctness judge", verbatim.
CORRECTNESS_PROMPT = (
    "You are an evaluator. Determine whether the Model Response’s final answer matches the Ground Truth. "
    "Instructions: 1. Extract the final answer from the Model Response. Ignore reasoning and intermediate steps. "
    "Use the last explicit answer given. 2. Normalize before comparison: - Numbers: ignore commas and trailing "
    "zeros; treat decimals and fractions as equivalent (0.5 = 1/2). - Text: ignore case, punctuation, and extra "
    "whitespace. - Math: algebraically equivalent expressions count as equal; order does not matter for "
    "sets/tuples. - Multiple choice: accept either the option letter or the option text. - Ignore units unless "
    "they change the meaning. 3. Return true only if the final answers are mathematically or semantically "
    "equivalent. If no clear final answer is present, return false. Question: {question} Model Response: "
    '{response_str} Ground Truth: {ground_truth} Output JSON: {{"analysis": "brief explanation", '
    '"true_false": true or false}}'
)

# [paper] "From Proof to Program" (TIM), Appendix A.2, "Win Rate Evaluation Prompt", verbatim (its
# typographic quotes and "0--5" as printed); the paper does not print where the problem and the two
# solutions go: the lines after the JSON format are ours.
WIN_RATE_PROMPT = (
    "You are an expert mathematician tasked with grading two solutions, ‘‘A’’ and ‘‘B’’, to the same "
    "competition-style problem. Evaluate which solution is better by assigning error severity scores (0 = low, "
    "5 = high) for the following categories: 1. Logic (0--5): Errors due to logical fallacies or unjustified "
    "leaps in reasoning. 2. Assumption (0--5): Errors from unproven or incorrect assumptions that undermine "
    "subsequent steps. 3. Creativity (0--5): Errors from fundamentally incorrect or unoriginal strategies "
    "indicating failure to identify the right approach. 4. Algebra/Arithmetic (0--5): Errors arising from "
    "critical algebraic or arithmetic miscalculations. Evaluation: • Provide a brief justification for each "
    "score, referencing relevant mathematical concepts or reasoning techniques. • Compute a final score as the "
    "average of the four error categories. • Select the solution with the lower final score as the better one. "
    "If tied, prefer the solution with clearer reasoning. Respond strictly in the following JSON format:\n"
    "{{\n"
    '  "A_grades": {{\n'
    '    "logic": {{"score": 0-5, "explanation": ""}},\n'
    '    "assumption": {{"score": 0-5,\n                    "explanation": ""}},\n'
    '    "creativity": {{"score": 0-5,\n                    "explanation": ""}},\n'
    '    "algebra_arithmetic": {{"score": 0-5,\n                            "explanation": ""}},\n'
    '    "final_score": {{"score": value}}\n'
    "  }},\n"
    '  "B_grades": {{\n'
    '    "logic": {{"score": 0-5, "explanation": ""}},\n'
    '    "assumption": {{"score": 0-5,\n                    "explanation": ""}},\n'
    '    "creativity": {{"score": 0-5,\n                    "explanation": ""}},\n'
    '    "algebra_arithmetic": {{"score": 0-5,\n                            "explanation": ""}},\n'
    '    "final_score": {{"score": value}}\n'
    "  }},\n"
    '  "best_solution": "A or B"\n'
    "}}"
    "\n\nProblem:\n{problem}\n\nSolution A:\n{a}\n\nSolution B:\n{b}"  # [ours] where the inputs go
)

_BOXED = re.compile(r"\\boxed\{(.*?)\}")


def boxed_choice(*allowed: int) -> Callable[[JudgeReply], Any]:
    """A reader of the reply's last ``\\boxed{...}`` (the ATTC reference's ``extract_last_boxed_answer``):
    one of ``allowed`` as an int, else UNPARSEABLE."""

    def parse(reply: JudgeReply) -> Any:
        found = _BOXED.findall(reply.text)
        value = found[-1].strip() if found else ""
        return int(value) if value.isdigit() and int(value) in allowed else UNPARSEABLE

    return parse


def _literal(text: str) -> str:
    """A verbatim prompt as a template: its braces escaped, so only the inputs added after it are fields."""
    return text.replace("{", "{{").replace("}", "}}")


# [reference code] 00Dreamer00/ATTC, case_analysis/donot_believe_tools.py (commit 77adefb): the
# reasoning-vs-tool conflict audit of section 2.1 (Figure 2), verbatim with its whitespace; the reference
# sends it followed directly by the model's whole response. One departure [ours]: its Python literal
# turns "\boxed{}" in "must be included in \boxed{}" into a backspace and "oxed{}"; we send "\boxed{}".
ATTC_CONFLICT_PROMPT = (
    "\n    I will give you a case of a model answering a mathematical problem, and you need to analyze the content "
    "of the model's answer. \n    If there is no Python code snippet in the model's response, or if the return "
    'result of the Python code (after "```output") does not conflict with the model\'s analysis before the '
    "code,you should output \\boxed{0}. If the return result of Python code conflicts with the analysis before "
    "the code,and the model does not trust the return result of Python code , output \\boxed{1}.  If the return "
    "result of Python code conflicts with the analysis before the code, and the model chooses to believe the "
    "return result of Python code and change its analysis approach, you should output \\boxed{2}.Your answer is "
    "limited to these three types and must be included in \\boxed{}. Do not output extra text. The cases that "
    "need to be analyzed are as follows:\n    "
)

# [reference code] 00Dreamer00/ATTC, case_analysis/overconfident.py (commit 77adefb): the audit of wrong
# runs behind "tool ignored" (section 2.2, Figure 3), verbatim with its whitespace; the reference sends
# it followed by the case as JSON (json.dumps(..., ensure_ascii=False, indent=2)) with the fields
# idx, question, solution, answer, code (the model's whole response) and pred.
ATTC_TOOL_IGNORED_PROMPT = (
    '\n    I will give you a jsonl formatted data, which is a case where the model answered incorrectly."question" '
    'is the question answered by the model, "answer" is the standard answer, "solution" is the standard '
    'problem-solving process, "code" is the content of the model\'s answer, and "pred" is the final answer of the '
    "model. \n    You need to analyze the model's answer content based on this information. If there is no "
    'Python code segment(after "```python") in the model\'s answer, output "\\boxed{2}". If the return result of '
    'the Python code (after "```output") is correct (including correct answer and correct thinking), output '
    '"\\boxed{1}". Otherwise, output "\\boxed{0}". Your answer is limited to these three types and must be '
    'included in "\\boxed{}, don\'t output extra text". The cases that need to be analyzed are as follows:\n\n    '
)

# [reference code] 00Dreamer00/ATTC, case_analysis/false_tool_in_true_cases.py (commit 77adefb): the
# audit of correct runs for a wrong tool output (section 2.2: the tool should not be trusted blindly
# either), verbatim with its whitespace; sent followed by the case as JSON, as above.
ATTC_TOOL_WRONG_PROMPT = (
    '\n    I will give you a jsonl formatted data, which is a case where the model answered correctly."question" '
    'is the question answered by the model, "answer" is the standard answer, "solution" is the standard '
    'problem-solving process, "code" is the content of the model\'s answer, and "pred" is the final answer of the '
    "model. \n    You need to analyze the content of the model's answer based on this information. If all the "
    "Python code's return results (after \"```output\") in the model's answer are correct (including correct "
    'answer and correct thinking), output "\\boxed{0}". If any return result of Python code is incorrect, output '
    '"\\boxed{1}". Your answer is limited to these two types and must be included in "\\boxed{}". Do not output '
    "any extra text. The cases that need to be analyzed are as follows:\n\n    "
)

# [paper] "From Proof to Program" (TIM), Appendix A.3, "Miss Rate Evaluation Prompt", verbatim (as printed,
# "Instructions" without a colon); where the problem, the solution and the gold solution go is ours.
MISS_RATE_PROMPT = (
    "You are an expert mathematician. You will be given a mathematical problem, a solution to that problem, and a "
    "gold solution to use as a reference. Your task is to identify which logical steps from the gold solution are "
    "absent in the given solution. Instructions 1. Parse the gold solution into an ordered list of atomic logical "
    "steps (Step 1, Step 2, …). A step is the smallest self-contained claim or transformation needed to progress "
    "the proof. 2. For each gold step, decide whether the same reasoning (possibly re-worded) appears in the given "
    "solution. Mark a step as present if the solution makes the identical deduction or provides an equivalent "
    "justification. 3. Collect all steps that are absent from the given solution. Output format (strict JSON):\n"
    "{{\n"
    '  "gold_steps": [\n'
    '    {{ "step": <integer>,\n'
    '        "summary": "<one-line summary of gold step>"\n'
    "    }}\n"
    "  ],\n"
    '  "missing_steps": [\n'
    '    {{ "step": <integer>,\n'
    '        "summary": "<one-line summary of gold step\n'
    '        that is absent>"\n'
    "    }}\n"
    "  ]\n"
    "}}"
    "\n\nProblem:\n{problem}\n\nSolution:\n{solution}\n\nGold solution:\n{gold}"  # [ours] where the inputs go
)

# [paper] "From Proof to Program" (TIM), Appendix A.4, "Reasoning Error Detection Prompt", verbatim. Section 5.4
# says the judge rates each type "on a 1–5 scale, or output None"; the printed prompt asks yes/no, which is
# what tuiagent asks and counts. Where the problem and the solution go is ours.
ERROR_TYPES_PROMPT = (
    "You are an expert mathematician grading a solution to a competition-style problem. Identify whether the "
    "solution exhibits each of the following error types: 1. Logic: Logical fallacies or unjustified leaps that "
    "disrupt reasoning. 2. Assumption: Unproven or incorrect assumptions that undermine subsequent steps. "
    "3. Creativity: Fundamentally incorrect strategy indicating failure to identify the correct approach. "
    "4. Algebra/Arithmetic: Critical algebraic or arithmetic miscalculations. 5. None of the above: No errors from "
    'the above categories are present. Evaluation Guidelines • For each category, set "exists" to "yes" if '
    'that error occurs; otherwise "no". • Provide a brief explanation for each category; if an error is '
    'detected, indicate where it occurs. • Mark None of the above as "yes" only if all other categories are '
    '"no". Output format (strict JSON):\n'
    "{{\n"
    '  "logic": {{"exists": "yes|no",\n                "explanation": "your explanation here"\n            }},\n'
    '  "assumption": {{"exists": "yes|no",\n                "explanation": "your explanation here"\n'
    "                }},\n"
    '  "creativity": {{"exists": "yes|no",\n                "explanation": "your explanation here"\n'
    "                }},\n"
    '  "algebra_arithmetic": {{"exists": "yes|no",\n                "explanation": "your explanation here"\n'
    "                        }},\n"
    '  "none_of_the_above": {{"exists": "yes|no",\n                "explanation": "your explanation here"\n'
    "                        }}\n"
    "}}"
    "\n\nProblem:\n{problem}\n\nSolution:\n{solution}"  # [ours] where the inputs go
)


def parse_yes_no(reply: JudgeReply) -> Any:
    """True for "yes", False for "no" (case and a trailing full stop aside); nothing else parses."""
    word = reply.text.strip().rstrip(".!").strip().lower()
    return {"yes": True, "no": False}.get(word, UNPARSEABLE)


# [ours] The tool-use-tax paper (arXiv 2605.00136) requires a distractor to leave the answer unchanged
# but its copy here prints no check (Appendix F's workflow is missing): the judge is asked this.
ANSWER_UNCHANGED_PROMPT = (
    "Two versions of a math word problem follow. The second was written from the first by adding a "
    "sentence that must not change the answer. The correct answer to the first is {answer}.\n\n"
    "Problem 1:\n{original}\n\nProblem 2:\n{variant}\n\n"
    "Is the correct answer to Problem 2 still {answer}? Reply with one word: yes or no."
)


def parse_count(reply: JudgeReply) -> Any:
    """A whole number 1..99 and nothing else (a trailing full stop aside)."""
    text = reply.text.strip().rstrip(".").strip()
    return int(text) if text.isdigit() and 0 < int(text) < 100 else UNPARSEABLE


# [ours] Type A of the tool-use tax (section 2.4) needs the gold computation's steps; where the
# reference has no GSM8K calculator annotations the judge counts them.
GOLD_STEPS_PROMPT = (
    "Here is the worked solution of a math word problem. How many separate arithmetic calculations "
    "does it perform to reach the answer?\n\nSolution:\n{reference}\n\nReply with one number."
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

PROMPTS: dict[str, JudgePrompt] = {
    p.id: p
    for p in (
        JudgePrompt(
            "correctness",
            1,
            CORRECTNESS_PROMPT,
            "[paper] Spurious Tool Use, Appendix A.3, answer correctness judge",
            parse_correctness,
            256,
            ("question", "response_str", "ground_truth"),
            schema=judge_schemas.CORRECTNESS,
        ),
        # max_tokens [ours]: the JSON asks for eight scores with explanations
        JudgePrompt(
            "win_rate",
            1,
            WIN_RATE_PROMPT,
            "[paper] From Proof to Program (TIM), Appendix A.2, Win Rate (input layout ours)",
            parse_win_rate,
            1024,
            ("problem", "a", "b"),
            pair=("a", "b"),
            schema=judge_schemas.WIN_RATE,
        ),
        # max_tokens [ours]: the prompts ask for one \boxed{} and nothing else; room for a judge that reasons first
        JudgePrompt(
            "attc_conflict",
            1,
            _literal(ATTC_CONFLICT_PROMPT) + "{response}",
            "[reference code] 00Dreamer00/ATTC case_analysis/donot_believe_tools.py: reasoning-tool conflict",
            boxed_choice(0, 1, 2),
            256,
            ("response",),
        ),
        JudgePrompt(
            "attc_tool_ignored",
            1,
            _literal(ATTC_TOOL_IGNORED_PROMPT) + "{case}",
            "[reference code] 00Dreamer00/ATTC case_analysis/overconfident.py: tool ignored in wrong runs",
            boxed_choice(0, 1, 2),
            256,
            ("case",),
        ),
        JudgePrompt(
            "attc_tool_wrong",
            1,
            _literal(ATTC_TOOL_WRONG_PROMPT) + "{case}",
            "[reference code] 00Dreamer00/ATTC case_analysis/false_tool_in_true_cases.py: a wrong tool output "
            "in right runs",
            boxed_choice(0, 1),
            256,
            ("case",),
        ),
        # max_tokens [ours]: a one-line summary per gold step; five explanations
        JudgePrompt(
            "miss_rate",
            1,
            MISS_RATE_PROMPT,
            "[paper] From Proof to Program (TIM), Appendix A.3, Miss Rate (input layout ours)",
            parse_miss_rate,
            1024,
            ("problem", "solution", "gold"),
            schema=judge_schemas.MISS_RATE,
        ),
        JudgePrompt(
            "error_types",
            1,
            ERROR_TYPES_PROMPT,
            "[paper] From Proof to Program (TIM), Appendix A.4, reasoning error detection (input layout ours)",
            parse_error_types,
            768,
            ("problem", "solution"),
            schema=judge_schemas.ERROR_TYPES,
        ),
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
            "gold_steps",
            1,
            GOLD_STEPS_PROMPT,
            "[ours] the gold steps of Type A (tool-use tax, section 2.4)",
            parse_count,
            4,
            ("reference",),
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
}


PLUGGED = "tuiagent.judge_prompts"  # a plug-in's prompts: an entry point to a sequence of JudgePrompt


def prompt(prompt_id: str) -> JudgePrompt:
    """The registered prompt ``prompt_id`` (shipped here or by a plug-in); an unknown one is a
    ValueError naming the known ones."""
    if prompt_id in PROMPTS:  # a plug-in is imported only for its own prompts
        return PROMPTS[prompt_id]
    known = registered()
    try:
        return known[prompt_id]
    except KeyError:
        raise ValueError(f"unknown judge prompt {prompt_id!r}; known: {', '.join(known)}") from None


def registered() -> dict[str, JudgePrompt]:
    """Every prompt: the shipped ones and the plug-ins'."""
    return PROMPTS | _plugged(tuple(plugins.names(PLUGGED)))


@functools.lru_cache(maxsize=8)
def _plugged(names: tuple[str, ...]) -> dict[str, JudgePrompt]:
    out: dict[str, JudgePrompt] = {}
    for name in names:
        found: Any = plugins.load(PLUGGED, name, "judge prompt set")
        for p in found:
            if p.id in PROMPTS or p.id in out:
                raise ValueError(f"judge prompt {p.id!r} of plug-in {name!r} is registered twice")
            out[p.id] = p
    return out
