"""The GpSimd engine's eight programmable cores: ncsim's model ISA for them, GpSimd programs (the
`.gpsimd NAME` sections of a source), and a numba interpreter per core with its cycle model.

- `ncsim.gpsimd.fields`: the operand kinds of core instructions (registers, register-or-immediate,
  branch targets, the calling instruction's program); the rows themselves are `isa.CORE_TABLE`.
- `ncsim.gpsimd.code`: a GpSimd program (`CoreProgram`): encoding, decoding, the flat code matrix
  the interpreter reads, and the parser of a `.gpsimd` section.
- `ncsim.gpsimd.interp`: the interpreter (numba) and the plain numpy reference of each instruction.

docs/gpsimd.md describes the ISA, the cycle model and the checks.
"""
