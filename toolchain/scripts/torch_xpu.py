"""torch in this interpreter as `toolchain doctor` reports it: the versions of the distributions named, torch's
version and XPU build, torch.xpu.is_available(), the device count and names (this one imports torch). Prints
one JSON object; an import or device error is in it (`torch_error`, `xpu_error`), not raised.

    python torch_xpu.py NAME...
"""

from __future__ import annotations

import importlib
import json
import sys
from importlib import metadata


def version(name: str) -> str:
    try:
        return metadata.version(name)
    except Exception:
        return ""


def main(names: list[str]) -> None:
    out: dict[str, object] = {"python": sys.executable, "versions": {n: version(n) for n in names}, "torch": ""}
    try:
        torch = importlib.import_module("torch")
    except Exception as exc:
        out["torch_error"] = "" if isinstance(exc, ModuleNotFoundError) and exc.name == "torch" else repr(exc)
    else:
        out["torch"] = str(getattr(torch, "__version__", ""))
        out["xpu_build"] = str(getattr(getattr(torch, "version", None), "xpu", None) or "")
        xpu = getattr(torch, "xpu", None)
        try:
            available = bool(xpu is not None and xpu.is_available())
            count = int(xpu.device_count()) if available and xpu is not None else 0
            out.update(available=available, count=count,
                       names=[str(xpu.get_device_name(i)) for i in range(count)] if xpu is not None else [])
        except Exception as exc:
            out.update(available=False, count=0, xpu_error=repr(exc))
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
