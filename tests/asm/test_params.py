"""`.param NAME [= DEFAULT]`: integers supplied from outside (Assembler(params=...), `ncsim asm/run -D`)."""

from __future__ import annotations

import numpy as np
import pytest

import ncsim
from ncsim.asm.assembler import Assembler, assemble
from ncsim.asm.elf import write_elf
from ncsim.errors import AsmError, NcsimError

# Shapes, loop bounds and slices from parameters; rows in tiles of 128, the last one partial.
COPY = """\
.param N
.param F = 64
.hbm x f32[N, F] in
.hbm y f32[N, F] out
.sbuf t f32[128, F]
.for i in 0..(N + 127) // 128
  dma_copy t[0 : N - i*128, :], x[i*128 : i*128 + 128, :]
  tensor_scalar t[0 : N - i*128, :], t[0 : N - i*128, :], multiply, 2.0
  dma_copy y[i*128 : i*128 + 128, :], t[0 : N - i*128, :]
.end
"""


def test_params_give_shapes_and_loop_bounds_as_consts_would():
    obj = assemble(COPY, "copy.s", params={"N": 300})
    assert {t.name: t.shape for t in obj.tensors} == {"x": (300, 64), "y": (300, 64), "t": (128, 64)}
    assert len(obj.lines["vector"]) == 3  # ceil(300 / 128) tiles
    as_consts = COPY.replace(".param N", ".const N = 300").replace(".param F = 64", ".const F = 64")
    assert write_elf(obj) == write_elf(assemble(as_consts, "copy.s"))


def test_a_given_value_wins_over_the_default():
    obj = assemble(COPY, "copy.s", params={"N": 5, "F": 3})
    assert {t.name: t.shape for t in obj.tensors}["x"] == (5, 3)


def test_params_run_with_values(tmp_path):
    path = tmp_path / "copy.s"
    path.write_text(COPY)
    x = np.arange(130 * 4, dtype=np.float32).reshape(130, 4)
    result = ncsim.run(path, {"x": x}, params={"N": 130, "F": 4}, sidecar=False)
    np.testing.assert_array_equal(result.outputs["y"], 2 * x)


@pytest.mark.parametrize("params, where, phrase", [
    ({}, "copy.s:1:8", "parameter 'N' has no value"),
    ({"N": 4, "FF": 1}, "copy.s", ("a value is given for 'FF', which the program does not declare with .param"
                                  " (its parameters: N, F)")),
    ({"N": 2.5}, "copy.s:1:8", "parameter 'N' is given 2.5: a parameter is an integer"),
    ({"N": True}, "copy.s:1:8", "parameter 'N' is given True"),
])
def test_param_errors(params, where, phrase):
    with pytest.raises(AsmError) as info:
        assemble(COPY, "copy.s", params=params)
    text = info.value.format()
    assert text.startswith(f"{where}: error: "), text
    assert phrase in text
    if "'FF'" in phrase:
        assert "did you mean 'F'" in text


def test_param_is_declared_once_like_any_name():
    with pytest.raises(AsmError, match="'N' is already a constant or loop variable"):
        assemble(".const N = 4\n.param N\n", "p.s", params={"N": 1})
    with pytest.raises(AsmError, match="parameter's default"):
        assemble(".param N = \n", "p.s")


def test_a_param_default_is_an_expression_of_earlier_names():
    asm = Assembler(params={"N": 8})
    asm.assemble(".param N\n.param H = N / 2\n.hbm x f32[H] in\n", "p.s")
    assert asm.program.tensors["x"].shape == (4,)


# --- the command line -------------------------------------------------------------------------------


def test_cli_asm_and_run_take_D(cli, tmp_path):
    (tmp_path / "copy.s").write_text(COPY)
    res = cli("asm", "copy.s", "-D", "N=256", "--define", "F=0x10")
    assert res.code == 0, res.err
    assert "3 tensors" in res.out
    res = cli("run", "copy.s", "-D", "N=200", "-q")
    assert res.code == 0, res.err
    assert "outputs: y float32[200, 64]" in res.out
    res = cli("run", "copy.o", "-D", "N=200")  # an object is assembled already
    assert res.code == 1 and "parameter values (-D) are for assembly source (.s): copy.o" in res.err, res.err


@pytest.mark.parametrize("args, message", [
    ((), "copy.s:1:8: error: parameter 'N' has no value"),
    (("-D", "N=4", "-D", "M=2"), "copy.s: error: a value is given for 'M'"),
    (("-D", "N=four"), "error: -D takes NAME=INTEGER (e.g. -D N=1024), not 'N=four'"),
    (("-D", "N"), "error: -D takes NAME=INTEGER"),
    (("-D", "N=1", "-D", "N=2"), "error: -D gives 'N' twice"),
])
def test_cli_D_errors(cli, tmp_path, args, message):
    (tmp_path / "copy.s").write_text(COPY)
    for command in ("asm", "run"):
        res = cli(command, "copy.s", *args)
        assert res.code == 1, res.out
        assert res.err.startswith(message), res.err
        assert "Traceback" not in res.err


def test_negative_D_value_reaches_the_program(cli, tmp_path):
    (tmp_path / "neg.s").write_text(".param K\n.const N = K + 10\n.hbm x f32[N] in\n")
    res = cli("asm", "neg.s", "-D", "K=-6")
    assert res.code == 0, res.err


def test_load_program_refuses_params_for_objects():
    obj = assemble(COPY, "copy.s", params={"N": 1})
    with pytest.raises(NcsimError, match="assembled already"):
        ncsim.run(obj, params={"N": 1})
