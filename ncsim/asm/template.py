"""Loops as templates: each line of a `.for` body is parsed once for all of its iterations.

The legacy way to unroll a loop sets the loop variable and assembles the body again, iteration after
iteration: every operand is lexed and parsed again each time (84% of the assembler's time on a
tiled matmul). Here a loop nest is first expanded into *frames*: for each nesting level, one row
per iteration of everything around it, each loop variable an int64 column. Nothing is parsed for
that; the frames give every instruction's position in program order and the program's size, which
is checked against the limits before any work is done on the body.

An `.if` block inside a loop splits the rows of its level by its condition, evaluated once over
all of them: each branch is expanded like a loop of one trip over the rows that take it, so a
condition on the loop variable costs one vectorised evaluation, not a parse per iteration.

Then each instruction line is parsed once, with its loop variables bound to `Lanes` (one value per
row, `ncsim.asm.lanes`): the ordinary parser and rules run once, on values that carry all rows at
once. Where a row would take another path through the parser than its neighbours (`accumulate=k > 0`
is true in some rows only), the rows are split at that point and each group is parsed on its own,
so each row gets exactly what the legacy way gives it.

Anything else a template cannot carry (a rule broken in some row, an integer that might leave 62
bits, a float computed from a loop variable) raises `Fallback`: the assembler then unrolls that loop
the legacy way, which reports the first error in program order with the message it always had.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ncsim.asm.build import Chunk
from ncsim.asm.fields import FieldError
from ncsim.asm.instruction import Instruction
from ncsim.asm.lanes import Diverge, Unvectorisable, lanes
from ncsim.asm.lexer import Cursor, Line
from ncsim.errors import AsmError

if TYPE_CHECKING:
    from ncsim.asm.assembler import Assembler

# Host bytes one instruction needs while it is assembled and in the decoded program; a program whose
# size times this exceeds the memory the machine has free is refused before it is built (Linux would
# kill the process part way, with no error to show).
BYTES_PER_INSTRUCTION = 400


class Fallback(Exception):
    """This loop must be unrolled the legacy way (one iteration at a time)."""


@dataclass
class Loop:
    line: Line
    body: list[Line | Loop | If]


@dataclass
class If:
    """An `.if` block: its branches in order, each the line whose condition chooses it (None for
    `.else`) and its body."""

    branches: list[tuple[Line | None, list[Line | Loop | If]]]


def loop_tree(lines: list[Line], i: int, end: int, asm: Assembler) -> Loop | None:
    """The loop at lines[i..end] as a tree of instruction lines, nested loops and `.if` blocks, or
    None if its body holds anything else (another directive or an include: those are run iteration
    by iteration)."""
    body = _body(lines, i + 1, end, asm)
    return None if body is None else Loop(lines[i], body)


def _body(lines: list[Line], j: int, end: int, asm: Assembler) -> list[Line | Loop | If] | None:
    body: list[Line | Loop | If] = []
    while j < end:
        line = lines[j]
        toks = line.tokens
        if toks[0].kind == "eol":
            j += 1
            continue
        if toks[0].is_("."):
            word = toks[1].text
            if word not in ("for", "if"):
                return None
            try:
                e = asm.matching_end(lines, j)
                parts = asm.if_branches(lines, j, e) if word == "if" else [(line, j + 1, e)]
            except AsmError:
                return None  # reported, in program order, by the legacy path
            subs = [_body(lines, lo, hi, asm) for _, lo, hi in parts]
            if any(sub is None for sub in subs):
                return None
            if word == "for":
                body.append(Loop(line, subs[0]))
            else:
                body.append(If([(cond, sub) for (cond, _, _), sub in zip(parts, subs)]))
            j = e + 1
            continue
        body.append(line)
        j += 1
    return body


@dataclass
class Pending:
    """An instruction line to parse over every row of `frame`; `rows` and `rel` place each of them:
    `rel` is its position relative to the start of row `rows` of the current level's frame."""

    line: Line
    frame: dict[str, np.ndarray]
    rows: np.ndarray
    rel: np.ndarray


@dataclass
class Parsed:
    """A template parsed for some rows: `instr` holds lanes where rows differ; `positions` are the
    rows' places in program order (relative to the loop's first instruction)."""

    line: Line
    instr: Instruction
    positions: np.ndarray


def _bind(asm: Assembler, frame: dict[str, np.ndarray], rows: np.ndarray) -> None:
    for name, column in frame.items():
        asm.env.names[name] = lanes(column[rows])


def expand(asm: Assembler, items: list[Line | Loop | If], frame: dict[str, np.ndarray], size: int,
           pending: list[Pending]) -> np.ndarray:
    """Expand `items` over the `size` rows of `frame`, appending an entry to `pending` for each
    instruction line; return how many instructions each row holds."""
    offset = np.zeros(size, np.int64)
    for item in items:
        if isinstance(item, Line):
            pending.append(Pending(item, frame, np.arange(size), offset.copy()))
            offset += 1
            continue
        if isinstance(item, If):
            expand_if(asm, item, frame, size, pending, offset)
            continue
        _bind(asm, frame, np.arange(size))
        try:
            var_tok, start, stop, step = asm.loop_header(item.line)
        except (AsmError, Diverge, Unvectorisable):
            raise Fallback from None
        start, stop, step = (np.broadcast_to(getattr(x, "v", x), (size,)).astype(np.int64) for x in (start, stop, step))
        trips = np.maximum((stop - start + step - 1) // step, 0)
        total = float(trips.astype(np.float64).sum())
        asm.count_trips(int(min(total, 2**62)), var_tok, item.line)
        total = int(total)
        guard_memory(total * 8 * (len(frame) + 2), item.line, f"the loop over '{var_tok.text}'")
        parent = np.repeat(np.arange(size), trips)
        first = np.cumsum(trips) - trips  # each parent row's first child row
        iteration = np.arange(total) - np.repeat(first, trips)
        child = {name: column[parent] for name, column in frame.items()}
        child[var_tok.text] = start[parent] + step[parent] * iteration
        mark = len(pending)
        counts = expand(asm, item.body, child, total, pending)
        asm.env.names.pop(var_tok.text, None)
        # Where each child row starts, relative to the start of its parent row.
        before = np.cumsum(counts) - counts
        start_in_parent = offset[parent] + before - np.repeat(before[first[trips > 0]] if total else before[:0],
                                                               trips[trips > 0])
        for p in pending[mark:]:
            p.rel = start_in_parent[p.rows] + p.rel
            p.rows = parent[p.rows]
        offset += np.bincount(parent, weights=counts, minlength=size).astype(np.int64)
    return offset


def expand_if(asm: Assembler, item: If, frame: dict[str, np.ndarray], size: int, pending: list[Pending],
              offset: np.ndarray) -> None:
    """Expand an `.if` block: each row takes the first branch whose condition holds in it (a branch
    is a loop of one trip or none, over the rows that take it); `offset` grows by what each row got."""
    remaining = np.arange(size)
    for cond, body in item.branches:
        if not len(remaining):
            break
        if cond is None:
            take, remaining = remaining, remaining[:0]
        else:
            holds = condition_values(asm, cond, frame, remaining) != 0
            take, remaining = remaining[holds], remaining[~holds]
        if not len(take):
            continue
        child = {name: column[take] for name, column in frame.items()}
        mark = len(pending)
        counts = expand(asm, body, child, len(take), pending)
        start_in_parent = offset[take]
        for p in pending[mark:]:
            p.rel = start_in_parent[p.rows] + p.rel
            p.rows = take[p.rows]
        offset += np.bincount(take, weights=counts, minlength=size).astype(np.int64)


def condition_values(asm: Assembler, line: Line, frame: dict[str, np.ndarray], rows: np.ndarray) -> np.ndarray:
    """The value of an `.if`/`.elif` condition in each of `rows` (split where its evaluation diverges)."""
    _bind(asm, frame, rows)
    try:
        value = asm.condition(line)
    except Diverge as d:
        out = np.empty(len(rows), np.int64)
        keys, inverse = np.unique(d.key, return_inverse=True)
        for g in range(len(keys)):
            sel = inverse == g
            out[sel] = condition_values(asm, line, frame, rows[sel])
        return out
    except (AsmError, FieldError, Unvectorisable):
        raise Fallback from None
    return np.broadcast_to(np.asarray(getattr(value, "v", value), np.int64), (len(rows),))


def guard_memory(nbytes: int, line: Line, what: str) -> None:
    """Refuse, at `line`, work that would need more host memory than the machine has free."""
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return
    if nbytes > free:
        raise line.error(f"{what} needs about {nbytes / 2**30:.1f} GiB of host memory to assemble;"
                         f" {free / 2**30:.1f} GiB are free")


def parse_rows(asm: Assembler, p: Pending, lanes_idx: np.ndarray, rel: np.ndarray, out: list[Parsed]) -> None:
    """Parse p.line once for the rows `lanes_idx` of its frame; split them where they diverge."""
    _bind(asm, p.frame, lanes_idx)
    try:
        instr = asm.parse_instruction(p.line, Cursor(p.line))
    except Diverge as d:
        keys, inverse = np.unique(d.key, return_inverse=True)
        for g in range(len(keys)):
            sel = inverse == g
            parse_rows(asm, p, lanes_idx[sel], rel[sel], out)
        return
    except (AsmError, FieldError, Unvectorisable):
        raise Fallback from None
    out.append(Parsed(p.line, instr, rel))


def assemble_loop(asm: Assembler, tree: Loop) -> None:
    """Assemble a whole loop nest into asm.program, or raise Fallback (nothing is changed then)."""
    outer = set(asm.env.names)
    pending: list[Pending] = []
    counts = expand(asm, [tree], {}, 1, pending)
    n = int(counts[0])
    base = asm.program.count
    from ncsim.asm.assembler import MAX_INSTRUCTIONS  # the one limit, kept beside the legacy path's use

    if base + n > MAX_INSTRUCTIONS:
        raise tree.line.error(f"the program unrolls to more than {MAX_INSTRUCTIONS} instructions"
                              f" (this loop alone to {n})")
    guard_memory((base + n) * BYTES_PER_INSTRUCTION, tree.line, f"a program of {base + n} instructions")
    parsed: list[Parsed] = []
    for p in pending:
        # the variables of loops that do not enclose this line (bound for an earlier line) are unbound,
        # as they are when the loop is unrolled one iteration at a time
        for name in set(asm.env.names) - outer - set(p.frame):
            del asm.env.names[name]
        if len(p.rel):
            parse_rows(asm, p, np.arange(len(p.rel)), p.rel, parsed)
    for name in set(asm.env.names) - outer:  # the loops' variables
        del asm.env.names[name]
    _materialise(asm, parsed, n)


def _materialise(asm: Assembler, parsed: list[Parsed], n: int) -> None:
    """Add the parsed templates to the program as chunks (their positions follow what is there)."""
    base = asm.program.count
    for p in parsed:
        where = (asm.program.file_index(p.line.file), p.line.lineno, p.instr.loc.col if p.instr.loc else 1)
        asm.program.chunks.append(Chunk(p.instr, p.positions + base, where))
    asm.program.count += n
