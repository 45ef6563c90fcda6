"""A timed run as a picture (PNG, SVG or PDF): what the Perfetto trace shows, for people who would
rather look.

    from ncsim.runtime.timeline import write_timeline
    write_timeline(result, "giou.png", obj)        # result = time_program(obj, ...)

One row per engine (Tensor, Vector, Scalar, GpSimd, Sync) and one per DMA queue in use; time in
microseconds. On an engine's row each instruction is a bar from its start to its end, coloured by
mnemonic; under it, thin bars show how long it waited on semaphores (from when its engine was free
for it until its waits held: grey) and on a port (from then until it started: red). Instructions
that take no engine time (dma_copy's issue, sem_wait, sem_signal) are thin ticks in the upper part
of the row. On a DMA queue's row each dma_copy is a bar from its first piece's start to its last
piece's end, coloured by direction; transfers of one queue that overlap in time share the row in
sub-lanes. Two panels below plot the HBM bandwidth against its cap, and the SBUF and PSUM bytes
holding values still to be read (ncsim.runtime.trace.live_bytes). The title names the kernel and
its total time.

Bars are drawn as a few PolyCollections, not one artist each, so 100 000 instructions draw in a few
seconds. matplotlib is imported when a picture is drawn (through its Agg canvas, no pyplot: no
global state, no display), so importing this module costs nothing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ncsim import isa
from ncsim.arrays import distinct
from ncsim.asm.objfile import ObjectFile
from ncsim.errors import NcsimError
from ncsim.memory.access import Memory
from ncsim.runtime.timing import TimingResult
from ncsim.runtime.trace import ENGINE_TRACKS, kernel_name, lanes, live_bytes, transfers

_SEM_COLOUR = "#7f7f7f"  # tab10 grey and red: left out of the mnemonics' palette
_PORT_COLOUR = "#d62728"
# DMA directions: dark shades (tab20b's), apart from the mnemonics' lighter tab20 palette.
_DIRECTION_COLOURS = ("#393b79", "#8c6d31", "#637939", "#7b4173", "#843c39", "#5254a3", "#bd9e39", "#8ca252",
                      "#a55194")
_WIDTH_IN = 16.0
_DPI = 100


# The picture's formats, by the file's extension; the metadata left out of each so that two runs
# write the same bytes (matplotlib would stamp its version or the date).
FORMATS: dict[str, dict[str, None]] = {"png": {"Software": None}, "svg": {"Creator": None, "Date": None},
                                       "pdf": {"Creator": None, "Producer": None, "CreationDate": None}}


def picture_format(path: str | Path) -> str:
    """The format `path` asks for by its extension (png, svg or pdf), or an NcsimError naming those."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        accepted = ", ".join(f".{f}" for f in FORMATS)
        raise NcsimError(f"--timeline draws {accepted} pictures, by the file's extension; not"
                         f" '{Path(path).suffix or 'no extension'}'", file=str(path))
    return suffix


def write_timeline(result: TimingResult, path: str | Path, obj: ObjectFile | None = None) -> None:
    """Draw the run to `path`, a .png, .svg or .pdf by its extension. `obj`, the timed object, gives
    the kernel's name for the title (without it, the program's, as the trace takes it)."""
    fmt = picture_format(path)
    from matplotlib import rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.collections import LineCollection, PolyCollection
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    cfg = result.config
    us = 1e6 / cfg.tick_hz  # microseconds per tick
    tr = transfers(result)
    tr_lane = lanes(tr.queue, tr.start, tr.end)
    queues = sorted(set(tr.queue.tolist()))
    rows = list(ENGINE_TRACKS) + [f"DMA q{q}" for q in queues]
    row_of_queue = {q: len(ENGINE_TRACKS) + i for i, q in enumerate(queues)}
    lanes_of_queue = {q: int(tr_lane[tr.queue == q].max()) + 1 for q in queues}

    height = 1.0 + 0.5 * len(rows) + 2 * 1.4
    fig = Figure(figsize=(_WIDTH_IN, height), dpi=_DPI)
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(3, 1, height_ratios=[0.5 * len(rows), 1.1, 1.1], hspace=0.12,
                            left=0.07, right=0.80, top=1 - 0.55 / height, bottom=0.45 / height)
    ax = fig.add_subplot(grid[0])
    hbm = fig.add_subplot(grid[1], sharex=ax)
    live = fig.add_subplot(grid[2], sharex=ax)

    def boxes(t0: np.ndarray, t1: np.ndarray, y0: np.ndarray, y1: np.ndarray) -> np.ndarray:
        x0, x1 = t0 * us, t1 * us
        return np.stack([np.stack([x0, y0], 1), np.stack([x0, y1], 1), np.stack([x1, y1], 1),
                         np.stack([x1, y0], 1)], 1)

    # Engine rows: row r spans [r - 0.4, r + 0.4], top to bottom.
    engine = result.engine.astype(np.int64)
    y = engine.astype(float)
    mnemonics = [isa.BY_OPCODE[int(o)].mnemonic for o in result.body_opcode.tolist()]
    names = sorted({mnemonics[b] for b in distinct(result.body).tolist()})
    palette = _palette(len(names))
    colour_of = {m: palette[i] for i, m in enumerate(names)}
    body_colour = np.array([colour_of[m] for m in mnemonics]).reshape(-1, 4) if mnemonics else np.zeros((0, 4))
    busy = result.end > result.start
    k = np.nonzero(busy)[0]
    ax.add_collection(PolyCollection(boxes(result.start[k], result.end[k], y[k] - 0.4, y[k] + 0.4),
                                     facecolors=body_colour[result.body[k]], linewidths=0, antialiased=False))
    k = np.nonzero(~busy)[0]
    ax.add_collection(LineCollection(  # the upper part of the row: the wait bars below stay visible
        np.stack([np.stack([result.start[k] * us, y[k] - 0.4], 1), np.stack([result.start[k] * us, y[k] + 0.2], 1)],
                 1), colors=body_colour[result.body[k]], linewidths=0.6))
    for t0, t1, colour in ((result.avail, result.ready, _SEM_COLOUR), (result.ready, result.start, _PORT_COLOUR)):
        k = np.nonzero(t1 > t0)[0]
        ax.add_collection(PolyCollection(boxes(t0[k], t1[k], y[k] + 0.25, y[k] + 0.4), facecolors=colour,
                                         linewidths=0, antialiased=False))

    # DMA queue rows, sub-lanes for overlapping transfers.
    directions = sorted(set(zip(tr.src.tolist(), tr.dst.tolist(), strict=True)))
    dir_colour = {d: _DIRECTION_COLOURS[i % len(_DIRECTION_COLOURS)] for i, d in enumerate(directions)}
    if len(tr.instr):
        row = np.array([row_of_queue[q] for q in tr.queue.tolist()], float)
        n_lanes = np.array([lanes_of_queue[q] for q in tr.queue.tolist()], float)
        step = 0.8 / n_lanes
        y0 = row - 0.4 + tr_lane * step
        ax.add_collection(PolyCollection(
            boxes(tr.start, tr.end, y0 + 0.05 * step, y0 + 0.95 * step),
            facecolors=[dir_colour[d] for d in zip(tr.src.tolist(), tr.dst.tolist(), strict=True)],
            edgecolors="white", linewidths=0.3 if len(tr.instr) < 2000 else 0))

    total_us = result.total_ticks * us
    ax.set_xlim(0, max(total_us, 1e-3) * 1.005)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_yticks(range(len(rows)), rows)
    ax.tick_params(labelbottom=False)
    ax.grid(axis="x", color="#e0e0e0", linewidth=0.6)
    ax.set_axisbelow(True)
    for r in range(len(rows) - 1):
        ax.axhline(r + 0.5, color="#d0d0d0", linewidth=0.5)

    # Panels: HBM bandwidth against its cap; bytes of SBUF and PSUM holding values still to be read.
    gbs = result.hbm_rate * (cfg.tick_hz / 1e9)
    cap = cfg.hbm_bandwidth / 1e9
    hbm.fill_between(result.hbm_time * us, gbs, step="post", color="#1f77b4", alpha=0.35, linewidth=0)
    hbm.step(result.hbm_time * us, gbs, where="post", color="#1f77b4", linewidth=0.8)
    hbm.axhline(cap, color="#1f77b4", linestyle="--", linewidth=0.8)
    hbm.text(0.002, cap, f" cap {cap:g} GB/s", transform=hbm.get_yaxis_transform(), va="bottom", fontsize=7,
             color="#1f77b4")
    hbm.set_ylabel("HBM GB/s")
    hbm.set_ylim(0, max(float(gbs.max(initial=0)), cap) * 1.25)
    for memory, colour in ((Memory.SBUF, "#2ca02c"), (Memory.PSUM, "#9467bd")):
        if np.any(result.fp_memory == int(memory)):
            times, level = live_bytes(result, memory)
            times = np.append(times, result.total_ticks)
            level = np.append(level, level[-1])
            live.fill_between(times * us, level / 2**20, step="post", color=colour, alpha=0.25, linewidth=0)
            live.step(times * us, level / 2**20, where="post", color=colour, linewidth=0.9,
                      label=f"{memory.label.upper()}")
    live.set_ylabel("live MiB")
    live.set_ylim(bottom=0)
    if live.get_lines():
        live.legend(loc="upper right", fontsize=8, framealpha=0.8)
    live.set_xlabel("time (µs)")
    for panel in (hbm, live):
        panel.grid(axis="x", color="#e0e0e0", linewidth=0.6)
    hbm.tick_params(labelbottom=False)

    # Legend and title.
    legend = [Patch(color=colour_of[m], label=m) for m in names]
    legend += [Patch(color=_SEM_COLOUR, label="waiting on semaphores"), Patch(color=_PORT_COLOUR, label="waiting on a port")]
    legend += [Patch(color=dir_colour[d], label=f"DMA {Memory(d[0]).label}->{Memory(d[1]).label}") for d in directions]
    ax.legend(handles=legend, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    kernel = kernel_name(result, obj, "kernel")
    fig.suptitle(f"{kernel}: {result.total_ns / 1000:,.3f} µs ({result.total_ticks:,} ticks at"
                 f" {cfg.tick_hz / 1e9:g} GHz), {result.count:,} instructions, {len(tr.instr):,} DMA transfers",
                 x=0.07, ha="left", fontsize=11)
    with rc_context({"svg.hashsalt": "ncsim"}):  # the SVG's element ids: fixed, not random
        fig.savefig(path, format=fmt, metadata=FORMATS[fmt])


def _palette(n: int) -> np.ndarray:
    """n distinct RGBA colours, the same for the same n: tab20 without its reds and greys (the waits'
    colours), then tab20c."""
    from matplotlib import colormaps

    tab20 = colormaps["tab20"](np.array([0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13, 16, 17, 18, 19]))
    base = np.concatenate((tab20, colormaps["tab20c"](np.arange(16))))
    return base[np.arange(n) % len(base)]
