"""The functional machine: executes a loaded program's instructions on the memory state.

It reads the decoded program (`ncsim.program.Program`): the instructions it hands to the engines
are the program's (made once from its arrays and kept there), and the waits and signals are read
from the program's semaphore columns.

Each engine runs its stream in order. An instruction runs once every semaphore condition it waits
for holds; its semaphore updates apply when it has run. The machine picks engines in a fixed order
(the table's engine order), running each as far as it can before moving on; any order that respects
the semaphores gives the same values for a race-free program, so this one is as good as any and it
repeats exactly. A DMA transfer runs when its issuing engine reaches it.

When no engine can go on and some still have instructions, the program has deadlocked: the
DeadlockError names each waiting engine, its instruction and source line, the condition and the
semaphore's value.

Every instruction's rules are checked before it runs (ncsim.engines.semantics), except in a program
known to keep them under the machine's configuration (Program.rules_kept: assembled under it, or
held to it by verify_program), so a program built any other way still gets the assembler's errors.

Each instruction's reads and writes are recorded as footprints (memory, partitions, byte range) for
the race checker of the timing model; reads of memory nothing wrote are collected as warnings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ncsim import engines, isa
from ncsim.asm.fields import SIGNAL_OPS, SemOp
from ncsim.asm.instruction import Instruction
from ncsim.asm.objfile import ObjectFile, TensorEntry
from ncsim.config import Config
from ncsim.engines.context import Context
from ncsim.errors import DeadlockError, NcsimError, SimError, SourceLoc, Waiting, unmet_wait
from ncsim.memory.access import AccessPattern, Memory
from ncsim.memory.state import MemoryState
from ncsim.program import Program

ENGINES = isa.ENGINES
SEM_MAX = 2**32 - 1


class Footprint(NamedTuple):
    """One read or write of one instruction: `engine` stream, instruction `index` in it."""

    engine: str
    index: int
    memory: Memory
    partition: int  # first partition (0 in HBM)
    partitions: int  # 0 in HBM
    lo: int  # byte range [lo, hi) inside each partition, or in HBM
    hi: int
    write: bool


@dataclass
class UnwrittenRead:
    loc: SourceLoc | None
    engine: str
    index: int
    mnemonic: str
    operand: str
    elements: int
    times: int = 1

    def message(self) -> str:
        where = f"{self.loc}: " if self.loc else f"{self.engine}[{self.index}]: "
        again = f" (and again {self.times - 1} more times)" if self.times > 1 else ""
        return (f"{where}warning: {self.mnemonic} reads {self.elements} element{'s' if self.elements != 1 else ''}"
                f" of {self.operand} that nothing wrote; they read as the sentinel (NaN for floats){again}")


class Machine:
    def __init__(self, program: Program | ObjectFile, config: Config, file: str = "<object>"):
        """`program`: the decoded program, or an object (decoded here)."""
        engines.load()
        self.program = Program.of(program, file)
        self.obj = program if isinstance(program, ObjectFile) else self.program.obj
        self.config = config
        self.file = file
        self.mem = MemoryState(config, self.program.tensors, self.program.on_chip_extents())
        self.engine_state: dict[str, dict] = {e: {} for e in ENGINES}
        self.sems = [0] * config.semaphores
        self._accesses: list[tuple[str, int, AccessPattern, bool]] = []  # made into footprints when asked
        self.order: list[tuple[str, int]] = []  # (engine, index) in the order they ran
        self.unwritten: dict[tuple[str, int, str], UnwrittenRead] = {}
        self.pcs = {e: 0 for e in ENGINES}
        # Each execute function checks the instruction's rules first (ncsim.engines.semantics); a program
        # whose instructions are known to keep them under this configuration (the assembler made it, or
        # verify_program checked it) skips that: the functions behind the check are run directly.
        self.rules_kept = self.program.rules_kept is not None and self.program.rules_kept == config
        # What the Context of an instruction finds once per body of the program: fp32_into's operators,
        # operands and their kinds, by (body, destination, steps, scalar operands), and rows' shared
        # shape, by (body, operand names); and each instruction's body, as a list.
        self.plans: dict[tuple, object] = {}
        self._body: list[int] = self.program.body.tolist()

    # ------------------------------------------------------------------ the program
    def loc(self, engine: str, index: int) -> SourceLoc | None:
        return self.program.loc(self.program.find(engine, index))

    # ------------------------------------------------------------------ host side
    def tensor(self, name: str) -> TensorEntry:
        for t in self.program.tensors:
            if t.name == name:
                return t
        raise KeyError(name)

    def load_tensor(self, t: TensorEntry, raw: np.ndarray) -> None:
        self.mem.write(self.mem.tensor_pattern(t), raw)

    def read_tensor(self, t: TensorEntry) -> np.ndarray:
        return self.mem.read(self.mem.tensor_pattern(t))

    @property
    def footprints(self) -> list[Footprint]:
        """Every read and write so far, in the order they happened."""
        return [Footprint(e, i, ap.memory, ap.partition, ap.partitions, *ap.byte_span(), w)
                for e, i, ap, w in self._accesses]

    # ------------------------------------------------------------------ bookkeeping called by Context
    def record(self, ctx: Context, ap: AccessPattern, write: bool) -> None:
        self._accesses.append((ctx.engine, ctx.index, ap, write))

    def warn_unwritten(self, ctx: Context, name_or_ap: object, ap: AccessPattern, count: int) -> None:
        operand = f"'{name_or_ap}'" if isinstance(name_or_ap, str) else f"{ap.memory.label}"
        key = (ctx.engine, ctx.index, operand)
        if key in self.unwritten:
            self.unwritten[key].times += 1
            return
        self.unwritten[key] = UnwrittenRead(self.loc(ctx.engine, ctx.index), ctx.engine, ctx.index,
                                            ctx.instr.mnemonic, operand, count)

    def warnings(self) -> list[str]:
        return [w.message() for w in self.unwritten.values()]

    # ------------------------------------------------------------------ running
    @property
    def total(self) -> int:
        return self.program.count

    def run(self, progress: Callable[[int, int], None] | None = None) -> None:
        """Run every stream to its end, or raise DeadlockError / SimError."""
        prog = self.program
        total = self.total
        done = len(self.order)
        first = prog.first.tolist()
        wptr, wsem, wop, wval = (a.tolist() for a in (prog.wait_ptr, prog.wait_sem, prog.wait_op, prog.wait_value))
        signals = tuple(a.tolist() for a in (prog.signal_ptr, prog.signal_sem, prog.signal_op, prog.signal_value))
        sems = self.sems
        moved = True
        while moved:
            moved = False
            for e, engine in enumerate(ENGINES):
                pc = self.pcs[engine]
                k, end = first[e] + pc, first[e + 1]
                while k < end:
                    held = True
                    for j in range(wptr[k], wptr[k + 1]):  # op 0 is >=, 1 is ==
                        v = sems[wsem[j]]
                        if v < wval[j] if wop[j] == 0 else v != wval[j]:
                            held = False
                            break
                    if not held:
                        break
                    self._execute(engine, pc, k, signals)
                    pc += 1
                    k += 1
                    self.pcs[engine] = pc
                    done += 1
                    moved = True
                    if progress is not None and done % 4096 == 0:
                        progress(done, total)
        if done < total:
            raise self._deadlock()

    def _execute(self, engine: str, index: int, k: int, signals: tuple[list[int], ...]) -> None:
        """Run instruction k (`index` of `engine`'s stream), then apply its semaphore updates (`signals`:
        the program's signal columns as lists)."""
        instr = self.program.instruction(k)
        ctx = Context(self, engine, index, instr, self._body[k])
        execute = instr.spec.slots["execute"]
        if self.rules_kept:
            execute = getattr(execute, "__wrapped__", execute)
        try:
            execute(ctx)
        except NcsimError as e:
            raise e.at(self.loc(engine, index)) if e.loc is None else e from None
        except MemoryError:
            raise SimError(f"{instr.mnemonic}: its operands need more host memory than this machine has"
                           f" ({', '.join(str(list(ap.shape)) for ap in _patterns(instr))})",
                           self.loc(engine, index)) from None
        self.order.append((engine, index))
        ptr, sem, op, value = signals
        for j in range(ptr[k], ptr[k + 1]):  # sem_signal's update last
            self._update(sem[j], op[j], value[j], ctx)

    def _holds(self, w: SemOp) -> bool:
        v = self.sems[w.sem]
        return v >= w.value if w.op == ">=" else v == w.value

    def _update(self, sem: int, op: int, value: int, ctx: Context) -> None:
        """Apply `s{sem} {SIGNAL_OPS[op]} {value}` (op 0 +=, 1 -=, 2 =)."""
        v = self.sems[sem]
        new = v + value if op == 0 else v - value if op == 1 else value
        if not 0 <= new <= SEM_MAX:
            s = SemOp(sem, SIGNAL_OPS[op], value)
            raise ctx.fail(f"semaphore s{sem} is {v}; {s} would take it to {new}, outside 0..{SEM_MAX}")
        self.sems[sem] = new

    def _deadlock(self) -> DeadlockError:
        waiting = []
        prog = self.program
        for e, engine in enumerate(ENGINES):
            pc, size = self.pcs[engine], int(prog.first[e + 1] - prog.first[e])
            if pc < size:
                k = int(prog.first[e]) + pc
                unmet = tuple(unmet_wait(w.sem, w.op, w.value, self.sems[w.sem], prog.semaphores.get(w.sem))
                              for w in prog.waits(k) if not self._holds(w))
                waiting.append(Waiting(engine, pc, prog.loc(k), prog.mnemonic(k), unmet, size))
        return DeadlockError.of(waiting)


def _patterns(instr: Instruction) -> list[AccessPattern]:
    return [v for v in instr.operands.values() if isinstance(v, AccessPattern)]


__all__ = ["DeadlockError", "Footprint", "Machine", "SimError"]
