r"""System prompts for tool-integrated reasoning and chain-of-thought runs.

The tool prompt carries one worked example of reasoning -> ```python -> ```output -> \boxed{}:
measured on the default 1.5B model, without an example it rarely writes code.
"""

from __future__ import annotations

TOOL_SYSTEM = r"""You are a careful math assistant. Solve the problem step by step.
When a calculation helps, write Python code in a ```python block. It runs in a Jupyter kernel where math, sympy, numpy (as np) and fractions are already imported; print what you need. Its output comes back in an ```output block. Continue from the output, and give the final answer in \boxed{}.

Example.
Problem: A bakery sells muffins in boxes of 6. Mia needs 75 muffins for a party. How many boxes must she buy?
Solution: She needs 75 muffins and a box holds 6, so she needs 75 / 6 boxes, rounded up.
```python
import math
print(math.ceil(75 / 6))
```
```output
13
```
She must buy 13 boxes.
\boxed{13}"""

# The tool-use-tax paper's GSM8K agent is "equipped only with a calculator" (arXiv 2605.00136, section
# 3.1); the paper gives no prompt for it, so these words and the example are ours, matched to
# TOOL_SYSTEM's so that only the tool differs (kernels/calculator.py is the tool).
CALCULATOR_SYSTEM = r"""You are a careful math assistant. Solve the problem step by step.
When a calculation helps, write one arithmetic expression (numbers, + - * / // % **, and parentheses) in a ```python block. A calculator evaluates it, and its value comes back in an ```output block. Continue from the output, and give the final answer in \boxed{}.

Example.
Problem: A bakery sells muffins in boxes of 6. Mia needs 75 muffins for a party. How many boxes must she buy?
Solution: She needs 75 muffins and a box holds 6, so she needs 75 / 6 boxes, rounded up.
```python
75 / 6
```
```output
12.5
```
12.5 rounds up to 13, so she must buy 13 boxes.
\boxed{13}"""

COT_SYSTEM = r"""You are a careful math assistant. Solve the problem step by step by reasoning in words and arithmetic; do not write code. Give the final answer in \boxed{}."""

DECLINED_NOTE = "The user chose not to run this code. Continue without it and give the final answer in \\boxed{}."
BUDGET_NOTE = "The tool budget is used up: no more code will run. Give the final answer in \\boxed{} now."
# [ours] appended to the assistant's turn, in its own voice, when a suspension's span is over (PruneTIR's RTTS).
TOOLS_BACK_NOTE = "The Python tool is available again, so code I write from here on will be run.\n"


def messages(problem: str, *, mode: str, tool: str = "python") -> list[dict[str, str]]:
    """The chat a run starts from. "fcstyle" (NoTool-FCStyle, arXiv 2605.00136) is the tool prompt
    with no tool behind it: the loop runs no code and does not stop at an output fence. ``tool``:
    the tool the prompt offers, Python in a kernel or a calculator."""
    tool_system = CALCULATOR_SYSTEM if tool == "calculator" else TOOL_SYSTEM
    system = tool_system if mode in ("tool", "fcstyle") else COT_SYSTEM
    return [{"role": "system", "content": system}, {"role": "user", "content": problem.strip()}]


def output_block(text: str) -> str:
    """The tool output as the model sees it, closing the code turn it follows."""
    body = text.rstrip("\n")
    return f"```output\n{body}\n```\n" if body else "```output\n```\n"


def truncate_middle(text: str, limit: int) -> str:
    """Keep the first and last ``limit // 2`` characters (ATTC reference: 200 + 200)."""
    if limit <= 0 or len(text) <= limit:
        return text
    half = limit // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n... [{cut} characters truncated] ...\n{text[-half:]}"
