"""STAND-IN for torch in the offline demo and the tests. It is NOT torch: a kernel package declares that it
is built against it (`built-against = ["standin-torch"]`), so the lock records its build (e.g. 2.14.0+xpu) and
the ABI check compares it with the closure's, exactly as for the real torch XPU wheel."""
from importlib.metadata import version

__version__ = version("standin-torch")
