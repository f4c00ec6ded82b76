"""Tokens of the JMS 1.1 §3.8 selector syntax as accepted by Apache Qpid / ActiveMQ (IP_066).

Whitespace is space, tab, CR, LF and form feed; ``-- ...`` (to end of line) and ``/* ... */``
are comments, as in the Apache grammars and SQL-92. Keywords are case-insensitive, identifiers
case-sensitive. ``"..."`` is a quoted identifier (Qpid Broker-J), needed for C-Roads
``custom-<ns>-<name>`` properties (IP_131).
"""
from __future__ import annotations

import re
import unicodedata
from typing import NamedTuple

from jms_selectors.errors import SelectorError

KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "LIKE", "ESCAPE", "IN", "IS", "TRUE", "FALSE", "NULL"})

_WHITESPACE = " \t\n\r\f"
_OPERATORS = ("<>", "<=", ">=", "=", "<", ">", "+", "-", "*", "/", "(", ")", ",")
_ID_START_CATEGORIES = frozenset({"Lu", "Ll", "Lt", "Lm", "Lo", "Nl", "Sc", "Pc"})
_ID_PART_CATEGORIES = _ID_START_CATEGORIES | {"Nd", "Mn", "Mc"}
_ASCII_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_$")
_ASCII_PART = _ASCII_START | frozenset("0123456789")
_NUMBER = re.compile(
    r"0[xX](?P<hex>[0-9a-fA-F]*)"
    r"|(?P<mantissa>[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?P<exponent>[eE][+-]?[0-9]*)?"
)
_SUFFIXES = "lLfFdD"
#: Longest numeric literal accepted (Python refuses to convert longer decimal strings).
MAX_NUMBER_LENGTH = 4000


class Token(NamedTuple):
    """One token: ``kind`` is an operator (``'<='``), a keyword (``'AND'``), ``'ID'``, ``'STR'``,
    ``'INT'``, ``'FLOAT'`` or ``'EOF'``; ``value`` the decoded name/string/number."""

    kind: str
    value: object
    pos: int
    end: int


def is_identifier_start(c: str) -> bool:
    """Java identifier start (letters, ``$``, ``_``, currency and connector characters)."""
    return c in _ASCII_START or (not c.isascii() and unicodedata.category(c) in _ID_START_CATEGORIES)


def is_identifier_part(c: str) -> bool:
    """Java identifier part (start characters, digits and combining marks)."""
    return c in _ASCII_PART or (not c.isascii() and unicodedata.category(c) in _ID_PART_CATEGORIES)


def describe(text: str, token: Token) -> str:
    """How an error message names a token."""
    if token.kind == "EOF":
        return "end of input"
    image = text[token.pos : token.end]
    return repr(image if len(image) <= 30 else image[:27] + "...")


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens ending with an ``EOF`` token; SelectorError on bad input."""
    tokens: list[Token] = []
    append = tokens.append
    n = len(text)
    i = 0
    while True:
        while i < n and text[i] in _WHITESPACE:
            i += 1
        if i >= n:
            append(Token("EOF", None, n, n))
            return tokens
        c = text[i]
        if c == "-" and text.startswith("--", i):
            newline = min((p for p in (text.find("\n", i), text.find("\r", i)) if p >= 0), default=n)
            i = newline
        elif c == "/" and text.startswith("/*", i):
            close = text.find("*/", i + 2)
            if close < 0:
                raise SelectorError(i, "unterminated comment: '/*' without '*/'", text)
            i = close + 2
        elif c == "'" or c == '"':
            token = _quoted(text, i, c)
            append(token)
            i = token.end
        elif c in "0123456789" or (c == "." and i + 1 < n and text[i + 1] in "0123456789"):
            token = _number(text, i)
            append(token)
            i = token.end
        elif is_identifier_start(c):
            j = i + 1
            while j < n and is_identifier_part(text[j]):
                j += 1
            word = text[i:j]
            upper = word.upper() if word.isascii() else ""
            append(Token(upper, upper, i, j) if upper in KEYWORDS else Token("ID", word, i, j))
            i = j
        else:
            for op in _OPERATORS:
                if text.startswith(op, i):
                    append(Token(op, op, i, i + len(op)))
                    i += len(op)
                    break
            else:
                hint = {"!": " (use '<>' for not equal)", "%": " (% is only a wildcard inside LIKE patterns)"}.get(c, "")
                raise SelectorError(i, f"unexpected character {c!r}{hint}", text)


def _quoted(text: str, start: int, quote: str) -> Token:
    """A '...' string literal or "..." quoted identifier; the quote is doubled inside."""
    parts = []
    i = start + 1
    while True:
        close = text.find(quote, i)
        if close < 0:
            what = "string literal" if quote == "'" else "quoted identifier"
            raise SelectorError(start, f"unterminated {what}: missing closing {quote}", text)
        parts.append(text[i:close])
        if text.startswith(quote, close + 1):
            parts.append(quote)
            i = close + 2
        else:
            value = "".join(parts)
            return Token("STR" if quote == "'" else "ID", value, start, close + 1)


def _number(text: str, start: int) -> Token:
    """Exact (decimal, 0x hex, 0 octal, optional L) or approximate (optional F/D) numeric literal."""
    m = _NUMBER.match(text, start)
    assert m is not None
    end = m.end()
    suffix = text[end] if end < len(text) and text[end] in _SUFFIXES else ""
    end += len(suffix)
    image = text[start:end]
    if end < len(text) and is_identifier_part(text[end]):
        raise SelectorError(start, f"invalid numeric literal {text[start:end + 1]!r}", text)
    if end - start > MAX_NUMBER_LENGTH:
        raise SelectorError(start, f"numeric literal longer than {MAX_NUMBER_LENGTH} characters", text)
    if m.group("hex") is not None:
        digits = m.group("hex")
        if not digits:
            raise SelectorError(start, f"invalid hexadecimal literal {image!r}: no digits after 0x", text)
        if suffix not in ("", "l", "L"):  # pragma: no cover - f/d/F/D are hex digits, consumed above
            raise SelectorError(start, f"invalid hexadecimal literal {image!r}", text)
        return Token("INT", int(digits, 16), start, end)
    mantissa, exponent = m.group("mantissa"), m.group("exponent")
    if exponent is not None and exponent.lstrip("eE+-") == "":
        raise SelectorError(start, f"invalid numeric literal {image!r}: exponent without digits", text)
    if "." in mantissa or exponent is not None or suffix in ("f", "F", "d", "D"):
        if suffix in ("l", "L"):
            raise SelectorError(start, f"invalid numeric literal {image!r}: L suffix on an approximate number", text)
        return Token("FLOAT", float(mantissa + (exponent or "")), start, end)
    if len(mantissa) > 1 and mantissa[0] == "0":
        if any(d in "89" for d in mantissa):
            raise SelectorError(start, f"invalid octal literal {image!r}: digits 8 and 9 are not octal", text)
        return Token("INT", int(mantissa, 8), start, end)
    return Token("INT", int(mantissa), start, end)
