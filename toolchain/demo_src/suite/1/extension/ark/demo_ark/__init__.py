from ._ark import target  # noqa: F401
