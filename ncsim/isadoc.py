"""Words about the instruction table: `ncsim isa`, `ncsim isa NAME` and docs/isa.md are made here."""

from __future__ import annotations

from ncsim import isa
from ncsim.asm.fields import MAX_HBM_DIMS
from ncsim.asm.instruction import HEADER, layout

# The NaN rule of every arithmetic result (ncsim/engines/alu.py, docs/numerics.md).
_CANONICAL_NAN = ("Every NaN an arithmetic operator produces, on every engine and in every instruction (elementwise,"
                  " reductions, scans, matmul), is the canonical quiet NaN, bits 0x7FC00000 (0x7FC0 in bf16): a NaN"
                  " operand's sign and payload are not kept, and a NaN made from numbers (inf - inf, 0 * inf, 0 / 0)"
                  " does not take the host CPU's sign. The comparisons and logical operators give 1.0 or 0.0, never NaN.")
_ACTIVATION_NAN = ("A NaN an activation produces (from a NaN operand, 0 * inf in `data * scale`, inf - inf in `+ bias`,"
                   " or a function outside its domain: log(-1), sqrt(-1), sin(inf)) is the canonical NaN 0x7FC00000,"
                   " like every ALU result.")


ALU_ENGINES_NOTE = (
    "Engines: the NeuronCore-v2 engines that run the operator, from the table of ALU operators and engines in"
    " `nki.api.shared` (SDK 2.23) and its note that add and multiply run on the Scalar engine only from"
    " NeuronCore-v3, and 32-bit integer add and multiply only on GpSimd (rules `alu-engine` and"
    " `int32-add-multiply`: an instruction whose destination and data tiles are all i32/u32 adds or multiplies"
    " on GpSimd, modulo 2**32, with integer constants or i32/u32 columns). Bitwise operators need integer tiles"
    " and integer constants (rule `bitwise-integers`). `divide` is in no engine's column of that table; ncsim"
    " runs it on Vector. tensor_partition_reduce has its own list (add, maximum, bitwise_or, bitwise_and on"
    " GpSimd), and the Scalar engine's activation functions are a table of their own.")


def alu_table() -> str:
    """The ALU operators and the v2 engines that run them, for `ncsim isa`."""
    lines = ["ALU operators (engines of NeuronCore-v2)"]
    for name, arity, cls, red, _doc, engines in isa.ALU_OPS:
        lines.append(f"  {name:<15} {cls:<7} {'reducible' if red else '':<10} {', '.join(engines)}")
    return "\n".join(lines) + "\n" + ALU_ENGINES_NOTE


def engines_of(spec: isa.InstrSpec) -> str:
    return ", ".join(spec.engines) if len(spec.engines) > 1 else spec.engines[0]


def summary_by_engine() -> str:
    """The list of instructions grouped by the engine that runs them by default."""
    lines = []
    for engine in isa.ENGINES:
        rows = [r for r in isa.TABLE if r.engines[0] == engine]
        if not rows:
            continue
        lines.append(f"{isa.ENGINE_NAMES[engine]}")
        for r in rows:
            also = f"  [also {', '.join(r.engines[1:])}]" if len(r.engines) > 1 else ""
            lines.append(f"  {r.mnemonic:<24} {r.summary}{also}")
        lines.append("")
    lines += [alu_table(), ""]
    lines.append(CORE_HEADING + " (inside .gpsimd sections only; costs in GpSimd cycles)")
    for r in isa.CORE_TABLE:
        lines.append(f"  {r.syntax():<34} {r.summary}; {r.cost}")
    lines.append("")
    lines.append("`ncsim isa NAME` shows one instruction: syntax, operands, semantics, cost and encoding.")
    return "\n".join(lines)


def operand_rows(spec: isa.InstrSpec) -> list[tuple[str, str, str, str]]:
    rows = []
    for o in spec.all_operands:
        default = "required" if o.required else o.kind.format(o.default)
        rows.append((o.name, o.kind.describe(), default, o.doc))
    return rows


def defaults_rows() -> list[tuple[str, str, str, str]]:
    """(instruction, operand, ncsim's default, NKI's) for every optional operand of the table and every
    operand that nki.isa (SDK 2.27) does not have: the defaults table of docs/isa.md."""
    rows = []
    for spec in isa.TABLE:
        for o in spec.operands:
            if o.required and o.nki is None:
                continue
            ours = "required" if o.required else o.kind.format(o.default)
            rows.append((spec.mnemonic, o.name, ours, "the same" if o.nki is None else o.nki))
    return rows


CORE_HEADING = "GpSimd core instructions: the model ISA of the 8 cores (docs/gpsimd.md)"


def encoding_rows(spec: isa.InstrSpec) -> list[tuple[str, int, int]]:
    if spec.group == "core":
        from ncsim.gpsimd.code import RECORD
        from ncsim.gpsimd.code import layout as core_layout

        placed = core_layout(spec)
        return [("opcode", 0, 1)] + [(o.name, off, o.kind.size) for o, off in placed] + [("record", 0, RECORD)]
    placed, fixed = layout(spec.opcode)
    rows = [("header", 0, HEADER.size)]
    rows += [(o.name, off, o.kind.size) for o, off in placed]
    return rows + [("waits, signals", fixed, 8)]


def describe(spec: isa.InstrSpec) -> str:
    lines = [
        f"{spec.mnemonic} — {spec.summary}",
        "",
        f"  syntax:    {spec.syntax()}",
        "  group:     GpSimd core instruction (only inside a .gpsimd section)" if spec.group == "core" else
        f"  engine:    {engines_of(spec)}" + (f" (default {spec.engines[0]})" if len(spec.engines) > 1 else ""),
        f"  opcode:    0x{spec.opcode:02x}",
        "",
        "operands:",
    ]
    for name, kind, default, doc in operand_rows(spec):
        lines.append(f"  {name:<18} {doc}")
        lines.append(f"  {'':<18}   {kind}; {default}")
    lines += ["", "semantics:", f"  {spec.semantics}", "", "cost:", f"  {spec.cost}", "", "encoding (bytes):"]
    for name, off, size in encoding_rows(spec):
        tail = " each, after the fields" if name.startswith("waits") else ""
        lines.append(f"  {off:>4} +{size:<3} {name}{tail}")
    return "\n".join(lines)


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def markdown() -> str:
    out = [
        "<!-- generated by tools/gen_isa_doc.py from ncsim/isa.py: do not edit; `make docs` refreshes it -->",
        "# NeuronCore-v2 instruction set (ncsim)",
        "",
        "Every instruction that ncsim assembles and simulates, from the one table in `ncsim/isa.py`.",
        "Operand names, their order and their defaults are those of `nki.isa`'s explicit-`dst` form in SDK",
        "2.27 (`dst` first, then nki.isa's parameters in its order; [defaults](#defaults-against-nki) lists",
        "where ncsim differs), so an `nki.isa` call transcribes operand for operand.",
        "Required operands may be written by position (in the order shown), the others by keyword.",
        "Every instruction also takes `wait=[sN>=v, ...]` and `signal=[sN+=v, ...]` (semaphores), and",
        "instructions that run on more than one engine take `engine=`.",
        "",
        "A raw access pattern reads `MEM.DTYPE[start:stop, @offset, [step,count], ...]`: memory",
        "(`sbuf`, `psum`, `hbm`), dtype, the partition range (not for `hbm`), the byte offset (inside each",
        "partition on chip, the address in HBM), then up to 4 free dimensions (5 in HBM) of",
        "`[step, count]` in elements, outermost first. In an SBUF/PSUM operand of an engine's",
        "instruction (not `dma_copy`, not `gpsimd_call`, not HBM) a count is at most 65535 (uint16) and a step",
        "of an axis with more than one element is in -32768..32767 (int16): rule `ap-fields`, from the",
        "Trainium/Inferentia2 Architecture Guide for NKI ([hardware.md](hardware.md#access)).",
        "",
        "## Encoding",
        "",
        "Every instruction encodes to a multiple of 8 bytes, little-endian: an 8-byte header (opcode u8,",
        "engine u8 as an index in " + ", ".join(isa.ENGINES) + ", number of waits u8, number of signals u8,",
        "total size u16, reserved u16 = 0), then the row's operands at the fixed offsets listed with each",
        (f"instruction (an access pattern takes {isa.TILE.size} bytes: memory, dtype, partition start, dimension"
        f" count, partition count, byte offset u64, {MAX_HBM_DIMS} x (step i32, count u32)), zero padding to 8,"
        " then 8 bytes"),
        "per wait and per signal (semaphore u8, op u8, zero u16, value u32). Objects are ELF64: one",
        "section per engine stream (`.text.tensor` ...), `.ncsim.tensors`, `.ncsim.files`, `.ncsim.lines`,",
        "a symbol table, and `.ncsim.sems` (the `.sem` names, by number) when the source names semaphores;",
        "`ncsim/asm/elf.py` documents the layout.",
        "",
        "## Contents",
        "",
    ]
    for engine in isa.ENGINES:
        rows = [r for r in isa.TABLE if r.engines[0] == engine]
        if rows:
            out.append(f"- {isa.ENGINE_NAMES[engine]}: " + ", ".join(f"[{r.mnemonic}](#{r.mnemonic})" for r in rows))
    out += ["", "## ALU operators", "", "| operator | operands | class | reduction | engines (v2) | meaning |",
            "|---|---|---|---|---|---|"]
    for name, arity, cls, red, doc, engines in isa.ALU_OPS:
        out.append(f"| `{name}` | {arity} | {cls} | {'yes' if red else 'no'} | {', '.join(engines)} | {_md_escape(doc)} |")
    out += ["", ALU_ENGINES_NOTE]
    out += ["", "Also accepted: " + ", ".join(f"`{a}` for `{b}`" for a, b in isa.ALU_ALIASES.items()) + ".", ""]
    out += [_CANONICAL_NAN, ""]
    out += ["## Activation functions", "", "| function | value (float64, rounded once to fp32) |", "|---|---|"]
    out += [f"| `{name}` | {_md_escape(doc)} |" for name, doc in isa.ACTIVATION_FUNCS]
    out += ["", _ACTIVATION_NAN]
    out += ["", "## Defaults against NKI", "",
            "Every optional operand with ncsim's default and NKI's, and the operands NKI does not have.",
            f"Reference: {isa.NKI_FORMS}.",
            "\"the same\" means nki.isa of SDK 2.27 has the parameter with this default (NKI writes `None`",
            "where ncsim writes `none`, a tuple `()` where ncsim writes `[]`, `nl.equal` and `nl.add` where",
            "ncsim writes `equal` and `add`). NKI's `engine` parameter",
            "defaults to `engine.unknown` (the compiler picks); ncsim's `engine=` defaults to the first engine",
            "listed for the instruction.",
            "", "| instruction | operand | ncsim | NKI (SDK 2.27) |", "|---|---|---|---|"]
    out += [f"| [{m}](#{m}) | `{n}` | `{d}` | {_md_escape(k)} |" for m, n, d, k in defaults_rows()]
    for spec in isa.TABLE:
        out += ["", f"## {spec.mnemonic}", "", spec.summary + ".", "", "```", spec.syntax(), "```", ""]
        out.append(f"Engine: {engines_of(spec)}. Opcode: `0x{spec.opcode:02x}`.")
        out += ["", "| operand | kind | default | meaning |", "|---|---|---|---|"]
        out += [f"| `{n}` | {_md_escape(k)} | `{d}` | {_md_escape(doc)} |" for n, k, d, doc in operand_rows(spec)]
        out += ["", f"**Semantics.** {spec.semantics}", "", f"**Cost.** {spec.cost}", ""]
        enc = ", ".join(f"{name} @{off}+{size}" for name, off, size in encoding_rows(spec))
        out.append(f"**Encoding** (byte offset + size): {enc}.")
    out += ["", "## " + CORE_HEADING, "",
            "Only inside a `.gpsimd NAME` ... `.end` section, which `gpsimd_call` runs on the cores; the engines'",
            "streams refuse them. Each encodes to one 16-byte record (opcode, then the operands at the offsets",
            "shown, zeros); costs are GpSimd cycles of the in-order model of [gpsimd.md](gpsimd.md).",
            "", "| instruction | operands | meaning | semantics | cost | opcode |", "|---|---|---|---|---|---|"]
    for spec in isa.CORE_TABLE:
        ops = ", ".join(f"`{o.name}`: {o.kind.describe()}" for o in spec.operands)
        out.append(f"| `{spec.syntax().strip()}` | {_md_escape(ops)} | {_md_escape(spec.summary)} |"
                   f" {_md_escape(spec.semantics)} | {_md_escape(spec.cost)} | `0x{spec.opcode:02x}` |")
    return "\n".join(out) + "\n"
