"""The image `doctor` tries the engine with when the recipe's image is not here: made on this machine, offline, by
`import` of a one-file root file system (no registry, no base image). Its only file is /bin/sleep, a static
x86_64 ELF the tool writes here (129 bytes: `pause()` in a loop), which the engine's `--entrypoint sleep` runs
until the container is removed. Another architecture gets no trial image (doctor says the start was not tried).
"""

from __future__ import annotations

import io
import platform
import struct
import tarfile
import tempfile
from pathlib import Path

from toolchain.target.container.engine import Engine, Image

TRIAL_IMAGE = "localhost/toolchain-doctor-trial:1"
_BASE = 0x400000
_PAUSE_LOOP = bytes.fromhex("b822000000" "0f05" "ebf7")  # mov eax, 34 (pause); syscall; jmp back


def sleeper_elf() -> bytes:
    """A static x86_64 Linux executable that waits (pause) until it is killed: an ELF header, one program
    header (the whole file loaded read+execute at 0x400000) and the code."""
    code_at = 64 + 56
    size = code_at + len(_PAUSE_LOOP)
    header = (b"\x7fELF\x02\x01\x01" + bytes(9)
              + struct.pack("<HHIQQQIHHHHHH", 2, 0x3E, 1, _BASE + code_at, 64, 0, 0, 64, 56, 1, 0, 0, 0))
    program = struct.pack("<IIQQQQQQ", 1, 5, 0, _BASE, _BASE, size, size, 0x1000)
    return header + program + _PAUSE_LOOP


def trial_image(engine: Engine) -> Image | None:
    """The trial image on `engine`, imported once (offline); None on a machine that is not x86_64 or when the
    engine cannot import it."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return None
    found = engine.inspect_image(TRIAL_IMAGE)
    if found is not None:
        return found
    with tempfile.TemporaryDirectory(prefix="toolchain-trial-") as tmp:
        tar = Path(tmp) / "rootfs.tar"
        with tarfile.open(tar, "w") as out:
            for folder in ("bin", "tmp"):
                info = tarfile.TarInfo(folder)
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                out.addfile(info)
            elf = sleeper_elf()
            info = tarfile.TarInfo("bin/sleep")
            info.size, info.mode = len(elf), 0o755
            out.addfile(info, io.BytesIO(elf))
        r = engine.query("import", str(tar), TRIAL_IMAGE, timeout=None)
        if r.returncode != 0:
            return None
    return engine.inspect_image(TRIAL_IMAGE)
