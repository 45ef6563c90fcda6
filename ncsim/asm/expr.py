"""Assembly-time integer expressions and numeric literals.

Integers: literals (decimal, 0x hex, 0b binary, '_' separators), names bound in the environment
(constants and loop variables), parentheses, and C's operators in C's order of precedence, from
the tightest: unary `- + !`, then `**` (which binds tighter than a unary minus on its left, as in
Python: -2**2 is -4), `* / // %`, `+ -`, the comparisons `< <= > >= == !=`, `&&`, `||`.
Comparisons and the logical operators give 1 or 0 (`accumulate=k > 0`, `.if i % 2 == 0 && j > 0`);
both sides of `&&` and `||` are always evaluated. A comparison takes one operator: `a < b < c`
means different things in C and Python, so it is refused (write `a < b && b < c`).
'/' is exact division: it is an error when it leaves a remainder, so that a slice never silently rounds.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping

from ncsim.asm.lanes import LaneBool, is_int
from ncsim.asm.lexer import Cursor, Token, describe

Env = Mapping[str, int | float]


MAX_LITERAL_DIGITS = 64
MAX_BITS = 64  # integer expressions stay within 64 bits (plus sign): addresses, counts, steps
MAX_PARENS = 64  # parentheses nest at most this deep (deeper is refused at its column, not a RecursionError)


def int_literal(tok: Token) -> int | None:
    text = tok.text.replace("_", "")
    try:
        if text[:2] in ("0x", "0X"):
            return int(text, 16)
        if text[:2] in ("0b", "0B"):
            return int(text, 2)
        if text.isdigit():
            return int(text)
    except ValueError:
        return None
    return None


_COMPARE = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
            ">=": operator.ge}


def _truth(value: object) -> object:
    """1 or 0 for a comparison's result (per lane, for lanes that disagree)."""
    return value.as_int() if isinstance(value, LaneBool) else int(value)


def parse_int(cur: Cursor, env: Env | None = None, what: str = "an integer") -> int:
    """An integer expression; the cursor stops at the first token that cannot continue it."""
    return _or(cur, env or {}, what)


def _or(cur: Cursor, env: Env, what: str) -> int:
    value = _and(cur, env, what)
    while cur.at("||"):
        cur.next()
        rhs = _and(cur, env, what)
        value = _truth(value != 0) | _truth(rhs != 0)
    return value


def _and(cur: Cursor, env: Env, what: str) -> int:
    value = _compare(cur, env, what)
    while cur.at("&&"):
        cur.next()
        rhs = _compare(cur, env, what)
        value = _truth(value != 0) & _truth(rhs != 0)
    return value


def _compare(cur: Cursor, env: Env, what: str) -> int:
    """A sum, or one comparison of two sums (relational and equality operators alike: see the
    module's docstring for why they do not chain)."""
    value = _sum(cur, env, what)
    tok = cur.peek()
    if tok.kind == "punct" and tok.text in _COMPARE:
        cur.next()
        value = _truth(_COMPARE[tok.text](value, _sum(cur, env, what)))
        again = cur.peek()
        if again.kind == "punct" and again.text in _COMPARE:
            raise cur.error(f"comparisons do not chain ('{tok.text}' then '{again.text}'): use parentheses, or &&"
                            " between two comparisons", again)
    return value


def _bounded(cur: Cursor, value: int, tok: Token) -> int:
    if value.bit_length() > MAX_BITS:
        raise cur.error(f"integer expression exceeds {MAX_BITS} bits", tok)
    return value


def _sum(cur: Cursor, env: Env, what: str) -> int:
    value = _term(cur, env, what)
    while cur.at("+") or cur.at("-"):
        op = cur.next()
        rhs = _term(cur, env, what)
        value = _bounded(cur, value + rhs if op.text == "+" else value - rhs, op)
    return value


def _term(cur: Cursor, env: Env, what: str) -> int:
    value = _unary(cur, env, what)
    while cur.at("*") or cur.at("//") or cur.at("/") or cur.at("%"):
        op = cur.next()
        rhs_tok = cur.peek()
        rhs = _unary(cur, env, what)
        if op.text != "*" and rhs == 0:
            raise cur.error("division by zero in an integer expression", rhs_tok)
        if op.text == "*":
            value = _bounded(cur, value * rhs, op)
        elif op.text == "//":
            value //= rhs
        elif op.text == "%":
            value %= rhs
        else:
            if value % rhs:
                raise cur.error(
                    f"{value} / {rhs} is not a whole number: '/' must divide exactly (use '//' to floor)", op
                )
            value //= rhs
    return value


def _unary(cur: Cursor, env: Env, what: str) -> int:
    ops = []
    while cur.at("-") or cur.at("+") or cur.at("!"):  # a loop, not recursion: '- - - x' may be long
        ops.append(cur.next().text)
    value = _power(cur, env, what)
    for op in reversed(ops):  # the innermost (rightmost) operator first
        if op == "-":
            value = -value
        elif op == "!":
            value = _truth(value == 0)
    return value


def _power(cur: Cursor, env: Env, what: str) -> int:
    base = _atom(cur, env, what)
    if cur.at("**"):
        op = cur.next()
        depth = cur.parens
        if depth >= MAX_PARENS:
            raise cur.error(f"nesting too deep: powers and parentheses nest at most {MAX_PARENS} levels", op)
        cur.parens = depth + 1
        try:
            exp = _unary(cur, env, what)
        finally:
            cur.parens = depth
        if exp < 0:
            raise cur.error("a negative power is not an integer", op)
        if abs(base) > 1 and exp >= MAX_BITS:
            raise cur.error(f"integer expression exceeds {MAX_BITS} bits", op)
        return _bounded(cur, base**exp, op)
    return base


def _atom(cur: Cursor, env: Env, what: str) -> int:
    tok = cur.peek()
    if tok.kind == "number":
        if len(tok.text) > MAX_LITERAL_DIGITS:
            raise cur.error(f"number literal longer than {MAX_LITERAL_DIGITS} characters", tok)
        value = int_literal(tok)
        if value is None:
            raise cur.error(f"expected {what}, found the non-integer number '{tok.text}'", tok)
        cur.next()
        return value
    if tok.kind == "ident":
        if tok.text in env:
            value = env[tok.text]
            if not is_int(value):
                raise cur.error(f"'{tok.text}' is {value!r}, not an integer", tok)
            cur.next()
            return value
        raise cur.error(f"unknown name '{tok.text}' in an integer expression", tok)
    if tok.is_("("):
        depth = cur.parens
        if depth >= MAX_PARENS:
            raise cur.error(f"nesting too deep: parentheses nest at most {MAX_PARENS} levels", tok)
        cur.next()
        cur.parens = depth + 1
        try:
            value = _or(cur, env, what)
        finally:
            cur.parens = depth
        cur.expect(")", "to close the parenthesis")
        return value
    raise cur.error(f"expected {what}, found {describe(tok)}", tok)


def parse_number(cur: Cursor, env: Env | None = None) -> int | float:
    """A numeric literal that may be a float (1.5, 1e-5, inf, nan, with a sign) or an integer expression."""
    env = env or {}
    save = cur.i
    sign = 1.0
    if cur.at("-") or cur.at("+"):
        sign = -1.0 if cur.next().text == "-" else 1.0
    tok = cur.peek()
    if tok.kind == "ident" and tok.text in ("inf", "nan"):
        cur.next()
        return sign * math.inf if tok.text == "inf" else math.nan
    if tok.kind == "number" and len(tok.text) > MAX_LITERAL_DIGITS:
        raise cur.error(f"number literal longer than {MAX_LITERAL_DIGITS} characters", tok)
    if tok.kind == "number" and int_literal(tok) is None:
        cur.next()
        try:
            return sign * float(tok.text.replace("_", ""))
        except ValueError:
            raise cur.error(f"malformed number '{tok.text}'", tok) from None
    if tok.kind == "ident" and isinstance(env.get(tok.text), float):
        cur.next()
        return sign * env[tok.text]
    cur.i = save
    return parse_int(cur, env, "a number")
