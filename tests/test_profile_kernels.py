"""tools/profile_kernels.py's mapping from a compiled kernel's addresses to its source lines (the
profiling itself needs perf and a minute or two of compilation: a developer runs it, not the suite)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import numba
import pytest

TOOL = Path(__file__).resolve().parent.parent / "tools" / "profile_kernels.py"
pytestmark = pytest.mark.skipif(shutil.which("objdump") is None or shutil.which("addr2line") is None,
                                reason="binutils (objdump, addr2line) is not installed")


def load_tool():
    spec = importlib.util.spec_from_file_location("profile_kernels", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@numba.njit(debug=True)
def _kernel(n):
    total = 0
    for i in range(n):
        total += i * i  # the line the kernel's code comes from
    return total


def test_a_kernels_code_maps_to_its_source_lines(tmp_path):
    tool = load_tool()
    assert _kernel(10) == 285
    cres = next(iter(_kernel.overloads.values()))
    obj = tmp_path / "kernel.o"
    code = cres.library.serialize_using_object_code()[2]
    obj.write_bytes(code[0] if isinstance(code, tuple) else code)
    section, offset, size = tool.symbol_place(str(obj), cres.fndesc.llvm_func_name)
    assert size > 0
    assert tool.symbol_place(str(obj), "no_such_symbol") is None
    places = subprocess.run(["addr2line", "-e", str(obj), "-j", section] + [hex(offset + o) for o in range(0, size, 4)],
                            check=True, capture_output=True, text=True).stdout.splitlines()
    lines = {tool.source_line(p) for p in places} - {""}
    source = {line.strip() for line in Path(__file__).read_text().splitlines()}
    assert lines and lines <= source, lines  # lines of this file, the kernel's (LLVM may fold some into others)
    assert lines & {"for i in range(n):", "total += i * i  # the line the kernel's code comes from", "return total"}
