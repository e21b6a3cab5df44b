"""A base environment: the image a recipe's components are rebuilt into and installed over (`[target] base =
"image@sha256:..."`, the B70 report's direct fix: rebuild ARK inside the container that holds vLLM). What the
image holds is read inside it (toolchain/scripts/base_image.py), without importing anything: every installed distribution with its version and
the sha256 of its `.dist-info/RECORD` (which names every installed file with its hash), and the Python and
torch build. The lock records it; `toolchain lock` reads it again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from toolchain.core.checks import NAME, STR, TABLES
from toolchain.core.probe_memo import remembered
from toolchain.core.record import field, record
from toolchain.core.serial import from_data, meta, to_table
from toolchain.errors import BuildError
from toolchain.target.facts import TargetInfo

if TYPE_CHECKING:
    from toolchain.target.base import Place


@record
class BaseDist:
    """One distribution installed in a base image: its name, version and the sha256 of its RECORD."""
    name: str = field(metadata=meta(check=NAME))  # canonical name
    version: str = field(metadata=meta(check=STR))
    # sha256 of its .dist-info/RECORD ("" when it has none)
    record_sha256: str = field(default="", metadata=meta(check=STR))


@record
class BaseEnv:
    """What the base image holds, as read inside it."""
    image: str = field(metadata=meta(check=NAME))  # as the recipe names it (pinned by digest)
    digest: str = field(default="", metadata=meta(check=STR))  # the digest of the image that was read
    python_version: str = field(default="", metadata=meta(check=STR))
    torch_version: str = field(default="", metadata=meta(check=STR))
    torch_xpu: str = field(default="", metadata=meta(check=STR))
    # a lock's [base] must list them (`lock.BASE_SCHEMA` makes this key required)
    dists: tuple[BaseDist, ...] = field(default=(), metadata=meta(check=TABLES))

    def version(self, name: str) -> str | None:
        return next((d.version for d in self.dists if d.name == name), None)


def read_base(runtime: Place, target: TargetInfo, image: str, python: str, memo_dir: Path | None = None) -> BaseEnv:
    """What the image holds (run in a container of it: the runtime's one-off container); `target`: the
    runtime's probe (the image's digest, torch). An image is immutable under its digest: with `memo_dir` the
    answer is remembered by digest and interpreter, so a warm build starts no container for it (`toolchain
    lock` passes none and reads the image again)."""
    if memo_dir is not None and target.image_digest:
        identity = {"image": image, "digest": target.image_digest, "python": python}
        saved = remembered(memo_dir, "base", identity,
                           lambda: (to_table(read_base(runtime, target, image, python), kebab=True), []))
        return from_data(BaseEnv, saved, kebab=True)
    done = runtime.run([python, runtime.script("base_image.py")], capture=True, check=False, timeout=300)
    try:
        data = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise BuildError(f"cannot read what the base image {image} holds with {python} "
                         f"(exit {done.returncode}): {(done.stderr or done.stdout).strip()[-300:]}",
                         hint="the base must have a Python with the stack installed; set [target] python to it") from None
    info = target
    return BaseEnv(image=image, digest=info.image_digest, python_version=str(data["python-version"]),
                   torch_version=info.torch_version, torch_xpu=info.torch_xpu,
                   dists=tuple(from_data(BaseDist, x, kebab=True) for x in data["dists"]))
