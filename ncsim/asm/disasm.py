"""ObjectFile -> assembly text that assembles back to the identical object.

Every instruction is printed in the canonical form of `ncsim.asm.instruction.format_instruction`,
preceded by a `.loc` directive that carries its source place, so that the line table survives
the round trip; tensors are printed with their addresses, named semaphores (`.sem NAME @N`) with
their numbers, and waits and signals use those names as the source did.
"""

from __future__ import annotations

from ncsim.asm import objfile
from ncsim.asm.instruction import Instruction, decode_stream, format_instruction
from ncsim.asm.lexer import quote
from ncsim.asm.objfile import ObjectFile, TensorEntry
from ncsim.errors import ObjectFileError


def decode_object(obj: ObjectFile, file: str = "<object>") -> dict[str, list[Instruction]]:
    """Each engine's instructions; checks that the line table has one entry per instruction."""
    streams = {}
    for engine in objfile.ENGINES:
        instrs = decode_stream(obj.streams[engine], f"{file} (.text.{engine})")
        entries = obj.lines[engine]
        if [e.index for e in entries] != list(range(len(instrs))):
            raise ObjectFileError(f"the line table of .text.{engine} has {len(entries)} entries for"
                                  f" {len(instrs)} instructions", file=file)
        streams[engine] = instrs
    return streams


def format_tensor(t: TensorEntry) -> str:
    shape = "[" + ", ".join(str(d) for d in t.shape) + "]"
    if t.memory == "hbm":
        return f".hbm  {t.name} {t.dtype.short}{shape} {t.kind} @{t.address}"
    return f".{t.memory} {t.name} {t.dtype.short}{shape} @{t.partition}:{t.address}"


def disassemble(obj: ObjectFile, file: str = "<object>") -> str:
    streams = decode_object(obj, file)
    # The semaphores are explicit in the text: re-assembling must not insert them again.
    out = [f"# disassembly of {file} (ncsim)", f".kernel {obj.kernel}", ".sync manual"]
    out += [format_tensor(t) for t in obj.tensors]
    # Named semaphores keep their numbers (`@N`): the source may have written lower numbers raw.
    out += [f".sem {name} @{number}" for number, name in sorted(obj.semaphores.items())]
    out += [f".file {i} {quote(path)}" for i, path in enumerate(obj.files)]
    for program in obj.gpsimd:
        out.append("")
        out += program.disassemble()
    for engine in objfile.ENGINES:
        instrs = streams[engine]
        if not instrs:
            continue
        out.append("")
        out.append(f"# {engine} engine: {len(instrs)} instruction{'s' if len(instrs) != 1 else ''}")
        for instr, entry in zip(instrs, obj.lines[engine]):
            out.append(f".loc {entry.file} {entry.line} {entry.col}")
            out.append(format_instruction(instr, obj.semaphores))
    return "\n".join(out) + "\n"
