from ._C import compiler, rms_norm  # noqa: F401
