from ._C import compiler, cutlass_revision, onednn_version, scale  # noqa: F401
