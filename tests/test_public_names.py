"""Every name a module of the package offers resolves: each name in a module's `__all__`, and each name of a
package's lazy export map (`_LAZY`: name -> the submodule it is imported from on first use), is looked up with
`getattr`. A lazy map naming a module that was renamed fails here, not in the first caller to ask for it.

And the CLI's entry module starts small: the toolchain modules `import toolchain.cli` loads stay within a
budget (each command imports what it runs when it runs)."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import toolchain

REPO_ROOT = Path(__file__).resolve().parent.parent
WALKED = list(pkgutil.walk_packages(toolchain.__path__, "toolchain."))  # (imports each package, no other module)
MODULES = sorted(m.name for m in WALKED)
PACKAGES = sorted(m.name for m in WALKED if m.ispkg)
CLI_BUDGET = 15  # toolchain modules `import toolchain.cli` loads: 12 when this was written (2026-12)


def offered(module: ModuleType) -> list[str]:
    """The names the module says it has: its `__all__` and its lazy map's."""
    return sorted({*getattr(module, "__all__", ()), *getattr(module, "_LAZY", {})})


@pytest.mark.parametrize("name", ["toolchain", *MODULES])
def test_every_name_a_module_offers_resolves(name):
    module = importlib.import_module(name)
    missing = []
    for attr in offered(module):
        try:
            getattr(module, attr)
        except (AttributeError, ImportError) as err:
            missing.append(f"{attr}: {err!r}")
    assert missing == []


@pytest.mark.parametrize("name", ["toolchain", *PACKAGES])
def test_a_lazy_name_is_in_all_and_its_module_exists(name):
    module = importlib.import_module(name)
    lazy = getattr(module, "_LAZY", {})
    assert set(lazy) <= set(getattr(module, "__all__", ()))
    for attr, home in lazy.items():
        assert importlib.util.find_spec(f"{name}.{home}") is not None, f"{attr}: no module {name}.{home}"


def test_the_lazy_maps_are_found():  # (the walk sees the packages that keep one)
    lazy = {m for m in PACKAGES if hasattr(importlib.import_module(m), "_LAZY")}
    assert {"toolchain.resolve", "toolchain.target"} <= lazy


def test_importing_the_cli_loads_few_toolchain_modules():
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", "import toolchain.cli"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = sorted(line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:"))
    ours = [m for m in loaded if m == "toolchain" or m.startswith("toolchain.")]
    assert "toolchain.cli" in ours
    assert len(ours) <= CLI_BUDGET, ours
