"""Suite-wide options."""


def pytest_addoption(parser):
    parser.addoption("--refresh-golden", action="store_true",
                     help="Rewrite the golden records in tests/golden/ from the current code (review the diff).")
