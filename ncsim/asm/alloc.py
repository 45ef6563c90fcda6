"""Placement of declared tensors that the program gives no address.

SBUF and PSUM tiles are placed in byte offsets inside each partition, starting at partition 0,
one after another in declaration order, each aligned to `ALIGN` bytes. A PSUM tile of at most one
bank (2 KiB per partition) never straddles a bank boundary (a matmul output must lie in one bank);
a larger one starts on a bank boundary. HBM tensors are placed one after another from address 0.
Tensors placed by hand (`@...`) are kept where they are, and automatic placement goes around them;
one placed by hand may alias another placed by hand, but not one placed automatically.
When a tile does not fit, the error gives the totals.
"""

from __future__ import annotations

from dataclasses import replace

from ncsim.asm.objfile import TensorEntry
from ncsim.config import Config
from ncsim.errors import AsmError

ALIGN = 64  # bytes; keeps every tile's rows on 64-byte boundaries (whole fp32 vectors of 16)


def per_partition_bytes(t: TensorEntry) -> int:
    """Bytes in each partition (on chip); the whole size (HBM)."""
    if t.memory == "hbm":
        return t.nbytes
    return t.nbytes // t.shape[0]


class Allocator:
    def __init__(self, config: Config):
        self.config = config
        # per memory: [(start, end, name)] of the byte ranges taken (per partition on chip)
        self.taken: dict[str, list[tuple[int, int, str]]] = {"sbuf": [], "psum": [], "hbm": []}
        self.automatic: set[str] = set()
        # per memory, the sizes first_fit found no room for since the memory last gave a place back
        # (taking more never makes room): `fits` answers those without searching again
        self.full: dict[str, set[int]] = {"sbuf": set(), "psum": set(), "hbm": set()}

    def capacity(self, memory: str) -> int:
        return {"sbuf": self.config.sbuf_usable_bytes, "psum": self.config.psum_partition_bytes,
                "hbm": self.config.hbm_bytes}[memory]

    def reserve(self, t: TensorEntry) -> None:
        self.taken[t.memory].append((t.address, t.address + per_partition_bytes(t), t.name))

    def reserve_explicit(self, t: TensorEntry) -> None:
        """A tensor placed by hand. It may alias another placed by hand (a deliberate view), but not
        one placed automatically: that overlap would be an accident of declaration order."""
        start, end = t.address, t.address + per_partition_bytes(t)
        for s, e, name in self.taken[t.memory]:
            if name in self.automatic and start < e and s < end:
                raise AsmError(f"'{t.name}' at byte {start} overlaps '{name}' (bytes {s}..{e}), which was placed"
                               " automatically: declare tensors placed by hand first, or place both by hand")
        self.reserve(t)

    def release(self, t: TensorEntry) -> None:
        """Give back the place of tensor `t` (the NKI front end's buffers given up under pressure)."""
        self.taken[t.memory] = [r for r in self.taken[t.memory] if r[2] != t.name]
        self.automatic.discard(t.name)
        self.full[t.memory].clear()

    def place(self, t: TensorEntry) -> TensorEntry:
        size = per_partition_bytes(t)
        addr = self.first_fit(t.memory, size)
        placed = replace(t, partition=0, address=addr)
        self.reserve(placed)
        self.automatic.add(t.name)
        return placed

    def fits(self, memory: str, size: int) -> bool:
        """False when a tile of `size` bytes (per partition) is known not to fit: first_fit found no room
        for it and nothing was given back since (the NKI front end asks before trying, to skip the
        search and the error's text when it has a buffer to fall back on)."""
        return size not in self.full[memory]

    def first_fit(self, memory: str, size: int) -> int:
        bank = self.config.psum_bank_bytes
        addr = 0
        for start, end, _ in sorted(self.taken[memory]):
            if addr + size <= start and self.bank_ok(memory, addr, size):
                break
            addr = max(addr, self.align(memory, end, size))
        addr = self.align(memory, addr, size)
        if addr + size > self.capacity(memory):
            self.full[memory].add(size)
            used = sum(e - s for s, e, _ in self.taken[memory])
            unit = "per partition " if memory != "hbm" else ""
            tiles = ", ".join(f"{n} {e - s}" for s, e, n in self.taken[memory])
            raise AsmError(
                f"{memory} is full: this tensor needs {size} bytes {unit}and {used} of the {self.capacity(memory)}"
                f" bytes {unit}are taken" + (f" (PSUM tiles stay inside {bank}-byte banks)" if memory == "psum" else ""),
                notes=(f"taken: {tiles}",) if tiles else ())
        return addr

    def align(self, memory: str, addr: int, size: int) -> int:
        addr = (addr + ALIGN - 1) // ALIGN * ALIGN
        if memory == "psum" and not self.bank_ok(memory, addr, size):
            bank = self.config.psum_bank_bytes
            addr = (addr + bank - 1) // bank * bank
        return addr

    def bank_ok(self, memory: str, addr: int, size: int) -> bool:
        if memory != "psum":
            return addr % ALIGN == 0
        bank = self.config.psum_bank_bytes
        if size <= bank:
            return addr // bank == (addr + size - 1) // bank
        return addr % bank == 0
