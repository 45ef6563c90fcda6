"""The assembler's flat-array back end (`ncsim.asm.build`): encoding a chunk's lanes in batches gives
the bytes that encoding them all at once gives."""

from __future__ import annotations

from ncsim.asm import build
from ncsim.asm.assembler import assemble
from ncsim.asm.elf import write_elf

LOOPS = """
.hbm x f32[256, 64] in
.hbm y f32[256, 64] out
.sbuf a f32[128, 4, 64]
.sbuf b f32[128, 64]
.for i in 0..50
  dma_copy a[:, i % 4, :], x[(i % 2) * 128 : (i % 2) * 128 + 128, :]
  tensor_scalar b[:, 0 : i % 7 + 1], a[:, i % 4, 0 : i % 7 + 1], multiply, i
  activation a[:, (i + 1) % 4, :], relu, b
  dma_copy y[(i % 2) * 128 : (i % 2) * 128 + 128, :], a[:, (i + 1) % 4, :], engine=gpsimd
.end
"""


def test_encoding_in_batches_of_lanes_gives_the_same_object(monkeypatch):
    whole = write_elf(assemble(LOOPS, "loops.s"))
    monkeypatch.setattr(build, "BATCH", 3)  # 50 lanes in batches of 3, the last one short
    assert write_elf(assemble(LOOPS, "loops.s")) == whole
