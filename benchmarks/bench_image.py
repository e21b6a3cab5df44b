"""From lock to image (issue 42), measured side by side in one run (`nox -s bench`). Needs podman and Debian's
`docker-registry` (a real registry on 127.0.0.1, started and stopped here); the base is the tests' Debian
bookworm image (tests/support/debian_image.py), made once.

1. The demo lock (built first) turned into an image over the test base and loaded into podman:
   `toolchain image --load podman`, warm (the base already read into the cache) and cold (a new cache: the base
   saved once), against `podman build --no-cache` of the equivalent Dockerfile (FROM base, COPY wheels,
   RUN pip install --force-reinstall --no-deps ...), each the median of --rounds.   goal: warm <= 10%
   Beside them: the image written as an OCI layout only (--oci-dir), and `podman load` alone of the archive the
   tool hands podman (the engine's own share, which no producer goes below).
2. The same over a base that holds vLLM (the B70 fix's shape: the demo's ARK rebuilt over it), where the tests'
   vllm-cpu environment is set up (tests/support/vllm_image.py); skipped, saying why, elsewhere.
3. Pushing to a registry that already holds the base (and an earlier image of the stack): the bytes sent
   against the new layer + config, and against the whole image.                     goal: only those travel
4. A container start importing the stack: `podman run --rm --read-only IMAGE python3 -c "import <every top-level
   module the layer installs>"`, the image with its .pyc (compiled by the base's Python) against the same lock's
   image made --no-bytecode; the import alone (timed inside the container) and the whole start.   goal: <= 0.5x
   Twice: the demo's few small modules, and the demo lock with a real PyPI closure of some size in its layer
   (sympy, mpmath and networkx wheels from PyPI through pip, kept under PYPI_CACHE: `import sympy, mpmath,
   networkx`, some 750 modules), each round the two images side by side; and how many modules a start of each
   compiles (`python3 -v` under PYTHONDONTWRITEBYTECODE: "code object from" a source, not a .pyc).
5. `--only-oci-dir`: the image written as an OCI layout (--oci-dir, nothing loaded) against `podman build
   --no-cache` of the same wheels over the same base, each round side by side: warm (the layer remembered),
   and the layer made again (its memo entry removed: the wheels staged and the layer written; the .pyc kept).
                                                                                          goal: <= 20%
6. `--only-load`: `toolchain image --load podman` warm (the layer remembered; the image removed from podman
   first, untimed) against `podman load` alone of the archive it hands podman, each round side by side.
                                                                                          goal: within 2x
   The tool runs under this interpreter (`sys.executable -m toolchain`, the source tree first on PYTHONPATH):
   the output says how that interpreter has the tool installed. An editable install (a developer's venv)
   imports its finder at every start, some ms a wheel install (a user's) does not pay: run the bench from a
   venv with the wheel installed (`pip install .`, not -e) for the figure a user sees.

    python -m benchmarks.bench_image [--rounds 3] [--json] [--only-start] [--only-oci-dir] [--only-load]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WHEELHOUSE = ROOT / "toolchain" / "demo_src" / "wheelhouse"


PYCACHE = Path(tempfile.gettempdir()) / "bench-image-pycache"
PYPI_CACHE = Path(tempfile.gettempdir()) / "bench-image-pypi"  # the PyPI closure's wheels, fetched once
PYPI_CLOSURE = ("sympy==1.13.3", "mpmath==1.3.0", "networkx==3.4.2")  # (pure-Python: one wheel each, any platform)


def _env() -> dict[str, str]:
    """The tool runs as an installed one does: its byte code written once and read (benchmarks/measure.py)."""
    from benchmarks.measure import installed_like_env

    env = installed_like_env(PYCACHE)
    if not env.get("CONTAINERS_CONF") and Path("/etc/containers/toolchain-tests.conf").is_file():
        env["CONTAINERS_CONF"] = "/etc/containers/toolchain-tests.conf"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _run(argv: list[str], *, cwd: Path = ROOT, timeout: float = 1800) -> str:
    done = subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"bench_image: {' '.join(argv)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return done.stdout


def _timed(argv: list[str], cwd: Path = ROOT) -> tuple[float, str]:
    started = time.perf_counter()
    out = _run(argv, cwd=cwd)
    return time.perf_counter() - started, out


def _base() -> str:
    """The Debian test image pinned by digest (made once by the tests' helper)."""
    sys.path.insert(0, str(ROOT))
    os.environ.update({k: v for k, v in _env().items() if k == "CONTAINERS_CONF"})
    from tests.support.debian_image import ensure_image

    name = ensure_image("podman")
    digest = _run(["podman", "image", "inspect", "--format", "{{.Digest}}", name]).strip()
    return f"{name.rsplit(':', 1)[0]}@{digest}"


def image(lock: Path, cache: Path, tag: str, base: str, *extra: str) -> tuple[float, dict[str, Any]]:
    """`toolchain image` timed; its --json document. The image is removed from podman first (not timed), so that
    each round stores it anew, as `podman build --no-cache` does."""
    subprocess.run(["podman", "rmi", "-f", tag], env=_env(), capture_output=True, timeout=300)
    seconds, out = _timed([sys.executable, "-m", "toolchain", "image", "--lock", str(lock), "--tag", tag,
                           "--base", base, "--cache-dir", str(cache), "--json", *extra])
    return seconds, dict(json.loads(out))


def podman_load_alone(oci: Path, archive: Path, tag: str) -> float:
    """`podman load` alone of the archive `toolchain image --load podman` hands podman (the layout without the
    base's layers, named by its index), timed after the image is removed: what no producer can go below."""
    import tarfile

    manifest = json.loads((oci / "index.json").read_text())["manifests"][0]["digest"].split(":", 1)[1]
    layers = json.loads((oci / "blobs" / "sha256" / manifest).read_text())["layers"]
    base_blobs = {d["digest"].split(":", 1)[1] for d in layers[:-1]}
    with tarfile.open(archive, "w") as tar:
        for path in sorted(oci.rglob("*")):
            if path.is_file() and path.name not in base_blobs:
                tar.add(path, arcname=path.relative_to(oci).as_posix())
    subprocess.run(["podman", "rmi", "-f", tag], env=_env(), capture_output=True, timeout=300)
    seconds, out = _timed(["podman", "load", "-q", "-i", str(archive)])
    if tag not in out:
        raise SystemExit(f"bench_image: podman load named the archive otherwise than {tag}: {out}")
    return seconds


def podman_build(lock: Path, base: str, ctx: Path, tag: str, python: str = "python3") -> float:
    """`podman build --no-cache` of FROM base + COPY wheels + RUN pip install --force-reinstall --no-deps."""
    shutil.rmtree(ctx, ignore_errors=True)
    (ctx / "wheels").mkdir(parents=True)
    closure = [d for d in json.loads(_run([sys.executable, "-c", (
        "import json,sys,tomllib; d=tomllib.load(open(sys.argv[1],'rb')); "
        "print(json.dumps([x['file'] for x in d.get('dependencies', [])]))"), str(lock)]))]
    for wheel in [*(WHEELHOUSE / f for f in closure), *sorted((lock.parent / "wheels").glob("*.whl"))]:
        shutil.copyfile(wheel, ctx / "wheels" / wheel.name)
    (ctx / "Containerfile").write_text(
        f"FROM {base}\nCOPY wheels /wheels\nRUN {python} -m pip install --no-index --no-cache-dir --force-reinstall "
        "--no-deps --break-system-packages /wheels/*.whl\n")
    seconds, _ = _timed(["podman", "build", "--no-cache", "-q", "--network=none", "-t", tag, str(ctx)])
    # (untimed: the image and the step images under it removed, or each round leaves two nameless ones behind)
    subprocess.run(["podman", "rmi", "-f", tag], env=_env(), capture_output=True, timeout=300)
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only-start", action="store_true", help="measure only the container start (4.)")
    ap.add_argument("--only-oci-dir", action="store_true", help="measure only the image written as a layout (5.)")
    ap.add_argument("--only-load", action="store_true", help="measure only --load podman against podman load (6.)")
    args = ap.parse_args()
    base = _base()
    results: dict[str, Any] = {"base": base, "load": _load(), "tool-install": install_kind()}
    with tempfile.TemporaryDirectory(prefix="bench-image-") as tmp_name:
        tmp = Path(tmp_name)
        _run([sys.executable, "-m", "toolchain", "build", "--recipe", "demo", "--cache-dir", str(tmp / "build-cache"),
              "--out", str(tmp / "out"), "--json"])
        lock = tmp / "out" / "stack.lock.toml"
        if args.only_oci_dir or args.only_load:
            if args.only_oci_dir:
                results["oci-dir"] = oci_dir(lock, tmp, base, args.rounds)
            if args.only_load:
                results["podman-load"] = loaded(lock, tmp, base, args.rounds)
            results["load-after"] = _load()
            if args.json:
                print(json.dumps(results, indent=2))
                return
            if args.only_oci_dir:
                _print_oci_dir(results, args.rounds)
            if args.only_load:
                _print_loaded(results, args.rounds)
            return
        results["start"] = start(lock, tmp, base, args.rounds)
        results["start-pypi"] = start(with_pypi_closure(lock, tmp / "pypi-out", tmp / "cold-pypi"), tmp, base,
                                      args.rounds, cache=tmp / "cold-pypi", modules=["sympy", "mpmath", "networkx"])
        if args.only_start:
            results["load-after"] = _load()
            if args.json:
                print(json.dumps(results, indent=2))
            else:
                _print_start(results["start"], args.rounds, "the demo")
                _print_start(results["start-pypi"], args.rounds, "the demo with sympy, mpmath and networkx from PyPI")
            return
        results["oci-dir"] = oci_dir(lock, tmp, base, args.rounds)
        cold = [image(lock, tmp / f"cold-{i}", "localhost/bench-image:1", base, "--load", "podman")[0]
                for i in range(args.rounds)]
        warm = [image(lock, tmp / "cold-0", "localhost/bench-image:1", base, "--load", "podman")[0]
                for _ in range(args.rounds)]
        oci = [image(lock, tmp / "cold-0", "localhost/bench-image:1", base, "--oci-dir", str(tmp / "oci"))[0]
               for _ in range(args.rounds)]
        floor = [podman_load_alone(tmp / "oci", tmp / "thin.tar", "localhost/bench-image:1") for _ in range(args.rounds)]
        built = [podman_build(lock, base, tmp / "ctx", "localhost/bench-image-dockerfile:1") for _ in range(args.rounds)]
        results["image"] = {"warm-s": statistics.median(warm), "cold-s": statistics.median(cold),
                            "oci-dir-s": statistics.median(oci), "podman-load-s": statistics.median(floor),
                            "podman-build-s": statistics.median(built)}
        results["image"]["warm-ratio"] = results["image"]["warm-s"] / results["image"]["podman-build-s"]
        results["image"]["cold-ratio"] = results["image"]["cold-s"] / results["image"]["podman-build-s"]
        results["image"]["oci-dir-ratio"] = results["image"]["oci-dir-s"] / results["image"]["podman-build-s"]
        results["image"]["podman-load-ratio"] = results["image"]["podman-load-s"] / results["image"]["podman-build-s"]
        results["push"] = _push(lock, tmp, base)
        results["vllm"] = _over_vllm(tmp, args.rounds)
        _run(["podman", "rmi", "-f", "localhost/bench-image:1", "localhost/bench-image-dockerfile:1"])
    if args.json:
        print(json.dumps(results, indent=2))
        return
    r, p = results["image"], results["push"]
    print(f"image of the demo lock over {base.split('@')[0]}, loaded into podman (median of {args.rounds}):")
    print(f"  toolchain image, warm cache   {r['warm-s']:7.2f} s   {r['warm-ratio']:6.1%} of podman build  (goal <= 10%)")
    print(f"  toolchain image, new cache    {r['cold-s']:7.2f} s   {r['cold-ratio']:6.1%} of podman build  (the base saved once)")
    print(f"  toolchain image --oci-dir     {r['oci-dir-s']:7.2f} s   {r['oci-dir-ratio']:6.1%} of podman build  "
          "(written, not loaded)")
    print(f"  podman load alone             {r['podman-load-s']:7.2f} s   {r['podman-load-ratio']:6.1%} of podman build  "
          "(the same image's archive, no base layers: the engine's own floor)")
    print(f"  podman build --no-cache       {r['podman-build-s']:7.2f} s")
    v = results["vllm"]
    if "skipped" in v:
        print(f"ARK rebuilt over a base that holds vLLM: skipped ({v['skipped']})")
    else:
        print(f"ARK rebuilt over a base that holds vLLM ({v['base-bytes'] / 1e9:.1f} GB), loaded into podman "
              f"(median of {args.rounds}):")
        print(f"  toolchain image, warm cache   {v['warm-s']:7.2f} s   {v['warm-ratio']:6.1%} of podman build")
        print(f"  podman build --no-cache       {v['podman-build-s']:7.2f} s")
    _print_start(results["start"], args.rounds, "the demo")
    _print_start(results["start-pypi"], args.rounds, "the demo with sympy, mpmath and networkx from PyPI")
    _print_oci_dir(results, args.rounds)
    results["load-after"] = _load()
    print(f"load (uptime) before: {results['load']}; after: {results['load-after']}")
    print("push to a registry that holds the base and the stack's earlier image:")
    print(f"  first push (empty registry)   {p['first-bytes']:>12,} bytes")
    print(f"  next push                     {p['next-bytes']:>12,} bytes  (new layer {p['layer-bytes']:,} + config "
          f"{p['config-bytes']:,} = {p['layer-bytes'] + p['config-bytes']:,}; the whole image {p['image-bytes']:,})")


START = ("import sys, time; n = len(sys.modules); t = time.perf_counter()\nfor m in sys.argv[1:]:\n try: __import__(m)\n"
         " except Exception: pass\nprint(time.perf_counter() - t, len(sys.modules) - n)")


def install_kind() -> str:
    """How this interpreter has the tool installed in its site-packages: "editable" (a .pth file there sets up
    setuptools' finder at every start), "wheel" (installed files; nothing at start), or "none" (the source tree
    on PYTHONPATH only). (Not importlib.metadata's first answer: the tree's own xpu_toolchain.egg-info, on
    sys.path when the bench runs from the tree, would shadow the installed one.)"""
    import site

    for folder in site.getsitepackages():
        for info in Path(folder).glob("xpu_toolchain-*.dist-info"):
            direct = info / "direct_url.json"
            editable = direct.is_file() and json.loads(direct.read_text()).get("dir_info", {}).get("editable")
            return "editable" if editable else "wheel"
    return "none"


def _load() -> str:
    """The machine's load averages (1, 5, 15 min), as `uptime` says them."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _top_modules(oci: Path, layer: str) -> list[str]:
    """Every module the layer installs into site-packages, dotted (`pkg.sub`; a package by its name): the whole
    stack, as a server that uses it imports it (one that fails to import is passed over, with or without .pyc)."""
    import gzip
    import tarfile

    with gzip.open(oci / "blobs" / "sha256" / layer.split(":", 1)[1]) as gz, tarfile.open(fileobj=gz) as tar:
        names = tar.getnames()
    out = set()
    for n in names:
        parts = n.split("/")
        if "dist-packages" in parts or "site-packages" in parts:
            rest = parts[parts.index("dist-packages" if "dist-packages" in parts else "site-packages") + 1:]
            if rest and rest[-1].endswith(".py") and all(p.isidentifier() for p in rest[:-1]) \
                    and rest[-1] != "__main__.py":
                mod = rest[:-1] if rest[-1] == "__init__.py" else [*rest[:-1], rest[-1][:-3]]
                if mod and all(p.isidentifier() for p in mod):
                    out.add(".".join(mod))
    return sorted(out)


def with_pypi_closure(lock: Path, out: Path, cache: Path) -> Path:
    """The demo lock and wheels with PYPI_CLOSURE added to its closure (`[[dependencies]]`, each wheel's PyPI URL
    and sha256): the wheels fetched from PyPI by pip once into PYPI_CACHE, and put where `toolchain image`
    looks for the closure's files in `cache` (so each run of the bench reads PyPI at most once)."""
    import hashlib

    PYPI_CACHE.mkdir(parents=True, exist_ok=True)
    have = {w.name.split("-", 2)[0].lower() + "==" + w.name.split("-", 2)[1] for w in PYPI_CACHE.glob("*.whl")}
    if not all(req in have for req in PYPI_CLOSURE):
        _run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--disable-pip-version-check",
              "-d", str(PYPI_CACHE), *PYPI_CLOSURE])
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(lock.parent, out)
    deps = cache / "images" / "deps"
    deps.mkdir(parents=True, exist_ok=True)
    entries = []
    for req in PYPI_CLOSURE:
        name, version = req.split("==")
        wheel = next(w for w in PYPI_CACHE.glob(f"{name}-{version}-*.whl"))
        data = wheel.read_bytes()
        shutil.copyfile(wheel, deps / wheel.name)
        entries.append(f'\n[[dependencies]]\nname = "{name}"\nversion = "{version}"\nfile = "{wheel.name}"\n'
                       f'url = "https://files.pythonhosted.org/packages/py3/{name[0]}/{name}/{wheel.name}"\n'
                       f'sha256 = "{hashlib.sha256(data).hexdigest()}"\nsize = {len(data)}\n'
                       f'index = "https://pypi.org/simple"\nrequired-by = ["demo-engine"]\n')
    (out / lock.name).write_text(lock.read_text() + "".join(entries))
    return out / lock.name


def _compiled(tag: str, modules: list[str]) -> dict[str, int]:
    """How many modules a start of `tag` importing `modules` compiles from source, in the layer and elsewhere
    (`python3 -v`: "code object from <source>"; from a .pyc it names the .pyc, quoted), and how many it loads
    from a .pyc; PYTHONDONTWRITEBYTECODE and a read-only root, so nothing is written."""
    argv = ["podman", "run", "--rm", "--read-only", "--network=none", "-e", "PYTHONDONTWRITEBYTECODE=1", tag,
            "python3", "-v", "-c", "import sys\nfor m in sys.argv[1:]:\n try: __import__(m)\n except Exception: pass",
            *modules]
    done = subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=1800)
    lines = [x[len("# code object from "):] for x in done.stderr.splitlines() if x.startswith("# code object from ")]
    source = [x for x in lines if not x.startswith("'")]
    return {"compiled-in-layer": sum("-packages/" in x for x in source),
            "compiled-elsewhere": sum("-packages/" not in x for x in source), "from-pyc": len(lines) - len(source)}


def start(lock: Path, tmp: Path, base: str, rounds: int, *, cache: Path | None = None,
          modules: list[str] | None = None) -> dict[str, Any]:
    """The container start importing the stack (`modules`, default every module the layer installs), with the
    layer's .pyc and without (--no-bytecode), the two side by side in each round: medians of the import alone
    (inside) and of the whole `podman run` (outside); and what a start of each compiles."""
    out: dict[str, Any] = {}
    kinds = (("pyc", ()), ("no-pyc", ("--no-bytecode",)))
    argv: dict[str, list[str]] = {}
    for kind, extra in kinds:
        tag = f"localhost/bench-image-start:{kind}"
        _, made = image(lock, cache or tmp / "cold-0", tag, base, "--load", "podman", "--oci-dir",
                        str(tmp / f"oci-{kind}"), *extra)
        mods = modules or _top_modules(tmp / f"oci-{kind}", made["layer"]["digest"])
        argv[kind] = ["podman", "run", "--rm", "--read-only", "--network=none", tag, "python3", "-c", START, *mods]
        out[kind] = {"modules": mods, "bytecode": made["bytecode"], "inside": [], "whole": [],
                     **_compiled(tag, mods)}
    for i in range(rounds + 1):  # (the first round warms the engine's caches: not counted)
        for kind, _ in kinds if i % 2 == 0 else reversed(kinds):
            seconds, said = _timed(argv[kind])
            took, imported = said.strip().splitlines()[-1].split()
            out[kind]["imported"] = int(imported)
            if i:
                out[kind]["inside"].append(float(took))
                out[kind]["whole"].append(seconds)
    for kind, _ in kinds:
        out[kind]["import-s"] = statistics.median(out[kind].pop("inside"))
        out[kind]["start-s"] = statistics.median(out[kind].pop("whole"))
        _run(["podman", "rmi", "-f", f"localhost/bench-image-start:{kind}"])
    out["import-ratio"] = out["pyc"]["import-s"] / out["no-pyc"]["import-s"]
    out["start-ratio"] = out["pyc"]["start-s"] / out["no-pyc"]["start-s"]
    return out


def _print_start(s: dict[str, Any], rounds: int, what: str) -> None:
    print(f"a container start importing {what} ({len(s['pyc']['modules'])} named, {s['pyc']['imported']} modules "
          f"imported), median of {rounds}, side by side:")
    print(f"  import, with the layer's .pyc    {s['pyc']['import-s'] * 1000:8.1f} ms   {s['import-ratio']:5.2f}x   "
          "(goal <= 0.5x)")
    print(f"  import, --no-bytecode            {s['no-pyc']['import-s'] * 1000:8.1f} ms")
    print(f"  whole podman run, with .pyc      {s['pyc']['start-s']:8.3f} s    {s['start-ratio']:5.2f}x")
    print(f"  whole podman run, --no-bytecode  {s['no-pyc']['start-s']:8.3f} s")
    for kind in ("pyc", "no-pyc"):
        c = s[kind]
        print(f"  modules compiled at a start ({kind}): {c['compiled-in-layer']} of the layer's, "
              f"{c['compiled-elsewhere']} others; {c['from-pyc']} read from .pyc")


def oci_dir(lock: Path, tmp: Path, base: str, rounds: int) -> dict[str, Any]:
    """`toolchain image --oci-dir` (nothing loaded) against `podman build --no-cache` of the same wheels over the
    same base, side by side in each round: warm (the layer remembered) and the layer made again (its memo entry
    removed first, untimed; the base's layout, the interpreter's answer and the .pyc kept)."""
    cache = tmp / "oci-cache"
    image(lock, cache, "localhost/bench-image:1", base, "--oci-dir", str(tmp / "oci"))  # (the base read once)
    memo = cache / "images" / "memo"
    warm, again, built = [], [], []
    for _ in range(rounds):
        warm.append(image(lock, cache, "localhost/bench-image:1", base, "--oci-dir", str(tmp / "oci"))[0])
        for entry in memo.glob("image-layer-*.json"):
            entry.unlink()
        again.append(image(lock, cache, "localhost/bench-image:1", base, "--oci-dir", str(tmp / "oci"))[0])
        built.append(podman_build(lock, base, tmp / "ctx", "localhost/bench-image-dockerfile:1"))
    out = {"warm-s": statistics.median(warm), "again-s": statistics.median(again),
           "podman-build-s": statistics.median(built)}
    out["warm-ratio"] = out["warm-s"] / out["podman-build-s"]
    out["again-ratio"] = out["again-s"] / out["podman-build-s"]
    return out


def _print_oci_dir(results: dict[str, Any], rounds: int) -> None:
    r = results["oci-dir"]
    print(f"the demo's image written as an OCI layout (--oci-dir), median of {rounds}, side by side "
          f"(load before {results['load']}):")
    print(f"  warm (the layer remembered)   {r['warm-s']:7.3f} s   {r['warm-ratio']:6.1%} of podman build  "
          "(goal <= 20%)")
    print(f"  the layer made again          {r['again-s']:7.3f} s   {r['again-ratio']:6.1%} of podman build  "
          "(the .pyc kept)")
    print(f"  podman build --no-cache       {r['podman-build-s']:7.3f} s")


def loaded(lock: Path, tmp: Path, base: str, rounds: int) -> dict[str, Any]:
    """`toolchain image --load podman` warm against `podman load` alone of the archive it hands podman, side by
    side in each round (the layout written once first, untimed: the base read, the layer remembered)."""
    cache, tag = tmp / "load-cache", "localhost/bench-image:1"
    image(lock, cache, tag, base, "--oci-dir", str(tmp / "oci-load"))
    image(lock, cache, tag, base, "--load", "podman")  # (untimed: the engine's caches warmed)
    tool, floor = [], []
    for _ in range(rounds):
        tool.append(image(lock, cache, tag, base, "--load", "podman")[0])
        floor.append(podman_load_alone(tmp / "oci-load", tmp / "thin.tar", tag))
    subprocess.run(["podman", "rmi", "-f", tag], env=_env(), capture_output=True, timeout=300)
    out = {"tool-s": statistics.median(tool), "podman-load-s": statistics.median(floor)}
    out["ratio"] = out["tool-s"] / out["podman-load-s"]
    return out


def _print_loaded(results: dict[str, Any], rounds: int) -> None:
    r = results["podman-load"]
    print(f"the demo's image loaded into podman, median of {rounds}, side by side (load before {results['load']}, "
          f"after {results['load-after']}):")
    print(f"  toolchain image --load podman {r['tool-s']:7.3f} s   {r['ratio']:5.2f}x podman load alone  "
          "(goal within 2x)")
    print(f"  podman load alone             {r['podman-load-s']:7.3f} s   (the same archive)")
    print(f"  the tool's own share          {(r['tool-s'] - r['podman-load-s']) * 1000:7.1f} ms  (its interpreter "
          f"has the tool installed: {results['tool-install']}{WHY_INSTALL.get(results['tool-install'], '')})")


WHY_INSTALL = {"editable": ": its finder costs each start some ms a user's wheel install does not",
               "none": ": the source tree on PYTHONPATH only"}


def _over_vllm(tmp: Path, rounds: int) -> dict[str, Any]:
    """The B70 fix's shape: the demo's ARK rebuilt over a base that holds vLLM (tests/support/vllm_image.py, the
    tests' vllm-cpu environment in the Debian image), its lock turned into an image, against `podman build` of
    the equivalent Containerfile over that base. Skipped where the vLLM environment is not set up."""
    sys.path.insert(0, str(ROOT))
    from tests.support import vllm_cpu, vllm_image
    from tests.support.debian_image import ensure_image

    ready, why = vllm_cpu.find()
    if ready is None:
        return {"skipped": why}
    try:
        base = vllm_image.ensure_base(ensure_image("podman"), ready)
    except vllm_image.Unavailable as exc:
        return {"skipped": str(exc)}
    recipe = vllm_image.ark_over(base, tmp / "vllm-recipes")
    _run([sys.executable, "-m", "toolchain", "build", "--recipe", str(recipe), "--cache-dir", str(tmp / "vllm-cache"),
          "--out", str(tmp / "vllm-out"), "--json"])
    lock = tmp / "vllm-out" / "stack.lock.toml"
    tag = "localhost/bench-image-vllm:1"
    image(lock, tmp / "vllm-cache", tag, base, "--load", "podman")  # the base saved into the cache once
    warm = [image(lock, tmp / "vllm-cache", tag, base, "--load", "podman")[0] for _ in range(rounds)]
    built = [podman_build(lock, base, tmp / "vllm-ctx", "localhost/bench-image-vllm-dockerfile:1",
                          vllm_image.VLLM_PYTHON) for _ in range(rounds)]
    size = _run(["podman", "image", "inspect", "--format", "{{.Size}}", base]).strip()
    _run(["podman", "rmi", "-f", tag, "localhost/bench-image-vllm-dockerfile:1"])
    warm_s, built_s = statistics.median(warm), statistics.median(built)
    return {"base": base, "base-bytes": int(size), "warm-s": warm_s, "podman-build-s": built_s,
            "warm-ratio": warm_s / built_s}


def _push(lock: Path, tmp: Path, base: str) -> dict[str, int]:
    """Push the stack's image, then the image of a changed lock (one more line: a new layer) to the same
    repository; the bytes each sends."""
    sys.path.insert(0, str(ROOT))
    from tests.support.registry import registry_available, run_registry

    ok, reason = registry_available()
    if not ok:
        raise SystemExit(f"bench_image: {reason}")
    other = tmp / "other"
    shutil.copytree(lock.parent, other)
    (other / lock.name).write_text(lock.read_text() + "# a new release of the same stack\n")
    with run_registry(tmp / "registry") as reg:
        os.environ["TOOLCHAIN_REMOTE_INSECURE"] = reg.address
        _, first = image(lock, tmp / "cold-0", f"{reg.address}/team/stack:1", base, "--push")
        _, second = image(other / lock.name, tmp / "cold-0", f"{reg.address}/team/stack:2", base, "--push")
        import requests

        manifest = requests.get(f"{reg.url}/v2/team/stack/manifests/2", timeout=30,
                                headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}).json()
    return {"first-bytes": first["pushed"]["uploaded-bytes"], "next-bytes": second["pushed"]["uploaded-bytes"],
            "layer-bytes": second["layer"]["size"], "config-bytes": manifest["config"]["size"],
            "image-bytes": sum(d["size"] for d in manifest["layers"]) + manifest["config"]["size"]}


if __name__ == "__main__":
    main()
