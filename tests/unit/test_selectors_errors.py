"""IP_066: invalid selectors are refused at compile time with a position and a reason."""
from __future__ import annotations

import pytest

import jms_selectors
from jms_selectors import SelectorError


@pytest.mark.parametrize("text,position,reason", [
    # lexical
    ("'abc", 0, "unterminated string literal"),
    ("a = 'abc", 4, "unterminated string literal"),
    ('"abc = 1', 0, "unterminated quoted identifier"),
    ("a = 1 /* comment", 6, "unterminated comment"),
    ("a ! b", 2, "unexpected character '!'"),
    ("a != 1", 2, "use '<>'"),
    ("a = 1 % 2", 6, "unexpected character '%'"),
    ("a = #", 4, "unexpected character '#'"),
    ("a = 1;", 5, "unexpected character ';'"),
    ("a\u00a0= 1", 1, "unexpected character"),
    ("a = .", 4, "unexpected character '.'"),
    ("a = 0x", 4, "no digits after 0x"),
    ("a = 0xg", 4, "invalid numeric literal"),
    ("a = 08", 4, "invalid octal literal"),
    ("a = 0129", 4, "invalid octal literal"),
    ("a = 1e", 4, "exponent without digits"),
    ("a = 1e+", 4, "exponent without digits"),
    ("a = 1.5L", 4, "L suffix on an approximate number"),
    ("a = 1abc", 4, "invalid numeric literal"),
    ("a = 12LL", 4, "invalid numeric literal"),
    ("a = 1.5ff", 4, "invalid numeric literal"),
    ("a = " + "9" * 5000, 4, "longer than 4000 characters"),
    # structure
    ("", None, None),  # valid: the empty selector
    ("(a = 1", 6, "expected ')' to close the '(' at position 0, found end of input"),
    ("((a = 1) AND (b = 2)", 20, "expected ')' to close the '(' at position 0"),
    ("a = (1 + 2", 10, "expected ')' to close the '(' at position 4"),
    ("a = 1)", 5, "unbalanced ')'"),
    ("a = 1 b = 2", 6, "expected AND, OR or the end of the selector"),
    ("a = 1 AND", 9, "unexpected end of input; expected an operand"),
    ("a = 1 OR OR b", 9, "expected an operand, found the reserved word 'OR'"),
    ("AND a", 0, "expected an operand, found the reserved word 'AND'"),
    ("a =", 3, "unexpected end of input"),
    ("= 1", 0, "expected an operand, found '='"),
    ("()", 1, "expected an operand, found ')'"),
    ("a = 1 = 2", 6, "cannot follow another comparison"),
    ("a < b < c", 6, "cannot follow another comparison"),
    ("a LIKE 'x' LIKE 'y'", 11, "cannot follow another comparison"),
    ("a IS NULL = TRUE", 10, "cannot follow another comparison"),
    ("a = NOT b", 4, "NOT cannot start an operand here"),
    ("a + NOT b = 1", 4, "NOT cannot start an operand here"),
    ("a NOT b", 6, "expected LIKE, IN or BETWEEN after NOT"),
    ("a NOT = 1", 6, "expected LIKE, IN or BETWEEN after NOT"),
    ("a IS 5", 5, "expected NULL after IS"),
    ("a IS NOT 5", 9, "expected NULL after IS NOT"),
    ("a IS", 4, "expected NULL after IS, found end of input"),
    ("a BETWEEN 1 OR 2", 12, "expected AND between the bounds of BETWEEN"),
    ("a BETWEEN 1", 11, "expected AND between the bounds of BETWEEN"),
    ("a BETWEEN 1 AND", 15, "unexpected end of input"),
    ("a BETWEEN 1 AND b = 2 AND c", 18, "cannot follow another comparison"),
    # LIKE
    ("a LIKE 5", 7, "expected a string literal pattern after LIKE"),
    ("a LIKE b", 7, "expected a string literal pattern after LIKE"),
    ("a LIKE", 6, "expected a string literal pattern after LIKE, found end of input"),
    ("a LIKE 'x' ESCAPE 'ab'", 18, "ESCAPE must be a single character"),
    ("a LIKE 'x' ESCAPE ''", 18, "ESCAPE must be a single character"),
    ("a LIKE 'x' ESCAPE 1", 18, "expected a one-character string literal after ESCAPE"),
    ("a LIKE 'x!' ESCAPE '!'", 7, "LIKE pattern ends with the escape character"),
    ("a LIKE 'x!a' ESCAPE '!'", 7, "invalid escape sequence '!a'"),
    ("a LIKE 'x_' ESCAPE '_'", 7, "LIKE pattern ends with the escape character"),
    ("a NOT LIKE '!' ESCAPE '!'", 11, "LIKE pattern ends with the escape character"),
    # IN
    ("a IN ()", 6, "the IN list must not be empty"),
    ("a IN 'x'", 5, "expected '(' after IN"),
    ("a IN ('x' 'y')", 10, "expected ',' or ')' in the IN list"),
    ("a IN ('x',)", 10, "expected a string literal in the IN list"),
    ("a IN ('x', b)", 11, "expected a string literal in the IN list, found 'b'"),
    ("a IN (TRUE)", 6, "expected a string literal in the IN list"),
    ("a IN (NULL)", 6, "expected a string literal in the IN list"),
    ("a IN (- 'x')", 6, "an IN list holds string literals only"),
    ("a IN ('x'", 9, "expected ',' or ')' in the IN list, found end of input"),
    # types decided by the syntax
    ("1", 0, "the selector needs a condition, found a numeric expression"),
    ("'DENM'", 0, "the selector needs a condition, found a string literal"),
    ("a + 1", 0, "the selector needs a condition, found a numeric expression"),
    ("(a + 1)", 0, "the selector needs a condition"),
    ("-a", 0, "the selector needs a condition"),
    ("'x' AND a", 0, "AND needs a condition, found a string literal"),
    ("a AND 1", 6, "AND needs a condition, found a numeric expression"),
    ("a OR b + 1", 5, "OR needs a condition"),
    ("NOT 1", 4, "NOT needs a condition"),
    ("NOT 'x'", 4, "NOT needs a condition"),
    ("a + 'x' > 1", 4, "arithmetic operator '+' needs numeric operands, found a string literal"),
    ("'x' * a > 1", 0, "arithmetic operator '*' needs numeric operands, found a string literal"),
    ("a + TRUE > 1", 4, "needs numeric operands, found a boolean literal"),
    ("(a = 1) + 1 > 1", 0, "needs numeric operands, found a condition"),
    ("a IS NULL + 1 = 2", 0, "needs numeric operands, found a condition"),
    ("-'x' = a", 1, "unary '-' needs numeric operands, found a string literal"),
    ("-TRUE = a", 1, "unary '-' needs numeric operands, found a boolean literal"),
    # keywords are reserved
    ("and = 1", 0, "expected an operand, found the reserved word 'and'"),
    ("a = b = 1", 6, "cannot follow another comparison"),
    ("like LIKE 'x'", 0, "expected an operand"),
    ("escape = 1", 0, "expected an operand"),
])
def test_error_position_and_reason(text, position, reason):
    if position is None:
        assert jms_selectors.compile(text).matches({}) is True
        return
    with pytest.raises(SelectorError) as info:
        jms_selectors.compile(text)
    error = info.value
    assert error.position == position, str(error)
    assert reason in error.reason
    assert str(error) == f"invalid selector at position {position}: {error.reason}"
    assert error.text == text
    assert isinstance(error, ValueError)


def test_error_message_example_shape():
    with pytest.raises(SelectorError, match=r"^invalid selector at position 17: expected '\)'"):
        jms_selectors.compile("(messageType = 12")


@pytest.mark.parametrize("value", [None, b"a = 1", 1, ["a = 1"]])
def test_non_string_selector_is_a_type_error(value):
    with pytest.raises(TypeError):
        jms_selectors.compile(value)


def test_reason_names_long_tokens_briefly():
    with pytest.raises(SelectorError) as info:
        jms_selectors.compile("a = 1 " + "x" * 100)
    assert "..." in info.value.reason and len(info.value.reason) < 150
