"""The instruction table checks itself, and every row round-trips through encode, decode, print, parse."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ncsim import isa
from ncsim.asm.fields import ParseEnv
from ncsim.asm.instruction import HEADER, decode_stream, encode, format_instruction, layout, parse_instruction
from ncsim.asm.lexer import Cursor, Line
from ncsim.isadoc import markdown
from tests.strategies import instructions

ROWS = [pytest.param(row, id=row.mnemonic) for row in isa.TABLE]


def test_mnemonics_and_opcodes_are_unique():
    assert len({r.mnemonic for r in isa.TABLE}) == len(isa.TABLE)
    assert len({r.opcode for r in isa.TABLE}) == len(isa.TABLE)
    assert all(0 < r.opcode < 256 for r in isa.TABLE)


@pytest.mark.parametrize("row", ROWS)
def test_row_is_complete(row: isa.InstrSpec):
    assert row.summary and row.semantics and row.cost
    assert row.engines and set(row.engines) <= set(isa.ENGINES)
    names = [o.name for o in row.all_operands]
    assert len(names) == len(set(names)), "operand names repeat"
    assert all(o.doc for o in row.all_operands)
    for o in row.operands:
        assert o.kind.describe()
        if not o.required:
            o.kind.check(o.default)  # every default is a legal value of its kind


@pytest.mark.parametrize("row", ROWS)
def test_fields_do_not_overlap(row: isa.InstrSpec):
    placed, fixed = layout(row.opcode)
    end = HEADER.size
    for operand, off in placed:
        assert off >= end, f"{operand.name} overlaps the field before it"
        assert operand.kind.size > 0
        end = off + operand.kind.size
    assert end <= fixed and fixed % 8 == 0


def test_no_two_encodings_overlap():
    # The opcode byte alone selects the row: an encoding of one row never decodes as another.
    seen = {}
    for row in isa.TABLE:
        assert row.opcode not in seen, (row.mnemonic, seen.get(row.opcode))
        seen[row.opcode] = row.mnemonic


def reparse(text: str):
    line = Line("<roundtrip>", 1, text)
    return parse_instruction(line, Cursor(line), ParseEnv())


@pytest.mark.parametrize("row", ROWS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_encode_decode_print_parse_encode(row: isa.InstrSpec, data):
    instr = data.draw(instructions(row))
    raw = encode(instr)
    assert len(raw) % 8 == 0
    (decoded,) = decode_stream(raw)
    assert encode(decoded) == raw
    text = format_instruction(decoded)
    again = reparse(text)
    assert encode(again) == raw, text
    assert format_instruction(again) == text


def test_docs_isa_md_is_current():
    doc = Path(__file__).resolve().parent.parent / "docs" / "isa.md"
    assert doc.read_text() == markdown(), "docs/isa.md is stale: run `make docs`"
