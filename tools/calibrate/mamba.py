"""The fused Mamba kernels of the NKI tutorial "Fused Mamba" (aws-neuron-sdk,
general/nki/tutorials/fused_mamba.rst), written here from the steps the tutorial documents, fp32:

- v1 (the "Initial NKI Kernel"): loops batch, state, channel tile (128 channels); in the inner
  loop delta and u of the tile are loaded, exp(delta * A) on Scalar (activation with a per-channel
  scale), delta * u * B on Vector (two tensor_tensor, B broadcast over the partitions),
  tensor_tensor_scan, * C, and += into an accumulator of all channel tiles; the accumulator is
  stored per channel tile after the state loop;
- v2 ("loop reordering" and "loop fusion"): the channel-tile loop outside the state loop, delta
  and u loaded once per channel tile, the accumulator per channel tile, stored at its end;
- v3 ("tiling seq_len"): v2 with the sequence cut into 512-element tiles as the innermost loop,
  the scan carried from tile to tile by its `initial` (the previous tile's last column).
"""

from __future__ import annotations

import numpy as np

import ncsim.nki.isa as nisa
import ncsim.nki.language as nl
from ncsim import nki
from ncsim.nki.typing import tensor

P = 128  # nl.tile_size.pmax: channels per tile
SEQ_TILE = 512  # v3's seq_len tile (the tutorial's seq_len_fsize)


def _step(delta_i, u_i, a_i, b_i, c_i, cols, initial=0):
    """Steps 1-5 of the tutorial on one channel tile and `cols` sequence elements: the scan and C * scan."""
    delta_a = nisa.activation(op=nl.exp, data=delta_i, scale=a_i)
    delta_u = nisa.tensor_tensor(delta_i, u_i, op=nl.multiply)
    delta_bu = nisa.tensor_tensor(delta_u, b_i.broadcast_to((P, cols)), op=nl.multiply)
    scan = nisa.tensor_tensor_scan(delta_a, delta_bu, initial=initial, op0=np.multiply, op1=np.add)
    return scan, nisa.tensor_tensor(scan, c_i.broadcast_to((P, cols)), op=nl.multiply)


@nki.jit
def mamba_v1(delta, u, a, b, c):
    batch, channels, seq = delta.shape
    states = a.shape[1]
    tiles = channels // P
    out = nl.ndarray((batch, channels, seq), dtype=delta.dtype, buffer=nl.shared_hbm)
    for ib in nl.affine_range(batch):
        acc = nl.zeros((tiles, nl.par_dim(P), seq), dtype=delta.dtype)
        for s in nl.affine_range(states):
            for t in nl.affine_range(tiles):
                rows = slice(t * P, (t + 1) * P)
                delta_i = nl.load(delta[ib, rows, 0:seq])
                u_i = nl.load(u[ib, rows, 0:seq])
                a_i = nl.load(a[rows, s])
                b_i = nl.load(b[ib, s:s + 1, 0:seq])
                c_i = nl.load(c[ib, s:s + 1, 0:seq])
                _, scan_c = _step(delta_i, u_i, a_i, b_i, c_i, seq)
                acc[t, 0:P, 0:seq] += scan_c
        for t in nl.affine_range(tiles):
            nl.store(out[ib, t * P:(t + 1) * P, 0:seq], acc[t, 0:P, 0:seq])
    return out


@nki.jit
def mamba_v2(delta, u, a, b, c):
    batch, channels, seq = delta.shape
    states = a.shape[1]
    out = nl.ndarray((batch, channels, seq), dtype=delta.dtype, buffer=nl.shared_hbm)
    for ib in nl.affine_range(batch):
        for t in nl.affine_range(channels // P):
            rows = slice(t * P, (t + 1) * P)
            acc = nl.zeros((P, seq), dtype=delta.dtype)
            delta_i = nl.load(delta[ib, rows, 0:seq])
            u_i = nl.load(u[ib, rows, 0:seq])
            for s in nl.affine_range(states):
                a_i = nl.load(a[rows, s])
                b_i = nl.load(b[ib, s:s + 1, 0:seq])
                c_i = nl.load(c[ib, s:s + 1, 0:seq])
                _, scan_c = _step(delta_i, u_i, a_i, b_i, c_i, seq)
                acc[0:P, 0:seq] += scan_c
            nl.store(out[ib, rows, 0:seq], acc[0:P, 0:seq])
    return out


@nki.jit
def mamba_v3(delta, u, a, b, c):
    batch, channels, seq = delta.shape
    states = a.shape[1]
    out = nl.ndarray((batch, channels, seq), dtype=delta.dtype, buffer=nl.shared_hbm)
    for ib in nl.affine_range(batch):
        for t in nl.affine_range(channels // P):
            rows = slice(t * P, (t + 1) * P)
            acc = nl.zeros((P, seq), dtype=delta.dtype)
            delta_i = nl.load(delta[ib, rows, 0:seq])
            u_i = nl.load(u[ib, rows, 0:seq])
            for s in nl.affine_range(states):
                a_i = nl.load(a[rows, s])
                carry = nl.zeros((P, 1), dtype=delta.dtype)
                for j in nl.sequential_range(seq // SEQ_TILE):
                    cols = slice(j * SEQ_TILE, (j + 1) * SEQ_TILE)
                    b_i = nl.load(b[ib, s:s + 1, cols])
                    c_i = nl.load(c[ib, s:s + 1, cols])
                    scan, scan_c = _step(delta_i[0:P, cols], u_i[0:P, cols], a_i, b_i, c_i, SEQ_TILE, carry)
                    carry = scan[0:P, SEQ_TILE - 1:SEQ_TILE]
                    acc[0:P, cols] += scan_c
            nl.store(out[ib, rows, 0:seq], acc[0:P, 0:seq])
    return out


def _args(channels: int, seq: int, states: int = 16, batch: int = 1) -> tuple:
    f32 = nl.float32
    return (tensor[[batch, channels, seq], f32], tensor[[batch, channels, seq], f32], tensor[[channels, states], f32],
            tensor[[batch, states, seq], f32], tensor[[batch, states, seq], f32])


CASES = {
    "v1_256": lambda: (mamba_v1, _args(256, 512)),
    "v1_4096": lambda: (mamba_v1, _args(4096, 512)),
    "v2_4096": lambda: (mamba_v2, _args(4096, 512)),
    "v3_4096_1024": lambda: (mamba_v3, _args(4096, 1024)),
    "v3_4096_2048": lambda: (mamba_v3, _args(4096, 2048)),
    "v3_4096_4096": lambda: (mamba_v3, _args(4096, 4096)),
    # the tutorial's table of latencies by seq_len: v2 to 5120 (from 4096 its tiles no longer fit SBUF
    # and ncsim spills), v3 at 512 and 3072, and both at 8192, the length the tutorial profiles (v2 at
    # 6144 and 7168 and v3 at 5120 to 7168 left out for the suite's time: docs/nki.md lists ncsim's figures)
    "v2_4096_1024": lambda: (mamba_v2, _args(4096, 1024)),
    "v2_4096_2048": lambda: (mamba_v2, _args(4096, 2048)),
    "v2_4096_3072": lambda: (mamba_v2, _args(4096, 3072)),
    "v2_4096_4096": lambda: (mamba_v2, _args(4096, 4096)),
    "v2_4096_5120": lambda: (mamba_v2, _args(4096, 5120)),
    "v3_4096_512": lambda: (mamba_v3, _args(4096, 512)),
    "v3_4096_3072": lambda: (mamba_v3, _args(4096, 3072)),
    "v2_4096_8192": lambda: (mamba_v2, _args(4096, 8192)),
    "v3_4096_8192": lambda: (mamba_v3, _args(4096, 8192)),
}
