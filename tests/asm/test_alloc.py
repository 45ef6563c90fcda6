"""Automatic placement of declared tensors: first fit in declaration order, 64-byte aligned, around the
tiles placed by hand, PSUM tiles inside banks, and an error with the totals when memory is full.

The reference is the rule itself, checked by brute force: each tile without an address goes to the
lowest 64-byte-aligned offset where it overlaps nothing placed before it (by hand or automatically),
fits in the memory and, in PSUM, lies inside one bank (at most a bank's bytes) or starts on a bank
boundary (more than a bank).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ncsim import dtypes
from ncsim.asm.assembler import Assembler, assemble
from ncsim.config import DEFAULT, Config, load_config
from ncsim.errors import AsmError

ALIGN = 64
KiB = 1024


def placements(src: str, config: Config = DEFAULT) -> dict[str, tuple[int, int]]:
    """(first partition, byte offset) of every declared tensor."""
    asm = Assembler(config)
    asm.assemble(src, "alloc.s")
    return {name: (t.partition, t.address) for name, t in asm.program.tensors.items()}


def capacity(memory: str, config: Config) -> int:
    return config.sbuf_usable_bytes if memory == "sbuf" else config.psum_partition_bytes


def in_banks(memory: str, addr: int, size: int, config: Config) -> bool:
    """PSUM: a tile of at most a bank lies inside one bank; a larger one starts on a bank boundary."""
    if memory != "psum":
        return True
    bank = config.psum_bank_bytes
    return addr // bank == (addr + size - 1) // bank if size <= bank else addr % bank == 0


def reference_place(taken: list[tuple[int, int]], memory: str, size: int, config: Config) -> int | None:
    for addr in range(0, capacity(memory, config) - size + 1, ALIGN):
        if in_banks(memory, addr, size, config) and all(addr + size <= s or e <= addr for s, e in taken):
            return addr
    return None


# --- the property ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Decl:
    name: str
    memory: str
    dtype: dtypes.DType
    partitions: int
    elements: int  # per partition
    at: tuple[int, int] | None  # placed by hand: (partition, offset)

    @property
    def size(self) -> int:
        return self.elements * self.dtype.itemsize

    def line(self) -> str:
        where = "" if self.at is None else f" @{self.at[0]}:{self.at[1]}"
        return f".{self.memory} {self.name} {self.dtype.short}[{self.partitions}, {self.elements}]{where}"


CONFIGS = {
    "default": DEFAULT,
    "reserved 64 KiB": load_config(sets=["sbuf_reserved_bytes=65536"]),
    "8 KiB of PSUM": load_config(sets=["psum_partition_bytes=8192"]),
    "4 PSUM banks": load_config(sets=["psum_num_banks=4"]),
}


@st.composite
def declarations(draw, config: Config) -> list[Decl]:
    """A few tiles placed by hand first, then tiles placed automatically; sizes such that memory
    sometimes runs out."""
    decls = []
    n_by_hand = draw(st.integers(0, 3))
    for k in range(draw(st.integers(1, 8))):
        memory = draw(st.sampled_from(["sbuf", "psum"]))
        dt = draw(st.sampled_from(dtypes.DTYPES))
        cap = capacity(memory, config)
        size = draw(st.integers(1, cap // 2) | st.sampled_from([k * cap // 16 - 3 for k in range(1, 9)])
                    | st.sampled_from([ALIGN, config.psum_bank_bytes, config.psum_bank_bytes + 4]))
        elements = max(1, size // dt.itemsize)
        partitions = draw(st.integers(1, 128))
        at = None
        if k < n_by_hand:
            room = capacity(memory, config) - elements * dt.itemsize
            at = (draw(st.integers(0, 128 - partitions)), draw(st.integers(0, room)))
        decls.append(Decl(f"t{k}", memory, dt, partitions, elements, at))
    return decls


@pytest.mark.parametrize("config_name", CONFIGS)
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_placement_is_the_lowest_aligned_free_offset(config_name, data):
    config = CONFIGS[config_name]
    decls = data.draw(declarations(config))
    src = "\n".join(d.line() for d in decls) + "\n"
    taken: dict[str, list[tuple[int, int]]] = {"sbuf": [], "psum": []}
    expected: dict[str, tuple[int, int]] = {}
    for lineno, d in enumerate(decls, start=1):
        if d.at is not None:
            addr = d.at[1]
        else:
            addr = reference_place(taken[d.memory], d.memory, d.size, config)
            if addr is None:
                with pytest.raises(AsmError) as err:
                    assemble(src, "alloc.s", config=config)
                used = sum(e - s for s, e in taken[d.memory])
                cap = capacity(d.memory, config)
                assert (f"{d.memory} is full: this tensor needs {d.size} bytes per partition and {used} of the"
                        f" {cap} bytes per partition are taken") in err.value.message
                assert (err.value.loc.line, err.value.loc.col) == (lineno, len(f".{d.memory} ") + 1)
                return
        taken[d.memory].append((addr, addr + d.size))
        expected[d.name] = (0, addr) if d.at is None else d.at
    got = placements(src, config)
    assert got == expected
    # the rules, stated once more directly
    for d in decls:
        if d.at is None:
            addr = got[d.name][1]
            assert addr % ALIGN == 0
            assert addr + d.size <= capacity(d.memory, config)
            assert in_banks(d.memory, addr, d.size, config)
            for other in decls:
                if other is not d and other.memory == d.memory:
                    o = got[other.name][1]
                    assert addr + d.size <= o or o + other.size <= addr, (d, other)


# --- examples ----------------------------------------------------------------------------------

def test_sbuf_tiles_go_one_after_another_in_declaration_order():
    got = placements(".sbuf a f32[128, 3]\n.sbuf b bf16[64, 40]\n.sbuf c u8[1, 1]\n.sbuf d f32[128, 16]\n")
    assert got == {"a": (0, 0), "b": (0, 64), "c": (0, 192), "d": (0, 256)}  # b takes 80 bytes


def test_hbm_tensors_go_one_after_another_from_zero():
    got = placements(".hbm fixed u8[100] in @0\n.hbm x u8[3] in\n.hbm y f32[5] out\n.hbm z bf16[2, 3] scratch\n")
    assert got == {"fixed": (0, 0), "x": (0, 128), "y": (0, 192), "z": (0, 256)}


def test_psum_tiles_stay_inside_banks():
    got = placements(
        ".psum a f32[128, 384]\n"   # 1536 B at 0
        ".psum b f32[128, 256]\n"   # 1024 B: 1536..2560 would straddle the first bank -> 2048
        ".psum c f32[128, 600]\n"   # 2400 B, more than a bank: on a bank boundary -> 4096
        ".psum d f32[128, 128]\n"   # 512 B: fits the gap left in the first bank
        ".psum e f32[128, 512]\n")  # a whole bank: the next free one
    assert got == {"a": (0, 0), "b": (0, 2048), "c": (0, 4096), "d": (0, 1536), "e": (0, 8192)}


def test_tiles_placed_by_hand_are_avoided():
    got = placements(
        ".sbuf fixed f32[128, 16] @0:64\n"  # bytes 64..128
        ".sbuf other f32[32, 16] @96:192\n"  # other partitions, but the same offsets are kept free
        ".sbuf a f32[128, 16]\n"             # fits before `fixed`
        ".sbuf b f32[128, 16]\n"             # not between: 128..192 is free, 192..256 is `other`
        ".sbuf c f32[128, 32]\n")            # 128 B: not in 128..192 -> after `other`
    assert got == {"fixed": (0, 64), "other": (96, 192), "a": (0, 0), "b": (0, 128), "c": (0, 256)}


def test_a_tile_placed_by_hand_later_is_avoided_too():
    src = ".sbuf a f32[128, 16]\n.sbuf fixed f32[128, 16] @0:0\n"
    try:
        got = placements(src)
    except AsmError:
        return  # refusing the overlap is fine as well
    assert got["a"][1] >= 64, got


def test_full_sbuf_gives_the_totals():
    with pytest.raises(AsmError) as err:
        assemble(".sbuf a f32[128, 25000]\n.sbuf b u8[128, 80225]\n", "full.s")
    e = err.value
    assert e.message == ("sbuf is full: this tensor needs 80225 bytes per partition and 100000 of the 180224"
                         " bytes per partition are taken")
    assert e.notes == ("taken: a 100000",)
    assert (e.loc.file, e.loc.line, e.loc.col) == ("full.s", 2, 7)
    placements(".sbuf a f32[128, 25000]\n.sbuf b u8[128, 80192]\n")  # exactly full is fine (100032 + 80192)


def test_usable_sbuf_is_176_kib_per_partition():
    placements(".sbuf a u8[128, 180224]\n")
    with pytest.raises(AsmError, match="needs 180225 bytes per partition and 0 of the 180224 bytes"):
        assemble(".sbuf a u8[128, 180225]\n")


def test_full_psum_gives_the_totals():
    src = "".join(f".psum b{k} f32[128, 512]\n" for k in range(8))
    assert [a for _, a in placements(src).values()] == [2048 * k for k in range(8)]
    with pytest.raises(AsmError) as err:
        assemble(src + ".psum more f32[128, 1]\n")
    assert err.value.message == ("psum is full: this tensor needs 4 bytes per partition and 16384 of the 16384"
                                 " bytes per partition are taken (PSUM tiles stay inside 2048-byte banks)")
    assert err.value.loc.line == 9
    with pytest.raises(AsmError, match="needs 16388 bytes per partition and 0 of the 16384"):
        assemble(".psum big f32[128, 4097]\n")


def test_configuration_moves_the_limits():
    tile = ".sbuf a u8[128, 163841]\n"
    placements(tile)  # fits the default 176 KiB
    smaller = load_config(sets=["sbuf_reserved_bytes=32768"])
    assert smaller.sbuf_usable_bytes == 160 * KiB
    with pytest.raises(AsmError, match="needs 163841 bytes per partition and 0 of the 163840 bytes"):
        assemble(tile, config=smaller)
    placements(".sbuf a u8[128, 163840]\n", smaller)
    larger = load_config(sets=["sbuf_reserved_bytes=0"])
    placements(".sbuf a u8[128, 196608]\n", larger)
    with pytest.raises(AsmError):
        assemble(".sbuf a u8[128, 196608]\n")


def test_configuration_moves_the_psum_banks():
    src = ".psum a f32[128, 192]\n.psum b f32[128, 128]\n"  # 768 B, then 512 B
    assert placements(src) == {"a": (0, 0), "b": (0, 768)}
    small_banks = load_config(sets=["psum_partition_bytes=8192"])  # 8 banks of 1 KiB
    assert placements(src, small_banks) == {"a": (0, 0), "b": (0, 1024)}
    with pytest.raises(AsmError, match=r"0 of the 8192 bytes per partition are taken \(PSUM tiles stay inside"
                                       r" 1024-byte banks\)"):
        assemble(".psum a f32[128, 2049]\n", config=small_banks)
