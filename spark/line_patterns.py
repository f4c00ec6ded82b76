"""The regular expressions ingest runs over a JSON log line (Java's syntax, which Python's ``re`` shares here).

Each scans the raw text, so each must tell a token of the JSON from the same characters inside a
string. What makes that possible: inside a JSON string a ``"`` is always escaped (``\\"``), so a
``"`` after one of ``{``, ``,`` or after a string's end is where a string starts, and a pattern that
consumes whole strings (:data:`STRING`) never starts inside one when it scans from the line's start.

- :data:`KEY_TOKEN`: a key of an object and the first token of its value (the value's JSON kind);
- :data:`NUMBER_GATE`: a cheap test that a line may hold a number in exponent form (a superset:
  ``":1e5"`` inside a string matches too); :data:`NUMBER_OUTSIDE_STRINGS` then finds the numbers
  exactly (group 1; a string gives an empty group);
- :data:`NON_NUMBER_OUTSIDE_STRINGS`: ``NaN``/``Infinity`` as a value (group 1), not inside a string;
- :data:`LONE_SURROGATE`: a ``\\uD800``-``\\uDFFF`` escape that is not half of a pair.
"""
from __future__ import annotations

#: A JSON string, written as an unrolled loop (runs of plain characters between escapes): Java's regex
#: engine recurses once per character on an alternation inside a repetition, several times slower.
STRING = r'"[^"\\]*(?:\\.[^"\\]*)*"'

#: A key (group 1, as written) of an object and the first token of its value (group 2): a number
#: whole, else its first character. A value's ``"`` is consumed with the token, so the scan goes on
#: inside that string; it cannot match there: a key needs ``[{,]`` right before its opening ``"``.
KEY_TOKEN = r'[{,]\s*"([^"\\]*(?:\\.[^"\\]*)*)"\s*:\s*(-?[0-9][0-9.eE+-]*|.)'

_EXPONENT_NUMBER = r"-?[0-9][0-9.]*[eE][+-]?[0-9]+"
#: A value that may be a number in exponent form (it starts after ``:``, ``[`` or ``,``).
NUMBER_GATE = rf"[:\[,]\s*{_EXPONENT_NUMBER}"
#: Every string (group 1 empty) and every number in exponent form outside strings (group 1).
NUMBER_OUTSIDE_STRINGS = rf"{STRING}|[:\[,]\s*({_EXPONENT_NUMBER})"

#: NaN or Infinity where a value stands (not JSON numbers; Python's json writes them).
NON_NUMBER = r"[:\[,]\s*-?(?:NaN|Infinity)\s*[,}\]]"
#: Every string (group 1 empty) and every NaN/Infinity value outside strings (group 1).
NON_NUMBER_OUTSIDE_STRINGS = rf"{STRING}|({NON_NUMBER})"

# An escape of a UTF-16 surrogate (\uD800-\uDFFF) not preceded by an escaped backslash: a high one not
# followed by a low one, or a low one not after a high one.
_ESCAPE = r"(?<!\\)(?:\\\\)*\\u"
LONE_SURROGATE = (rf"(?i){_ESCAPE}d[89ab][0-9a-f]{{2}}(?!\\ud[c-f][0-9a-f]{{2}})"
                  rf"|(?<!\\ud[89ab][0-9a-f]{{2}}){_ESCAPE}d[c-f][0-9a-f]{{2}}")
