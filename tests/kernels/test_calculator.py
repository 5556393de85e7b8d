"""The calculator tool (kernels/calculator.py): one arithmetic expression in, its value out."""

from __future__ import annotations

import pytest

from kernels.calculator import MAX_EXPONENT, CalculatorKernel, NotArithmetic, evaluate


@pytest.mark.parametrize(
    ("text", "value"),
    [("75 / 6", 12.5), ("48 // 5", 9), ("2 ** 10", 1024), ("-(3 + 4) * 2", -14), ("  17 % 5\n", 2), ("1.5 * 4", 6.0)],
)
def test_arithmetic_is_evaluated(text, value):
    assert evaluate(text) == value and type(evaluate(text)) is type(value)


@pytest.mark.parametrize(
    "text",
    ["import os", "x = 3", "print(3 * 4)", "3\n4", "abs(-2)", "True + 1", "2j * 3", "'a' * 3", "[1, 2]", "(1, 2)", ""],
)
def test_anything_but_one_arithmetic_expression_is_refused(text):
    with pytest.raises(NotArithmetic, match="one arithmetic expression"):
        evaluate(text)


def test_no_expression_can_run_long_or_divide_by_zero_quietly():
    with pytest.raises(OverflowError):
        evaluate(f"2 ** {MAX_EXPONENT + 1}")
    assert evaluate(f"2 ** {MAX_EXPONENT}") == 2**MAX_EXPONENT
    with pytest.raises(ZeroDivisionError):
        evaluate("1 / (2 - 2)")


async def test_the_kernel_answers_a_value_or_an_error_the_model_reads():
    async with CalculatorKernel() as k:
        ok = await k.execute("24 * 17 - 129", 5)
        assert ok.text == "279" and not ok.error
        bad = await k.execute("import math\nprint(math.ceil(75 / 6))", 5)
        assert bad.error and bad.error_name == "NotArithmetic" and "one arithmetic expression" in bad.text
        zero = await k.execute("1 / 0", 5)
        assert zero.error and zero.text.startswith("ZeroDivisionError")
        assert k.calls == ["24 * 17 - 129", "import math\nprint(math.ceil(75 / 6))", "1 / 0"]
