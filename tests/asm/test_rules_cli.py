"""Every rule of ncsim.asm.rules that the engines also check at run time is refused first by `ncsim asm`:
for each, a one-instruction program breaking it, assembled through the CLI; the error names the file,
the line and the rule. A rule added without a case here fails test_every_rule_has_a_case."""

from __future__ import annotations

import subprocess

import pytest

from ncsim.asm.rules import ALL_RULES
from tests.asm.conftest import NCSIM


def S(dt: str, p: int, free: int, at: int = 0, start: int = 0, mem: str = "sbuf") -> str:
    """A raw access pattern: `p` partitions from `start`, `free` contiguous elements from byte `at`."""
    return f"{mem}.{dt}[{start}:{start + p}, @{at}, [1,{free}]]"


A, B, C = S("f32", 16, 4), S("f32", 16, 4, 64), S("f32", 16, 4, 128)
CASES = {
    "gpsimd-memory": f"tensor_copy dst={S('f32', 16, 4, mem='psum')}, src={A}, engine=gpsimd",
    "inputs-not-both-psum": (f"tensor_tensor dst={A}, data1={S('f32', 16, 4, mem='psum')},"
                             f" data2={S('f32', 16, 4, 64, mem='psum')}, op=add"),
    "alu-engine": f"tensor_scalar dst={A}, data={B}, op0=add, operand0=1.0, engine=scalar",
    "int32-add-multiply": f"tensor_tensor dst={S('i32', 16, 4)}, data1={S('i32', 16, 4, 64)}, data2={S('i32', 16, 4, 128)}, op=add",
    "bitwise-integers": f"tensor_tensor dst={A}, data1={B}, data2={C}, op=bitwise_and",
    "tensor-scalar-operators": f"tensor_scalar dst={A}, data={B}, op0=add, operand0=1.0, op1=maximum",
    "arithmetic-operators": (f"scalar_tensor_tensor dst={S('i16', 16, 4)}, data={S('i16', 16, 4, 64)}, op0=bitwise_and,"
                             f" operand0=1, op1=add, operand1={S('i16', 16, 4, 128)}"),
    "reduce-operator": f"tensor_reduce dst={S('f32', 16, 1)}, data={B}, op=divide, axis=[1]",
    "reduce-axes": f"tensor_reduce dst={S('f32', 16, 2)}, data={B}, op=add, axis=[1]",
    "reduce-negate": f"tensor_reduce dst={S('i16', 16, 1)}, data={S('i16', 16, 4, 64)}, op=bitwise_or, axis=[1], negate=true",
    "column": f"tensor_scalar dst={A}, data={B}, op0=add, operand0={S('f32', 16, 2, 256)}",
    "activation-dtypes": f"activation dst={A}, op=exp, data={B}, scale={S('bf16', 16, 1, 512)}",
    "reciprocal-bias": f"activation dst={A}, op=reciprocal, data={B}, bias={S('f32', 16, 1, 512)}",
    "predicate": f"tensor_copy_predicated dst={A}, src={B}, predicate={S('i32', 16, 4, 128)}",
    "matmul-shape": (f"nc_matmul dst={S('f32', 2, 8, mem='psum')}, stationary={S('bf16', 4, 2)},"
                     f" moving={S('bf16', 8, 8, 64)}"),
    "matmul-dtypes": (f"nc_matmul dst={S('f32', 2, 8, mem='psum')}, stationary={S('f32', 4, 2)},"
                      f" moving={S('bf16', 4, 8, 64)}"),
    "psum-bank": (f"nc_matmul dst={S('f32', 2, 8, 2040, mem='psum')}, stationary={S('bf16', 4, 2)},"
                  f" moving={S('bf16', 4, 8, 64)}"),
    "transpose": f"nc_transpose dst={S('f32', 32, 4)}, data={S('f32', 4, 33, 1024)}, engine=vector",
    "affine-pattern": f"iota dst={S('i32', 16, 4)}, pattern=[[1,3]], offset=0",
    "partition-reduce-shape": f"tensor_partition_reduce dst={S('f32', 2, 4)}, op=add, data={B}",
    "local-gather": f"local_gather dst={S('f32', 16, 4)}, src_buffer={S('f32', 16, 4, 64)}, index={S('u8', 16, 4, 128)}",
    "bn-stats": f"bn_stats dst={S('f32', 16, 6)}, data={S('f32', 16, 600, 64)}",
    "bn-aggr": f"bn_aggr dst={S('f32', 16, 2)}, data={B}",
    "max8": f"max8 dst={S('f32', 16, 8)}, src={S('f32', 16, 4, 64)}",
    "find-index8": f"nc_find_index8 dst={S('f32', 16, 8)}, data={S('f32', 16, 16, 64)}, vals={S('f32', 16, 8, 192)}",
    "match-replace8": (f"nc_match_replace8 dst={S('f32', 16, 16)}, data={S('f32', 16, 16, 64)},"
                       f" vals={S('f32', 16, 7, 192)}, imm=0.0"),
    "stream-shuffle": f"nc_stream_shuffle dst={S('f32', 16, 4)}, src={S('bf16', 16, 4, 64)}, shuffle_mask=[{', '.join(['0'] * 32)}]",
    "dynamic-index": f"tensor_copy_dynamic_src dst={A}, src={B}, index={S('i16', 1, 1, 512)}",
    "activation-reduce-op": (f"activation_reduce dst={A}, op=exp, data={B}, reduce_op=maximum,"
                             f" reduce_res={S('f32', 16, 1, 512)}"),
    "dma-rmw-op": "dma_copy dst=hbm.f32[@0, [1,4]], src=hbm.f32[@64, [1,4]], dst_rmw_op=multiply",
    "dma-dge-mode": "dma_copy dst=hbm.f32[@0, [1,4]], src=hbm.f32[@64, [1,4]], dge_mode=hwdge",
    "matmul-perf-mode": (f"nc_matmul dst={S('f32', 2, 8, mem='psum')}, stationary={S('bf16', 4, 2)},"
                         f" moving={S('bf16', 4, 8, 64)}, perf_mode=double_row"),
    "matmul-pe-tile": (f"nc_matmul dst={S('f32', 2, 8, mem='psum')}, stationary={S('bf16', 4, 2)},"
                       f" moving={S('bf16', 4, 8, 64)}, tile_position=[0, 0], tile_size=[32, 32]"),
    "ap-fields": f"tensor_copy dst={S('u8', 16, 2)}, src=sbuf.u8[0:16, @64, [40000,2]]",
}


def test_every_rule_has_a_case():
    assert sorted(CASES) == sorted(r.name for r in ALL_RULES)


@pytest.mark.parametrize("rule", sorted(CASES))
def test_the_assembler_refuses_what_the_run_refuses(rule, tmp_path):
    src = tmp_path / f"{rule}.s"
    src.write_text("# breaks one rule on the next line\n" + CASES[rule] + "\n")
    r = subprocess.run([str(NCSIM), "asm", str(src), "-o", str(tmp_path / "x.o")], capture_output=True, text=True, check=False,
                       timeout=120)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert f"{src}:2:" in r.stderr, r.stderr
    assert f"(rule {rule})" in r.stderr, r.stderr


def test_ap_fields_cover_the_engines_on_chip_patterns_only():
    """uint16 counts and int16 steps (the architecture guide's SBUF/PSUM access by an engine): an HBM row
    of more than 32767 elements, a DMA's on-chip side and an unstepped axis stay expressible."""
    from ncsim.asm.assembler import assemble
    from ncsim.errors import AsmError

    def problem(line: str) -> str | None:
        try:
            assemble(".sync manual\n" + line + "\n", "k.s")
        except AsmError as e:
            return e.message
        return None

    assert problem("tensor_copy sbuf.u8[0:16, @0, [1,65535]], sbuf.u8[0:16, @65536, [1,65535]]") is None
    assert "65536 elements on free axis 0" in problem("tensor_copy sbuf.u8[0:16, @0, [1,65536]],"
                                                      " sbuf.u8[0:16, @65536, [1,65536]]")
    assert problem(f"tensor_copy {S('f32', 16, 2)}, sbuf.f32[0:16, @131072, [-32768,2]]") is None
    assert "steps -32769 elements on free axis 0" in problem(
        f"tensor_copy {S('f32', 16, 2)}, sbuf.f32[0:16, @131076, [-32769,2]]")
    assert "steps 32768 elements on free axis 1" in problem(
        f"tensor_copy {S('f32', 16, 4)}, sbuf.f32[0:16, @64, [1,2], [32768,2]]")
    assert problem(f"tensor_copy {S('f32', 16, 2)}, sbuf.f32[0:16, @64, [40000,1], [1,2]]") is None
    # HBM patterns and DMA transfers are not covered: long rows and long steps assemble
    assert problem("dma_copy hbm.f32[@0, [1,70000]], hbm.f32[@524288, [1,70000]]") is None
    assert problem("dma_copy sbuf.u8[0:1, @0, [1,70000]], hbm.u8[@0, [100000,1], [1,70000]]") is None
    assert problem("dma_copy sbuf.f32[0:2, @0, [1,4]], hbm.f32[@0, [40000,2], [1,4]]") is None
