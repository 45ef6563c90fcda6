"""Tokens of one assembly line, each with its column, and a cursor over them.

The assembler works line by line: every instruction and directive is one line, so a token's place
is (line, column) and an error can always show the line with a caret under the token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ncsim.errors import AsmError, SourceLoc

# Longest operators first so that '>=' is not read as '>' then '='.
_PUNCT = (
    "**", "//", ">=", "<=", "==", "!=", "+=", "-=", "..", "&&", "||",
    "[", "]", "(", ")", ",", "=", ":", "@", "+", "-", "*", "/", "%", "<", ">", ".", "!",
)
_TOKEN_RE = re.compile(
    r"""
    (?P<ws>[ \t\r]+)
  | (?P<comment>\#.*|;.*)
  | (?P<number>0[xX][0-9a-fA-F_]+|0[bB][01_]+|\d[\d_]*(?:\.(?!\.)\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<punct>"""
    + "|".join(re.escape(p) for p in _PUNCT)
    + r""")
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class Token:
    kind: str  # "number", "ident", "string", "punct", "eol"
    text: str
    col: int  # 1-based column of the first character

    def is_(self, text: str) -> bool:
        return self.kind in ("punct", "ident") and self.text == text


class Line:
    """One source line: where it is, its text, and its tokens (comments dropped, an "eol" token last)."""

    def __init__(self, file: str, lineno: int, text: str):
        self.file = file
        self.lineno = lineno
        self.text = text.rstrip("\n")
        self.tokens = tokenize(self)

    def loc(self, col: int = 1, length: int = 1) -> SourceLoc:
        return SourceLoc(self.file, self.lineno, col, self.text, length)

    def error(self, message: str, tok: Token | None = None, notes: tuple[str, ...] = ()) -> AsmError:
        col, length = (tok.col, max(1, len(tok.text))) if tok is not None else (1, len(self.text.strip()) or 1)
        if tok is None:
            col = len(self.text) - len(self.text.lstrip()) + 1
        return AsmError(message, self.loc(col, length), notes=notes)


def tokenize(line: Line) -> list[Token]:
    text = line.text
    pos = 0
    out: list[Token] = []
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            bad = Token("punct", text[pos], pos + 1)
            raise line.error(f"unexpected character {text[pos]!r}", bad)
        kind = m.lastgroup
        if kind not in ("ws", "comment"):
            out.append(Token(kind, m.group(), pos + 1))
        pos = m.end()
    out.append(Token("eol", "", len(text) + 1))
    return out


class Cursor:
    """A position in a line's tokens, with the helpers every parser in ncsim.asm shares."""

    def __init__(self, line: Line, start: int = 0):
        self.line = line
        self.toks = line.tokens
        self.i = start
        self.parens = 0  # how deep the expression parser is in parentheses and powers (ncsim.asm.expr)

    def peek(self, k: int = 0) -> Token:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> Token:
        tok = self.peek()
        if tok.kind != "eol":
            self.i += 1
        return tok

    def at(self, text: str) -> bool:
        return self.peek().is_(text)

    def accept(self, text: str) -> Token | None:
        if self.at(text):
            return self.next()
        return None

    def expect(self, text: str, context: str = "") -> Token:
        tok = self.peek()
        if not tok.is_(text):
            where = f" {context}" if context else ""
            raise self.error(f"expected '{text}'{where}, found {describe(tok)}", tok)
        return self.next()

    def expect_ident(self, what: str) -> Token:
        tok = self.peek()
        if tok.kind != "ident":
            raise self.error(f"expected {what}, found {describe(tok)}", tok)
        return self.next()

    def at_end(self) -> bool:
        return self.peek().kind == "eol"

    def expect_end(self, context: str = "") -> None:
        tok = self.peek()
        if tok.kind != "eol":
            raise self.error(f"unexpected {describe(tok)}{' ' + context if context else ''}", tok)

    def error(self, message: str, tok: Token | None = None, notes: tuple[str, ...] = ()) -> AsmError:
        return self.line.error(message, tok if tok is not None else self.peek(), notes)


def string_value(tok: Token) -> str:
    """The text of a string token: between the quotes, with \\" and \\\\ unescaped."""
    return re.sub(r"\\(.)", r"\1", tok.text[1:-1])


def quote(text: str) -> str:
    """A string token whose value is `text`."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def describe(tok: Token) -> str:
    if tok.kind == "eol":
        return "end of line"
    return f"'{tok.text}'"
