"""What an image layer needs to know of a base image's interpreter, read inside it: where pip would install
(sysconfig's scheme, each folder with its symbolic links resolved), the interpreter's path as invoked (the
console scripts' shebang), its Python tag, ABI, platform and C library, and, for each distribution named on
the command line that is installed inside that scheme, the files `pip uninstall` would remove (its RECORD's
files that exist, their `__pycache__` bytecode) and the folders that would be left empty. Prints one JSON
object; whether the interpreter is externally managed (PEP 668) too."""

from __future__ import annotations

import json
import os
import sys
import sysconfig

try:
    from importlib import metadata
except ImportError:  # Python < 3.8: no distribution is read (nothing replaced is found)
    metadata = None  # type: ignore[assignment]


def canonical(name: str) -> str:
    out = name.strip().lower()
    for ch in "_.":
        out = out.replace(ch, "-")
    while "--" in out:
        out = out.replace("--", "-")
    return out


def inside(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def owned_files(dist: object, dist_info: str) -> list[str]:
    """The existing files of a distribution's RECORD (absolute, links resolved) and their bytecode."""
    site_dir = os.path.dirname(dist_info)
    out = set()
    for line in (dist.read_text("RECORD") or "").splitlines():  # type: ignore[attr-defined]
        rel = line.rsplit(",", 2)[0].strip('"') if line.strip() else ""
        if not rel:
            continue
        path = os.path.normpath(os.path.join(site_dir, rel))
        if os.path.lexists(path):
            out.add(os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path)))
        if path.endswith(".py"):
            cache = os.path.join(os.path.dirname(path), "__pycache__")
            stem = os.path.basename(path)[:-3] + "."
            if os.path.isdir(cache):
                out.update(os.path.join(os.path.realpath(cache), f) for f in os.listdir(cache) if f.startswith(stem))
    for name in os.listdir(dist_info):  # what pip uninstall removes with the .dist-info whatever RECORD says
        out.add(os.path.join(os.path.realpath(dist_info), name))
    return sorted(out)


def emptied_dirs(files: list[str], roots: list[str]) -> list[str]:
    """Folders below the scheme's roots that hold nothing but `files` (so pip leaves them empty, or removes them)."""
    gone = set(files)
    candidates = set()
    for f in files:
        d = os.path.dirname(f)
        while inside(d, roots) and d not in roots:
            candidates.add(d)
            d = os.path.dirname(d)
    out = []
    for d in sorted(candidates):
        whole = True
        for top, dirs, names in os.walk(d):
            if any(os.path.join(top, n) not in gone for n in names) or \
                    any(os.path.islink(os.path.join(top, n)) and os.path.join(top, n) not in gone for n in dirs):
                whole = False
                break
        if whole:
            out.append(d)
    return out


def main() -> None:
    paths = sysconfig.get_paths()
    scheme = {k: os.path.realpath(paths[k]) for k in ("purelib", "platlib", "scripts", "data", "include")}
    roots = [scheme["purelib"], scheme["platlib"]]
    wanted = {canonical(n) for n in sys.argv[1:]}
    replaced = []
    seen = set()
    for dist in (metadata.distributions() if metadata is not None else []):
        name = canonical(dist.metadata["Name"] or "")
        path = getattr(dist, "_path", None)
        if name not in wanted or name in seen or path is None:
            continue
        seen.add(name)  # the first of a name on sys.path is the one imported
        dist_info = os.path.realpath(str(path))
        if not inside(os.path.dirname(dist_info), roots):
            continue  # outside the scheme (a system package): pip leaves it where it is, the new one shadows it
        files = owned_files(dist, dist_info)
        replaced.append({"name": name, "version": dist.version, "dist-info": dist_info, "files": files,
                         "dirs": emptied_dirs(files, [*roots, scheme["scripts"], scheme["data"]])})
    impl = sys.implementation.name
    soabi = sysconfig.get_config_var("SOABI") or ""
    libc = os.confstr("CS_GNU_LIBC_VERSION") if hasattr(os, "confstr") else ""
    print(json.dumps({
        "executable": sys.executable, "python-version": "{}.{}.{}".format(*sys.version_info[:3]),
        "python-tag": "{}{}{}".format({"cpython": "cp"}.get(impl, impl), *sys.version_info[:2]),
        "soabi": soabi, "abiflags": getattr(sys, "abiflags", ""),
        "platform": sysconfig.get_platform().replace("-", "_").replace(".", "_"),
        "glibc": (libc or "").split(" ")[-1] if (libc or "").startswith("glibc") else "",
        "scheme": scheme, "replaced": sorted(replaced, key=lambda r: r["name"]),
        # PEP 668: the distribution manages this interpreter's packages (its marker file, when there is one)
        "externally-managed": externally_managed()}, sort_keys=True))


def externally_managed() -> str:
    """The path of the interpreter's EXTERNALLY-MANAGED marker (PEP 668), "" when it has none."""
    try:
        marker = os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")
    except KeyError:
        return ""
    return marker if os.path.isfile(marker) else ""


if __name__ == "__main__":
    main()
