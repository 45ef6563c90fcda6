"""ncsim/config.py: every parameter sourced, the figures of docs/hardware.md and derived sizes, overrides, errors."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ncsim.config import (
    DEFAULT,
    ENGINES,
    SOURCE_KEYS,
    Config,
    GiB,
    KiB,
    MiB,
    describe,
    load_config,
    valid_range,
)
from ncsim.errors import ConfigError

FIELDS = dataclasses.fields(Config)

# The DMA efficiency points (docs/hardware.md#dma): bytes per partition -> fraction of the plateau.
SPEC_DMA_POINTS = [
    (32, 0.015), (64, 0.03), (128, 0.05), (256, 0.10), (512, 0.21),
    (1024, 0.42), (2048, 0.81), (4096, 0.97), (8192, 1.0),
]


def changed(config: Config) -> set[str]:
    """Names of the parameters where `config` differs from the defaults."""
    return {f.name for f in FIELDS if getattr(config, f.name) != getattr(DEFAULT, f.name)}


def config_error(call, *args, **kwargs) -> str:
    """The formatted ConfigError that `call` raises (what the CLI would print)."""
    with pytest.raises(ConfigError) as info:
        call(*args, **kwargs)
    return info.value.format()


# --- Every parameter says what it is and where it comes from ---


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.name)
def test_every_field_has_unit_source_and_doc(field):
    for key in ("unit", "source", "doc"):
        assert isinstance(field.metadata.get(key), str) and field.metadata[key].strip(), key
    assert field.metadata["source"].split(":")[0] in SOURCE_KEYS


def test_defaults_are_valid_and_frozen():
    assert Config() == DEFAULT
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT.pmax = 64


# --- The figures of docs/hardware.md ---


@pytest.mark.parametrize(("engine", "ticks"), [("tensor", 2), ("vector", 5), ("scalar", 4), ("gpsimd", 4)])
def test_ticks_per_cycle(engine, ticks):
    assert DEFAULT.ticks_per_cycle(engine) == ticks


def test_ticks_per_cycle_unknown_engine_lists_the_engines():
    message = config_error(DEFAULT.ticks_per_cycle, "sync")
    assert "sync" in message and all(engine in message for engine in ENGINES)


def test_derived_sizes():
    assert DEFAULT.sbuf_usable_bytes == 176 * KiB
    assert DEFAULT.sbuf_bytes == 24 * MiB
    assert DEFAULT.psum_bank_bytes == 2 * KiB
    assert DEFAULT.psum_bytes == 2 * MiB
    assert DEFAULT.psum_fmax == 512
    assert (DEFAULT.gemm_kmax, DEFAULT.gemm_stationary_fmax, DEFAULT.gemm_moving_fmax) == (128, 128, 512)
    assert DEFAULT.gpsimd_partitions_per_core == 16
    assert DEFAULT.gpsimd_fp32_lanes == 16
    assert DEFAULT.hbm_bytes == 16 * GiB
    assert DEFAULT.tensor_peak_flops == pytest.approx(91.75e12, rel=1e-4)
    assert DEFAULT.dma_engines * DEFAULT.dma_engine_bandwidth == pytest.approx(272e9)


def test_derived_sizes_follow_their_parameters():
    config = DEFAULT.with_overrides({"psum_num_banks": 4, "sbuf_reserved_bytes": 0})
    assert (config.psum_bank_bytes, config.psum_fmax, config.gemm_moving_fmax) == (4 * KiB, 1024, 1024)
    assert config.sbuf_usable_bytes == 192 * KiB


def test_access_rate_halves_for_wide_innermost_strides():
    assert DEFAULT.access_rate(4) == 128
    assert DEFAULT.access_rate(15) == 128
    assert DEFAULT.access_rate(16) == 64


# --- DMA efficiency ---


def test_dma_efficiency_table_is_the_spec_figure():
    assert list(DEFAULT.dma_efficiency_table) == SPEC_DMA_POINTS


@pytest.mark.parametrize(("size", "fraction"), SPEC_DMA_POINTS)
def test_dma_efficiency_reproduces_the_spec_points(size, fraction):
    assert DEFAULT.dma_efficiency(size) == fraction


@pytest.mark.parametrize(("size", "fraction"), [(1, 0.015), (31, 0.015), (8 * KiB, 1.0), (1 << 30, 1.0)])
def test_dma_efficiency_clamps_at_both_ends(size, fraction):
    assert DEFAULT.dma_efficiency(size) == fraction


def test_dma_efficiency_interpolates_in_log2_bytes():
    config = DEFAULT.with_overrides({"dma_efficiency_table": [[16, 0.2], [64, 0.6]]})
    assert config.dma_efficiency(32) == pytest.approx(0.4)  # log2(32) is halfway from log2(16) to log2(64)


@given(st.integers(1, 1 << 20), st.integers(1, 1 << 20))
def test_dma_efficiency_is_monotonic(a, b):
    a, b = min(a, b), max(a, b)
    assert DEFAULT.dma_efficiency(a) <= DEFAULT.dma_efficiency(b)


@given(st.integers(0, len(SPEC_DMA_POINTS) - 2), st.floats(0, 1))
def test_dma_efficiency_stays_between_neighbouring_points(i, t):
    (b0, f0), (b1, f1) = SPEC_DMA_POINTS[i], SPEC_DMA_POINTS[i + 1]
    size = 2 ** (math.log2(b0) + t * (math.log2(b1) - math.log2(b0)))
    assert f0 <= DEFAULT.dma_efficiency(size) <= f1


# --- Overrides ---


def test_with_no_overrides_is_the_default():
    assert DEFAULT.with_overrides({}) == DEFAULT
    assert load_config() == DEFAULT


def test_toml_file_changes_exactly_the_named_fields(tmp_path):
    path = tmp_path / "fast-hbm.toml"
    path.write_text(
        "# a Trn1 with twice the HBM bandwidth\n"
        "hbm_bandwidth = 820e9\n"
        "dma_engines = 8\n"
        "tensor_clock_hz = 5.6e9\n"
        "dma_efficiency_table = [[64, 0.5], [4096, 1.0]]\n"
    )
    config = load_config(str(path))
    assert changed(config) == {"hbm_bandwidth", "dma_engines", "tensor_clock_hz", "dma_efficiency_table"}
    assert config.hbm_bandwidth == 820e9
    assert config.dma_engines == 8
    assert config.tensor_clock_hz == 5_600_000_000 and config.ticks_per_cycle("tensor") == 1
    assert config.dma_efficiency_table == ((64, 0.5), (4096, 1.0))


@pytest.mark.parametrize(
    ("setting", "name", "value"),
    [
        ("hbm_bandwidth=820e9", "hbm_bandwidth", 820e9),
        ("sbuf_partition_bytes=0x18000", "sbuf_partition_bytes", 96 * KiB),
        ("dma_queues_per_engine = 4", "dma_queues_per_engine", 4),
        ("scalar_clock_hz=2.8e9", "scalar_clock_hz", 2_800_000_000),
        ("free_elements_max_sbuf=32_768", "free_elements_max_sbuf", 32 * KiB),
        ("dma_efficiency_table=[[64, 0.5], [4096, 1]]", "dma_efficiency_table", ((64, 0.5), (4096, 1.0))),
    ],
)
def test_key_value_changes_exactly_the_named_field(setting, name, value):
    config = load_config(sets=[setting])
    assert changed(config) == {name}
    assert getattr(config, name) == value
    assert type(getattr(config, name)) is type(getattr(DEFAULT, name))


def test_key_value_wins_over_the_file(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("dma_engines = 8\n")
    assert load_config(str(path), ["dma_engines=4"]).dma_engines == 4


def test_numpy_scalars_from_a_sweep_are_plain_numbers():
    config = DEFAULT.with_overrides({"dma_engines": np.int64(8), "hbm_bandwidth": np.float32(820e9)})
    assert type(config.dma_engines) is int and config.dma_engines == 8
    assert type(config.hbm_bandwidth) is float


def test_parameters_that_must_agree_change_together():
    config = load_config(sets=["psum_partition_bytes=12288", "psum_num_banks=6"])
    assert config.psum_bank_bytes == 2 * KiB


# --- Bad input: a ConfigError that names the parameter and says the rule ---


def test_unknown_parameter_suggests_close_names():
    message = config_error(DEFAULT.with_overrides, {"hbm_bandwith": 820e9})
    assert "hbm_bandwith" in message and "did you mean hbm_bandwidth" in message


def test_unknown_parameter_without_close_names():
    message = config_error(load_config, sets=["frobnicate=1"])
    assert "unknown parameter 'frobnicate'" in message and "did you mean" not in message


def test_derived_quantities_cannot_be_set():
    message = config_error(DEFAULT.with_overrides, {"psum_bank_bytes": 4096})
    assert "psum_bank_bytes is derived" in message and "psum_num_banks" in message


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("pmax", "lots", "integer"),
        ("pmax", "1.5", "integer"),
        ("pmax", 1.5, "integer"),
        ("pmax", True, "integer"),
        ("pmax", [128], "integer"),
        ("pmax", "1e999999999", "at most"),
        ("pmax", 2**64, "at most"),
        ("hbm_bandwidth", 10**400, "finite"),
        ("hbm_bandwidth", "fast", "number"),
        ("hbm_bandwidth", "nan", "finite"),
        ("hbm_bandwidth", {"per_core": 410e9}, "number"),
        ("dma_efficiency_table", "fast", "[bytes, fraction] pairs"),
        ("dma_efficiency_table", [[32, 0.5, 1]], "[bytes, fraction] pair"),
        ("dma_efficiency_table", [[32.5, 0.5]], "positive integer"),
        ("dma_efficiency_table", [[32, 1.5]], "(0, 1]"),
        ("dma_efficiency_table", [[64, 0.5], [32, 0.6]], "increase"),
        ("dma_efficiency_table", [[32, 0.5], [64, 0.4]], "must not fall"),
        ("dma_engines", 0, "outside its valid range, 1 to 128"),
        ("sbuf_reserved_bytes", -1, "outside its valid range, 0 B to 1 MiB"),
        ("dma_efficiency_table", [[2 * GiB, 1.0]], "outside the valid range, 1 B to 1 GiB per point"),
        ("dma_efficiency_table", [[2**i, 1.0] for i in range(1, 66)], "at most 64"),
    ],
)
def test_bad_value_names_the_parameter_and_the_rule(name, value, expected):
    message = config_error(DEFAULT.with_overrides, {name: value})
    assert name in message and expected in message


def out_of_range(f: dataclasses.Field) -> tuple[object, object]:
    """A value just below the parameter's valid range and one just above it."""
    lo, hi = f.metadata["valid"]
    if isinstance(f.default, tuple):  # the table: its range bounds each point's bytes
        return [[lo - 1, 1.0]], [[hi + 1, 1.0]]
    if isinstance(f.default, int):
        return lo - 1, hi + 1
    return (lo * 0.999 if lo > 0 else -1.0), hi * 1.001


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.name)
def test_every_parameter_has_a_finite_range_holding_its_default(field):
    lo, hi = field.metadata["valid"]
    assert math.isfinite(lo) and math.isfinite(hi) and 0 <= lo < hi
    if isinstance(field.default, tuple):
        assert all(lo <= size <= hi for size, _ in field.default)
    else:
        assert lo <= field.default <= hi
        assert type(lo)(field.default) == field.default  # an int range for an int parameter


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.name)
def test_values_outside_the_range_are_refused_with_the_range(field):
    below, above = out_of_range(field)
    for value in (below, above):
        message = config_error(DEFAULT.with_overrides, {field.name: value})
        assert field.name in message and "valid range" in message, message
        assert valid_range(field.name) in message, message
        message = config_error(load_config, sets=[f"{field.name}={value}"])  # and as the CLI reads them
        assert valid_range(field.name) in message, message


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.name)
def test_ncsim_config_shows_each_range(field):
    line = next(ln for ln in describe(DEFAULT).splitlines() if ln.startswith(f"  {field.name} "))
    if isinstance(field.default, tuple):  # its value is long: range and source on the next line
        lines = describe(DEFAULT).splitlines()
        line = lines[lines.index(line) + 1]
    assert valid_range(field.name) in line


@pytest.mark.parametrize(("name", "value"), [
    ("pmax", "64000000"), ("sbuf_partition_bytes", "1e12"), ("dma_engines", "1e9"),
    ("dma_queues_per_engine", "1e9"), ("semaphores", "1000000000"), ("hbm_bandwidth", "1e-30"),
    ("dma_latency_ns", "1e18"), ("psum_partition_bytes", "1e12"),
])
def test_the_issues_absurd_values_are_refused_at_once(name, value):
    message = config_error(load_config, sets=[f"{name}={value}"])
    assert f"{name} = " in message and "outside its valid range" in message


def test_a_second_file_merges_over_the_first(tmp_path):
    (tmp_path / "a.toml").write_text("dma_engines = 8\nhbm_bandwidth = 820e9\n")
    (tmp_path / "b.toml").write_text("dma_engines = 4\n")
    config = load_config([str(tmp_path / "a.toml"), str(tmp_path / "b.toml")], ["hbm_bandwidth=100e9"])
    assert (config.dma_engines, config.hbm_bandwidth) == (4, 100e9)


def test_a_file_that_is_not_utf8_is_named(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes("# r\xe9glages\ndma_engines = 8\n".encode("latin-1"))
    message = config_error(load_config, str(path))
    assert str(path) in message and "not UTF-8" in message and "line 1" in message


def test_a_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbfdma_engines = 8\n")
    assert load_config(str(path)).dma_engines == 8


def test_constructing_with_a_wrong_type_is_refused():
    assert "pmax" in config_error(Config, pmax=128.0)


@pytest.mark.parametrize("setting", ["hbm_bandwidth", "=820e9", "hbm_bandwidth=", "  "])
def test_malformed_key_value(setting):
    assert "key=value" in config_error(load_config, sets=[setting])


def test_bad_key_value_says_which_override(tmp_path):
    message = config_error(load_config, sets=["dma_engines=many"])
    assert "dma_engines" in message and "'dma_engines=many'" in message


def test_broken_toml_names_the_file_and_the_line(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("dma_engines = 8\nhbm_bandwidth = = 1\n")
    message = config_error(load_config, str(path))
    assert str(path) in message and "line 2" in message


def test_bad_parameter_in_toml_names_the_file(tmp_path):
    path = tmp_path / "typo.toml"
    path.write_text("dma_engins = 8\n")
    message = config_error(load_config, str(path))
    assert str(path) in message and "did you mean dma_engines" in message


def test_missing_toml_file(tmp_path):
    path = tmp_path / "absent.toml"
    assert str(path) in config_error(load_config, str(path))


@pytest.mark.parametrize("name", ["vector_clock_hz", "tensor_clock_hz", "access_clock_hz"])
def test_clock_must_divide_the_tick_rate(name):
    message = config_error(DEFAULT.with_overrides, {name: "1.5e9"})
    assert f"{name} = 1.5 GHz" in message and "tick_hz" in message


def test_tick_rate_must_be_a_multiple_of_every_clock():
    message = config_error(DEFAULT.with_overrides, {"tick_hz": 2_800_000_000})
    assert "tick_hz = 2.8 GHz" in message


def test_psum_banks_must_divide_the_partition():
    message = config_error(DEFAULT.with_overrides, {"psum_num_banks": 3})
    assert "psum_num_banks = 3" in message and "psum_partition_bytes" in message


def test_psum_banks_must_hold_whole_fp32_accumulators():
    message = config_error(DEFAULT.with_overrides, {"psum_partition_bytes": 1000})
    assert "psum_partition_bytes" in message and "fp32" in message


def test_sbuf_reserve_must_leave_room():
    message = config_error(DEFAULT.with_overrides, {"sbuf_reserved_bytes": "196608"})
    assert "sbuf_reserved_bytes = 192 KiB" in message and "sbuf_partition_bytes" in message


def test_gpsimd_cores_must_split_the_partitions():
    assert "gpsimd_cores = 3" in config_error(DEFAULT.with_overrides, {"gpsimd_cores": 3})


# --- describe() ---


def test_describe_lists_every_parameter_and_derived_quantity():
    text = describe(DEFAULT)
    for f in FIELDS:
        assert f"  {f.name} " in text
        assert f.metadata["source"] in text
    for name in ("sbuf_usable_bytes", "psum_bank_bytes", "psum_fmax", "gemm_moving_fmax"):
        assert f"  {name} " in text
    for readable in ("192 KiB", "176 KiB", "16 GiB", "2.8 GHz", "1.12 GHz", "410 GB/s", "17 GB/s", "1300 ns"):
        assert readable in text
    assert not any(line.startswith("*") for line in text.splitlines())


def test_describe_marks_what_differs_from_the_default():
    text = describe(load_config(sets=["hbm_bandwidth=820e9", "psum_num_banks=4"]))
    lines = text.splitlines()
    assert lines[-1] == "* differs from the default"
    marked = {line.split()[1] for line in lines[:-1] if line.startswith("* ")}
    # psum_num_banks moves the derived bank size and the limits built on it
    assert marked == {"hbm_bandwidth", "psum_num_banks", "psum_bank_bytes", "psum_fmax", "gemm_moving_fmax"}
    assert "820 GB/s" in text


def test_docs_running_lists_every_range():
    """docs/running.md's table of ranges is the code's, row for row."""
    doc = (Path(__file__).resolve().parent.parent / "docs" / "running.md").read_text()
    table = doc.split("| parameter | valid range |\n|---|---|\n")[1].split("\n\n")[0].splitlines()
    assert table == [f"| `{f.name}` | {valid_range(f.name)} |" for f in FIELDS]
