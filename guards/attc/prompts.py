"""ATTC's audit prompts, as its reference code asks them (00Dreamer00/ATTC, ``case_analysis/``), each
read by the reference's last-``\\boxed{}`` rule; registered with the judge through the
``tuiagent.judge_prompts`` entry point."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tuiagent.core.judge_prompts import UNPARSEABLE, JudgePrompt
from tuiagent.protocol import JudgeReply

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

PROMPTS = (
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
)
