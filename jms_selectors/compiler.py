"""Compile a selector tree into Python functions (IP_066/067: filter every message, fast).

Each condition becomes two Python expressions, "definitely TRUE" and "definitely FALSE", so
three-valued logic needs no "unknown" value at run time; common predicates are inlined, LIKE
becomes ``==``/``startswith``/``endswith``/``in``. The generated source never contains selector
text (values go in the globals under generated names), nesting deeper than :data:`HOIST_DEPTH`
moves into separate functions, and a misbehaving mapping gives "no match", never an error.
How and why: docs/selectors.md ("The compiler"); figures: docs/performance.md.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager

from jms_selectors import reference
from jms_selectors.ast import (
    And, Arithmetic, Between, Comparison, ComparisonOp, Expr, Identifier, In, IsNull, Like, Not, Or, Unary,
    identifiers,
)
from jms_selectors.like import contains_any

#: Nesting of generated expressions after which a sub-tree gets its own generated function.
HOIST_DEPTH = 8
#: Value length from which a separator-led ``LIKE '%,lit%'`` searches with ``re`` instead of ``in``.
_REGEX_FROM = 128

_MIRROR: dict[ComparisonOp, ComparisonOp] = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_REF = re.compile("\x01(\\d+)\x02")
_SIMPLE = re.compile("\x01\\d+\x02|[A-Za-z_][A-Za-z0-9_]*")


class Selector:
    """A compiled selector: ``text``, ``ast``, ``matches(props)`` and ``evaluate(props)``.

    ``matches`` and ``evaluate`` are plain generated functions stored on the instance (no
    method-call overhead); ``source`` is their Python source, for inspection. Usually made by
    :func:`jms_selectors.compile`; ``Selector(text, tree)`` compiles a tree built directly
    (no length or depth checks; a tree too deep to generate code for falls back to the walker).
    """

    __slots__ = ("text", "ast", "matches", "evaluate", "source")

    text: str
    ast: Expr
    matches: Callable[[Mapping[str, object]], bool]
    evaluate: Callable[[Mapping[str, object]], bool | None]
    source: str

    def __init__(self, text: str, ast: Expr) -> None:
        self.text = text
        self.ast = ast
        try:
            self.matches, self.evaluate, self.source = _build(ast)
        except (RecursionError, MemoryError):  # only for trees the parser would not produce
            self.matches, self.evaluate, self.source = _walker(ast)

    def __repr__(self) -> str:
        return f"Selector({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Selector) and other.ast == self.ast

    def __hash__(self) -> int:
        return hash(self.ast)

    def __reduce__(self) -> tuple[Callable[..., Selector], tuple[object, ...]]:
        return (_restore, (self.text, self.ast))


def _walker(ast: Expr) -> tuple[Callable, Callable, str]:
    """Fallback when code generation hits a resource limit: closures over the reference walker."""

    def evaluate(properties: Mapping[str, object]) -> bool | None:
        return reference.evaluate(ast, properties)

    def matches(properties: Mapping[str, object]) -> bool:
        return reference.evaluate(ast, properties) is True

    return matches, evaluate, ""


def _restore(text: str, ast: Expr) -> Selector:
    return Selector(text, ast)


# ------------------------------------------------------------------ run-time helpers
# Numbers are int and float (and subclasses), never bool; see jms_selectors.reference.


def _num(x: object) -> bool:
    return isinstance(x, (int, float)) and type(x) is not bool


def _to_float(x: int | float) -> float:
    try:
        return float(x)
    except OverflowError:
        return math.inf if x > 0 else -math.inf


def _add(x: object, y: object) -> int | float | None:
    if not (_num(x) and _num(y)):
        return None
    if isinstance(x, int) and isinstance(y, int):
        return int(x) + int(y)
    return _to_float(x) + _to_float(y)  # type: ignore[arg-type]


def _sub(x: object, y: object) -> int | float | None:
    if not (_num(x) and _num(y)):
        return None
    if isinstance(x, int) and isinstance(y, int):
        return int(x) - int(y)
    return _to_float(x) - _to_float(y)  # type: ignore[arg-type]


def _mul(x: object, y: object) -> int | float | None:
    if not (_num(x) and _num(y)):
        return None
    if isinstance(x, int) and isinstance(y, int):
        return int(x) * int(y)
    return _to_float(x) * _to_float(y)  # type: ignore[arg-type]


def _div(x: object, y: object) -> int | float | None:
    """Exact/exact truncates toward zero (SQL-92), exact/0 is unknown; otherwise IEEE 754."""
    if not (_num(x) and _num(y)):
        return None
    if isinstance(x, int) and isinstance(y, int):
        if not y:
            return None
        q = abs(int(x)) // abs(int(y))
        return -q if (x < 0) != (y < 0) else q
    a, b = _to_float(x), _to_float(y)  # type: ignore[arg-type]
    if b == 0.0:
        return math.nan if a == 0.0 or a != a else math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _neg(x: object) -> int | float | None:
    return -x if _num(x) else None  # type: ignore[operator]


def _pos(x: object) -> int | float | None:
    return x if _num(x) else None  # type: ignore[return-value]


def _comparable(x: object, y: object, ordering: bool) -> bool:
    """Both non-null and of one kind the operator applies to (numbers; strings/booleans for =)."""
    if _num(x):
        return _num(y)
    if ordering:
        return False
    if isinstance(x, str):
        return isinstance(y, str)
    return type(x) is bool and type(y) is bool


# Unlike types compare FALSE (``<>`` TRUE); only a null operand gives unknown.
def _eq(x: object, y: object) -> bool | None:
    if x is None or y is None:
        return None
    return bool(x == y) if _comparable(x, y, False) else False


def _ne(x: object, y: object) -> bool | None:
    if x is None or y is None:
        return None
    return bool(x != y) if _comparable(x, y, False) else True


def _lt(x: object, y: object) -> bool | None:
    if x is None or y is None:
        return None
    return x < y if _comparable(x, y, True) else False  # type: ignore[operator]


def _le(x: object, y: object) -> bool | None:
    if x is None or y is None:
        return None
    return x <= y if _comparable(x, y, True) else False  # type: ignore[operator]


def _gt(x: object, y: object) -> bool | None:
    if x is None or y is None:
        return None
    return x > y if _comparable(x, y, True) else False  # type: ignore[operator]


def _ge(x: object, y: object) -> bool | None:
    if x is None or y is None:
        return None
    return x >= y if _comparable(x, y, True) else False  # type: ignore[operator]


def _between(x: object, low: object, high: object) -> bool | None:
    return _and3(_ge(x, low), _le(x, high))


def _not_between(x: object, low: object, high: object) -> bool | None:
    """``x NOT BETWEEN a AND b`` is ``x < a OR x > b`` (the Apache brokers' createNotBetween)."""
    return _or3(_lt(x, low), _gt(x, high))


def _bool3(x: object) -> bool | None:
    return x if x is None or type(x) is bool else False


def _not3(x: bool | None) -> bool | None:
    return None if x is None else not x


def _and3(*values: bool | None) -> bool | None:
    return False if False in values else None if None in values else True


def _or3(*values: bool | None) -> bool | None:
    return True if True in values else None if None in values else False


def _like3(x: object, match: Callable[[str], bool], negated: bool) -> bool | None:
    if x is None:
        return None
    return match(x) != negated if isinstance(x, str) else negated


def _in3(x: object, strings: frozenset, negated: bool) -> bool | None:
    return (x in strings) != negated if isinstance(x, str) else None


_RUNTIME: dict[str, object] = {
    "_NT": frozenset({int, float}),
    "_NUMT": (int, float),
    "_add": _add, "_sub": _sub, "_mul": _mul, "_div": _div, "_neg": _neg, "_pos": _pos,
    "_between": _between, "_not_between": _not_between, "_bool3": _bool3, "_not3": _not3, "_and3": _and3, "_or3": _or3,
    "_like3": _like3,
    "_in3": _in3,
}
_ARITHMETIC = {"+": "_add", "-": "_sub", "*": "_mul", "/": "_div"}
_COMPARE = {"=": _eq, "<>": _ne, "<": _lt, "<=": _le, ">": _gt, ">=": _ge}
_RUNTIME.update({f"_cmp{i}": fn for i, fn in enumerate(_COMPARE.values())})
_COMPARE_NAME = {op: f"_cmp{i}" for i, op in enumerate(_COMPARE)}


# ------------------------------------------------------------------ code generation
class _Function:
    """One generated function: its property references, grouped by predicate instance."""

    def __init__(self) -> None:
        self.refs: list[tuple[str, int]] = []
        self.instance = 0
        self._instances = 0
        self._temps = 0

    def ref(self, name: str) -> str:
        self.refs.append((name, self.instance))
        return f"\x01{len(self.refs) - 1}\x02"

    def temp(self) -> str:
        self._temps += 1
        return f"_t{self._temps}"

    @contextmanager
    def predicate(self) -> Iterator[None]:
        """References made inside one predicate's code; its first one runs before the others."""
        outer = self.instance
        self._instances += 1
        self.instance = self._instances
        try:
            yield
        finally:
            self.instance = outer


class _Generator:
    """Python source and globals for one selector."""

    def __init__(self) -> None:
        self.namespace: dict[str, object] = dict(_RUNTIME)
        self.definitions: list[str] = []
        self._constants: dict[tuple[type, object], str] = {}
        self._keys: dict[str, str] = {}
        self._searchers: dict[frozenset[str], str] = {}
        self._hoisted: dict[tuple[int, str], str] = {}
        self._pinned: list[Expr] = []  # keeps id()-keyed nodes alive during generation
        self._dynamic: dict[int, bool] = {}
        self._count = 0

    def _name(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def const(self, value: object) -> str:
        """A global name bound to ``value`` (deduplicated for strings and ints)."""
        if value is None or isinstance(value, bool):
            return repr(value)
        key = (type(value), value) if type(value) in (str, int) else None
        if key is not None and key in self._constants:
            return self._constants[key]
        name = self._name("_c")
        self.namespace[name] = value
        if key is not None:
            self._constants[key] = name
        return name

    def searcher(self, literals: frozenset[str]) -> str:
        """A global name bound to a search for any of ``literals`` (one per distinct set)."""
        name = self._searchers.get(literals)
        if name is None:
            name = self._searchers[literals] = self.const(contains_any(list(literals)))
        return name

    def key(self, prop: str) -> str:
        if prop not in self._keys:
            name = self._name("_k")
            self.namespace[name] = prop
            self._keys[prop] = name
        return self._keys[prop]

    def dynamic(self, node: Expr) -> bool:
        """Whether the node reads any property (otherwise it is folded at compile time)."""
        found = self._dynamic.get(id(node))
        if found is None:
            found = bool(identifiers(node))
            self._dynamic[id(node)] = found
            self._pinned.append(node)
        return found

    # ---------------------------------------------------------------- functions
    def function(self, name: str, expressions: list[str], fn: _Function, template: str) -> None:
        """Emit ``def name(p)`` whose body is ``template`` formatted with the rendered expressions."""
        prologue, rendered = self._render(fn, expressions)
        lines = [f"def {name}(p):"]
        body = prologue + [template.format(*rendered)]
        if name.startswith("_h"):
            lines += ["    " + line for line in body]
        else:
            lines += ["    try:"] + ["        " + line for line in body]
            lines += ["    except Exception:", f"        return {'False' if name == '_match' else 'None'}"]
        self.definitions.append("\n".join(lines))

    def _render(self, fn: _Function, expressions: list[str]) -> tuple[list[str], list[str]]:
        instances: dict[str, set[int]] = {}
        for prop, instance in fn.refs:
            instances.setdefault(prop, set()).add(instance)
        variables = {prop: f"_v{i}" for i, prop in enumerate(instances)}
        shared = {prop for prop, used in instances.items() if len(used) > 1}
        prologue = [f"{variables[prop]} = p.get({self.key(prop)})" for prop in variables if prop in shared]
        bound: set[str] = set()

        def substitute(match: re.Match[str]) -> str:
            prop = fn.refs[int(match.group(1))][0]
            var = variables[prop]
            if prop in shared or prop in bound:
                return var
            bound.add(prop)
            return f"({var} := p.get({self.key(prop)}))"

        return prologue, [_REF.sub(substitute, text) for text in expressions]

    def hoist(self, node: Expr, mode: str) -> str:
        """Generate ``node`` (mode T, F, V or 3) as its own function; return the call expression."""
        key = (id(node), mode)
        name = self._hoisted.get(key)
        if name is None:
            self._pinned.append(node)
            name = self._name("_h")
            self._hoisted[key] = name
            fn = _Function()
            if mode == "V":
                code = self.value(node, fn, 0)[0]
            elif mode == "3":
                code = self.three(node, fn, 0)
            else:
                code = self.cond(node, mode == "T", fn, 0)
            self.function(name, [code], fn, "return {}")
        return f"{name}(p)"

    # ---------------------------------------------------------------- conditions
    def cond(self, node: Expr, positive: bool, fn: _Function, depth: int) -> str:
        """Python expression: true iff ``node`` is definitely TRUE (positive) / FALSE."""
        while isinstance(node, Not):  # T(NOT x) = F(x), F(NOT x) = T(x)
            node, positive = node.operand, not positive
        if not self.dynamic(node):
            return "True" if reference.evaluate(node, {}) is positive else "False"
        if isinstance(node, (And, Or)):
            if depth >= HOIST_DEPTH:
                return self.hoist(node, "T" if positive else "F")
            return self.junction(node, positive, fn, depth + 1)
        with fn.predicate():
            return self.predicate(node, positive, fn, depth + 1)

    def junction(self, node: And | Or, positive: bool, fn: _Function, depth: int) -> str:
        """T/F of an n-ary AND/OR: the operands' T (or F) joined by ``and`` or ``or``.

        Two or more ``x LIKE '%lit%'`` operands on the same property whose tests are joined
        by ``or`` ("x contains one of ...", e.g. a quadTree tile list) or, negated, by ``and``
        ("x contains none of ...") are merged into one regex search over ``x``.
        """
        disjunctive = isinstance(node, Or) == positive
        groups: dict[str, list[Like]] = {}
        for operand in node.operands:
            if (
                isinstance(operand, Like)
                and isinstance(operand.subject, Identifier)
                and operand.matcher.kind == "contains"
                and (positive != operand.negated) == disjunctive
            ):
                groups.setdefault(operand.subject.name, []).append(operand)
        merged = {id(like): name for name, likes in groups.items() if len(likes) >= 2 for like in likes}
        parts = []
        for operand in node.operands:
            name = merged.get(id(operand))
            if name is None:
                parts.append(self.cond(operand, positive, fn, depth))
            elif name in groups:
                search = self.searcher(frozenset(like.matcher.literal for like in groups.pop(name)))
                with fn.predicate():
                    first, rest = self.bind(fn.ref(name), fn)
                    if disjunctive:  # some LIKE is TRUE: a string containing one of them
                        parts.append(f"({self.is_str(first, rest, 'any')} and {search}({rest}) is not None)")
                    else:  # every LIKE is FALSE: not null and not a string containing one of them
                        test = f"({self.is_str(rest, rest, 'any')} and {search}({rest}) is not None)"
                        parts.append(f"({first} is not None and not {test})")
        return "(" + (" or " if disjunctive else " and ").join(parts) + ")"

    def predicate(self, node: Expr, positive: bool, fn: _Function, depth: int) -> str:
        if isinstance(node, Identifier):  # a property used as a condition: TRUE only if it is True
            if positive:
                return f"{fn.ref(node.name)} is True"
            first, rest = self.bind(fn.ref(node.name), fn)  # FALSE: False or any non-boolean value
            return f"({first} is not True and {rest} is not None)"
        if isinstance(node, Comparison):
            return self.comparison(node, positive, fn, depth)
        if isinstance(node, Like):
            return self.like(node, positive != node.negated, fn, depth)
        if isinstance(node, In):
            return self.member(node, positive != node.negated, fn, depth)
        if isinstance(node, Between):
            return self.between(node, positive, fn, depth)
        if isinstance(node, IsNull):
            code, kind = self.value(node.subject, fn, depth)
            return f"{code} is {'not ' if positive == node.negated else ''}None"
        return "False"  # arithmetic used as a condition (not produced by the parser): never boolean

    # ---------------------------------------------------------------- values
    def value(self, node: Expr, fn: _Function, depth: int) -> tuple[str, str]:
        """Python expression for a value and its static kind.

        Kinds: ``str``/``num``/``bool``/``null`` for constants, ``num?`` (a number or None)
        for arithmetic, ``any`` for properties and conditions.
        """
        if not self.dynamic(node):
            folded = reference.value(node, {})
            if folded is None or isinstance(folded, bool):
                return repr(folded), "null" if folded is None else "bool"
            return self.const(folded), "str" if isinstance(folded, str) else "num"
        if isinstance(node, Identifier):
            return fn.ref(node.name), "any"
        if isinstance(node, (Unary, Arithmetic)):
            if depth >= HOIST_DEPTH:
                return self.hoist(node, "V"), "num?"
            if isinstance(node, Unary):
                operand = self.value(node.operand, fn, depth + 1)[0]
                return f"{'_neg' if node.op == '-' else '_pos'}({operand})", "num?"
            left = self.value(node.left, fn, depth + 1)[0]
            right = self.value(node.right, fn, depth + 1)[0]
            return f"{_ARITHMETIC[node.op]}({left}, {right})", "num?"
        return self.three(node, fn, depth), "any"

    def three(self, node: Expr, fn: _Function, depth: int) -> str:
        """A condition used as a value: True, False or None, each sub-expression evaluated once.

        (Writing it as ``True if T else False if F else None`` would evaluate nested
        conditions-as-values exponentially often.) Rare, so it calls helpers.
        """
        if not self.dynamic(node):
            return repr(reference.evaluate(node, {}))
        if isinstance(node, Identifier):
            return f"_bool3({fn.ref(node.name)})"
        if depth >= HOIST_DEPTH:
            return self.hoist(node, "3")
        depth += 1
        if isinstance(node, Not):
            return f"_not3({self.three(node.operand, fn, depth)})"
        if isinstance(node, (And, Or)):
            operands = ", ".join(self.three(operand, fn, depth) for operand in node.operands)
            return f"{'_and3' if isinstance(node, And) else '_or3'}({operands})"
        if isinstance(node, Comparison):
            left, right = self.value(node.left, fn, depth)[0], self.value(node.right, fn, depth)[0]
            return f"{_COMPARE_NAME[node.op]}({left}, {right})"
        if isinstance(node, Like):
            subject = self.value(node.subject, fn, depth)[0]
            return f"_like3({subject}, {self.const(node.matcher.matches)}, {node.negated})"
        if isinstance(node, In):
            subject = self.value(node.subject, fn, depth)[0]
            strings = frozenset(v for v in node.values if isinstance(v, str))
            return f"_in3({subject}, {self.const(strings)}, {node.negated})"
        if isinstance(node, Between):
            parts = ", ".join(self.value(part, fn, depth)[0] for part in (node.subject, node.low, node.high))
            return f"_not_between({parts})" if node.negated else f"_between({parts})"
        if isinstance(node, IsNull):
            return f"({self.value(node.subject, fn, depth)[0]} is {'not ' if node.negated else ''}None)"
        return "None"  # arithmetic used as a condition (not produced by the parser)

    def bind(self, code: str, fn: _Function) -> tuple[str, str]:
        """(first use, later uses) of a value needed more than once in one predicate."""
        if _SIMPLE.fullmatch(code):
            return code, code
        temp = fn.temp()
        return f"({temp} := {code})", temp

    @staticmethod
    def is_str(first: str, rest: str, kind: str) -> str:
        if kind == "num?":
            return "False"
        return f"(type({first}) is str or isinstance({rest}, str))"

    @staticmethod
    def is_num(first: str, rest: str, kind: str) -> str:
        if kind == "num?":
            return f"{first} is not None"
        return f"(type({first}) in _NT or (isinstance({rest}, _NUMT) and type({rest}) is not bool))"

    # ---------------------------------------------------------------- predicates
    def comparison(self, node: Comparison, positive: bool, fn: _Function, depth: int) -> str:
        op = node.op
        left, left_kind = self.value(node.left, fn, depth)
        right, right_kind = self.value(node.right, fn, depth)
        constant = ("str", "num", "bool", "null")
        if left_kind in constant and right_kind not in constant:
            left, left_kind, right, right_kind, op = right, right_kind, left, left_kind, _MIRROR[op]
        if right_kind not in constant:
            return f"{_COMPARE_NAME[op]}({left}, {right}) is {positive}"
        if right_kind == "null":
            return "False"
        if op == "<>":  # T(a <> b) = F(a = b)
            op, positive = "=", not positive
        first, rest = self.bind(left, fn)
        if right_kind == "bool":
            if op != "=" or left_kind == "num?":
                holds = "False"
            else:
                return f"{first} is {right}" if positive else f"({first} is not {right} and {rest} is not None)"
        elif right_kind == "str":
            holds = f"({self.is_str(rest, rest, left_kind)} and {rest} == {right})" if op == "=" else "False"
        else:
            holds = f"({self.is_num(rest, rest, left_kind)} and {rest} {'==' if op == '=' else op} {right})"
        if not positive:  # FALSE: not null, and not the same kind with the relation holding
            return f"({first} is not None and not {holds})"
        if holds == "False":
            return "False"
        if op != "=":
            return f"({self.is_num(first, rest, left_kind)} and {rest} {op} {right})"
        same = self.is_str(rest, rest, left_kind) if right_kind == "str" else self.is_num(rest, rest, left_kind)
        return f"({first} == {right} and {same})"  # the cheap equality first

    def like(self, node: Like, match: bool, fn: _Function, depth: int) -> str:
        """``match``: LIKE is TRUE (a string matching); else FALSE (not null, not a matching string)."""
        code, kind = self.value(node.subject, fn, depth)
        if kind != "any":  # arithmetic: a number (LIKE FALSE) or null
            return "False" if match else f"{code} is not None"
        first, rest = self.bind(code, fn)
        pattern = node.matcher
        if pattern.kind == "general":
            test = f"{self.const(pattern.matches)}({rest})"
        elif pattern.kind == "any":
            test = "True"
        else:
            literal = self.const(pattern.literal)
            test = {
                "exact": f"{rest} == {literal}",
                "prefix": f"{rest}.startswith({literal})",
                "suffix": f"{rest}.endswith({literal})",
                "contains": f"{literal} in {rest}",
            }[pattern.kind]
            if pattern.kind == "contains" and len(pattern.literal) > 1 and not pattern.literal[0].isalnum():
                # '%,tile%' on a long comma-separated list: CPython's str search finds no skips
                # when value and literal share a small alphabet, while re's literal-prefix scan
                # jumps between separators (~1.2-2x faster from ~128 characters up).
                search = self.searcher(frozenset((pattern.literal,)))
                test = f"({test} if len({rest}) < {_REGEX_FROM} else {search}({rest}) is not None)"
        if match:
            return f"({self.is_str(first, rest, kind)} and {test})"
        return f"({first} is not None and not ({self.is_str(rest, rest, kind)} and {test}))"

    def member(self, node: In, inside: bool, fn: _Function, depth: int) -> str:
        """IN over strings: TRUE/FALSE for a string subject, unknown for anything else."""
        code, kind = self.value(node.subject, fn, depth)
        if kind == "num?":
            return "False"
        strings = frozenset(v for v in node.values if isinstance(v, str))
        first, rest = self.bind(code, fn)
        return f"({self.is_str(first, rest, kind)} and {rest} {'in' if inside else 'not in'} {self.const(strings)})"

    def between(self, node: Between, positive: bool, fn: _Function, depth: int) -> str:
        """BETWEEN is ``x >= a AND x <= b``; NOT BETWEEN is ``x < a OR x > b``."""
        subject, kind = self.value(node.subject, fn, depth)
        low, low_kind = self.value(node.low, fn, depth)
        high, high_kind = self.value(node.high, fn, depth)
        if low_kind == "num" and high_kind == "num" and kind in ("any", "num?"):
            first, rest = self.bind(subject, fn)
            holds = f"{low} <= {rest} <= {high}" if not node.negated else f"({rest} < {low} or {rest} > {high})"
            if positive:
                return f"({self.is_num(first, rest, kind)} and {holds})"
            return f"({first} is not None and not ({self.is_num(rest, rest, kind)} and {holds}))"
        helper = "_not_between" if node.negated else "_between"
        return f"{helper}({subject}, {low}, {high}) is {positive}"


def _build(ast: Expr) -> tuple[Callable, Callable, str]:
    """Generate, compile and return (matches, evaluate, source) for a syntax tree."""
    generator = _Generator()
    fn = _Function()
    true = generator.cond(ast, True, fn, 0)
    generator.function("_match", [true], fn, "return True if {0} else False")
    fn = _Function()
    true, false = generator.cond(ast, True, fn, 0), generator.cond(ast, False, fn, 0)
    generator.function("_evaluate", [true, false], fn, "return True if {0} else False if {1} else None")
    source = "\n\n".join(generator.definitions) + "\n"
    namespace = generator.namespace
    exec(compile(source, "<jms_selectors>", "exec"), namespace)  # noqa: S102 - source holds no selector text
    return namespace["_match"], namespace["_evaluate"], source  # type: ignore[return-value]
