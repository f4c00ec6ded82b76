"""Tokens of the JMS 2.0 §3.8.1 selector syntax as the Apache brokers accept it (IP_066).

The token set is the intersection of the JavaCC grammars of Qpid Broker-J, ActiveMQ and Artemis:
a selector this lexer accepts they all tokenize. Comments ``/* */`` and ``--`` up to the next
line break (without one, ``--`` is two minus signs, as in the Java engines); keywords
case-insensitive, bare identifiers ASCII, ``"..."`` quoted identifiers for C-Roads
``custom-<ns>-<name>`` properties (IP_131). Tokens, literals and the grammars checked:
docs/selectors.md ("Dialect", "Grammar").
"""
from __future__ import annotations

import re
import unicodedata
from typing import NamedTuple

from jms_selectors.errors import SelectorError

KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "LIKE", "ESCAPE", "IN", "IS", "TRUE", "FALSE", "NULL"})
#: Words no bare identifier may be: the keywords and ActiveMQ/Artemis' XPATH and XQUERY.
RESERVED = KEYWORDS | {"XPATH", "XQUERY"}

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
    last_break = max(text.rfind("\n"), text.rfind("\r"))  # a '--' before it starts a line comment
    while True:
        while i < n and text[i] in _WHITESPACE:
            i += 1
        if i >= n:
            append(Token("EOF", None, n, n))
            return tokens
        c = text[i]
        if c == "-" and i < last_break and text.startswith("--", i):
            # LINE_COMMENT "--" (~["\n","\r"])* ("\n"|"\r"|"\r\n"): up to the first line break;
            # without one after it, the "-" below takes the first dash (JavaCC's longest match).
            i = min(p for p in (text.find("\n", i), text.find("\r", i)) if p >= 0)
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
            append(_word(text, i, j))
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


def embeddable(text: str) -> str:
    """``text`` written so that it tokenizes the same when a line break follows it.

    A ``--`` with no line break after it is two minus signs; put a line break after the text (as
    code combining selectors does, to close each one off) and it becomes a comment that swallows
    the rest of its line. Adjacent minus signs are therefore written apart (``a = 1 -- x`` becomes
    ``a = 1 - - x``), which every engine reads as before. A text that does not tokenize is
    returned unchanged (it is refused either way).
    """
    try:
        tokens = tokenize(text)
    except SelectorError:
        return text
    cuts = [second.pos for first, second in zip(tokens, tokens[1:])
            if first.kind == "-" and second.kind == "-" and first.end == second.pos]
    if not cuts:
        return text
    pieces, start = [], 0
    for cut in cuts:
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return " ".join(pieces)


def _word(text: str, start: int, end: int) -> Token:
    """A keyword or a bare identifier; reserved words and non-ASCII names are refused."""
    word = text[start:end]
    if not word.isascii():
        raise SelectorError(start, f"identifier {word!r} is not ASCII; quote it: {_quote_id(word)}", text)
    upper = word.upper()
    if upper in KEYWORDS:
        return Token(upper, upper, start, end)
    if upper in RESERVED:
        raise SelectorError(start, f"{word!r} is a reserved word; to name a property so, quote it: {_quote_id(word)}", text)
    return Token("ID", word, start, end)


def _quote_id(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


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
    """Exact (decimal with optional L, 0x hex, 0 octal) or approximate (``.`` or exponent) literal.

    Forms outside the Apache grammars' DECIMAL/HEX/OCTAL/FLOATING_POINT tokens are refused with
    the portable spelling: F/D suffixes, L on hex/octal/approximate numbers, 8 or 9 in octal.
    """
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
    bare = image[: len(image) - len(suffix)]
    if m.group("hex") is not None:
        digits = m.group("hex")
        if not digits:
            raise SelectorError(start, f"invalid hexadecimal literal {image!r}: no digits after 0x", text)
        if suffix:  # f/d/F/D are hex digits, consumed above: only L gets here
            raise SelectorError(start, f"invalid hexadecimal literal {image!r}: no L suffix on hex (portable form: {bare})", text)
        return Token("INT", int(digits, 16), start, end)
    mantissa, exponent = m.group("mantissa"), m.group("exponent")
    if exponent is not None and exponent.lstrip("eE+-") == "":
        raise SelectorError(start, f"invalid numeric literal {image!r}: exponent without digits", text)
    approximate = "." in mantissa or exponent is not None
    if suffix in ("f", "F", "d", "D"):
        portable = bare if approximate else bare + ".0"
        raise SelectorError(start, f"invalid numeric literal {image!r}: no F/D suffixes (portable form: {portable})", text)
    if approximate:
        if suffix:
            raise SelectorError(start, f"invalid numeric literal {image!r}: L suffix on an approximate number "
                                       f"(portable form: {bare})", text)
        return Token("FLOAT", float(mantissa + (exponent or "")), start, end)
    if mantissa[0] == "0":
        if any(d in "89" for d in mantissa):
            raise SelectorError(start, f"invalid octal literal {image!r}: digits 8 and 9 are not octal", text)
        if suffix:
            raise SelectorError(start, f"invalid octal literal {image!r}: no L suffix on octal (portable form: {bare})", text)
        return Token("INT", int(mantissa, 8), start, end)
    return Token("INT", int(mantissa), start, end)
