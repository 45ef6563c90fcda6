"""The examples in the docs are files the tests run, so the docs cannot drift from the code."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from ncsim.asm.assembler import Assembler
from ncsim.cli import main
from ncsim.config import SOURCE_KEYS, Config

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


# --- docs/hardware.md: the hardware facts live in the repository, and code cites them there ---

HARDWARE = ROOT / "docs" / "hardware.md"
CITED = ("ncsim", "docs", "programs", "tests", "tools")  # plus the top-level files below
TOP_FILES = ("README.md", "Makefile", "pyproject.toml")
TEXT_SUFFIXES = {".py", ".md", ".s", ".toml", ".txt", ".cfg", ".json"}
ANCHOR = re.compile(r'<a id="([a-z0-9-]+)"></a>')
CITATION = re.compile(r"hardware\.md#([A-Za-z0-9_-]+)")


def _repo_text_files() -> list[Path]:
    files = [ROOT / name for name in TOP_FILES if (ROOT / name).exists()]
    for top in CITED:
        files += [p for p in (ROOT / top).rglob("*")
                  if p.is_file() and p.suffix in TEXT_SUFFIXES and "__pycache__" not in p.parts]
    return sorted(files)


def test_no_file_cites_the_spec_outside_the_repository():
    """The old spec lived beside the repository, in the steering directory, and was cited by section
    sign; a clone has none of it. Cite docs/hardware.md#<anchor> instead."""
    outside = "../" + "shared"  # split so that this file does not match itself
    section = "\u00a7"
    old_path = "spec/" + "neuroncore"
    offenders = []
    for path in _repo_text_files():
        text = path.read_text(errors="replace")
        for n, line in enumerate(text.splitlines(), 1):
            if outside in line or section in line or old_path in line:
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not offenders, "cite docs/hardware.md#<anchor> instead of the spec:\n" + "\n".join(offenders)


def test_every_hardware_md_citation_names_an_anchor_that_exists():
    anchors = set(ANCHOR.findall(HARDWARE.read_text()))
    assert {"sources", "engines", "clocks", "sync", "sbuf", "psum", "hbm", "dma", "cost", "numerics"} <= anchors
    missing = []
    for path in _repo_text_files():
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            missing += [f"{path.relative_to(ROOT)}:{n}: #{a}" for a in CITATION.findall(line) if a not in anchors]
    assert not missing, "docs/hardware.md has no such anchor:\n" + "\n".join(missing)


def test_hardware_md_names_every_source_key_and_indexes_every_parameter():
    text = HARDWARE.read_text()
    for key in SOURCE_KEYS:
        assert f"\n| {key} | " in text, f"docs/hardware.md#sources does not define the source key {key}"
    index = text.split('<a id="parameters"></a>')[1]
    unindexed = [f.name for f in dataclasses.fields(Config) if f"`{f.name}`" not in index]
    assert not unindexed, f"docs/hardware.md#parameters does not list {unindexed}"
    # and the prose says where each figure comes from: every parameter is named above the index too
    body = text.split('<a id="parameters"></a>')[0]
    assert not [f.name for f in dataclasses.fields(Config) if f"`{f.name}`" not in body]


def _slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: links reduced to their text, lower case, punctuation
    other than hyphens dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def test_every_link_to_an_anchor_of_the_docs_finds_it():
    """A link `[..](file.md#anchor)` or `[..](#anchor)` between README.md and docs/*.md names an
    explicit `<a id>` or a heading's anchor of its target."""
    files = {f.resolve(): f.read_text() for f in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]}
    anchors = {}
    for path, text in files.items():
        ids = set(ANCHOR.findall(text))
        fenced = False
        for line in text.splitlines():
            fenced ^= line.startswith("```")
            if not fenced and line.startswith("#"):
                ids.add(_slug(line.lstrip("#")))
        anchors[path] = ids
    broken = []
    for path, text in files.items():
        for target, anchor in re.findall(r"\]\(([^)\s#]*)#([^)\s]+)\)", text):
            if target.startswith("http"):
                continue
            dest = (path.parent / target).resolve() if target else path
            if dest in anchors and anchor not in anchors[dest]:
                broken.append(f"{path.relative_to(ROOT)}: {target}#{anchor}")
    assert not broken, "links to anchors that do not exist:\n" + "\n".join(broken)
