"""A loaded object held to the run's configuration, by the assembler's own rule functions.

An object may come from another configuration (`ncsim asm k.s` then `ncsim run k.o --set pmax=64`)
or from elsewhere, so a run of an object checks it before anything is allocated, computed or timed,
on the values path and the timing-only path alike: every tensor with `rules.check_tensor`, and the
instructions with `rules.check_instruction`. (The timing model indexes its DMA queues and
semaphores by what the instructions name, so an object it has not checked could not be timed
safely.)

Checking a million instructions one by one would take longer than timing them. Instructions of one
body (`ncsim.program`) agree in every byte but their access patterns' offsets, their constants and
their semaphores, and the rules read an offset only through the operand's byte range: its end
against the memory's size, and for a matmul's output the PSUM bank it lies in. So the rules run on:

- each body's first instruction;
- per body and operand in memory, the instruction whose operand ends furthest, and the one whose
  operand starts latest in a PSUM bank (the bank rule breaks first there, the width being the body's);
- per body and constant operand, the first instruction with each distinct value;
- the first instruction that names a semaphore the configuration does not have.

If any instruction breaks a rule, one of these does. They are checked in program order and the
first error is raised, as a SimError placed at the instruction's source line.
"""

from __future__ import annotations

import numba
import numpy as np

from ncsim.asm.rules import check_instruction, check_tensor
from ncsim.config import Config
from ncsim.errors import AsmError, SimError
from ncsim.memory.access import Memory
from ncsim.program import Program


def verify_program(prog: Program, config: Config) -> None:
    """Raise SimError if a tensor or an instruction of `prog` breaks a hardware rule under `config`."""
    for t in prog.tensors:
        try:
            check_tensor(t, config)
        except AsmError as e:
            raise SimError(e.message, file=prog.name) from None
    for k in candidates(prog, config).tolist():
        try:
            check_instruction(prog.instruction(k), config)
        except AsmError as e:
            raise SimError(e.message, prog.loc(k), notes=e.notes) from None
    prog.rules_kept = config  # the machine need not check them again


def candidates(prog: Program, config: Config) -> np.ndarray:
    """The instructions to check (sorted k): if any instruction breaks a rule, one of these does."""
    n = prog.count
    if n == 0:
        return np.zeros(0, np.int64)
    picks = [np.asarray(prog.body_first, np.int64)]

    # Operands in memory: per (body, operand), the furthest end and the latest start in a PSUM bank.
    slots = int(np.diff(prog.fp_ptr).max())
    if slots:
        furthest, latest = _furthest(prog.body, prog.fp_ptr, prog.fp_memory, prog.fp_lo, prog.fp_hi,
                                     len(prog.body_first), slots, config.psum_bank_bytes, int(Memory.PSUM))
        picks += [furthest[furthest >= 0], latest[latest >= 0]]

    # Constants: per (body, operand), each distinct value once.
    ap_instr = np.repeat(np.arange(n, dtype=np.int64), np.diff(prog.ap_ptr))
    if len(ap_instr):
        slot = np.arange(len(ap_instr), dtype=np.int64) - prog.ap_ptr[ap_instr]
        width = int(slot.max()) + 1
        constant = np.zeros((len(prog.body_first), width), np.bool_)
        for b, k in enumerate(prog.body_first.tolist()):
            constant[b, prog.constant_slots(k)] = True
        rows = np.flatnonzero(constant[prog.body[ap_instr], slot])
        if len(rows):
            keys = np.stack([prog.body[ap_instr[rows]], slot[rows], prog.ap_value[rows]])
            _, first = np.unique(keys, axis=1, return_index=True)
            picks.append(ap_instr[rows[first]])

    # Semaphores the configuration does not have: the first instruction naming one.
    for ptr, sem in ((prog.wait_ptr, prog.wait_sem), (prog.signal_ptr, prog.signal_sem)):
        bad = np.flatnonzero(sem >= config.semaphores)
        if len(bad):
            picks.append(np.searchsorted(ptr, bad[:1], side="right").astype(np.int64) - 1)
    return np.unique(np.concatenate(picks))


@numba.njit(cache=True)
def _furthest(body, fp_ptr, fp_memory, fp_lo, fp_hi, bodies, slots, bank, psum):
    """Per (body, footprint slot): the first instruction whose footprint ends furthest, and the first
    whose PSUM footprint starts latest in its bank (-1: none)."""
    end = np.full((bodies, slots), -1, np.int64)
    furthest = np.full((bodies, slots), -1, np.int64)
    start = np.full((bodies, slots), -1, np.int64)
    latest = np.full((bodies, slots), -1, np.int64)
    for k in range(body.shape[0]):
        b = body[k]
        for r in range(fp_ptr[k], fp_ptr[k + 1]):
            j = r - fp_ptr[k]
            if fp_hi[r] > end[b, j]:
                end[b, j] = fp_hi[r]
                furthest[b, j] = k
            if fp_memory[r] == psum and fp_lo[r] % bank > start[b, j]:
                start[b, j] = fp_lo[r] % bank
                latest[b, j] = k
    return furthest.ravel(), latest.ravel()
