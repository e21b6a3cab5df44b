"""Pre-flight for `--no-build-isolation`: the build requirements a source tree declares must already be
installed in the target interpreter, since pip will not install them. Checked inside the target."""

from __future__ import annotations

import shlex

from toolchain.errors import BuildError

CHECK = r"""
import os, re, sys
from importlib import metadata
path = os.path.join(sys.argv[1], "pyproject.toml")
if not os.path.exists(path):
    sys.exit(0)
text = open(path, encoding="utf-8").read()
try:
    import tomllib
    reqs = tomllib.loads(text).get("build-system", {}).get("requires", [])
except ImportError:
    m = re.search(r"\[build-system\][^\[]*?requires\s*=\s*\[(.*?)\]", text, re.S)
    reqs = re.findall(r"[\"']([^\"']+)[\"']", m.group(1)) if m else []
missing = []
for req in reqs:
    if ";" in req:
        continue  # environment markers: too rare in build requirements to evaluate here
    name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
    if not name:
        continue
    try:
        metadata.distribution(name.group(1))
    except metadata.PackageNotFoundError:
        missing.append(req)
print("\n".join(missing))
"""


def check_build_requires(ws, python: str, src: str, what: str, log) -> None:
    r = ws.run([python, "-c", CHECK, src], env={}, cwd=src, log=log, capture=True)
    missing = [line for line in r.stdout.splitlines() if line.strip()]
    if missing:
        raise BuildError(f"{what}: build requirements missing in the target interpreter {python}: "
                         + ", ".join(missing),
                         hint="builds use --no-build-isolation, so install them there first: "
                              + shlex.join([python, "-m", "pip", "install", *missing]))
