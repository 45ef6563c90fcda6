"""An NKI kernel's program printed as ncsim assembly (`ncsim nki --emit-asm DIR`, `nki.emit_asm`,
`nki.asm_text`) assembles with `ncsim asm` to the same object: the same bytes, so the same streams."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

import ncsim.nki.language as nl
from ncsim import nki
from ncsim.asm.assembler import assemble
from ncsim.asm.disasm import decode_object
from ncsim.asm.elf import read_elf, write_elf

ROOT = Path(__file__).resolve().parents[2]


@nki.jit
def softmax_rows(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(a.shape[0] // 128):
        x = nl.load(a[i * 128:(i + 1) * 128])
        y = nl.load(b[i * 128:(i + 1) * 128])
        nl.store(out[i * 128:(i + 1) * 128], nl.softmax(x * y, axis=1))
    return out


def test_the_python_api_text_assembles_to_the_same_object():
    a = np.ones((256, 64), np.float32)
    text = nki.emit_asm(softmax_rows, a, a)
    run = nki.last_run()
    assert ".kernel softmax_rows" in text and "activation_reduce" in text
    assert text == nki.asm_text(run)
    again = assemble(text, "softmax_rows.s")
    assert write_elf(again) == write_elf(run.obj)
    streams = decode_object(again)
    assert {e: [str(i) for i in s] for e, s in streams.items()} == \
        {e: [str(i) for i in s] for e, s in decode_object(run.obj).items()}


SCRIPT = """
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl

@nki.jit
def scale(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.exp(nl.load(a)) * 2.0)
    return out

x = np.zeros((4, 8), np.float32)
scale(x)
import sys
from ncsim.asm.elf import write_elf
open(sys.argv[1], "wb").write(write_elf(nki.last_run().obj))  # the object the first call ran
scale(x)
"""


def test_ncsim_nki_emit_asm_writes_what_ncsim_asm_assembles_identically(tmp_path):
    (tmp_path / "k.py").write_text(SCRIPT)
    ncsim = str(Path(sys.executable).parent / "ncsim")
    done = subprocess.run([ncsim, "nki", "--emit-asm", str(tmp_path / "asm"), str(tmp_path / "k.py"),
                           str(tmp_path / "ran.o")], check=False, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "asm").iterdir()) == ["scale.s", "scale_2.s"]
    src = tmp_path / "asm" / "scale.s"
    done = subprocess.run([ncsim, "asm", str(src), "-o", str(tmp_path / "scale.o")], check=False,
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    obj = read_elf((tmp_path / "scale.o").read_bytes(), "scale.o")
    assert (tmp_path / "scale.o").read_bytes() == (tmp_path / "ran.o").read_bytes()
    assert [i.mnemonic for s in decode_object(obj).values() for i in s if i.mnemonic.startswith(("act", "tensor"))] \
        == ["tensor_scalar", "activation"]
    assert '.file 0 "' + str(tmp_path / "k.py") + '"' in src.read_text()
