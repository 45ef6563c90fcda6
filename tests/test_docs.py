"""The examples in the docs are files the tests run, so the docs cannot drift from the code."""

from __future__ import annotations

from pathlib import Path

from ncsim.asm.assembler import Assembler
from ncsim.cli import main

ROOT = Path(__file__).resolve().parent.parent


def test_language_example_is_the_file_and_assembles():
    doc = (ROOT / "docs" / "language.md").read_text()
    example = (ROOT / "docs" / "examples" / "scale.s").read_text()
    assert "```\n" + example + "```" in doc, "docs/language.md's example differs from docs/examples/scale.s"
    a = Assembler()
    obj = a.assemble(example, "docs/examples/scale.s")
    assert obj.kernel == "scale" and [t.name for t in obj.tensors] == ["x", "y", "xt"]
    assert "waits" in a.program.sync_report and len(a.program.instructions) == 6


def test_readme_error_example(tmp_path, monkeypatch, capsys):
    readme = (ROOT / "README.md").read_text()
    src = "\n".join([".kernel k", ".psum acc f32[128, 512]", ".sbuf x f32[128, 512]"] + ["#"] * 5
                    + ["  tensor_tensor acc, acc, acc, power, engine=gpsimd"]) + "\n"
    (tmp_path / "k.s").write_text(src)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["ncsim", "asm", "k.s"])
    try:
        main()
    except SystemExit as e:
        assert e.code == 1
    err = capsys.readouterr().err
    assert err.strip() and err.strip() in readme, err


def test_readme_report_example_is_what_giou_prints(monkeypatch, capsys):
    """The README shows `ncsim run programs/giou.s` as it prints: keep it true."""
    readme = (ROOT / "README.md").read_text()
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr("sys.argv", ["ncsim", "run", "programs/giou.s", "--out", "/dev/null"])
    main()
    out = capsys.readouterr().out
    example = readme.split("per direction; HBM and Tensor engine utilisation; and a verdict on what bounds the kernel:\n\n```\n")[1]
    example = example.split("```")[0]
    lines = [ln for ln in out.splitlines() if not ln.startswith("simulated ")]  # host times vary
    assert example.rstrip("\n").splitlines() == [ln.replace("/dev/null", "programs/giou.npz") for ln in lines]
