"""Fuzzing: whatever the source or the object, ncsim answers with its own error (file and place) or succeeds.

(a) mutations of valid programs through the assembler: an ObjectFile or an NcsimError that names fuzz.s;
(b) random and mutated objects through read_elf and the disassembler: an ObjectFileError on one line,
    or text that the assembler takes back (or refuses with an NcsimError);
(c) both through the CLI in-process: exit status 0 or 1, never 2 (an internal error), never a traceback.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ncsim import isa
from ncsim.asm.assembler import assemble
from ncsim.asm.disasm import disassemble
from ncsim.asm.elf import TEXT_SECTIONS, read_elf, write_elf
from ncsim.asm.objfile import ObjectFile
from ncsim.errors import NcsimError, ObjectFileError
from tests.asm.conftest import PROGRAMS

REPO_PROGRAMS = Path(__file__).resolve().parents[2] / "programs"
# The hand-written raw programs, and the language examples (loops, slices, automatic placement and
# synchronisation) where they exist; giou.s is left out for speed (it unrolls to hundreds of instructions).
SEEDS: list[str] = list(PROGRAMS.values()) + [
    (REPO_PROGRAMS / name).read_text() for name in ("relu.s", "matmul.s") if (REPO_PROGRAMS / name).exists()
]

# Characters and tokens the mutations insert: the language's punctuation and words, edge-case numbers,
# and a few characters that are no part of it.
CHARS = list(" \t\n.,:;[]()@=+-*/%<>#\"_0123456789abefsx") + ["é", "\x00", "\r", "\x0c", "\u2028"]
TOKENS = [
    *sorted(isa.BY_MNEMONIC)[::3], "sbuf", "psum", "hbm", "none", "true", "false", "inf", "nan", "engine=",
    "op=", "queue=", "wait=", "signal=", "s0", "s255", "s256", ">=", "+=", "==", "-=", "..", ".for i in 0..2",
    ".end", ".sbuf", ".hbm", ".psum", ".const c =", ".sem", ".sync manual", ".file", ".loc", ".kernel", "0",
    "1", "-1", "7", "128", "129", "2048", "65536", "4294967296", "1e40", "0x_", "1.5", "-0.0", "f32", "bf16",
    "u8", "[", "]", "[1,4]", "@", ":", ",", "(", ")", "/", "//", "%", '"x"', "a", "x", "acc", "# comment",
]
TOKEN_RE = re.compile(r"\w+|\S")


@st.composite
def mutated_sources(draw) -> str:
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["delete", "insert", "replace", "delete_token", "insert_token", "replace_token",
                                   "duplicate_line", "swap_lines", "delete_line"]))
        if op in ("delete", "insert", "replace"):
            i = draw(st.integers(0, max(len(text) - 1, 0)))
            char = draw(st.sampled_from(CHARS))
            text = {"delete": text[:i] + text[i + 1:], "insert": text[:i] + char + text[i:],
                    "replace": text[:i] + char + text[i + 1:]}[op]
        elif op.endswith("_token"):
            spans = [m.span() for m in TOKEN_RE.finditer(text)]
            if not spans:
                continue
            a, b = spans[draw(st.integers(0, len(spans) - 1))]
            word = draw(st.sampled_from(TOKENS))
            text = {"delete_token": text[:a] + text[b:], "insert_token": text[:a] + word + " " + text[a:],
                    "replace_token": text[:a] + word + text[b:]}[op]
        else:
            lines = text.splitlines()
            if not lines:
                continue
            i = draw(st.integers(0, len(lines) - 1))
            j = draw(st.integers(0, len(lines) - 1))
            if op == "duplicate_line":
                lines.insert(j, lines[i])
            elif op == "swap_lines":
                lines[i], lines[j] = lines[j], lines[i]
            else:
                del lines[i]
            text = "\n".join(lines) + "\n"
    return text


def assemble_or_error(text: str) -> ObjectFile | None:
    """The object, or None after checking the NcsimError names fuzz.s and shows the right line."""
    try:
        obj = assemble(text, "fuzz.s")
    except NcsimError as e:
        message = e.format()
        assert message.startswith("fuzz.s:"), message
        if e.loc is not None:
            lines = text.splitlines()
            assert e.loc.file == "fuzz.s" and 1 <= e.loc.line <= len(lines), message
            assert e.loc.text == lines[e.loc.line - 1], message
            assert 1 <= e.loc.col <= len(e.loc.text) + 1, message
        return None
    assert isinstance(obj, ObjectFile)
    return obj


def test_every_seed_assembles():
    """The mutations start from valid programs (else the fuzz only tests the first error)."""
    for text in SEEDS:
        obj = assemble_or_error(text)
        assert obj is not None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_sources())
def test_mutated_sources(text):
    assemble_or_error(text)


# --- objects ------------------------------------------------------------------------------------------

OBJECTS: list[bytes] = [write_elf(assemble(text, "seed.s")) for text in SEEDS[:2]]


def text_ranges(data: bytes) -> list[tuple[int, int]]:
    """(offset, size) of the non-empty .text sections of a well-formed object."""
    shoff = struct.unpack_from("<Q", data, 40)[0]
    ranges = []
    for k in range(len(TEXT_SECTIONS)):
        offset, size = struct.unpack_from("<QQ", data, shoff + 64 * (k + 1) + 24)
        if size:
            ranges.append((offset, size))
    return ranges


@st.composite
def mutated_objects(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(OBJECTS)))
    how = draw(st.sampled_from(["anywhere", "instructions", "instructions", "truncate", "random"]))
    if how == "random":
        head = draw(st.sampled_from([b"", b"\x7fELF", bytes(data[:64])]))
        return head + draw(st.binary(max_size=512))
    if how == "truncate":
        return bytes(data[:draw(st.integers(0, len(data) - 1))])
    if how == "anywhere":
        lo, hi = 0, len(data)
    else:  # the instruction streams: opcodes, engine codes, sizes, operand fields, semaphore entries
        lo, size = draw(st.sampled_from(text_ranges(bytes(data))))
        hi = lo + size
    for _ in range(draw(st.integers(1, 6))):
        data[draw(st.integers(lo, hi - 1))] = draw(st.integers(0, 255))
    return bytes(data)


def disassemble_or_error(data: bytes) -> str | None:
    try:
        text = disassemble(read_elf(data, "fuzz.o"), "fuzz.o")
    except ObjectFileError as e:
        message = e.format()
        assert message.startswith("fuzz.o") and "\n" not in message, message
        return None
    assert text.startswith("# disassembly of fuzz.o (ncsim)\n")
    # What the disassembler prints, the assembler reads back or refuses with its own error.
    try:
        assemble(text, "dis.s")
    except NcsimError as e:
        assert e.format().startswith("dis.s:"), e.format()
    return text


def test_seed_objects_disassemble():
    for data in OBJECTS:
        assert disassemble_or_error(data) is not None


@settings(max_examples=300, deadline=None)
@given(mutated_objects())
def test_mutated_objects(data):
    disassemble_or_error(data)


# --- the same through the CLI ---------------------------------------------------------------------------

# Derandomized: the few CLI examples are the same on every run, so this cannot fail by chance; the
# API-level tests above are the ones that explore.
CLI_SETTINGS = settings(max_examples=25, deadline=None, derandomize=True,
                        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@CLI_SETTINGS
@given(mutated_sources())
def test_cli_asm_mutated_sources(cli, tmp_path, text):
    (tmp_path / "fuzz.s").write_text(text)
    (tmp_path / "fuzz.o").unlink(missing_ok=True)
    res = cli("asm", "fuzz.s")
    assert res.code in (0, 1), res
    assert "Traceback" not in res.err and "internal error" not in res.err, res.err
    if res.code == 0:
        assert res.err == ""
        read_elf((tmp_path / "fuzz.o").read_bytes(), "fuzz.o")
    else:
        assert res.err.startswith("fuzz.s:"), res.err
        assert not (tmp_path / "fuzz.o").exists()


@CLI_SETTINGS
@given(mutated_objects())
def test_cli_disasm_mutated_objects(cli, tmp_path, data):
    (tmp_path / "fuzz.o").write_bytes(data)
    res = cli("disasm", "fuzz.o")
    assert res.code in (0, 1), res
    assert "Traceback" not in res.err and "internal error" not in res.err, res.err
    if res.code == 0:
        assert res.out.startswith("# disassembly of fuzz.o (ncsim)\n") and res.err == ""
    else:
        assert res.err.startswith("fuzz.o") and res.err.count("\n") == 1, res.err
