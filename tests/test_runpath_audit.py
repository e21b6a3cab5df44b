"""A built wheel's shared object whose RUNPATH names a folder of the build machine (pyenv's LDSHARED adds
`-Wl,-rpath,<its prefix>/lib`) is reported by the native audit, naming the interpreter's prefix."""

from __future__ import annotations

import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from toolchain.resolve.native import WheelAudit, read_elf
from toolchain.resolve.verdicts import build_machine_paths


def _so(tmp: Path, *rpaths: str) -> Path:
    (tmp / "x.c").write_text("int x(void) { return 1; }\n")
    out = tmp / "x.so"
    flags = [f"-Wl,-rpath,{r}" for r in rpaths]
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,--enable-new-dtags", *flags, "-o", str(out), str(tmp / "x.c")],
                   check=True, timeout=120)
    return out


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_a_runpath_into_the_interpreters_prefix_is_named_and_origin_is_not(tmp_path):
    so = _so(tmp_path, "$ORIGIN/../lib", "/opt/py/3.11.7/lib", "/srv/other")
    with open(so, "rb") as f:
        obj = read_elf("pkg/x.so", f)
    assert obj.runpath == ("$ORIGIN/../lib", "/opt/py/3.11.7/lib", "/srv/other")
    built = WheelAudit("pkg-1.0-cp311-cp311-linux_x86_64.whl", "a" * 64, "pkg 1.0", "built", (obj,))
    lines = build_machine_paths([built], ["/opt/py/3.11.7"])
    assert len(lines) == 2, lines
    assert "RUNPATH /opt/py/3.11.7/lib, the build interpreter's prefix /opt/py/3.11.7" in lines[0]
    assert "RUNPATH /srv/other, a folder of the build machine" in lines[1]
    dependency = WheelAudit("dep-1.0-cp311-cp311-linux_x86_64.whl", "b" * 64, "dep 1.0", "dependency", (obj,))
    assert build_machine_paths([dependency], ["/opt/py/3.11.7"]) == []  # (what the build made, not what it pinned)


@pytest.mark.skipif("-rpath" not in (sysconfig.get_config_var("LDSHARED") or ""),
                    reason="this interpreter's LDSHARED adds no RUNPATH (pyenv's does)")
def test_a_demo_build_with_such_an_interpreter_says_so(demo_build):
    prefix = sysconfig.get_config_var("prefix")
    said = demo_build.result.stderr
    assert "demo_kernels/_C.cpython-" in said and f"the build interpreter's prefix {prefix}" in said, said
