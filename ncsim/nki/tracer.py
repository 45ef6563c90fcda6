"""The NKI kernel builder: runs a kernel's Python once per SPMD instance and builds an ncsim Program.

The program is the assembler's own `ncsim.asm.assembler.Program`: every `nl.*` / `nisa.*` call adds
`ncsim.asm.instruction.Instruction`s made from the instruction table by operand name (`emit`),
checked by the assembler's rules (`ncsim.asm.rules.check_instruction`) and placed at the kernel's
own source line (the first frame outside `ncsim.nki`), so errors, the trace and the report point at
the kernel. Code that generates a kernel from another source (ncsim.torch's lowering) names that
source's place instead with `Tracer.source(file, line)`; the buffer pools keep their sites.
Tensors are `TensorEntry`s placed by `ncsim.asm.alloc.Allocator`; `Program.build` then
synchronises the engines exactly as for assembly. Nothing is printed and re-parsed.

Buffer policy (docs/nki.md "Buffer policy"): every creation site of an on-chip tile (its line, and
the lines of the calls that led there) has a pool of buffers. The pool grows to `buffers` (default
2) times the largest number of the site's tiles the kernel has held at once (a Python reference
alive), so that the set of tiles one loop iteration makes and the next iteration's are disjoint and
can overlap. A new tile takes a new buffer while the pool is below that size (or when every buffer
holds a reachable tile), else the least recently used buffer that holds no reachable tile. An
instruction that overwrites a whole SBUF tile holding data gives the tile another buffer of its
pool on the same terms, when the memory has room (`Tracer.renew`): NKI allocates tiles by lifetime.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import gc
import inspect
import itertools
import linecache
import math
import os
import sys
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ncsim import dtypes, isa
from ncsim.asm.alloc import Allocator, per_partition_bytes
from ncsim.asm.assembler import Program, auto_queue
from ncsim.asm.build import Chunk
from ncsim.asm.fields import APKind, FieldError, const_of
from ncsim.asm.instruction import Instruction
from ncsim.asm.lanes import Lanes, lanes
from ncsim.asm.objfile import TensorEntry
from ncsim.asm.rules import check_instruction, partition_start_ok
from ncsim.config import Config
from ncsim.errors import AsmError, NcsimError, SourceLoc
from ncsim.memory.access import AccessPattern, Immediate, Memory
from ncsim.nki.tensor import Buffer, View

DEFAULT_BUFFERS = 2  # buffers per tile creation site (see the module docstring)
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_current: Tracer | None = None


def current(what: str = "this call") -> Tracer:
    if _current is None:
        raise AsmError(f"{what} is only available inside an NKI kernel being traced (call the kernel, or"
                       " nki.simulate_kernel(kernel, ...))")
    return _current


@dataclass(frozen=True)
class Place:
    """Where in the user's code an instruction or a tile comes from."""

    file: str
    line: int
    col: int  # 1-based
    length: int
    site: tuple[tuple[str, int, int], ...]  # the user frames' (file, line, col), innermost first

    def source_loc(self) -> SourceLoc:
        key = (self.file, self.line, self.col, self.length)
        loc = _LOCS.get(key)
        if loc is None:
            loc = _LOCS[key] = SourceLoc(self.file, self.line, self.col, linecache.getline(self.file, self.line),
                                         self.length)
        return loc


_LOCS: dict[tuple[str, int, int, int], SourceLoc] = {}  # one SourceLoc per kernel place (they are immutable)


def _position(frame: Any) -> tuple[int, int, int]:
    """(line, 1-based column, length) of the call a frame is executing (Python 3.11 positions)."""
    line = frame.f_lineno
    try:
        pos = _positions(frame.f_code)[frame.f_lasti // 2]
    except (IndexError, TypeError):
        return line, 1, 1
    if pos[0] is None or pos[2] is None:
        return line, 1, 1
    length = (pos[3] - pos[2]) if pos[1] == pos[0] and pos[3] is not None else 1
    return pos[0], pos[2] + 1, max(1, length)


_POSITIONS: dict[Any, list[Any]] = {}


def _positions(code: Any) -> list[Any]:
    got = _POSITIONS.get(code)
    if got is None:
        got = _POSITIONS[code] = list(code.co_positions())
    return got


_OURS: dict[str, bool] = {}  # file name -> whether it is a module of ncsim.nki


def _ours(filename: str) -> bool:
    got = _OURS.get(filename)
    if got is None:
        got = _OURS[filename] = os.path.dirname(os.path.abspath(filename)) == _PACKAGE_DIR
    return got


def user_place() -> Place:
    """The innermost frame outside ncsim.nki (the kernel's line that called nl.* / nisa.*), and
    the chain of user frames around it up to the tracer (the tile creation site). Inside
    `Tracer.source(...)` the place is that source's, the site still the frames'."""
    frame = sys._getframe(1)
    while frame is not None and _ours(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return Place("<nki>", 1, 1, 1, ())
    given = _current.given if _current is not None else None
    first = frame
    site = []
    while frame is not None and not _ours(frame.f_code.co_filename):
        line, col, _ = _position(frame)
        site.append((frame.f_code.co_filename, line, col))
        frame = frame.f_back
    if given is not None:
        return Place(*given, tuple(site))
    line, col, length = _position(first)
    return Place(first.f_code.co_filename, line, col, length, tuple(site))


def _kernel_place(tb: Any) -> Place:
    """The kernel's frame in a traceback that went from the kernel into ncsim.nki: the last frame
    outside ncsim.nki before the first one inside it."""
    frame = None
    while tb is not None:
        if not _ours(tb.tb_frame.f_code.co_filename):
            frame = tb.tb_frame
        elif frame is not None:
            break
        tb = tb.tb_next
    if frame is None:
        return Place("<nki>", 1, 1, 1, ())
    line, col, length = _position(frame)
    return Place(frame.f_code.co_filename, line, col, length, ())


@dataclass
class Pending:
    """An instruction whose destination is not yet chosen (see ncsim.nki.tensor)."""

    tracer: Tracer
    mnemonic: str
    engine: str | None
    operands: dict[str, Any]
    memory: str
    place: Place
    intervals: dict[int, tuple[int, int]] = field(default_factory=dict)
    dst_name: str = "dst"


# Per mnemonic: its row of the instruction table, its operand names, and per operand (name, required,
# default, whether it takes an access pattern or a constant, whether the instruction writes it).
_TABLES: dict[str, tuple[isa.InstrSpec, frozenset[str], tuple[tuple[str, bool, Any, bool, bool], ...]]] = {}


def _table(mnemonic: str) -> tuple[isa.InstrSpec, frozenset[str], tuple[tuple[str, bool, Any, bool, bool], ...]]:
    spec = isa.BY_MNEMONIC[mnemonic]
    rows = tuple((o.name, o.required, o.default, isinstance(o.kind, APKind), o.role in ("out", "inout"))
                 for o in spec.operands)
    got = _TABLES[mnemonic] = (spec, frozenset(o.name for o in spec.operands), rows)
    return got


@dataclass
class _Site:
    """Instructions of one call site and one operand structure (see Tracer.record): the first of
    them, and per instruction its program-order position and its access patterns' (partition,
    offset) pairs, flattened."""

    instr: Instruction
    where: tuple[int, int, int]
    positions: list[int] = field(default_factory=list)
    varying: list[list[int]] = field(default_factory=list)


@dataclass
class _LoopFrame:
    """A running nl.affine_range / sequential_range loop: its place among the loops around it (key)
    and, in the current iteration, how many times each statement has run (counts)."""

    key: tuple
    counts: dict[tuple, int] = field(default_factory=dict)


@dataclass
class _Pool:
    """The buffers of one tile creation site (the buffer policy of the module docstring)."""
    entries: list[TensorEntry] = field(default_factory=list)
    holders: list[Callable[[], Buffer | None]] = field(default_factory=list)  # each buffer's tile
    used: list[int] = field(default_factory=list)  # when each buffer last got a tile (Tracer.tick)
    live: int = 0  # the site's tiles the kernel can reach now (kept by the holders' callbacks)
    peak: int = 0  # the most of them seen reachable at once

    def hold(self, i: int, buf: Buffer, tick: int) -> None:
        self.live += 1
        self.holders[i] = weakref.ref(buf, self._dropped)
        self.used[i] = tick

    def _dropped(self, _ref: object) -> None:
        self.live -= 1

    def drop(self, i: int) -> TensorEntry:
        """Take buffer i out of the pool (its place given back to the memory by the caller)."""
        entry = self.entries[i]
        del self.entries[i], self.holders[i], self.used[i]
        return entry

    def fold(self) -> None:
        """Count the tiles reachable now into the peak."""
        self.peak = max(self.peak, self.live)


class Tracer:
    """Builds one kernel's Program while its Python runs (see the module docstring)."""

    def __init__(self, kernel: str, config: Config, buffers: int = DEFAULT_BUFFERS, batch: bool = True,
                 renew: bool = True, future: dict[int, list[int]] | None = None):
        self.config = config
        self.buffers = buffers
        self.batch = batch  # gather the instructions of a call site into chunks of lanes (record)
        self.sites: dict[Any, _Site] = {}
        self.checked: set[Any] = set()  # instructions the rules were checked on (emit)
        self.tiles_ok: set[Any] = set()  # (memory, dtype, shape) of tiles check_tile accepted
        self.program = Program(kernel=kernel)
        self.alloc = Allocator(config)
        self.queues: dict[tuple[str, Memory, Memory], int] = {}
        self.pools: dict[tuple[str, tuple[int, ...], str, tuple], _Pool] = {}
        self.last_pool: _Pool | None = None  # the pool that last got a tile, its peak not yet counted
        self.tick = 0  # tiles made so far (the pools' least-recently-used order)
        self.pending: list[weakref.ref[View]] = []
        self.pe_ones: dict[int, View] = {}  # [1, M] fp32 ones of partition broadcasts (language._pe_broadcast)
        self.hbm: list[Buffer] = []
        self.shared: list[Buffer] = []  # shared_hbm tensors, in creation order (shared by SPMD instances)
        self.shared_seen = 0  # shared_hbm tensors the current instance has created
        self.grid: tuple[int, ...] = ()
        self.program_id: tuple[int, ...] = ()
        self.names: set[str] = set()
        self.prints: list[tuple[str, str, Place]] = []  # nl.device_print: (prefix, HBM tensor, place)
        self.given: tuple[str, int, int, int] | None = None  # the place source() gives, if any
        # Direct allocation (ncsim.nki.compiler): the first tensor of each on-chip memory allocated
        # directly and the first tile allocated automatically (a kernel does one or the other per
        # memory); force_auto (ncc.force_auto_alloc) places directly allocated tensors automatically.
        self.force_auto = False
        self.direct_first: dict[str, Place] = {}
        self.auto_first: dict[str, Place] = {}
        self.hbm_scratch_first: Place | None = None  # the first nl.hbm / private_hbm tensor (check_hbm_scratch)
        self.direct_places: dict[tuple, tuple[tuple, list[TensorEntry]]] = {}  # trace key -> places
        self.frames: list[_LoopFrame] = []  # the nl.affine_range / sequential_range loops running (loop)
        self.loop_run = 0  # outermost such loops started so far
        # per physical tile of a direct allocation, the logical tile (Buffer) that last wrote it, and
        # where (check_lifetimes)
        self.last_writer: dict[str, tuple[Buffer | None, Place | None]] = {}
        self.use_tick = 0  # Buffer.last_use: when a buffer was last made, indexed or used (make_room)
        self.collected = False  # make_room has collected Python's garbage
        self.holes: set[int] = set()  # program-order places reserved for spills' stores not made (yet)
        self.constants: dict[tuple, Buffer] = {}  # nl.shared_constant tensors by (dtype, shape, bytes)
        self.constant_values: dict[str, np.ndarray] = {}  # their values, by tensor name (inputs of the run)
        # no_reorder blocks (ncsim.nki.schedule): how deep the blocks running are, the block numbers,
        # and the program-order places of the instructions made in one, with its number
        self.no_reorder_depth = 0
        self.no_reorder_blocks = 0
        self.in_block: list[tuple[int, int]] = []
        self.renewing = renew  # a write of a whole SBUF tile may take its other buffer (renew)
        self.pool_of: dict[str, _Pool] = {}  # each automatically placed tile's pool, by its entry's name (renew)
        # The spill choice (make_room): the tiles the kernel has made (Buffer.seq), the instructions it
        # has made (not those of spills: the clock of `uses`), when each tile was used, and `future`,
        # the `uses` of an earlier trace of the same kernel, which tells when each tile is used next
        # (None: the least recently used tile is taken). Uses are recorded from the first spill on
        # (both traces are the same up to it, and the choice asks only what comes after), and only
        # by a trace with no `future`. `reloading` while reload makes a spill's DMAs.
        self.seq = 0
        self.user_tick = 0
        self.uses: dict[int, list[int]] = {}
        self.future = future
        self.recording = False
        self.reloading = False
        self.spills = 0  # tiles that gave up their place (make_room)

    @contextlib.contextmanager
    def source(self, file: str, line: int, col: int = 1, length: int = 1) -> Iterator[None]:
        """Instructions and tiles made in the body are placed at `file`:`line`:`col` (their `.loc`,
        errors, the trace and the report) instead of the first frame outside ncsim.nki, for a kernel
        generated from that source (ncsim.torch's lowering gives each op's instructions the line of
        the torch function that used it). The tile creation sites, and so the buffer pools, are
        still the calling frames: each generated op does not get pools of its own. An error raised
        in the body without a place (indexing, reshape) is placed there too."""
        saved = self.given
        self.given = given = (file, int(line), max(1, int(col)), max(1, int(length)))
        try:
            yield
        except AsmError as e:
            if e.loc is not None:
                raise
            raise AsmError(e.message, Place(*given, ()).source_loc(), notes=e.notes) from None
        finally:
            self.given = saved

    # ---------------------------------------------------------------- names and places
    def unique(self, name: str) -> str:
        base, n = name, 1
        while name in self.names:
            name = f"{base}_{n}"
            n += 1
        self.names.add(name)
        return name

    def fail(self, message: str, place: Place | None = None, notes: tuple[str, ...] = ()) -> AsmError:
        return AsmError(message, (place or user_place()).source_loc(), notes=notes)

    # ---------------------------------------------------------------- tensors
    def hbm_tensor(self, name: str, dtype: dtypes.DType, shape: tuple[int, ...], kind: str) -> Buffer:
        entry = self.alloc.place(TensorEntry(self.unique(name), "hbm", dtype, shape, 0, 0, kind))
        buf = Buffer(entry, entry.name)
        self.hbm.append(buf)
        return buf

    def tile(self, memory: str, dtype: dtypes.DType, shape: tuple[int, ...], place: Place,
             protect: frozenset[int] | set[int] = frozenset()) -> Buffer:
        """A buffer for a new tile made at `place` (the buffer policy of the module docstring);
        `protect`: ids of buffers that must not be evicted to make room (make_room)."""
        self.check_tile(memory, dtype, shape, place)
        if memory in self.direct_first:
            first = self.direct_first[memory]
            raise self.fail(f"this {memory.upper()} tile would be allocated automatically, in a kernel whose {memory.upper()}"
                            f" tensors are allocated directly (the first at {os.path.basename(first.file)}:{first.line}):"
                            f" NKI allocates a kernel's {memory.upper()} tensors all directly or all automatically; declare"
                            f" it with nl.ndarray(..., buffer=ncc.{memory}.mod_alloc(...)) and assign the result into it",
                            place)
        self.auto_first.setdefault(memory, place)
        key = (memory, shape, dtype.short, place.site)
        pool = self.pools.setdefault(key, _Pool())
        self.fold_pool()
        # The tiles reachable before this one count now; this one counts at the next call
        # (fold_pool), so that `t = nl.ndarray(...)` in a loop, whose old tile dies only when the
        # name is bound again, counts as one live tile and not two.
        pool.fold()
        size = self.buffers * max(pool.peak, 1)
        free = [i for i in range(len(pool.entries)) if pool.holders[i]() is None]
        chosen = None
        if free and (len(pool.entries) >= size or not self.alloc.fits(memory, dtype.itemsize * math.prod(shape[1:]))):
            chosen = min(free, key=pool.used.__getitem__)
        else:
            file = os.path.basename(place.file).removesuffix(".py")
            name = self.unique(f"{file}_{place.line}_{memory}{len(pool.entries)}")
            entry = None
            try:
                entry = self.alloc.place(TensorEntry(name, memory, dtype, shape, 0, 0, "tile"))
            except AsmError as e:
                # The memory is full: a buffer of this site that holds no reachable tile is taken
                # again (fewer buffers, less overlap); without one, the buffers of other sites that
                # hold no reachable tile are given back to the memory; then the kernel is refused
                # (docs/nki.md).
                if free:
                    self.names.discard(name)
                    chosen = min(free, key=pool.used.__getitem__)
                else:
                    # (the error's text only: an exception kept in a local would hold this frame, and
                    # the tiles it reaches, in a reference cycle, making liveness depend on when
                    # Python collects garbage)
                    message, notes = e.message, e.notes
                    while entry is None:
                        if not self.make_room(memory, pool, protect, place):
                            raise AsmError(message, place.source_loc(), notes=notes) from None
                        try:
                            entry = self.alloc.place(TensorEntry(name, memory, dtype, shape, 0, 0, "tile"))
                        except AsmError as e2:
                            message, notes = e2.message, e2.notes
            if entry is not None:
                chosen = self.add_buffer(pool, entry)
        self.tick += 1
        buf = Buffer(pool.entries[chosen], pool.entries[chosen].name)
        if not self.reloading:
            buf.seq = self.seq
            self.seq += 1
        self.use_tick += 1
        buf.last_use = self.use_tick
        pool.hold(chosen, buf, self.tick)
        self.last_pool = pool
        return buf

    def check_hbm_scratch(self, place: Place) -> None:
        """NKI's known limitation of direct allocation: a kernel that allocates directly declares no HBM
        tensor but its outputs (nl.shared_hbm); nl.hbm and nl.private_hbm are refused (the guide's
        "Non IO HBM tensor is not supported in allocated NKI kernel")."""
        if self.direct_first:
            first = next(iter(self.direct_first.values()))
            raise self.fail("an HBM tensor that is not an output (nl.hbm, nl.private_hbm) in a kernel that allocates"
                            f" directly (at {os.path.basename(first.file)}:{first.line}): NKI refuses it (\"Non IO HBM"
                            " tensor is not supported in allocated NKI kernel\"); return it (nl.shared_hbm) or keep the"
                            " data on chip", place)
        self.hbm_scratch_first = self.hbm_scratch_first or place

    def direct_tiles(self, alloc: Any, dtype: dtypes.DType, blocks: tuple[int, ...], shape: tuple[int, ...],
                     place: Place) -> list[Buffer]:
        """The tiles of a tensor declared with a direct allocation (ncsim.nki.compiler), one per block
        index in row-major order: where `alloc.func` places each, blocks placed alike sharing a tile."""
        memory = alloc.memory
        self.check_tile(memory, dtype, shape, place)
        if memory in self.auto_first:
            first = self.auto_first[memory]
            raise self.fail(f"{alloc!r}: this kernel already has a {memory.upper()} tile allocated automatically"
                            f" (at {os.path.basename(first.file)}:{first.line}): NKI allocates a kernel's"
                            f" {memory.upper()} tensors all directly or all automatically", place)
        if self.hbm_scratch_first is not None:
            first = self.hbm_scratch_first
            raise self.fail(f"{alloc!r}: this kernel declares an HBM tensor that is not an output (at"
                            f" {os.path.basename(first.file)}:{first.line}), which NKI refuses in a kernel that"
                            " allocates directly (\"Non IO HBM tensor is not supported in allocated NKI kernel\")",
                            place)
        self.direct_first.setdefault(memory, place)
        # NKI traces a loop's body once, ncsim runs it per iteration: inside nl.affine_range /
        # sequential_range loops a declaration keeps the places it got in the first iteration of each
        # (its trace key: the loops around it and, in each, the how-manieth run of the statement in one
        # iteration, so that a Python loop in the body, which NKI's trace unrolls too, declares anew).
        key = None
        if self.frames:
            frame = self.frames[-1]
            n = frame.counts.get(place.site, 0)
            frame.counts[place.site] = n + 1
            key = (frame.key, place.site, n)
        if key is not None and key in self.direct_places:
            what, entries = self.direct_places[key]
            if what != (memory, dtype.short, blocks, shape):
                raise self.fail(f"this declaration made a tensor {list(what[2] + what[3])} {what[1]} in {what[0]} in"
                                " the first iteration of its loop and a different one now: NKI traces a loop's body"
                                " once, so a declaration in it declares one tensor", place)
            return [Buffer(e, e.name) for e in entries]
        cfg = self.config
        per = dtype.itemsize * math.prod(shape[1:])
        parts = shape[0]
        placed: dict[tuple[int, int], TensorEntry] = {}
        entries = []
        # NKI calls the function with keywords (nki-samples' allocated attention binds its first
        # parameter with functools.partial(func, bank_map=...)); one whose parameters have other
        # names is called positionally
        try:
            inspect.signature(alloc.func).bind(idx=(), pdim_size=0, fdim_size=0)
            by_name = True
        except (TypeError, ValueError):
            by_name = False
        for idx in itertools.product(*(range(b) for b in blocks)):
            try:
                got = alloc.func(idx=idx, pdim_size=parts, fdim_size=per) if by_name else alloc.func(idx, parts, per)
            except Exception as e:  # noqa: BLE001 - the user's function: its error, at the declaration
                raise self.fail(f"{alloc!r} failed for block {idx}: {type(e).__name__}: {e}", place) from None
            n = 2 if memory == "sbuf" else 3
            if not (isinstance(got, (tuple, list)) and len(got) == n
                    and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in got)):
                form = "(start_partition, byte_addr)" if memory == "sbuf" else "(bank, start_partition, byte_addr)"
                raise self.fail(f"{alloc!r} gave {got!r} for block {idx}: a {memory.upper()} allocation function"
                                f" returns {form}, integers", place)
            if memory == "sbuf":
                bank, (partition, addr) = 0, (int(x) for x in got)
            else:
                bank, partition, addr = (int(x) for x in got)
            rule = None
            if not partition_start_ok(partition, parts):
                starts = [str(p) for p in (0, 32, 64, 96) if partition_start_ok(p, parts)]
                rule = (f"a tile of {parts} partitions starts at partition {' or '.join(starts)}"
                        f" (the ISA's rule), not {partition}")
            elif memory == "sbuf" and not 0 <= addr <= cfg.sbuf_usable_bytes - per:
                rule = (f"its {per} bytes per partition at byte {addr} are outside SBUF's usable"
                        f" {cfg.sbuf_usable_bytes} bytes per partition")
            elif memory == "psum" and not 0 <= bank < cfg.psum_partition_bytes // cfg.psum_bank_bytes:
                rule = f"PSUM has banks 0 to {cfg.psum_partition_bytes // cfg.psum_bank_bytes - 1}, not {bank}"
            elif memory == "psum" and (partition, addr) != (0, 0):
                rule = (f"a PSUM tile starts at partition 0 and byte 0 of its bank (NKI's known limitation),"
                        f" not partition {partition}, byte {addr}")
            elif addr % dtype.itemsize:
                rule = f"byte {addr} is not a multiple of {dtype.name}'s {dtype.itemsize} bytes"
            if rule:
                raise self.fail(f"{alloc!r} places block {idx} at" + (f" bank {bank}," if memory == "psum" else "")
                                + f" partition {partition}, byte {addr}: {rule}", place)
            where = (partition, bank * cfg.psum_bank_bytes + addr)
            if where not in placed:
                file = os.path.basename(place.file).removesuffix(".py")
                entry = TensorEntry(self.unique(f"{file}_{place.line}_{memory}_at{where[1]}"), memory, dtype, shape,
                                    where[0], where[1], "tile")
                self.alloc.reserve_explicit(entry)
                self.program.tensors[entry.name] = entry
                self.last_writer[entry.name] = (None, None)
                placed[where] = entry
            entries.append(placed[where])
        if key is not None:
            self.direct_places[key] = ((memory, dtype.short, blocks, shape), entries)
        return [Buffer(e, e.name) for e in entries]

    def loop(self, r: range, site: tuple) -> Iterator[int]:
        """Iterate an nl.affine_range / sequential_range whose `for` statement is at `site`, keeping
        the frame of loops running (direct_tiles' trace keys)."""
        if self.frames:
            parent = self.frames[-1]
            n = parent.counts.get(("loop", site), 0)
            parent.counts[("loop", site)] = n + 1
            key = parent.key + ((site, n),)
        else:
            self.loop_run += 1
            key = ((site, self.loop_run),)
        frame = _LoopFrame(key)
        self.frames.append(frame)
        try:
            for i in r:
                frame.counts = {}
                yield i
        finally:
            self.frames.remove(frame)

    def shared_constant(self, values: np.ndarray, dtype: dtypes.DType) -> Buffer:
        """nl.shared_constant: an HBM tensor holding `values` (already of `dtype`'s numpy type) when
        the kernel starts, one per distinct constant (an input of the run, filled by simulate)."""
        key = (dtype.short, values.shape, values.tobytes())
        if key not in self.constants:
            buf = self.hbm_tensor("const", dtype, tuple(values.shape) or (1,), "in")
            self.constants[key] = buf
            self.constant_values[buf.name] = values.reshape(buf.entry.shape)
        return self.constants[key]

    def lazy_block(self, tensor: Any, flat: int, write: bool, index: tuple[int, ...]) -> View:
        """Block `flat` of a lazily made block tensor (language.BlockTensor): its tile, made now if it
        has none (when the memory is full, `tile` takes the place of the least recently used tile:
        make_room)."""
        memory, dtype, place = tensor.maker
        view = tensor.blocks[flat]
        if view is None:
            if flat in tensor.evicted and not write:
                raise self.fail(f"block {list(index)} of the {list(tensor.shape)} tensor made at"
                                f" {os.path.basename(place.file)}:{place.line} was evicted: {memory.upper()} was"
                                " full, and ncsim's automatic allocation gave its tile to another (ncsim spills"
                                " SBUF tiles to HBM, not PSUM ones, which DMA cannot reach). Hold fewer tiles at"
                                f" once, or place them by hand (ncc.{memory}.mod_alloc)", user_place())
            buf = self.tile(memory, dtype, tensor.tile_shape, place)
            buf.block = (tensor.ref, flat)
            view = tensor.blocks[flat] = View.of(buf)
            tensor.evicted.discard(flat)
        self.use_tick += 1
        view.buf.last_use = self.use_tick
        self.used(view.buf)
        return view

    def used(self, buf: Buffer) -> None:
        """Note that the kernel uses tile `buf` now (`uses`, the record a later trace's spill choice reads)."""
        if self.recording and buf.seq >= 0 and not self.reloading:
            self.uses.setdefault(buf.seq, []).append(self.user_tick)

    def next_use(self, buf: Buffer) -> float:
        """When the kernel uses tile `buf` next, by the earlier trace's record (`future`): inf if never."""
        ticks = self.future.get(buf.seq) if self.future is not None and buf.seq >= 0 else None
        if not ticks:
            return math.inf
        i = bisect.bisect_right(ticks, self.user_tick)
        return ticks[i] if i < len(ticks) else math.inf

    def release_free(self, memory: str, keep: _Pool | None = None) -> int:
        """Give back to the memory every buffer of a site (other than `keep`'s) that holds no reachable
        tile; how many were given back."""
        n = 0
        for (mem, *_), pool in self.pools.items():
            if mem != memory or pool is keep:
                continue
            for i in reversed(range(len(pool.entries))):
                if pool.holders[i]() is None:
                    self.alloc.release(pool.drop(i))
                    n += 1
        return n

    def make_room(self, memory: str, keep: _Pool, protect: set[int], place: Place) -> bool:
        """The memory is full and the site's pool `keep` has no free buffer: give back the free buffers
        of other sites, or else take the place of the least recently used reachable tile of the memory
        (not one in `protect`, ids of the buffers the instruction being made reads). In SBUF that tile
        is spilled: a place in program order is kept for a dma_copy (Sync) storing it to an HBM tensor,
        made, with a load into a new tile, only when an instruction uses it again (`reload`), as NKI's
        compiler spills and reloads. PSUM cannot be reached by DMA: a tile taken there is evicted, its buffer marked so
        that using it later is refused (emit), an evicted block of a lazily made block tensor made again
        when assigned. False when nothing can be given back."""
        if self.release_free(memory, keep):
            return True
        # Which tiles are live is what the kernel's Python can still reach: garbage in reference
        # cycles is collected (once a trace: ncsim makes no cycles that hold tiles, and a full
        # collection costs tens of ms), so that the choice does not depend on when Python collects it.
        if not self.collected:
            self.collected = True
            if gc.collect() and self.release_free(memory, keep):
                return True
        # The tile whose next use is farthest (never: first), as a compiler that knows the whole
        # kernel chooses (Belady's rule), when an earlier trace recorded the uses; else, and among
        # equals, the least recently used.
        victim, best = None, None
        for (mem, *_), pool in self.pools.items():
            if mem != memory:
                continue
            for i, holder in enumerate(pool.holders):
                buf = holder()
                if buf is None or id(buf) in protect:
                    continue
                key = (-self.next_use(buf), buf.last_use)
                if best is None or key < best:
                    victim, best = (buf, pool, i), key
        if victim is None:
            return False
        buf, pool, i = victim
        self.spills += 1
        self.recording = self.future is None
        if memory == "sbuf":
            # the spill's store is given its place in program order now and made only if the tile is
            # used again (reload): a tile the kernel no longer needs, though its Python still holds it,
            # moves no data, as NKI's compiler, which knows its lifetime, would not spill it
            hole = None
            if buf.stored:
                hole = self.program.count
                self.program.count += 1
                self.holes.add(hole)
            buf.spilled = (hole, place)
        elif buf.block is not None and (tensor := buf.block[0]()) is not None:
            flat = buf.block[1]
            tensor.blocks[flat] = None
            tensor.evicted.add(flat)
            buf.evicted = f"block {flat} of the {list(tensor.shape)} tensor made at line {tensor.maker[2].line}"
        else:
            buf.evicted = f"the tile {buf.entry.name!r}"
        pool.live -= 1  # (its holder goes with the entry, so its death will not be counted)
        self.alloc.release(pool.drop(i))
        return True

    def add_buffer(self, pool: _Pool, entry: TensorEntry) -> int:
        """A new buffer of `pool`, placed at `entry`, holding no tile yet: its index in the pool."""
        self.program.tensors[entry.name] = entry
        pool.entries.append(entry)
        pool.holders.append(lambda: None)
        pool.used.append(0)
        self.pool_of[entry.name] = pool
        return len(pool.entries) - 1

    def renew(self, buf: Buffer) -> None:
        """An instruction is about to overwrite all of SBUF tile `buf`, which holds data written
        before: the write starts a new lifetime of the tile, which NKI's allocator places by itself
        (it allocates tiles, first write to last read, after tracing: nki.compiler.Allocation), so it
        takes another buffer of the tile's pool when one is free or the pool may grow (the pool's size
        of the buffer policy) and the memory has room without giving anything up; the reads of the old
        contents made before keep their buffer, and the new write need not wait for them. Every
        view of the tile follows (Buffer.entry)."""
        pool = self.pool_of.get(buf.entry.name)
        if pool is None or buf.spilled or buf.evicted:
            return
        try:
            i = pool.entries.index(buf.entry)
        except ValueError:
            return
        free = [j for j in range(len(pool.entries)) if j != i and pool.holders[j]() is None]
        if free:
            j = min(free, key=pool.used.__getitem__)
        else:
            if len(pool.entries) >= self.buffers * max(pool.peak, pool.live, 1):
                return
            e = buf.entry
            if not self.alloc.fits(e.memory, per_partition_bytes(e)):
                return
            name = self.unique(f"{e.name}r")
            try:
                entry = self.alloc.place(TensorEntry(name, e.memory, e.dtype, e.shape, 0, 0, "tile"))
            except AsmError:
                self.names.discard(name)
                return
            j = self.add_buffer(pool, entry)
        self.tick += 1
        pool.holders[i] = lambda: None
        pool.holders[j] = weakref.ref(buf, pool._dropped)
        pool.used[j] = self.tick
        buf.entry, buf.name = pool.entries[j], pool.entries[j].name

    def reload(self, buf: Buffer, place: Place, protect: set[int], dead: bool = False) -> None:
        """A spilled SBUF tile used again (make_room): its store to an HBM tensor of its own is made
        at the place in program order its spill reserved (dma_copy, Sync, reading its old place), then
        a new tile, made at `place`, loads it back (dma_copy, Sync) and becomes the buffer's place:
        every view of it follows. dead: the instruction at `place` overwrites the whole tile, so its
        contents are never read again: no store and no load, only the new place (the reserved one is
        closed up, as for a tile never used again). A tile that holds what a DMA copied whole from an
        HBM tensor, neither written since (Buffer.source), is not stored either: that copy is made
        again, as a compiler loads a value again rather than spill it (a tile loaded back from its
        spill tensor holds that tensor's copy)."""
        hole, spilled_at = buf.spilled
        source = buf.source  # a copy of HBM data still there, and of the whole tile, is made again
        if source is not None:
            partition, offset, dims, dtype, src, version = source
            made = View(buf, partition, offset, dims, dtype)
            if src.buf.version != version or not _covers(made, {"dst": made}, "dst"):
                source = None
        self.reloading = True
        try:
            hbm = None
            if hole is not None and not dead and source is None:
                hbm = self.hbm_tensor("spill", buf.dtype, buf.entry.shape, "scratch")
                self.holes.discard(hole)
                self.emit("dma_copy", "sync", place=spilled_at, flush=False, at=hole, dst=View.of(hbm),
                          src=View.of(buf))
            new = self.tile(buf.entry.memory, buf.dtype, buf.entry.shape, place, protect | {id(buf)})
            pool = self.last_pool  # (the pool tile just gave `new` from)
            assert pool is not None
            i = pool.entries.index(new.entry)
            if hbm is not None:
                self.emit("dma_copy", "sync", place=place, flush=False, dst=View.of(new), src=View.of(hbm))
            buf.entry, buf.name, buf.spilled = new.entry, new.name, None
            buf.stored = hbm is not None
            # loaded back from its spill tensor, the tile holds that tensor's copy: spilled again
            # unchanged, it is not stored again
            buf.source = (0, 0, View.of(buf).dims, buf.dtype, View.of(hbm), hbm.version) if hbm is not None else None
            pool.holders[i] = weakref.ref(buf, pool._dropped)  # the pool's tile is buf's now (live stays 1)
            if source is not None and not dead:
                self.emit("dma_copy", "sync", place=place, flush=False, dst=made, src=src)
        finally:
            self.reloading = False

    def fold_pool(self) -> None:
        """Count the tiles of the site that last made one into its peak (called at each tile and
        each `nl.*` result, so that a site's tiles held together, e.g. in a list, are counted)."""
        if self.last_pool is not None:
            self.last_pool.fold()
            self.last_pool = None

    def check_tile(self, memory: str, dtype: dtypes.DType, shape: tuple[int, ...], place: Place) -> None:
        """NKI's tile rules: partition dimension first, at most pmax; a PSUM tile fits one bank."""
        key = (memory, dtype, shape)
        if key in self.tiles_ok:  # the same answer for the same tile (the configuration is fixed)
            return
        cfg = self.config
        if not shape or any(int(s) < 1 for s in shape):
            raise self.fail(f"a tile's shape must be non-empty and positive, not {list(shape)}", place)
        if shape[0] > cfg.pmax:
            raise self.fail(f"a tile's first dimension is its partition dimension, at most {cfg.pmax}"
                            f" (nl.tile_size.pmax); this one is {list(shape)}", place)
        per = dtype.itemsize
        for s in shape[1:]:
            per *= s
        if memory == "psum" and per > cfg.psum_bank_bytes:
            raise self.fail(f"a PSUM tile holds at most {cfg.psum_bank_bytes} bytes per partition (one bank:"
                            f" nl.tile_size.psum_fmax = {cfg.psum_bank_bytes // 4} fp32); {list(shape)} of"
                            f" {dtype.name} needs {per}", place)
        self.tiles_ok.add(key)

    # ---------------------------------------------------------------- pending results
    def result(self, shape: tuple[int, ...], dtype: dtypes.DType, memory: str, mnemonic: str,
               engine: str | None = None, intervals: dict[int, tuple[int, int]] | None = None,
               dst_name: str = "dst", **operands: Any) -> View:
        """A view of a result whose instruction is `mnemonic(**operands)`, its destination chosen later."""
        place = user_place()
        self.fold_pool()
        if memory != "hbm":
            self.check_tile(memory, dtype, shape, place)
        for v in operands.values():
            if isinstance(v, View) and v.pending is not None and v._buf is None:
                self.place(v)
        p = Pending(self, mnemonic, engine, operands, memory, place, dict(intervals or {}), dst_name)
        from ncsim.nki.tensor import row_major

        view = View(None, 0, 0, row_major(shape, memory != "hbm"), dtype, p)
        self.pending.append(weakref.ref(view))
        return view

    def place(self, view: View) -> None:
        """Give a pending view a tile at its creation site and emit its instruction."""
        p = self.take(view)
        reads = {id(v._buf) for v in p.operands.values() if type(v) is View and v._buf is not None}
        view._buf = self.tile(p.memory, view.nc_dtype, view.shape, p.place, reads)
        if p.mnemonic:  # (a result its mask removed has no instruction: language._nothing)
            self.emit_pending(p, view)
        view.pending = None  # its operands' tiles are no longer held through it (buffer policy)

    def take(self, view: View) -> Pending:
        """Take a pending view's instruction, to emit it into a destination of the caller's choice
        (the results made before it are emitted first, so that program order is creation order)."""
        p = view.pending
        assert p is not None and view._buf is None
        while self.pending:
            first = self.pending[0]()
            if first is view:
                break
            if first is None or first._buf is not None:
                self.pending.pop(0)
            else:
                self.place(first)
        self.pending = [r for r in self.pending if r() is not None and r() is not view]
        return p

    def emit_pending(self, p: Pending, dst: View) -> Instruction | None:
        if not p.mnemonic:  # a result its mask removed: nothing to write
            return None
        dst = dst.clip(p.intervals) if p.intervals else dst
        return self.emit(p.mnemonic, p.engine, place=p.place, flush=False, **{p.dst_name: dst}, **p.operands)

    def flush(self) -> None:
        """Emit every pending result into a tile of its own, in the order they were made."""
        while self.pending:
            ref = self.pending[0]
            view = ref()
            if view is None or view._buf is not None or not view.pending.mnemonic:
                self.pending.pop(0)  # (a result its mask removed gets a tile only if read)
                continue
            self.place(view)

    def discard_pending(self) -> None:
        """At the end of a kernel: results nobody used are never computed (dead code)."""
        self.pending = []

    # ---------------------------------------------------------------- instructions
    def emit(self, mnemonic: str, engine: str | None = None, *, place: Place | None = None,
             accumulating: bool = False, flush: bool = True, at: int | None = None, **operands: Any) -> Instruction:
        """Add one instruction, its operands given by NAME (the table's names). Views become access
        patterns, Python numbers constants. Checked by the assembler's rules at the kernel's line.
        Pending results are emitted first (flush=False: the caller has emitted those before it)."""
        place = place or user_place()
        if flush:
            self.flush()
        table = _TABLES.get(mnemonic) or _table(mnemonic)
        spec, names, rows = table
        if not names.issuperset(operands):  # a bug in ncsim.nki, not in the kernel
            raise TypeError(f"{mnemonic} has no operands {sorted(set(operands) - names)} (isa.py: {spec.syntax()})")
        spilled = [v for v in operands.values() if type(v) is View and v._buf is not None and v._buf.spilled]
        spilled = spilled if at is None else []  # (at: reload's store, which reads the spilled tile's old place)
        # the views of SBUF tiles holding data that this instruction overwrites whole (_covers): a
        # spilled one holds nothing it will read (dead), the others may take another buffer (renew)
        whole = []
        if (self.renewing or spilled) and not accumulating and operands.get("dst_rmw_op") is None:
            whole = [v for o in spec.operands if o.role == "out" and type(v := operands.get(o.name)) is View
                     and v._buf is not None and v._buf.stored and _covers(v, operands, o.name)]
        if spilled:
            protect = {id(v._buf) for v in operands.values() if type(v) is View and v._buf is not None}
            dead = {id(v._buf) for v in whole}
            for v in spilled:
                if v._buf.spilled:  # (two operands may view one tile)
                    self.reload(v._buf, place, protect, dead=id(v._buf) in dead)
        try:
            for name, *_ in rows:
                v = operands.get(name)
                if isinstance(v, View) and v.buf.zero_pending and not (accumulating and name == "dst"):
                    self.emit_zeros(v.buf, place)
            if self.renewing:
                for v in whole:
                    if v._buf.stored:  # (a dead spilled tile just placed anew holds nothing)
                        self.renew(v._buf)
            values: dict[str, Any] = {}
            written: list[View] = []
            for name, required, default, is_ap, out in rows:
                if name not in operands:
                    if required:
                        raise TypeError(f"{mnemonic} needs operand {name}")
                    values[name] = default
                    continue
                v = operands[name]
                if isinstance(v, View):
                    values[name] = v.ap()
                    if out:
                        written.append(v)
                elif is_ap:
                    values[name] = None if v is None else constant(v)
                else:
                    values[name] = v
            engine = engine or spec.engines[0]
            given = operands.keys()
            if mnemonic == "dma_copy" and "queue" not in operands:
                values["queue"] = self.auto_queue(engine, values["src"], values["dst"])
                given = given | {"queue"}
            instr = Instruction(spec, engine, values, loc=place.source_loc(), given=frozenset(given))
            # The rules give the same answer for the same instruction (the configuration is fixed):
            # an instruction made again (a tile read in each iteration) is checked once.
            try:
                key: Any = (spec.opcode, engine, *[(type(v), v) for v in values.values()])
                known = key in self.checked
            except TypeError:  # an unhashable operand value: checked every time
                key, known = None, False
            if not known:
                for o in spec.operands:  # each operand's kind (an access pattern's memory, a constant)
                    try:
                        o.kind.check(values[o.name])
                    except FieldError as e:
                        raise AsmError(f"{mnemonic} operand '{o.name}': {e}") from None
                check_instruction(instr, self.config)
                if key is not None:
                    self.checked.add(key)
        except NcsimError as e:
            raise e.at(place.source_loc()) from None
        self.use_tick += 1
        if not self.reloading:
            self.user_tick += 1
        for v in operands.values():
            if type(v) is View and v._buf is not None:
                if self.recording:
                    self.used(v._buf)
                if v._buf.evicted:
                    raise self.fail(f"this uses {v._buf.evicted}, which was evicted: {v.memory.upper()} was full, and"
                                    " ncsim's automatic allocation gave its tile to another (ncsim spills SBUF tiles"
                                    " to HBM, not PSUM ones, which DMA cannot reach). Hold fewer tiles at once, or"
                                    f" place them by hand (ncc.{v.memory}.mod_alloc)", place)
                v._buf.last_use = self.use_tick
        if self.last_writer:
            self.check_lifetimes(spec, operands, place)
        self.record(instr, (self.program.file_index(place.file), place.line, place.col), at)
        # a DMA's copy of HBM data: reload may make it again instead of storing the tile (whether it
        # covers the tile is asked there, when a tile spills, not of every load here)
        src = operands.get("src") if mnemonic == "dma_copy" and not accumulating else None
        copied = (type(src) is View and src._buf is not None and src.memory == "hbm" and src.dynamic is None
                  and operands.get("dst_rmw_op") is None)
        for v in written:
            buf = v.buf
            if buf.entry.name in self.last_writer:
                self.last_writer[buf.entry.name] = (buf, place)
            if buf.memory == "hbm":
                buf.version += 1
            # (the destination's geometry, not the view: a view held by its buffer would keep the
            # buffer reachable, and liveness is Python's)
            buf.source = ((v.partition, v.offset, v.dims, v._dtype, src, src._buf.version)
                          if copied and buf.memory == "sbuf" and v.dynamic is None else None)
            buf.stored = True
            if not accumulating:
                buf.zeroed = False
                buf.matmul_written.clear()
        return instr

    def check_lifetimes(self, spec: isa.InstrSpec, operands: dict[str, Any], place: Place) -> None:
        """Direct allocation's lifetime rule: a logical tile read after another logical tile that
        shares its physical tile wrote it has lost its data (NKI Direct Allocation Developer Guide,
        "Lifetime Conflicts": too few physical tiles for the logical tiles alive at once)."""
        for o in spec.operands:
            v = operands.get(o.name)
            if o.role == "out" or not isinstance(v, View) or v.pending is not None:
                continue
            buf = v.buf
            last = self.last_writer.get(buf.entry.name)
            if last is None or last[0] is None or last[0] is buf or not buf.stored:
                continue
            other = last[1]
            raise self.fail(f"this reads a tile whose data was overwritten: it shares its physical tile"
                            f" ('{buf.entry.name}', partition {buf.entry.partition}, byte {buf.entry.address}) with"
                            f" another logical tile, written since at {os.path.basename(other.file)}:{other.line}."
                            " A direct allocation needs a physical tile for each logical tile alive at once"
                            " (NKI's lifetime rule): give it more tiles (num_free_tiles) or end one tile's use"
                            " before the next is written", place)

    def record(self, instr: Instruction, where: tuple[int, int, int], at: int | None = None) -> None:
        """Add `instr` at the next program-order position (or at `at`, one reserved earlier: a spill's
        store). Batched (the default), instructions of one call site that differ only in their access
        patterns' first partitions and offsets (the iterations of a loop) are gathered into one chunk
        whose differing values are lanes, as the assembler's loop templates are
        (`ncsim.asm.build.Chunk`); `materialise` makes the chunks."""
        if at is not None:
            self.program.chunks.append(Chunk(instr, np.array([at], np.int64), where))
            return
        if self.no_reorder_depth:
            self.in_block.append((self.program.count, self.no_reorder_blocks - 1))
        if not self.batch:
            self.program.add(instr, where)
            return
        skeleton: list[Any] = []
        varying: list[int] = []
        for v in instr.operands.values():
            if type(v) is AccessPattern:
                skeleton.append((v.memory, v.dtype, v.partitions, v.dims))
                varying.append(v.partition)
                varying.append(v.offset)
            else:
                skeleton.append((type(v), v))
        try:
            key = (instr.spec.opcode, instr.engine, where, instr.given, tuple(skeleton))
            site = self.sites.get(key)
        except TypeError:  # an unhashable operand value: a chunk of its own
            key, site = object(), None
        if site is None:
            site = self.sites[key] = _Site(instr, where)
        site.positions.append(self.program.count)
        site.varying.append(varying)
        self.program.count += 1

    def materialise(self) -> None:
        """The gathered sites as the program's chunks (`record`): per site, one instruction whose
        varying partitions and offsets are `Lanes`, at the program-order positions of its lanes."""
        for site in self.sites.values():
            instr = site.instr
            if len(site.positions) > 1:
                table = np.array(site.varying, np.int64)
                operands = dict(instr.operands)
                j = 0
                for name, v in instr.operands.items():
                    if type(v) is AccessPattern:
                        partition, offset = lanes(table[:, j]), lanes(table[:, j + 1])
                        j += 2
                        if isinstance(partition, Lanes) or isinstance(offset, Lanes):
                            operands[name] = AccessPattern(v.memory, v.dtype, partition, v.partitions, offset, v.dims)
                instr = Instruction(instr.spec, instr.engine, operands, loc=instr.loc, given=instr.given)
            self.program.chunks.append(Chunk(instr, np.array(site.positions, np.int64), site.where))
        self.sites = {}
        if self.holes:  # places reserved for spills whose tiles were never used again: closed up
            holes = np.array(sorted(self.holes), np.int64)
            for chunk in self.program.chunks:
                chunk.positions = (chunk.positions - np.searchsorted(holes, chunk.positions)).astype(np.int32)
            self.program.count -= len(holes)
            self.holes = set()
            self.in_block = [(g - int(np.searchsorted(holes, g)), b) for g, b in self.in_block]

    def no_reorder(self, enter: bool) -> None:
        """A no_reorder block begins (enter) or ends: the instructions made in the outermost one keep
        their program order (ncsim.nki.schedule)."""
        if enter:
            if not self.no_reorder_depth:
                self.no_reorder_blocks += 1
            self.no_reorder_depth += 1
        else:
            self.no_reorder_depth -= 1

    def blocks(self) -> np.ndarray:
        """Each program-order instruction's no_reorder block, -1 outside any."""
        out = np.full(self.program.count, -1, np.int64)
        if self.in_block:
            at = np.array(self.in_block, np.int64)
            out[at[:, 0]] = at[:, 1]
        return out

    def emit_zeros(self, buf: Buffer, place: Place) -> None:
        """The memset that nl.zeros in PSUM deferred (an nc_matmul that overwrites it all needs none)."""
        buf.zero_pending = False
        self.emit("memset", "vector", place=place, flush=False, dst=buf.whole(), value=constant(0.0))
        buf.zeroed = True

    def auto_queue(self, engine: str, src: AccessPattern, dst: AccessPattern) -> int:
        """The assembler's rule (Assembler.auto_queue): one DMA queue per issuing engine and direction."""
        return auto_queue(self.queues, self.config, engine, src, dst)

    # ---------------------------------------------------------------- driving a kernel
    def run_grid(self, func: Callable[..., Any], args: tuple, kwargs: dict, grid: tuple[int, ...]) -> Any:
        global _current
        if _current is not None:
            raise AsmError("an NKI kernel cannot call another kernel while it is traced")
        self.grid = grid
        result = None
        _current = self
        _LOCS.clear()  # a kernel's source lines are read again for each trace
        try:
            for pid in itertools.product(*(range(g) for g in grid)) if grid else [()]:
                self.program_id = pid
                self.shared_seen = 0
                result = func(*args, **kwargs)
                self.flush()
        except AsmError as e:
            if e.loc is not None:
                raise
            # an error raised without a place (indexing, reshape): at the kernel's line that called ncsim.nki
            raise AsmError(e.message, _kernel_place(e.__traceback__).source_loc(), notes=e.notes) from None
        finally:
            _current = None
            self.discard_pending()
        return result

    def shared_hbm(self, dtype: dtypes.DType, shape: tuple[int, ...], place: Place) -> Buffer:
        """nl.shared_hbm tensors are shared by the SPMD instances: the n-th one an instance makes is
        the n-th one the first instance made."""
        n = self.shared_seen
        self.shared_seen += 1
        if n < len(self.shared):
            buf = self.shared[n]
            if buf.entry.shape != shape or buf.dtype != dtype:
                raise self.fail(f"SPMD instances disagree on shared_hbm tensor {n}: {list(buf.entry.shape)}"
                                f" {buf.dtype.name} and {list(shape)} {dtype.name}", place)
            return buf
        buf = self.hbm_tensor("hbm", dtype, shape, "scratch")
        self.shared.append(buf)
        return buf

    def finish(self, outputs: list[Buffer], inouts: list[Buffer]) -> None:
        """Give the HBM tensors their roles and names in the object's tensor table, and the program
        its chunks (materialise)."""
        self.materialise()
        out_ids = {id(b) for b in outputs}
        in_ids = {id(b) for b in inouts}
        for buf in self.hbm:
            kind = buf.entry.kind
            if id(buf) in out_ids:
                kind = "inout" if kind == "in" else "out"
            elif id(buf) in in_ids:
                kind = "inout"
            buf.entry = dataclasses.replace(buf.entry, kind=kind)
            self.program.tensors[buf.entry.name] = buf.entry


def _covers(v: View, operands: dict[str, Any], name: str) -> bool:
    """Whether the write of operand `name`, view `v`, of an SBUF tile covers every byte of the tile,
    each once, at offsets known while tracing, and no other operand of the instruction views the tile
    (an in-place update reads what it writes)."""
    buf = v._buf
    if buf is None or buf.entry.memory != "sbuf" or v.dynamic is not None:
        return False
    if any(type(u) is View and u._buf is buf for n, u in operands.items() if n != name):
        return False
    parts, per = buf.extent()
    if v.partition != 0 or v.offset != 0 or v.dims[0][1] != parts:
        return False
    span = 1
    for step, count in sorted((s, c) for s, c in v.dims[1:] if c != 1):
        if step != span:
            return False
        span *= count
    return span * v._dtype.itemsize == per * buf.dtype.itemsize


def constant(v: Any) -> Immediate:
    """A Python or numpy number as an instruction's constant, as the assembler makes it
    (ncsim.asm.fields.const_of: floats as their nearest fp32, integers and bools as int32, uint32
    above 2**31 - 1)."""
    if isinstance(v, Immediate):
        return v
    if isinstance(v, (int, np.integer, np.bool_)):
        number: int | float = int(v)
    elif isinstance(v, (float, np.floating)):
        number = float(v)
    else:
        raise AsmError(f"expected a tile or a number, not {type(v).__name__}")
    try:
        return const_of(number)
    except FieldError as e:
        raise AsmError(str(e)) from None
