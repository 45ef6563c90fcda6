"""MemoryState fills its memories lazily (on chip: the leading bytes of each partition in use; HBM: a
declared tensor when first reached, never when first written whole). Against a plain model that fills
every byte with the sentinel up front, any sequence of writes and reads gives the same bytes and the
same counts of unwritten elements."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ncsim import dtypes
from ncsim.asm.objfile import TensorEntry
from ncsim.config import Config
from ncsim.memory.access import AccessPattern, Memory
from ncsim.memory.state import SENTINEL_BYTE, MemoryState

U8 = dtypes.by_name("uint8")
F32 = dtypes.by_name("float32")
CONFIG = Config()
P = CONFIG.pmax
ROW = CONFIG.sbuf_partition_bytes
PSUM_ROW = CONFIG.psum_partition_bytes

# Two HBM tensors that overlap (an alias), one that touches the second, one apart: three segments' worth
# of merging, and a whole-tensor write of one of an overlapping pair.
HBM = [TensorEntry("a", "hbm", U8, (4096,), 0, 0, "in"),
       TensorEntry("b", "hbm", U8, (2048,), 0, 2048, "inout"),
       TensorEntry("c", "hbm", U8, (1024,), 0, 4096, "out"),
       TensorEntry("d", "hbm", F32, (256,), 0, 65536, "in")]
TILE = TensorEntry("t", "sbuf", F32, (P, 64), 0, 1024, "tile")


def _model() -> dict[Memory, tuple[np.ndarray, np.ndarray]]:
    """Every byte filled up front: (data, written) per memory, HBM by address."""
    def mem(shape):
        return np.full(shape, SENTINEL_BYTE, np.uint8), np.zeros(shape, np.bool_)
    return {Memory.SBUF: mem((P, ROW)), Memory.PSUM: mem((P, PSUM_ROW)), Memory.HBM: mem((65536 + 1024,))}


def _bytes(model, ap: AccessPattern) -> tuple[np.ndarray, np.ndarray]:
    data, written = model[ap.memory]
    offs = ap.offset + ap.element_offsets().reshape(-1)
    if ap.memory == Memory.HBM:
        return data[offs], written[offs]
    rows = slice(ap.partition, ap.partition + ap.partitions)
    return data[rows][:, offs], written[rows][:, offs]


def _patterns():
    on_chip = st.tuples(st.sampled_from([(Memory.SBUF, ROW), (Memory.PSUM, PSUM_ROW)]), st.integers(0, P - 1),
                        st.integers(1, 8), st.integers(0, 1 << 20), st.integers(1, 64), st.integers(1, 3)).map(
        lambda t: AccessPattern(t[0][0], U8, min(t[1], P - t[2]), t[2], t[3] % (t[0][1] - t[4] * t[5]),
                                ((t[5], t[4]),)))
    whole = st.sampled_from([AccessPattern(Memory.HBM, t.dtype, 0, 0, t.address, ((1, t.shape[0]),)) for t in HBM])
    part = st.tuples(st.sampled_from(HBM[:3]), st.integers(0, 4095), st.integers(1, 300)).map(
        lambda t: AccessPattern(Memory.HBM, U8, 0, 0, t[0].address + t[1] % (t[0].nbytes - min(t[2], t[0].nbytes) + 1),
                                ((1, min(t[2], t[0].nbytes)),)))
    return st.one_of(on_chip, whole, part)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), _patterns(), st.integers(0, 255)), min_size=1, max_size=12),
       st.sampled_from([None, {Memory.SBUF: 0}, {Memory.SBUF: 4096, Memory.PSUM: 64}]))
def test_lazy_fill_matches_filling_everything_up_front(ops, extents):
    mem = MemoryState(CONFIG, [*HBM, TILE], extents)
    model = _model()
    for write, ap, value in ops:
        if write:
            raw = np.full(ap.shape, value, ap.dtype.storage)
            mem.write(ap, raw)
            data, written = model[ap.memory]
            offs = ap.offset + ap.element_offsets().reshape(-1) * ap.dtype.itemsize
            for b in range(ap.dtype.itemsize):
                if ap.memory == Memory.HBM:
                    data[offs + b] = raw.view(np.uint8).reshape(-1, ap.dtype.itemsize)[:, b]
                    written[offs + b] = True
                else:
                    at = np.ix_(np.arange(ap.partition, ap.partition + ap.partitions), offs + b)
                    data[at] = raw.view(np.uint8).reshape(ap.partitions, -1, ap.dtype.itemsize)[..., b]
                    written[at] = True
        got = mem.read(ap).view(np.uint8).reshape(-1)
        want, want_written = _bytes(model, AccessPattern(ap.memory, U8, ap.partition, ap.partitions, ap.offset,
                                                         ((1, ap.byte_span()[1] - ap.offset),)) if ap.dtype.itemsize > 1 else ap)
        if ap.dtype.itemsize == 1:
            assert np.array_equal(got, want.reshape(-1))
            assert mem.unwritten(ap) == int(np.count_nonzero(~want_written))
        else:  # whole f32 tensor: compare its bytes in order
            assert np.array_equal(got, want.reshape(-1))
            assert mem.unwritten(ap) == int(np.count_nonzero(~want_written.reshape(-1, 4).all(axis=1)))


def test_a_kernel_using_a_few_kib_touches_no_more_of_sbuf():
    """Only the bytes in use are filled when the state is made; a pattern past them fills up to its end."""
    mem = MemoryState(CONFIG, [TILE], {Memory.SBUF: 2048})
    assert mem._filled[Memory.SBUF] == 2048 and mem._filled[Memory.PSUM] == 0
    far = AccessPattern(Memory.SBUF, F32, 3, 2, ROW - 64, ((1, 16),))
    assert np.isnan(mem.read(far)).all() and mem.unwritten(far) == 32
    assert mem._filled[Memory.SBUF] == ROW
