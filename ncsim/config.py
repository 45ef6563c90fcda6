"""The hardware parameters of one NeuronCore-v2, each with its source; overridable.

Every figure is stated, with its public source, in `docs/hardware.md`: each field's `source` is a key
of docs/hardware.md#sources (ARCH, ISA, PERF, DMA, ALLOC, SHARED, DRV, SIM) and a short place, and
docs/hardware.md#parameters gives each field's section. Nothing else in ncsim hard-codes a hardware
constant: it reads `Config`.

Units: sizes in bytes, clocks in Hz, bandwidths in bytes per second, latencies in ns, costs in cycles
of the engine that runs the instruction (unless a field says otherwise). A figure appears once;
quantities that follow from others (usable SBUF, PSUM bank size, matmul limits) are derived
properties, so overriding the parameter moves them too.

    cfg = load_config("trn1-fast-hbm.toml", ["hbm_bandwidth=820e9", "dma_engines=8"])
    print(describe(cfg))

A bad override raises `ConfigError` naming the parameter, the value and the rule it broke.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
import numbers
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ncsim.errors import ConfigError

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
TiB = 1024 * GiB

SOURCE_KEYS = ("ARCH", "ISA", "PERF", "DMA", "ALLOC", "SHARED", "DRV", "SIM", "CPPAPI", "CPPPERF", "MODEL", "TUT")
INT_MAX = 2**63 - 1  # integer parameters and simulated time are int64 in the timing loop
ENGINES = ("tensor", "vector", "scalar", "gpsimd")  # the engines with a clock and a datapath
CYCLES_MAX = 10**6  # the most any cost constant may be, in cycles: 10^4 times the largest default
TABLE_POINTS_MAX = 64  # points of dma_efficiency_table, at most

# (bytes per partition, fraction of the plateau) pairs, bytes strictly increasing.
EfficiencyTable = tuple[tuple[int, float], ...]


def param(default: Any, valid: tuple[float, float], unit: str, source: str, doc: str, *,
          assembly: bool = False) -> Any:
    """A Config field: its default, its valid range, unit, source ("KEY: place in that source") and meaning.

    `assembly`: the assembler (or the NKI tracer) reads it, so a program's object can differ with it
    (limits checked at assembly, placement, semaphore and queue numbers). The other parameters only
    move the timing: a sweep assembles a program once per value of these (`assembly_key`).

    `valid` is (least, most), both allowed; for dma_efficiency_table it bounds each point's bytes. Where
    the hardware or the encoding has a limit, the range stops there and the source says it (pmax 128,
    256 semaphores, 16 DMA queues: the queue operand is 0..15); elsewhere it is generous but finite
    (clocks 1 MHz to 100 GHz, bandwidths 100 MB/s to 100 TB/s, cost constants up to CYCLES_MAX), so
    that no setting allocates more than a few hundred MiB, stalls the run or reports nonsense. A 0 at
    the bottom marks an overhead a study may switch off.
    """
    metadata = {"unit": unit, "source": source, "doc": doc, "valid": valid, "assembly": assembly}
    return dataclasses.field(default=default, metadata=metadata)


def derived(unit: str, formula: str) -> Callable[[Callable[[Config], Any]], property]:
    """A read-only quantity computed from parameters; `describe()` lists it with its formula."""

    def wrap(fn: Callable[[Config], Any]) -> property:
        fn.derived = (unit, formula)  # type: ignore[attr-defined]
        return property(fn)

    return wrap


@dataclass(frozen=True)
class Config:
    """The NeuronCore-v2 that ncsim simulates. Frozen: change it with `with_overrides`."""

    # --- Clocks (docs/hardware.md#clocks) ---
    tick_hz: int = param(
        5_600_000_000, (10**6, 10**12), "Hz", "ARCH: every engine clock divides 5.6 GHz (ncsim's integer time)",
        "Simulated time counts ticks of this clock; every engine clock must divide it exactly.")
    tensor_clock_hz: int = param(2_800_000_000, (10**6, 10**11), "Hz", "ARCH: Tensor (PE) 2.8 GHz", "Tensor engine clock.")
    vector_clock_hz: int = param(1_120_000_000, (10**6, 10**11), "Hz", "ARCH: Vector (DVE) 1.12 GHz", "Vector engine clock.")
    scalar_clock_hz: int = param(1_400_000_000, (10**6, 10**11), "Hz", "ARCH: Scalar (ACT) 1.4 GHz", "Scalar engine clock.")
    gpsimd_clock_hz: int = param(1_400_000_000, (10**6, 10**11), "Hz", "ARCH: GpSimd (POOL) 1.4 GHz", "GpSimd engine clock.")

    # --- Tensor engine (docs/hardware.md#engines) ---
    pe_rows: int = param(
        128, (1, 128), "count", "ARCH: Tensor, 128x128 systolic array",
        "Rows of the PE array: a matmul's contraction size K (its operands' partitions) is at most this.", assembly=True)
    pe_cols: int = param(
        128, (1, 128), "count", "ARCH: Tensor, 128x128 systolic array",
        "Columns of the PE array: the stationary operand's free size M is at most this.", assembly=True)

    # --- SBUF and PSUM (docs/hardware.md#sbuf, #psum) ---
    pmax: int = param(
        128, (1, 128), "count", "ARCH: SBUF 24 MiB = 128 x 192 KiB",
        "Partitions of SBUF and PSUM; the partition dimension of every operand is at most this (NKI pmax).", assembly=True)
    sbuf_partition_bytes: int = param(
        192 * KiB, (1, 1 * MiB), "B", "ARCH: SBUF 24 MiB = 128 x 192 KiB", "Bytes of one SBUF partition.", assembly=True)
    sbuf_reserved_bytes: int = param(
        16 * KiB, (0, 1 * MiB), "B", "ALLOC: 16 KiB of each SBUF partition reserved for the compiler",
        "Bytes at the top of each SBUF partition that kernels may not allocate.", assembly=True)
    psum_partition_bytes: int = param(
        16 * KiB, (4, 256 * KiB), "B", "ARCH: PSUM 2 MiB = 128 x 16 KiB", "Bytes of one PSUM partition.", assembly=True)
    psum_num_banks: int = param(
        8, (1, 1024), "count", "ARCH: PSUM 8 banks of 2 KiB per partition",
        "PSUM banks per partition; a matmul output tile must lie inside one bank (NKI psum_num_banks).", assembly=True)

    # --- HBM (docs/hardware.md#hbm) ---
    hbm_bytes: int = param(16 * GiB, (1, 1 * TiB), "B", "ARCH: HBM 32 GiB per chip, 2 cores (ncsim: half each)", "Device memory of one core.", assembly=True)
    hbm_bandwidth: float = param(
        410e9, (1e8, 1e14), "B/s", "ARCH: HBM 820 GB/s per chip, 2 cores (ncsim: half each)",
        "HBM bandwidth of one core: the cap on all its DMA engines together.")

    # --- GpSimd (docs/hardware.md#gpsimd) ---
    gpsimd_cores: int = param(
        8, (1, 128), "count", "ARCH: GpSimd, 8 cores, core i on partitions [16i, 16i+16)",
        "GpSimd cores; each is wired to pmax / gpsimd_cores consecutive SBUF partitions.", assembly=True)
    gpsimd_tcm_bytes: int = param(
        64 * KiB, (1, 16 * MiB), "B", "ARCH: GpSimd, 64 KiB local TCM per core", "Private memory of one GpSimd core.")
    gpsimd_tcm_access_cycles: int = param(
        3, (1, CYCLES_MAX), "cycles", "ARCH: GpSimd, TCM 3-cycle access", "Latency of a TCM load or store.")
    gpsimd_simd_bits: int = param(
        512, (32, 4096), "bits", "ARCH: GpSimd, 512-bit SIMD (16 x fp32)", "Vector register width of one GpSimd core.")
    gpsimd_tcm_pool_bytes: int = param(
        16 * KiB, (64, 16 * MiB), "B", "CPPAPI: tcm_malloc draws from a 16 KiB pool per core",
        "The TCM pool talloc allocates from (from TCM address 0).")
    gpsimd_branch_taken_cycles: int = param(
        2, (0, CYCLES_MAX), "cycles", "MODEL: docs/gpsimd.md#cycles (no public figure)",
        "Extra cycles of a taken branch on a GpSimd core.")
    gpsimd_divide_cycles: int = param(
        8, (1, CYCLES_MAX), "cycles", "MODEL: docs/gpsimd.md#cycles (no public figure)",
        "Cycles before a GpSimd core's fdiv or vdiv result can be used.")
    gpsimd_sbuf_setup_cycles: int = param(
        60, (0, CYCLES_MAX), "cycles", "ARCH: starting any tensor access costs about 60 cycles",
        "Fixed cost of a GpSimd core's block transfer to or from its SBUF partitions (then 64 bytes a cycle).")
    gpsimd_element_access_cycles: int = param(
        423, (1, CYCLES_MAX), "cycles", "CPPPERF: fitted, docs/gpsimd.md#calibration",
        "Cycles of one element read or written through the plain element accessor (eld, est). Fitted: "
        "programs/relu_gpsimd_element.s then spends 853 cycles an element (2 accesses + 7), the tutorial's "
        "853.6 under docs/gpsimd.md's host-share assumption.")
    gpsimd_tcm_block_cycles: int = param(
        960, (0, CYCLES_MAX), "cycles", "CPPPERF: fitted, docs/gpsimd.md#calibration",
        "Fixed cost of one TCM accessor block transfer to or from HBM, besides the DMA latency and bandwidth. "
        "Fitted (with dma_latency_ns 1300, dma_engine_bandwidth 17e9): programs/relu_gpsimd_tcm.s then spends "
        "6.72 cycles an element in blocks of 1024, the tutorial's 6.72 under docs/gpsimd.md's host-share assumption.")
    gpsimd_step_limit: int = param(
        100_000_000, (1, 10**12), "count", "MODEL: docs/gpsimd.md#checks (a guard against endless loops)",
        "Instructions one GpSimd core may run in one call before ncsim stops it as a loop that never ends.")

    # --- DMA (docs/hardware.md#dma) ---
    dma_engines: int = param(
        16, (1, 128), "count", "DMA: 16 DMA engines per core; each corresponds to 8 partition lanes (Example 1)",
        "DMA engines of one core; a transfer gives each block of pmax / dma_engines consecutive partitions to one "
        "engine, so fewer partitions use fewer engines.")
    dma_queues_per_engine: int = param(
        16, (1, 16), "count", "DMA: each DMA engine has 16 queues",
        "Queues of one DMA engine; it serves them round-robin, one transfer at a time.", assembly=True)
    dma_engine_bandwidth: float = param(
        17e9, (1e8, 1e14), "B/s", "DMA: bandwidth guide, 17 B/ns per engine on Trn1",
        "Bandwidth of one DMA engine: 17 B/ns, what the DMA bandwidth guide gives one Trn1 engine (272 GB/s for 16). "
        "The quoted peak is 27 GiB/s (about 29.0e9 B/s); the current DMA overview says 27.2 GB/s.")
    dma_latency_ns: int = param(
        1300, (0, 10**6), "ns", "DMA: about 1300 ns from the releasing semaphore to data moving",
        "Fixed cost of a DMA transfer before its first byte moves (cross-engine latency). A piece whose DMA "
        "engine is idle does its per-transfer work (the transfer level's time over the buffer level's) "
        "while it runs, so it starts that much earlier (docs/timing.md#the-per-transfer-work-and-the-latency).")
    dma_efficiency_table: tuple[tuple[int, float], ...] = param(
        ((32, 0.015), (64, 0.03), (128, 0.05), (256, 0.10), (512, 0.21),
         (1 * KiB, 0.42), (2 * KiB, 0.81), (4 * KiB, 0.97), (8 * KiB, 1.0)), (1, 1 * GiB),
        "B -> fraction", "DMA: DMA overview figure, throughput by bytes per partition (ncsim's reading)",
        "DMA throughput as a fraction of the plateau by bytes per partition of 128-partition transfers "
        "(8 partition lanes per DMA engine); linear in log2(bytes) between points, clamped at both ends. "
        "The figure reads 98-100% from 8 KiB up; ncsim takes 100%. A piece reads it at its bytes / 8 "
        "(the transfer level; ARCH: overhead 'at both DMA buffer and transfer levels'), and moves at the "
        "lower of that and its chunks' rate (dma_chunk_ns, the buffer level; docs/timing.md#dma).")
    dma_chunk_ns: float = param(
        7.45, (0.0, 1e6), "ns", "DMA: DMA overview figure, 97% at 4 KiB per partition (ncsim's reading)",
        "Overhead of each contiguous chunk (DMA buffer) a DMA engine moves, besides its bytes at "
        "dma_engine_bandwidth: the buffer level of DMA overhead. From the figure's 97% at 4 KiB per "
        "partition, where the transfer level costs nothing more: an engine's 8 rows of 4 KiB take "
        "32768 B / 17 B/ns / 0.97, 59.6 ns over their data time, 7.45 ns a row.")

    # --- Synchronisation (docs/hardware.md#sync) ---
    semaphores: int = param(256, (1, 256), "count", "DRV: v2/address_map.h, 256 semaphores per core", "Hardware semaphores.", assembly=True)
    sequencer_registers: int = param(
        64, (1, 1024), "count", "ISA: nki.isa.register_alloc, 64 x 32-bit registers per engine sequencer", "Scalar registers per sequencer.")
    sequencer_register_bits: int = param(
        32, (1, 64), "bits", "ISA: nki.isa.register_alloc, 64 x 32-bit registers per engine sequencer", "Width of a sequencer register.")

    # --- Cost model (docs/hardware.md#cost); in cycles of the engine that runs the instruction ---
    min_ii: int = param(
        64, (0, CYCLES_MAX), "cycles", "ISA: estimated instruction cost, MIN_II = 64",
        "Minimum initiation interval: the least back-to-back cost of an instruction.")
    fp32_matmul_slowdown: int = param(
        4, (1, 64), "x", "ARCH: fp32 matmul runs 4x slower (23 TFLOPS)",
        "Factor on nc_matmul's cost when its operands are fp32.")
    load_stationary_speedup: int = param(
        4, (1, 64), "x", "ARCH: Tensor engine, LoadStationary up to 4x faster than a matmul",
        "How much faster loading the stationary operand is than a matmul of the same free size.")
    vector_dependent_extra_cycles: int = param(
        100, (0, CYCLES_MAX), "cycles",
        "ARCH: Vector 'Cost Model', +100 cycles when each instruction depends on the previous one",
        "Dependent overhead of the Vector engine: a Vector instruction that reads what the previous one wrote "
        "lasts max(its formula, its work + this) (docs/timing.md).")
    scalar_dependent_extra_cycles: int = param(
        263, (0, CYCLES_MAX), "cycles",
        "PERF: Opt #5a, dependent one-element ScalarE instructions every 189 ns = 264 cycles, 1 of them work",
        "Dependent overhead of the Scalar engine: a Scalar instruction that reads what the previous one wrote "
        "lasts max(its formula, its work + this). PERF measured 264 cycles between dependent one-element "
        "instructions, one cycle of which is the element's work; the reason it gives (the next instruction "
        "cannot read before the previous one's output is committed) does not depend on N, so ncsim applies "
        "it at every N.")
    gpsimd_dependent_extra_cycles: int = param(
        100, (0, CYCLES_MAX), "cycles",
        "PERF: Opt #5a, static overhead ~100 cycles on every compute engine (no GpSimd-specific figure)",
        "Dependent overhead of the GpSimd engine's fixed-function instructions (not gpsimd_call's programs): "
        "no public figure is specific to GpSimd, so ncsim takes the static overhead PERF gives all compute engines.")
    static_overhead_cycles: int = param(
        100, (0, CYCLES_MAX), "cycles",
        "ARCH: Vector 'Cost Model', 100 cycles when N << 128; PERF: Opt #5a, ~100 cycles on every engine",
        "Static instruction overhead of Vector, Scalar and GpSimd: a tiny instruction (N <= tiny_free_elements) "
        "lasts max(its formula, its work + this).")
    tensor_tensor_cycles_per_element: int = param(
        1, (1, 64), "cycles", "TUT: Fused Mamba, mamba_v2 1.61 ms at VectorE 99.63% (docs/timing.md#calibration)",
        "Vector cycles per free element of a tensor_tensor outside the ISA's N cases (both inputs in SBUF, fp32): "
        "the ISA estimates 2N; the fused Mamba tutorial's measured profile (512 x 5 [128, 512] fp32 Vector "
        "instructions in 1.60 ms of Vector time, about 700 cycles each) gives N plus the dependent overhead.")
    tiny_free_elements: int = param(
        16, (0, 64 * KiB), "elements", "ARCH: the static overhead shows for instructions with N << 128 (ncsim's estimate: N <= 16)",
        "Free elements per partition at or below which a Vector, Scalar or GpSimd instruction is tiny and pays "
        "static_overhead_cycles (PERF measured it on one-element instructions).")
    local_gather_t: int = param(
        4, (1, 64), "count", "ISA: local_gather estimated cost, C = ((28 + t*e)/(t*e)) / min(4/dtype_size, e), t = 4",
        "The constant t of local_gather's cost 150 + num_valid_indices * num_elem_per_idx / C.")
    local_gather_overhead: int = param(
        28, (0, CYCLES_MAX), "cycles", "ISA: local_gather estimated cost, C = ((28 + t*e)/(t*e)) / min(4/dtype_size, e)",
        "The constant 28 of local_gather's divisor C.")
    gpsimd_iota_fixed_cycles: int = param(
        150, (0, CYCLES_MAX), "cycles", "ISA: iota, affine_select cost 150 + N",
        "Fixed part of the cost of GpSimd iota and affine_select.")
    dynamic_copy_min_cycles: int = param(
        600, (0, CYCLES_MAX), "cycles", "ISA: dynamic-offset copies cost max(600, N)",
        "Least cost of a copy whose offset is read at run time.")
    access_start_cycles: int = param(
        60, (0, CYCLES_MAX), "cycles", "ARCH: starting any tensor access costs about 60 cycles",
        "Cost of starting a tensor access, in cycles of the accessing engine.")
    access_elements_per_cycle: int = param(
        128, (1, 4096), "elements", "ARCH: 128 elements per cycle at 1.4 GHz per interface",
        "Elements per cycle of access_clock_hz through one read or write interface, innermost stride "
        "under access_wide_stride_bytes.")
    access_clock_hz: int = param(
        1_400_000_000, (10**6, 10**11), "Hz", "ARCH: 128 elements per cycle at 1.4 GHz per interface",
        "Clock of the SBUF/PSUM read and write interfaces.")
    access_wide_stride_bytes: int = param(
        16, (1, 1 * MiB), "B", "ARCH: half the access rate when the innermost stride is 16 bytes or more",
        "Innermost stride from which an access runs at the slower rate.")
    access_wide_stride_slowdown: int = param(
        2, (1, 64), "x", "ARCH: half the access rate when the innermost stride is 16 bytes or more",
        "Divisor of the access rate for an innermost stride of access_wide_stride_bytes or more.")

    # --- Per-instruction limits (docs/hardware.md#access) ---
    free_elements_max_sbuf: int = param(
        64 * KiB, (1, 1 * MiB), "elements", "ARCH: most Vector/Scalar instructions take up to 64K free elements from SBUF",
        "Free elements per partition an instruction may read from SBUF.", assembly=True)
    free_elements_max_psum: int = param(
        4 * KiB, (1, 1 * MiB), "elements", "ARCH: most Vector/Scalar instructions take up to 4K free elements from PSUM",
        "Free elements per partition an instruction may read from PSUM.", assembly=True)
    free_dims_max: int = param(
        4, (1, 4), "dims", "ARCH: access patterns have up to 4 free dimensions of [step, count]",
        "Free dimensions of one access pattern.")
    bn_stats_fmax: int = param(
        512, (1, 1 * MiB), "elements", "ISA: nki.isa.bn_stats, at most 512 elements per partition (nl.tile_size.bn_stats_fmax)",
        "Free elements per partition one bn_stats reads.", assembly=True)
    top8_fmax: int = param(
        16 * KiB, (1, 1 * MiB), "elements", "ISA: nki.isa.max8, nc_find_index8, nc_match_replace8, at most 16,384 per partition",
        "Free elements per partition that max8, nc_find_index8 and nc_match_replace8 search.", assembly=True)
    vector_transpose_max: int = param(
        32, (1, 128), "elements", "ISA: nki.isa.nc_transpose, Vector Engine handles [32, 32] or smaller",
        "Largest partition and free size of an nc_transpose on the Vector engine.", assembly=True)

    # --- Derived quantities ---

    @derived("B", "sbuf_partition_bytes - sbuf_reserved_bytes")
    def sbuf_usable_bytes(self) -> int:
        """SBUF bytes per partition that kernels may allocate (NKI total_available_sbuf_size)."""
        return self.sbuf_partition_bytes - self.sbuf_reserved_bytes

    @derived("B", "pmax * sbuf_partition_bytes")
    def sbuf_bytes(self) -> int:
        return self.pmax * self.sbuf_partition_bytes

    @derived("B", "psum_partition_bytes / psum_num_banks")
    def psum_bank_bytes(self) -> int:
        return self.psum_partition_bytes // self.psum_num_banks

    @derived("B", "pmax * psum_partition_bytes")
    def psum_bytes(self) -> int:
        return self.pmax * self.psum_partition_bytes

    @derived("elements", "psum_bank_bytes / 4 (fp32)")
    def psum_fmax(self) -> int:
        """fp32 elements per partition of one PSUM bank: the largest PSUM tile (NKI psum_fmax)."""
        return self.psum_bank_bytes // 4

    @derived("count", "pe_rows")
    def gemm_kmax(self) -> int:
        """Largest contraction size K of one nc_matmul: the partitions of both operands."""
        return self.pe_rows

    @derived("elements", "pe_cols")
    def gemm_stationary_fmax(self) -> int:
        """Largest free size M of nc_matmul's stationary operand (NKI gemm_stationary_fmax)."""
        return self.pe_cols

    @derived("elements", "psum_fmax")
    def gemm_moving_fmax(self) -> int:
        """Largest free size N of nc_matmul's moving operand: its fp32 output fills one bank."""
        return self.psum_fmax

    @derived("count", "pmax / gpsimd_cores")
    def gpsimd_partitions_per_core(self) -> int:
        return self.pmax // self.gpsimd_cores

    @derived("elements", "gpsimd_simd_bits / 32")
    def gpsimd_fp32_lanes(self) -> int:
        return self.gpsimd_simd_bits // 32

    @derived("FLOP/s", "2 * pe_rows * pe_cols * tensor_clock_hz")
    def tensor_peak_flops(self) -> float:
        """Peak Tensor engine throughput for 16-bit and smaller operands (docs/hardware.md#engines: 92 TFLOPS)."""
        return 2.0 * self.pe_rows * self.pe_cols * self.tensor_clock_hz

    # --- Methods ---

    def ticks_per_cycle(self, engine: str) -> int:
        """Ticks of tick_hz in one cycle of `engine` ("tensor", "vector", "scalar" or "gpsimd")."""
        if engine not in ENGINES:
            raise ConfigError(f"unknown engine {engine!r}: expected one of {', '.join(ENGINES)}")
        return self._ticks_per_cycle(f"{engine}_clock_hz")

    def dma_efficiency(self, bytes_per_partition: float) -> float:
        """Fraction of a DMA engine's bandwidth reached with chunks of `bytes_per_partition` bytes."""
        table = self.dma_efficiency_table
        if bytes_per_partition <= table[0][0]:
            return table[0][1]
        if bytes_per_partition >= table[-1][0]:
            return table[-1][1]
        i = bisect.bisect_right([b for b, _ in table], bytes_per_partition)
        (b0, f0), (b1, f1) = table[i - 1], table[i]
        t = (math.log2(bytes_per_partition) - math.log2(b0)) / (math.log2(b1) - math.log2(b0))
        return min(f1, f0 + t * (f1 - f0))  # min: rounding must not step over the next point

    def access_rate(self, innermost_stride_bytes: int) -> float:
        """Elements per access_clock_hz cycle through one interface, for this innermost stride."""
        if innermost_stride_bytes >= self.access_wide_stride_bytes:
            return self.access_elements_per_cycle / self.access_wide_stride_slowdown
        return float(self.access_elements_per_cycle)

    def with_overrides(self, overrides: Mapping[str, Any]) -> Config:
        """This configuration with the named parameters changed; values may be strings ("820e9", "0x100")."""
        return dataclasses.replace(self, **{name: _convert(name, value) for name, value in overrides.items()})

    # --- Validation ---

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, _checked(f, getattr(self, f.name)))
        self._check_relations()

    def _check_relations(self) -> None:
        if self.sbuf_reserved_bytes >= self.sbuf_partition_bytes:
            _fail(self, "sbuf_reserved_bytes",
                  f"must be less than sbuf_partition_bytes = {_show(self, 'sbuf_partition_bytes')}")
        if self.psum_partition_bytes % self.psum_num_banks:
            _fail(self, "psum_num_banks",
                  f"must divide psum_partition_bytes = {_show(self, 'psum_partition_bytes')} exactly "
                  "(psum_num_banks x bank bytes = psum_partition_bytes)")
        if self.psum_bank_bytes % 4:
            _fail(self, "psum_partition_bytes",
                  f"gives PSUM banks of {self.psum_bank_bytes} B with {self.psum_num_banks} banks; "
                  "a bank must hold whole fp32 accumulators (a multiple of 4 bytes)")
        if self.pmax % self.gpsimd_cores:
            _fail(self, "gpsimd_cores", f"must divide pmax = {self.pmax} (each core owns equal partitions)")
        if self.gpsimd_simd_bits % 32:
            _fail(self, "gpsimd_simd_bits", "must be a multiple of 32 (whole fp32 lanes)")
        for engine in ENGINES:
            self._ticks_per_cycle(f"{engine}_clock_hz")
        self._ticks_per_cycle("access_clock_hz")
        _check_efficiency_table(self)

    def _ticks_per_cycle(self, clock: str) -> int:
        ticks, rest = divmod(self.tick_hz, getattr(self, clock))
        if rest:
            _fail(self, clock,
                  f"must divide tick_hz = {_show(self, 'tick_hz')} exactly, so that one cycle is a whole "
                  f"number of ticks ({self.tick_hz / getattr(self, clock):.4g} ticks per cycle)")
        return ticks


def _fail(config: Config, name: str, rule: str) -> None:
    raise ConfigError(f"{name} = {_show(config, name)}: {rule}")


def _checked(f: dataclasses.Field, value: Any) -> Any:
    """`value` as the field's type (int, float or table), or ConfigError saying why it cannot be."""
    name, default = f.name, f.default
    if isinstance(default, tuple):
        return _checked_table(name, value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # numpy scalars from a sweep are fine
        raise ConfigError(f"{name} = {value!r}: must be {_expected(default)}")
    if isinstance(default, int):
        try:
            value = operator.index(value)
        except TypeError:
            raise ConfigError(f"{name} = {value!r}: must be an integer") from None
        if value > INT_MAX:
            raise ConfigError(f"{name} = {value}: must be at most {INT_MAX} (the simulator keeps it in int64)")
    else:
        try:
            value = float(value)
        except OverflowError:
            value = math.inf
        if not math.isfinite(value):
            raise ConfigError(f"{name} = {value!r}: must be a finite number")
    lo, hi = f.metadata["valid"]
    if not lo <= value <= hi:
        raise ConfigError(f"{name} = {_format(value, f.metadata['unit'])}: outside its valid range,"
                          f" {valid_range(name)}", notes=("`ncsim config` shows every parameter's range",))
    return value


def _checked_table(name: str, value: Any) -> EfficiencyTable:
    example = "e.g. [[32, 0.015], [8192, 1.0]]"
    if not isinstance(value, list | tuple) or not value:
        raise ConfigError(f"{name} = {value!r}: must be a non-empty list of [bytes, fraction] pairs, {example}")
    if len(value) > TABLE_POINTS_MAX:
        raise ConfigError(f"{name}: {len(value)} points; at most {TABLE_POINTS_MAX}")
    lo, hi = _FIELDS[name].metadata["valid"]
    table = []
    for point in value:
        if not isinstance(point, list | tuple) or len(point) != 2:
            raise ConfigError(f"{name}: point {point!r} is not a [bytes, fraction] pair, {example}")
        size, fraction = point
        if isinstance(size, bool) or not isinstance(size, numbers.Integral):
            raise ConfigError(f"{name}: point {list(point)!r}: bytes must be a positive integer")
        if not lo <= size <= hi:
            raise ConfigError(f"{name}: point {list(point)!r}: bytes outside the valid range, {valid_range(name)}")
        if isinstance(fraction, bool) or not isinstance(fraction, numbers.Real) or not 0 < fraction <= 1:
            raise ConfigError(f"{name}: point {list(point)!r}: the fraction must be a number in (0, 1]")
        table.append((int(size), float(fraction)))
    return tuple(table)


def _check_efficiency_table(config: Config) -> None:
    table = config.dma_efficiency_table
    for (b0, f0), (b1, f1) in itertools.pairwise(table):
        if b1 <= b0:
            _fail(config, "dma_efficiency_table", f"bytes must increase from point to point ({b0} then {b1})")
        if f1 < f0:
            _fail(config, "dma_efficiency_table",
                  f"efficiency must not fall as chunks grow ({f0:g} at {b0} B, then {f1:g} at {b1} B)")


# --- Overrides: names and values as users write them ---

_FIELDS = {f.name: f for f in dataclasses.fields(Config)}
_DERIVED = {  # name -> (unit, formula)
    name: attr.fget.derived
    for name, attr in vars(Config).items()
    if isinstance(attr, property) and hasattr(attr.fget, "derived")
}


def _convert(name: str, value: Any) -> Any:
    """A user's value for parameter `name`, converted to the parameter's type."""
    f = _FIELDS.get(name)
    if f is None:
        raise _unknown(name)
    default = f.default
    if isinstance(value, str):
        text = value.strip()
        if isinstance(default, tuple):
            import tomllib  # here, not at the top: a run that sets nothing does not pay for the parser

            try:
                value = tomllib.loads(f"v = {text}")["v"]
            except tomllib.TOMLDecodeError:
                raise ConfigError(f"{name} = {value!r}: must be {_expected(default)}") from None
        elif isinstance(default, int):
            value = _parse_int(name, text)
        else:
            try:
                value = float(text)
            except ValueError:
                raise ConfigError(f"{name} = {value!r}: must be {_expected(default)}") from None
    elif isinstance(default, int) and isinstance(value, float) and value.is_integer():
        value = int(value)  # 5.6e9 in a TOML file names an integer number of Hz
    return _checked(f, value)


def _parse_int(name: str, text: str) -> int:
    from decimal import Decimal, InvalidOperation

    try:
        return int(text, 0)  # 4096, 0x1000, 1_024
    except ValueError:
        pass
    try:
        number = Decimal(text.replace("_", ""))  # 2.8e9: exact, unlike float
    except InvalidOperation:
        number = None
    if number is None or not number.is_finite() or number != number.to_integral_value():
        raise ConfigError(f"{name} = {text!r}: must be an integer (e.g. 4096, 0x1000 or 2.8e9)")
    if number > INT_MAX:  # before int(): int(Decimal("1e999999999")) would not finish
        raise ConfigError(f"{name} = {text}: must be at most {INT_MAX} (the simulator keeps it in int64)")
    return int(number)


def _expected(default: Any) -> str:
    if isinstance(default, tuple):
        return "a list of [bytes, fraction] pairs, e.g. [[32, 0.015], [8192, 1.0]]"
    return "an integer (e.g. 4096, 0x1000 or 2.8e9)" if isinstance(default, int) else "a number (e.g. 820e9)"


def _unknown(name: str) -> ConfigError:
    notes = ("`ncsim config` lists every parameter",)
    if name in _DERIVED:
        return ConfigError(f"{name} is derived ({_DERIVED[name][1]}) and cannot be set; "
                           "set the parameters it is computed from", notes=notes)
    import difflib

    close = difflib.get_close_matches(name, _FIELDS, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    return ConfigError(f"unknown parameter {name!r}{hint}", notes=notes)


def load_config(toml_path: str | Sequence[str] | None = None, sets: Iterable[str] = ()) -> Config:
    """The defaults, then the parameters of a TOML file (or of several, in order), then `key=value`
    overrides, later ones winning.

    All overrides are applied together, so two parameters that must agree (PSUM size and banks) can
    change at once. Every value is checked against its parameter's range before anything uses it.
    """
    overrides: dict[str, Any] = {}
    for path in [toml_path] if isinstance(toml_path, str) else toml_path or ():
        import tomllib

        try:
            with open(path, "rb") as fh:
                raw = fh.read()
        except OSError as e:
            raise ConfigError(f"cannot read the configuration file: {e.strerror}", file=path) from None
        try:
            data = tomllib.loads(raw.decode("utf-8-sig"))  # TOML is UTF-8; a byte-order mark is let pass
        except UnicodeDecodeError as e:
            line = raw.count(b"\n", 0, e.start) + 1
            raise ConfigError(f"not UTF-8 text: byte {e.start} (line {line}) is 0x{raw[e.start]:02x}; a TOML"
                              " file must be UTF-8", file=path) from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"invalid TOML: {e}", file=path) from None
        for name, value in data.items():
            try:
                overrides[name] = _convert(name, value)
            except ConfigError as e:
                raise ConfigError(e.message, file=path, notes=e.notes) from None
    for text in sets:
        name, sep, value = (part.strip() for part in text.partition("="))
        if not sep or not name or not value:
            raise ConfigError(f"malformed override {text!r}: expected the form key=value, e.g. hbm_bandwidth=820e9")
        try:
            overrides[name] = _convert(name, value)
        except ConfigError as e:
            raise ConfigError(e.message, notes=(f"in the override {text!r}", *e.notes)) from None
    return DEFAULT.with_overrides(overrides)


# --- Display ---


def _format(value: Any, unit: str) -> str:
    """A value with its unit, as a person writes it: 192 KiB, 2.8 GHz, 410 GB/s, 4x."""
    if unit == "B":
        for size, suffix in ((TiB, "TiB"), (GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
            if value >= size and value % size == 0:
                return f"{value // size} {suffix}"
        return f"{value} B"
    if unit in ("Hz", "B/s", "FLOP/s"):
        for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
            if value >= scale:
                return f"{value / scale:.6g} {prefix}{unit}"
        return f"{value:g} {unit}"
    if unit == "B -> fraction":
        return ", ".join(f"{_format(b, 'B')}: {f * 100:g}%" for b, f in value)
    if unit == "x":
        return f"{value}x"
    if unit == "count":
        return str(value)
    return f"{value:g} {unit}" if isinstance(value, float) else f"{value} {unit}"


def _show(config: Config, name: str) -> str:
    return _format(getattr(config, name), _FIELDS[name].metadata["unit"])


def assembly_parameters() -> tuple[str, ...]:
    """The parameters marked `assembly` (the assembler or the NKI tracer reads them), in table order."""
    return tuple(name for name, f in _FIELDS.items() if f.metadata["assembly"])


def assembly_key(config: Config) -> tuple[tuple[str, Any], ...]:
    """What of `config` a program's assembly depends on: (name, value) of each assembly parameter.
    Two configurations with the same key give the same object (`ncsim sweep` assembles once per key)."""
    return tuple((name, getattr(config, name)) for name in assembly_parameters())


def valid_range(name: str) -> str:
    """Parameter `name`'s valid range in words: "1 to 128", "0 to 1 MiB", "100 MB/s to 100 TB/s"."""
    f = _FIELDS[name]
    unit = f.metadata["unit"]
    lo, hi = (type(f.default)(v) if isinstance(f.default, int | float) else int(v) for v in f.metadata["valid"])
    if unit == "B -> fraction":
        return f"{_format(lo, 'B')} to {_format(hi, 'B')} per point"  # the range bounds each point's bytes
    if unit in ("B", "Hz", "B/s", "x"):  # each end in its own scale: 1 MHz to 100 GHz
        return f"{_format(lo, unit)} to {_format(hi, unit)}"
    lo, hi = (int(v) if isinstance(v, float) and v.is_integer() else v for v in (lo, hi))  # 0 to 1,000,000 ns
    return f"{lo:,} to {hi:,}" + ("" if unit == "count" else f" {unit}")


def describe(config: Config) -> str:
    """A table of every parameter (name, value, valid range, whether it affects assembly, source) and every
    derived quantity (name, value, formula). A '*' marks values that differ from the default."""
    rows = []  # (mark, name, value, range, source)
    for name, f in _FIELDS.items():
        mark = "*" if getattr(config, name) != getattr(DEFAULT, name) else " "
        asm = "yes" if f.metadata["assembly"] else ""
        rows.append((mark, name, _show(config, name), valid_range(name), asm, f.metadata["source"]))
    rows.append(None)
    for name, (unit, formula) in _DERIVED.items():
        mark = "*" if getattr(config, name) != getattr(DEFAULT, name) else " "
        rows.append((mark, name, _format(getattr(config, name), unit), "", "", f"= {formula}"))

    name_width = max(len(name) for name in (*_FIELDS, *_DERIVED))
    value_width = 16  # longer values (the DMA efficiency table) put their range and source on the next line
    range_width = max(len(row[3]) for row in rows if row is not None)
    # the source keys (ARCH, ISA, ...) name public pages, listed with each figure in docs/hardware.md
    # asm: "yes" where the parameter changes a program's assembly (the rest only move the timing)
    head = f"  {'parameter':<{name_width}}  {'value':<{value_width}}  {'valid range':<{range_width}}  asm"
    lines = [head + "  source (keys: docs/hardware.md#sources)"]
    for row in rows:
        if row is None:
            lines.append("")
            lines.append(f"  {'derived':<{name_width}}  {'':<{value_width}}  {'':<{range_width}}       formula")
            continue
        mark, name, value, valid, asm, source = row
        if len(value) <= value_width:
            lines.append(f"{mark} {name:<{name_width}}  {value:<{value_width}}  {valid:<{range_width}}  {asm:<3}  {source}")
        else:
            lines.append(f"{mark} {name:<{name_width}}  {value}")
            lines.append(f"  {'':<{name_width}}  {'':<{value_width}}  {valid:<{range_width}}  {asm:<3}  {source}")
    if any(row is not None and row[0] == "*" for row in rows):
        lines.append("* differs from the default")
    return "\n".join(lines)


DEFAULT = Config()
