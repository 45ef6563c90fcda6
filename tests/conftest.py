"""Suite-wide options."""


def pytest_addoption(parser):
    parser.addoption("--refresh-golden", action="store_true",
                     help="Rewrite the golden records in tests/golden/ from the current code (review the diff).")


def pytest_configure(config):
    """The `ncsim` command's in-process runs (the `cli` fixtures) leave the test process's malloc as it
    is: keep_freed_memory (ncsim.runtime.heap) would make it hold its peak memory for the whole suite.
    tests/test_sweep.py and tests/runtime/test_run.py check it in processes of their own."""
    from ncsim.runtime import heap

    heap._kept = True
