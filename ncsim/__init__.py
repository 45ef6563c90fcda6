"""ncsim: a simulator of one AWS NeuronCore-v2 (Trainium1 / Inferentia2).

    import ncsim
    result = ncsim.run("programs/giou.s")     # see ncsim.runtime.run.run
"""

from __future__ import annotations

from typing import Any

from ncsim import classcache

classcache.install()  # before any of ncsim's dataclasses is defined


def run(*args: Any, **kwargs: Any) -> Any:
    """Run a kernel: `ncsim.runtime.run.run` (imported on first use, so `import ncsim` stays light)."""
    from ncsim.runtime.run import run as _run

    return _run(*args, **kwargs)


def sweep(*args: Any, **kwargs: Any) -> Any:
    """Run programs over a grid of hardware parameters on Dask: `ncsim.sweeps.sweep` (a DataFrame;
    needs the extra ncsim[sweep]). The module `ncsim.sweeps` also has `summary`, `plot`, `load_grid`."""
    from ncsim.sweeps import sweep as _sweep

    return _sweep(*args, **kwargs)
