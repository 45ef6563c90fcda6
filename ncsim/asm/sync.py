"""Automatic synchronisation: find the hazards between streams and insert semaphore waits and signals.

Streams. Each compute engine runs its instructions in order; each DMA queue runs in order the
transfers that one engine puts on it (a queue fed by two engines is two streams). A dma_copy is triggered by an engine (its waits are waited there) and then moves data on its
queue. Two instructions on the same stream need nothing (the stream keeps its order); two on
different streams that touch overlapping bytes, at least one writing (read-after-write,
write-after-read, write-after-write), need the later one to wait for the earlier one's completion.

Minimal edges. Each instruction carries a vector clock: for every stream, the last instruction of
that stream it is already known to follow (through its own stream's order and the waits before it).
A hazard with an instruction the clock already covers needs no edge, and only the latest hazard on
each other stream gets one, so no edge is implied by the others and independent work is never
serialised.

Semaphores. Each stream that some instruction waits for gets one semaphore that counts its
completions: the instructions waited for signal `s+=1` in stream order, and a waiter waits for
`s>=n`, n being its producer's rank among them. Semaphores the program names or uses are avoided.
When an instruction would wait on more semaphores than the encoding holds, the extra waits go on
sem_wait instructions placed just before it on its engine.

Exactness. Byte footprints are compared exactly: an access pattern is a set of equal-length runs
of bytes (its innermost contiguous dimensions folded into the run), per partition range on chip.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np

from ncsim import isa
from ncsim.asm.fields import SemOp
from ncsim.asm.instruction import Instruction
from ncsim.errors import AsmError
from ncsim.memory.access import AccessPattern


@dataclass(frozen=True)
class Access:
    ap: AccessPattern
    write: bool
    operand: str


@dataclass
class Edge:
    producer: int  # instruction index (program order)
    consumer: int
    kind: str  # RAW, WAR, WAW
    producer_operand: str
    consumer_operand: str
    memory: str
    wait: SemOp | None = None


@dataclass
class SyncResult:
    instructions: list[Instruction]
    origin: list[int]  # for each output instruction, the index of the input instruction it came from
    edges: list[Edge] = field(default_factory=list)
    semaphores: dict[str, int] = field(default_factory=dict)  # stream -> semaphore


def stream_of(instr: Instruction) -> str:
    """The stream that carries out the instruction's work. A DMA queue keeps the order of what one
    engine puts on it; transfers that two engines put on the same queue are ordered only by when
    they are triggered, so each (queue, issuing engine) is a stream of its own."""
    if instr.mnemonic == "dma_copy":
        return f"dma queue {instr.operands['queue']} from {instr.engine}"
    return instr.engine


def accesses(instr: Instruction) -> list[Access]:
    out = []
    for operand in instr.spec.operands:
        value = instr.operands[operand.name]
        if not isinstance(value, AccessPattern):
            continue
        if operand.role in ("out", "inout"):
            out.append(Access(value, True, operand.name))
        if operand.role in ("in", "inout") or (operand.name == "dst" and _accumulates(instr)):
            out.append(Access(value, False, operand.name))
    return out


def _accumulates(instr: Instruction) -> bool:
    return bool(instr.operands.get("accumulate"))


@lru_cache(maxsize=65536)
def byte_runs(ap: AccessPattern) -> tuple[np.ndarray, int]:
    """(sorted run starts, run length in bytes) covering exactly the bytes the pattern touches in one
    partition (on chip) or in HBM."""
    size = ap.dtype.itemsize
    dims = list(ap.dims)
    run = size
    while dims and dims[-1][0] * size == run:
        run *= dims[-1][1]
        dims.pop()
    starts = np.full((), ap.offset, dtype=np.int64)
    for step, count in dims:
        starts = starts[..., None] + np.arange(count, dtype=np.int64) * (step * size)
    return np.unique(starts.ravel()), run


def overlap(a: AccessPattern, b: AccessPattern) -> bool:
    if a.memory != b.memory:
        return False
    if a.on_chip and (a.partition >= b.partition + b.partitions or b.partition >= a.partition + a.partitions):
        return False
    (alo, ahi), (blo, bhi) = a.byte_span(), b.byte_span()
    if alo >= bhi or blo >= ahi:
        return False
    sa, la = byte_runs(a)
    sb, lb = byte_runs(b)
    idx = np.searchsorted(sb, sa + la, side="left")
    ok = idx > 0
    return bool(np.any(sb[idx[ok] - 1] + lb > sa[ok]))


def hazard(earlier: list[Access], later: list[Access]) -> tuple[str, Access, Access] | None:
    """The first hazard between two instructions' accesses, RAW reported before WAR before WAW."""
    for kind, ew, lw in (("RAW", True, False), ("WAR", False, True), ("WAW", True, True)):
        for e in earlier:
            if e.write != ew:
                continue
            for lt in later:
                if lt.write == lw and overlap(e.ap, lt.ap):
                    return kind, e, lt
    return None


def used_semaphores(instrs: list[Instruction]) -> set[int]:
    used = set()
    for instr in instrs:
        for op in instr.waits + instr.signals:
            used.add(op.sem)
        for v in instr.operands.values():
            if isinstance(v, SemOp):
                used.add(v.sem)
    return used


def synchronise(instrs: list[Instruction], num_semaphores: int, reserved: set[int] = frozenset()) -> SyncResult:
    n = len(instrs)
    streams = [stream_of(i) for i in instrs]
    names = sorted(set(streams) | {i.engine for i in instrs})
    sid = {s: k for k, s in enumerate(names)}
    zero = np.zeros(len(names), dtype=np.int64)
    pos = np.zeros(n, dtype=np.int64)  # 1-based position in its stream; a clock entry 0 means "none known"
    history: dict[str, list[int]] = {s: [] for s in names}
    clock_now = {s: zero.copy() for s in names}  # what the next instruction of each stream will know
    clock_after: list[np.ndarray] = []  # what anyone who waits for instruction i's completion knows
    foot = [accesses(i) for i in instrs]
    edges: list[Edge] = []
    for i, instr in enumerate(instrs):
        own = streams[i]
        gained = clock_now[instr.engine].copy()  # the issuing engine learns only what it waits for
        known = np.maximum(gained, clock_now[own]) if own != instr.engine else gained.copy()
        found = []
        for s in names:
            if s == own or not foot[i]:
                continue
            for j in reversed(history[s]):
                if pos[j] <= known[sid[s]]:
                    break
                h = hazard(foot[j], foot[i])
                if h:
                    found.append((j, h))
                    break
        # latest producers first: waiting for them may already cover the others
        for j, (kind, a, b) in sorted(found, key=lambda f: -f[0]):
            if pos[j] <= known[sid[streams[j]]]:
                continue
            known = np.maximum(known, clock_after[j])
            gained = np.maximum(gained, clock_after[j])
            edges.append(Edge(j, i, kind, a.operand, b.operand, a.ap.memory.label))
        history[own].append(i)
        pos[i] = len(history[own])
        known[sid[own]] = pos[i]
        if own != instr.engine:
            clock_now[instr.engine] = gained
        clock_now[own] = known
        clock_after.append(known)
    return _assign_semaphores(instrs, streams, edges, num_semaphores, reserved)


def _assign_semaphores(instrs: list[Instruction], streams: list[str], edges: list[Edge], num_semaphores: int,
                       reserved: set[int]) -> SyncResult:
    producers = sorted({e.producer for e in edges})
    stream_names = sorted({streams[p] for p in producers}, key=lambda s: (s.startswith("dma"), s))
    free = [s for s in range(num_semaphores) if s not in reserved]
    if len(stream_names) > len(free):
        raise AsmError(f"automatic synchronisation needs {len(stream_names)} semaphores, {len(free)} are free")
    sem_of = dict(zip(stream_names, free))
    rank: dict[int, int] = {}
    counts = {s: 0 for s in stream_names}
    for p in producers:
        counts[streams[p]] += 1
        rank[p] = counts[streams[p]]
    waits: dict[int, list[SemOp]] = {}
    for e in edges:
        e.wait = SemOp(sem_of[streams[e.producer]], ">=", rank[e.producer])
        waits.setdefault(e.consumer, []).append(e.wait)
    out: list[Instruction] = []
    origin: list[int] = []
    limit = isa.WAITS.max_len
    sem_wait = isa.BY_MNEMONIC["sem_wait"]
    for i, instr in enumerate(instrs):
        new_waits = list(instr.waits) + waits.get(i, [])
        extra, new_waits = new_waits[:-limit] if len(new_waits) > limit else [], new_waits[-limit:]
        for w in extra:
            out.append(Instruction(sem_wait, instr.engine, {"cond": w}, loc=instr.loc))
            origin.append(i)
        signals = list(instr.signals)
        if i in rank:
            signals.append(SemOp(sem_of[streams[i]], "+=", 1))
        out.append(replace(instr, waits=tuple(new_waits), signals=tuple(signals)))
        origin.append(i)
    return SyncResult(out, origin, edges, sem_of)


def describe_edges(result: SyncResult, instrs: list[Instruction], where: list[str]) -> str:
    """One line per inserted wait: who waits for whom, the hazard, and the semaphore."""
    lines = [f"automatic synchronisation: {len(result.edges)} waits on {len(result.semaphores)} semaphores"
             + ("" if not result.semaphores else " (" + ", ".join(f"s{s} counts {name}" for name, s
                                                                  in result.semaphores.items()) + ")")]
    for e in result.edges:
        p, c = instrs[e.producer], instrs[e.consumer]
        lines.append(f"  {where[e.consumer]} {c.mnemonic} ({stream_of(c)}) waits {e.wait} for"
                     f" {where[e.producer]} {p.mnemonic} ({stream_of(p)}): {e.kind} on {e.memory}"
                     f" ({e.producer_operand} -> {e.consumer_operand})")
    return "\n".join(lines)

