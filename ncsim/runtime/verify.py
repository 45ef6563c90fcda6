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

from ncsim.arrays import distinct
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
    bodies = len(prog.body_first)
    slots = int(np.diff(prog.fp_ptr).max())
    width = int(np.diff(prog.ap_ptr).max())
    constant = np.zeros((bodies, max(width, 1)), np.bool_)  # [body, ap slot]: the slot holds a constant
    for b, k in enumerate(prog.body_first.tolist()):
        constant[b, prog.constant_slots(k)] = True
    picks = _picks(prog.body, prog.fp_ptr, prog.fp_memory, prog.fp_lo, prog.fp_hi, bodies, max(slots, 1),
                   config.psum_bank_bytes, int(Memory.PSUM), prog.ap_ptr, prog.ap_value, constant)
    parts = [np.asarray(prog.body_first, np.int64), picks]
    # Semaphores the configuration does not have: the first instruction naming one.
    for ptr, sem in ((prog.wait_ptr, prog.wait_sem), (prog.signal_ptr, prog.signal_sem)):
        bad = np.flatnonzero(sem >= config.semaphores)
        if len(bad):
            parts.append(np.searchsorted(ptr, bad[:1], side="right").astype(np.int64) - 1)
    return distinct(np.concatenate(parts))


@numba.njit(cache=True)
def _picks(body, fp_ptr, fp_memory, fp_lo, fp_hi, bodies, slots, bank, psum, ap_ptr, ap_value, constant):
    """One pass over the instructions: per (body, footprint slot), the first instruction whose
    footprint ends furthest and the first whose PSUM footprint starts latest in its bank; per (body,
    constant slot), the first instruction with each distinct value (found in a hash table of the
    constants seen, sized by a first count of them). Unsorted, with repeats."""
    n = body.shape[0]
    end = np.full((bodies, slots), -1, np.int64)
    furthest = np.full((bodies, slots), -1, np.int64)
    start = np.full((bodies, slots), -1, np.int64)
    latest = np.full((bodies, slots), -1, np.int64)
    m = 0
    for k in range(n):
        b = body[k]
        for r in range(fp_ptr[k], fp_ptr[k + 1]):
            j = r - fp_ptr[k]
            if fp_hi[r] > end[b, j]:
                end[b, j] = fp_hi[r]
                furthest[b, j] = k
            if fp_memory[r] == psum and fp_lo[r] % bank > start[b, j]:
                start[b, j] = fp_lo[r] % bank
                latest[b, j] = k
        for r in range(ap_ptr[k], ap_ptr[k + 1]):
            if constant[b, r - ap_ptr[k]]:
                m += 1
    size = 8
    while size < 2 * m:
        size *= 2
    seen_k = np.full(size, -1, np.int64)  # the instruction and ap_value row of each distinct constant
    seen_r = np.empty(size, np.int64)
    out = np.empty(2 * bodies * slots + m, np.int64)
    p = 0
    for b in range(bodies):
        for j in range(slots):
            if furthest[b, j] >= 0:
                out[p] = furthest[b, j]
                p += 1
            if latest[b, j] >= 0:
                out[p] = latest[b, j]
                p += 1
    if m == 0:
        return out[:p]
    for k in range(n):
        b = body[k]
        for r in range(ap_ptr[k], ap_ptr[k + 1]):
            j = r - ap_ptr[k]
            if not constant[b, j]:
                continue
            v = ap_value[r]
            h = (np.uint64(v) * np.uint64(0x9E3779B97F4A7C15)) ^ (np.uint64(b) << np.uint64(8)) ^ np.uint64(j)
            h ^= h >> np.uint64(29)
            x = np.int64(h & np.uint64(size - 1))
            while seen_k[x] >= 0:
                c = seen_k[x]
                if body[c] == b and seen_r[x] - ap_ptr[c] == j and ap_value[seen_r[x]] == v:
                    break
                x = (x + 1) & (size - 1)
            if seen_k[x] < 0:
                seen_k[x] = k
                seen_r[x] = r
                out[p] = k
                p += 1
    return out[:p]
