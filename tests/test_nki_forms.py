"""The instruction forms are nki.isa's (SDK 2.27): names, positional order and defaults, the parameters
v2 lacks refused by name, and the defaults table of docs/isa.md (issue 11, items 1 and 2)."""

from __future__ import annotations

import numpy as np
import pytest

from ncsim import isa
from ncsim.asm.assembler import assemble
from ncsim.asm.disasm import decode_object
from ncsim.asm.instruction import Instruction
from ncsim.errors import AsmError
from ncsim.isadoc import defaults_rows, markdown
from tests.engines.harness import check

# The nki.isa signatures of SDK 2.27 (aws-neuron-sdk v2.27.0, nki/api/nki/isa/__init__.py), written in ncsim's
# spelling: the parameters without a default in their order, then those with one and the default (`name`
# and the engine choice left out). Facts transcribed by hand, to hold the table to.
NKI_2_27: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "nc_matmul": (("dst", "stationary", "moving"),
                  {"is_stationary_onezero": "false", "is_moving_onezero": "false", "is_transpose": "false",
                   "tile_position": "[]", "tile_size": "[]", "perf_mode": "none"}),
    "nc_transpose": (("dst", "data"), {}),
    "activation": (("dst", "op", "data"), {"bias": "none", "scale": "1.0", "reduce_op": "none",
                                           "reduce_res": "none", "reduce_cmd": "idle"}),
    "activation_reduce": (("dst", "op", "data", "reduce_op", "reduce_res"), {"bias": "none", "scale": "1.0"}),
    "tensor_tensor": (("dst", "data1", "data2", "op"), {}),
    "tensor_scalar": (("dst", "data", "op0", "operand0"), {"reverse0": "false", "op1": "none", "operand1": "none",
                                                           "reverse1": "false"}),
    "tensor_scalar_reduce": (("dst", "data", "op0", "operand0", "reduce_op", "reduce_res"), {"reverse0": "false"}),
    "scalar_tensor_tensor": (("dst", "data", "op0", "operand0", "op1", "operand1"),
                             {"reverse0": "false", "reverse1": "false"}),
    "tensor_reduce": (("dst", "op", "data", "axis"), {"negate": "false", "keepdims": "false"}),
    "tensor_tensor_scan": (("dst", "data0", "data1", "initial", "op0", "op1"),
                           {"reverse0": "false", "reverse1": "false"}),
    "tensor_copy": (("dst", "src"), {}),
    "tensor_copy_predicated": (("dst", "src", "predicate"), {"reverse_pred": "false"}),
    "tensor_copy_dynamic_src": (("dst", "src"), {}),
    "tensor_copy_dynamic_dst": (("dst", "src"), {}),
    "memset": (("dst", "value"), {}),
    "reciprocal": (("dst", "data"), {}),
    "bn_stats": (("dst", "data"), {}),
    "bn_aggr": (("dst", "data"), {}),
    "max8": (("dst", "src"), {}),
    "nc_find_index8": (("dst", "data", "vals"), {}),
    "nc_match_replace8": (("dst", "data", "vals", "imm"), {"dst_idx": "none"}),
    "dropout": (("dst", "data", "prob"), {}),
    "nc_stream_shuffle": (("dst", "src", "shuffle_mask"), {}),
    "iota": (("dst", "pattern", "offset"), {"channel_multiplier": "0"}),
    "affine_select": (("dst", "pattern", "offset", "channel_multiplier", "on_true_tile", "on_false_value"),
                      {"cmp_op": "equal"}),
    "tensor_partition_reduce": (("dst", "op", "data"), {}),
    "local_gather": (("dst", "src_buffer", "index"), {"num_elem_per_idx": "1", "num_valid_indices": "none"}),
    "dma_copy": (("dst", "src"), {"dst_rmw_op": "none", "oob_mode": "error", "dge_mode": "unknown"}),
}


@pytest.mark.parametrize("mnemonic", sorted(NKI_2_27))
def test_forms_are_nki_2_27(mnemonic):
    """Positional operands in nki.isa's order, the optional ones with its defaults; an operand NKI lacks
    (or whose default differs) carries its `nki` note, which docs/isa.md shows."""
    spec = isa.BY_MNEMONIC[mnemonic]
    required, optional = NKI_2_27[mnemonic]
    ours = [o.name for o in spec.operands if o.required and o.nki is None]
    assert tuple(ours) == required
    for o in spec.operands:
        if o.required or o.nki is not None:
            continue
        assert o.name in optional, f"{mnemonic}: '{o.name}' is not NKI's and has no nki note"
        assert o.kind.format(o.default) == optional[o.name], o.name
    missing = set(optional) - {o.name for o in spec.operands}
    assert not missing, f"{mnemonic} lacks NKI's {sorted(missing)}"


def test_every_nki_instruction_is_listed():
    # ncsim's own rows, which nki.isa does not have: semaphores, and the call of a GpSimd program (the
    # custom C++ operator's path, docs/gpsimd.md)
    assert set(NKI_2_27) == {r.mnemonic for r in isa.TABLE} - {"sem_wait", "sem_signal", "gpsimd_call"}


def test_defaults_table_lists_every_optional_operand_and_each_difference():
    rows = {(m, n): (d, k) for m, n, d, k in defaults_rows()}
    for spec in isa.TABLE:
        for o in spec.operands:
            if not o.required:
                assert (spec.mnemonic, o.name) in rows
    assert rows[("affine_select", "cmp_op")] == ("equal", "the same")
    assert rows[("dropout", "seed")][1].startswith("not in NKI")
    assert "accumulate=None" in rows[("nc_matmul", "accumulate")][1]
    assert "## Defaults against NKI" in markdown() and isa.NKI_FORMS in markdown()


# ------------------------------------------------------------------ NKI order == keyword form
HEAD = """\
.sbuf t f32[128, 64]
.sbuf u f32[128, 64]
.sbuf w f32[128, 4, 16]
.sbuf col f32[128, 1]
.sbuf k3 f32[128, 4, 1]
.sbuf g f32[128, 16]
.sbuf ix u16[128, 1]
.sbuf s bf16[64, 64]
.sbuf m bf16[64, 512]
.sbuf st bf16[128, 64]
.sbuf mv bf16[128, 512]
.psum acc f32[64, 512]
.hbm x f32[128, 64] in
"""


def one(line: str) -> Instruction:
    obj = assemble(HEAD + line + "\n", "nki.s")
    streams = decode_object(obj)
    return next(i for instrs in streams.values() for i in instrs)


def encoded(line: str) -> tuple:
    instr = one(line)
    return instr.mnemonic, instr.engine, tuple(sorted(instr.operands.items(), key=lambda kv: kv[0]).__repr__())


SAME = [
    ("activation t, exp, u, bias=col, reduce_op=add, reduce_res=col, reduce_cmd=reset_reduce",
     "activation dst=t, op=exp, data=u, bias=col, reduce_op=add, reduce_res=col, reduce_cmd=reset_reduce"),
    ("activation_reduce t, exp, u, add, col", "activation_reduce dst=t, op=exp, data=u, reduce_op=add, reduce_res=col"),
    ("tensor_reduce col, maximum, t, 1, negate=true",
     "tensor_reduce dst=col, op=maximum, data=t, axis=[1], negate=true"),
    ("tensor_reduce k3, add, w, [2], keepdims=true", "tensor_reduce dst=k3, op=add, data=w, axis=2, keepdims=true"),
    ("tensor_partition_reduce t[0:1, :], add, u", "tensor_partition_reduce dst=t[0:1, :], op=add, data=u"),
    ("affine_select t, [[-1, 64]], 0, 1, u, -inf",
     ("affine_select dst=t, pattern=[[-1, 64]], offset=0, channel_multiplier=1, on_true_tile=u,"
      " on_false_value=-inf, cmp_op=equal")),
    ("iota t, [[1, 64]], 5", "iota dst=t, pattern=[[1, 64]], offset=5, channel_multiplier=0"),
    ("local_gather g, t, ix, num_elem_per_idx=1",
     "local_gather dst=g, src_buffer=t, index=ix, num_valid_indices=none"),
    ("dma_copy t, x, dst_rmw_op=add", "dma_copy dst=t, src=x, dst_rmw_op=add, oob_mode=error, dge_mode=unknown"),
    ("nc_matmul acc, s, m, tile_position=[0, 64], tile_size=[64, 64], is_transpose=true",
     ("nc_matmul dst=acc, stationary=s, moving=m, is_transpose=true, tile_position=[0, 64],"
      " tile_size=[64, 64], perf_mode=none")),
]


@pytest.mark.parametrize("nki_order,keywords", SAME)
def test_nki_positional_order_is_the_keyword_form(nki_order, keywords):
    assert encoded(nki_order) == encoded(keywords)


def test_causal_mask_transcribed_without_cmp_op_compares_equal():
    """nki.isa.affine_select's cmp_op defaults to nl.equal: a mask written without it keeps only the
    elements whose affine value is 0 (here the diagonal p == j), not those above 0."""
    instr = one("affine_select t[0:4, 0:4], [[-1, 4]], 0, 1, u[0:4, 0:4], -inf")
    assert instr["cmp_op"] == "equal"
    data = np.arange(1, 17, dtype=np.float32).reshape(4, 4)
    got = check(instr, np.random.default_rng(0), on_true_tile=data)["dst"]
    ninf = -np.inf
    assert got.tolist() == [[1, ninf, ninf, ninf], [ninf, 6, ninf, ninf], [ninf, ninf, 11, ninf],
                            [ninf, ninf, ninf, 16]]


def test_keepdims_keeps_the_reduced_axes_with_size_one():
    instr = one("tensor_reduce k3, add, w, 2, keepdims=true")
    data = np.arange(128 * 64, dtype=np.float32).reshape(128, 4, 16)
    got = check(instr, np.random.default_rng(0), data=data)["dst"]
    assert got.shape == (128, 4, 1) and np.array_equal(got[..., 0], data.sum(axis=2))
    with pytest.raises(AsmError, match=r"with keepdims=true reducing \[128, 4, 16\] over axis \[2\] gives"
                                       r" \[128, 4, 1\]"):
        one("tensor_reduce t[:, 0:4], add, w, 2, keepdims=true")


def test_num_valid_indices_none_means_all_and_zero_is_refused():
    assert one("local_gather g, t, ix")["num_valid_indices"] is None
    assert one("local_gather g, t, ix, num_valid_indices=16")["num_valid_indices"] == 16
    with pytest.raises(AsmError, match="0 is outside 1..4096"):
        one("local_gather g, t, ix, num_valid_indices=0")


# ------------------------------------------------------------------ what v2 lacks: refused by name
REFUSED = [
    ("nc_matmul acc, s, m, perf_mode=double_row", "perf_mode=double_row", "matmul-perf-mode"),
    ("nc_matmul acc, s, m, tile_position=[0, 0], tile_size=[32, 128]", "tile_size=[32, 128]", "NeuronCore-v3"),
    ("nc_matmul acc, s, m, tile_position=[0, 0]", "tile_position=[start_row, start_column] and tile_size",
     "matmul-pe-tile"),
    ("nc_matmul acc, s, m, tile_position=[32, 0], tile_size=[64, 128]", "tile_position=[32, 0] must be multiples",
     "matmul-pe-tile"),
    ("nc_matmul acc, st, mv, tile_position=[64, 0], tile_size=[64, 128]", "stationary [128, 64] does not fit",
     "matmul-pe-tile"),
    ("dma_copy t, x, dge_mode=hwdge", "dge_mode=hwdge", "dma-dge-mode"),
    ("dma_copy t, x, dst_rmw_op=maximum", "dst_rmw_op=maximum", "dma-rmw-op"),
    ("activation t, exp, u, reduce_op=maximum, reduce_cmd=reset_reduce", "reduce_op=maximum", "activation-reduce-op"),
    ("activation_reduce t, exp, u, multiply, col", "reduce_op=multiply", "activation-reduce-op"),
]


@pytest.mark.parametrize("line,named,rule", REFUSED)
def test_parameters_v2_lacks_are_refused_by_name(line, named, rule):
    with pytest.raises(AsmError) as e:
        one(line)
    assert named in e.value.message and rule in e.value.message


def test_parameters_v2_has_are_accepted():
    instr = one("nc_matmul acc, s, m, tile_position=[64, 0], tile_size=[64, 128], is_stationary_onezero=true,"
                " is_moving_onezero=true, is_transpose=true")
    assert instr["tile_size"] == (64, 128) and instr["perf_mode"] == "none"
    assert one("dma_copy t, x, dge_mode=swdge, oob_mode=skip")["dge_mode"] == "swdge"
