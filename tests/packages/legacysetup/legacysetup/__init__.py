"""A pure-Python package built by setup.py, its pyproject.toml without [build-system] (tests/test_build_frontend.py)."""

VALUE = 42
