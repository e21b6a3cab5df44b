"""A pure-Python package built by setuptools (tests/test_build_frontend.py)."""

VALUE = 42


def value() -> int:
    return VALUE
