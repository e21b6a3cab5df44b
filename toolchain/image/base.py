"""The base image: its manifest, config and blobs as an OCI layout kept in the cache by digest (`podman save
--uncompressed --format oci-dir`: the manifest the engine holds, whose sha256 IS the pinned digest, checked),
and its interpreter's facts, read in a container of it (toolchain/scripts/image_python.py)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolchain.console import UI
from toolchain.core.fs import atomic_write_bytes, publish_dir, sha256_bytes, sha256_file
from toolchain.core.owned import CorruptRecord, safe_under
from toolchain.core.proc.runner import CommandFailed, run
from toolchain.core.record import record
from toolchain.core.regex import SHA256, SHA256_HEX, Regex
from toolchain.errors import BuildError, UsageError

if TYPE_CHECKING:
    from toolchain.sharing.registry import Registry

ACCEPT = ", ".join(("application/vnd.oci.image.manifest.v1+json", "application/vnd.oci.image.index.v1+json",
                   "application/vnd.docker.distribution.manifest.v2+json",
                   "application/vnd.docker.distribution.manifest.list.v2+json"))
ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
PINNED = Regex(rf"^(?P<name>[^@\s]+)@(?P<digest>sha256:{SHA256})$")


@record
class Replaced:
    """A distribution the base holds inside the install scheme that the layer installs again: what pip's
    uninstall would remove (files, and the folders it leaves empty), absolute paths in the image."""
    name: str
    version: str
    files: tuple[str, ...] = ()
    dirs: tuple[str, ...] = ()


@record
class Interpreter:
    """The base image's interpreter as read inside it."""
    executable: str
    python_version: str
    python_tag: str          # cp311
    soabi: str               # cpython-311-x86_64-linux-gnu
    platform: str            # linux_x86_64
    glibc: str               # 2.36 ("" for another C library)
    scheme: dict[str, str]   # purelib, platlib, scripts, data, include: folders with links resolved
    replaced: tuple[Replaced, ...] = ()
    externally_managed: str = ""  # its PEP 668 marker file ("" when the interpreter has none)


@record
class BaseImage:
    """A base image pinned by digest, kept as an OCI layout (`layout`): its manifest and config. Read from a
    registry (`registry`: host, repository, plain HTTP), its layers are downloaded when a delivery needs them."""
    name: str                # as given, NAME@sha256:...
    digest: str
    layout: Path
    manifest: dict[str, Any]
    config: dict[str, Any]
    registry: tuple[str, str, bool] | None = None

    def blob(self, digest: str) -> Path:
        """Where the layout keeps the blob `digest` (downloaded first from the base's registry when absent)."""
        path = self.layout / "blobs" / "sha256" / digest.split(":", 1)[1]
        if not path.exists() and self.registry is not None:
            size = next(int(d["size"]) for d in self.manifest["layers"] if d["digest"] == digest)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            registry_for(*self.registry).blob_to({"digest": digest, "size": size, "mediaType": "layer"}, tmp, size)
            os.replace(tmp, path)
        return path


def registry_for(host: str, repository: str, insecure: bool = False, timeout: float = 60.0) -> Registry:
    """The project's registry client (sharing/registry.py, its credentials) for one repository: the one place
    the image package names it."""
    from toolchain.recipe.cachespec import RemoteURL
    from toolchain.sharing.registry import Registry
    from toolchain.sharing.settings import RemoteSettings

    return Registry(RemoteSettings(RemoteURL(host, repository), insecure=insecure, timeout=timeout),
                    repository=repository)


def plain_http(host: str) -> bool:
    """Whether the registry `host` is opted in to plain HTTP by $TOOLCHAIN_REMOTE_INSECURE (comma-separated
    hosts, as for the remote wheel cache)."""
    from toolchain.sharing.settings import ENV_INSECURE

    return host.lower() in {h.strip().lower() for h in os.environ.get(ENV_INSECURE, "").split(",") if h.strip()}


def split_name(name: str) -> tuple[str, str]:
    """(registry host, repository) of an image name; host "" when it names none (a local name)."""
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return "", name


def pinned(image: str, origin: str) -> tuple[str, str]:
    """(name, digest) of `NAME@sha256:<64 hex>`; UsageError (exit 2) for an image not pinned by digest."""
    m = PINNED.match(image.strip())
    if not m:
        raise UsageError(f"{origin}: {image!r} is not pinned by digest",
                         hint="name the base as NAME@sha256:<64 hex> (`podman image inspect --format "
                              "'{{.Digest}}' NAME` shows it)")
    return m["name"], m["digest"]


def engine_env() -> dict[str, str]:
    """The environment the engine commands run with (this one: CONTAINERS_CONF, DOCKER_HOST pass through)."""
    return dict(os.environ)


# what podman ("image not known") and docker ("No such image") say of an image they do not hold, and docker's
# client when no daemon answers (it holds nothing that can be read)
NOT_HELD = Regex(r"image not known|no such image|cannot connect to the docker daemon", re.I)


def inspected(engine: str, ref: str, fmt: str = "") -> str | None:
    """What `ENGINE image inspect [--format FMT] REF` prints; None when the engine does not hold `ref` (or is not
    installed). Any other failure (podman's storage unreadable, say) is not "not held": CommandFailed naming the
    command and the engine's message, so that no caller asks a registry in its place or takes the name for free."""
    got = run([engine, "image", "inspect", *(["--format", fmt] if fmt else []), ref], env=engine_env(),
              capture=True, check=False, timeout=120)
    if got.returncode == 0:
        return got.stdout
    if not got.started or NOT_HELD.search(got.stderr):
        return None
    raise CommandFailed(got.argv, got.returncode, None, got.stderr,
                        hint=f"`{engine} image inspect {ref}` failed otherwise than for want of the image: see "
                             f"{engine}'s message above and try again")


def keep_base(image: str, cache_dir: Path, engine: str, ui: UI, *, insecure: bool = False,
              platform: str = "linux_x86_64") -> BaseImage:
    """The base as an OCI layout under `<cache>/images/base/<digest>`: a base named on a registry is read from
    it (the manifest of `platform` when the digest names an index; layers downloaded when needed), a local one
    saved once from `engine`; BuildError when what the engine holds is not that digest."""
    name, digest = pinned(image, "the base image")
    host, repository = split_name(name)
    if host and host != "localhost":
        return _fromregistry_for(image, host, repository, digest, cache_dir / "images" / "base", insecure, platform)
    final = cache_dir / "images" / "base" / digest.split(":", 1)[1]
    if not (final / "index.json").is_file():
        tmp = final.parent / f".{final.name}.{os.getpid()}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        log = cache_dir / "images" / "logs" / f"{final.name[:16]}.log"
        held(image, engine, ui, log)
        with ui.status(f"reading the base image {image}"):
            run([engine, "save", "--uncompressed", "--format", "oci-dir", "-o", str(tmp), image], env=engine_env(),
                log=log, timeout=3600)
        _check_saved(tmp, image, digest, engine)
        publish_dir(tmp, final)
    index = json.loads((final / "index.json").read_text())
    mdigest = index["manifests"][0]["digest"]
    layout = final
    manifest = json.loads((layout / "blobs" / "sha256" / mdigest.split(":", 1)[1]).read_bytes())
    config = json.loads((layout / "blobs" / "sha256" / manifest["config"]["digest"].split(":", 1)[1]).read_bytes())
    return BaseImage(name=name, digest=digest, layout=layout, manifest=manifest, config=config)


def held(image: str, engine: str, ui: UI, log: Path, *, insecure: bool = False) -> None:
    """`engine` holds the base `image` (NAME@sha256:...) under that name: pulled when it does not (podman over
    plain HTTP when `insecure`). UsageError (exit 2) when it holds the digest under other names only and `image`
    names no registry to pull it from (`localhost/...`: another image's digest given with this name); a registry's
    name is pulled under that name; BuildError naming the base when it cannot be pulled."""
    name, digest = pinned(image, "the base image")
    got = inspected(engine, image, "{{json .RepoDigests}}|{{json .RepoTags}}")
    if got is not None:
        digests, _, tags = got.strip().partition("|")
        names = {d.split("@", 1)[0] for d in json.loads(digests or "[]") or []} | \
            {t.rsplit(":", 1)[0] for t in json.loads(tags or "[]") or []}
        registry = name.split("/", 1)[0] if "/" in name else ""
        pullable = ("." in registry or ":" in registry) and registry.split(":", 1)[0] != "localhost"
        if names and name not in names and not pullable:  # (a registry's name is pulled: the same bytes, its name)
            raise UsageError(f"the base image {image}: {engine} holds {digest} as {', '.join(sorted(names))}, not as "
                             f"{name}", hint="name the base as the engine holds it (`podman images --digests` lists "
                                             "them), or tag it with that name first")
        if not names or name in names:
            return
    plain_http = ["--tls-verify=false"] if insecure and engine == "podman" else []
    with ui.status(f"pulling the base image {image}"), _pull_auth(name, engine) as auth:
        done = run([engine, "pull", *plain_http, *auth, image], env=engine_env(), log=log, capture=True, check=False,
                   timeout=3600)
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines() or [f"exit {done.returncode}"]
        plain = ("; a registry that speaks plain HTTP: pass --remote-insecure" if engine == "podman" else
                 "; docker reads a plain-HTTP registry only when its daemon lists it in insecure-registries")
        raise BuildError(f"the base image {image} is not in {engine} and cannot be pulled: {why[-1]}",
                         hint=f"check the base's name and digest; `{engine} login` for a private registry{plain}")


@contextlib.contextmanager
def _pull_auth(name: str, engine: str) -> Iterator[list[str]]:
    """podman's `--authfile FILE` for pulling `name` with the credentials the tool's own registry client takes
    from TOOLCHAIN_REGISTRY_USERNAME/PASSWORD (a file of podman's auth.json form, readable by this user alone,
    removed after: the password never on a command line); [] otherwise (podman reads its own login files)."""
    from toolchain.sharing.auth import ENV_PASSWORD, ENV_USERNAME

    host, _ = split_name(name)
    user, password = os.environ.get(ENV_USERNAME, ""), os.environ.get(ENV_PASSWORD, "")
    if engine != "podman" or not host or not user or not password:
        yield []
        return
    import tempfile

    with tempfile.TemporaryDirectory(prefix="toolchain-auth-") as folder:  # (mode 0700)
        auth = Path(folder) / "auth.json"
        token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        auth.write_text(json.dumps({"auths": {host: {"auth": token}}}))
        yield ["--authfile", str(auth)]


def names_of(digest: str, engine: str) -> list[str]:
    """Every NAME@`digest` under which `engine` holds an image of that manifest digest, a local name first (one
    named on a registry would be read from there); [] when it holds none."""
    if engine == "podman":
        got = run([engine, "images", "--format", "json"], env=engine_env(), capture=True, check=False, timeout=120)
        held = [str(d) for i in (json.loads(got.stdout or "[]") if got.returncode == 0 else [])
                for d in i.get("RepoDigests") or []]
    else:
        got = run([engine, "images", "--digests", "--no-trunc", "--format", "{{.Repository}}@{{.Digest}}"],
                  env=engine_env(), capture=True, check=False, timeout=120)
        held = got.stdout.split() if got.returncode == 0 else []
    names = {h.split("@", 1)[0] for h in held if h.endswith("@" + digest) and not h.startswith("<none>")}
    return [f"{n}@{digest}" for n in sorted(names, key=lambda n: (split_name(n)[0] not in ("", "localhost"), n))]


def _check_saved(layout: Path, image: str, digest: str, engine: str) -> None:
    """The saved layout holds the pinned manifest, or is made to: an engine keeps every manifest an image had
    (pulled, pushed, loaded) and `save` writes its latest; podman keeps each under its digest in its image store,
    taken when its sha256 is the pinned digest and its config and layers are the saved ones (a gzip layer of the
    tool's made again from the saved tar: `_regzip_ours`). BuildError otherwise."""
    index = json.loads((layout / "index.json").read_text())
    saved = index["manifests"][0]["digest"]
    blobs = layout / "blobs" / "sha256"
    if saved == digest and "sha256:" + sha256_file(blobs / saved.split(":", 1)[1]) == digest:
        return
    kept = _engine_manifest(image, digest, engine)
    if kept is not None:
        doc = json.loads(kept)
        why = _regzip_ours(doc, json.loads((blobs / saved.split(":", 1)[1]).read_bytes()), blobs)
        named = [doc["config"]["digest"], *(d["digest"] for d in doc["layers"])]
        missing = [d for d in named if not (blobs / d.split(":", 1)[1]).is_file()]
        if not missing:
            atomic_write_bytes(blobs / digest.split(":", 1)[1], kept)
            index["manifests"][0] = {**index["manifests"][0], "digest": digest, "size": len(kept)}
            atomic_write_bytes(layout / "index.json", json.dumps(index).encode())
            return
        shutil.rmtree(layout, ignore_errors=True)
        said = "; ".join(f"{d}: {why.get(d, 'not in what it saves')}" for d in missing)
        raise BuildError(f"{engine} holds {image}, but cannot give back every blob its manifest names ({engine} "
                         f"keeps a loaded layer as a tar, `{engine} save` gives the tar, not the gzip the "
                         f"manifest names): {said}",
                         hint="name the base on a registry that holds that digest (the same image, its layers "
                              "read from there), or make the base with `toolchain image --load podman`, whose "
                              "layer is made again from podman's tar")
    shutil.rmtree(layout, ignore_errors=True)
    raise BuildError(f"{engine} saves {image} with manifest {saved}, not the pinned {digest}",
                     hint="pull the image by that digest again (`podman pull NAME@DIGEST`), or pin the digest the "
                          "engine holds")


def _regzip_ours(doc: dict[str, Any], saved: dict[str, Any], blobs: Path) -> dict[str, str]:
    """The gzip layers `doc` (the pinned manifest) names that the saved layout lacks, made from the saved tar at
    the same place where that tar is the layer the config names (its diff_id) and the config's history says the
    tool made it: compressed as the tool compresses its layer and kept only when its sha256 is the digest `doc`
    names (podman keeps the tar of a layer it loaded, `save` cannot give back the gzip). Others stay missing
    (`_check_saved` says so, with the reason returned for each, by its digest); another tool's gzip is never
    tried (a futile pass over a layer of any size)."""
    from toolchain.image.gzipped import GZIP_TYPES, HISTORY_COMMENT, gzip_as_digest

    config = blobs / str(doc["config"]["digest"]).split(":", 1)[1]
    if not config.is_file() or len(saved.get("layers", [])) != len(doc["layers"]):
        return {}
    why: dict[str, str] = {}
    conf = json.loads(config.read_bytes())
    diff_ids = (conf.get("rootfs") or {}).get("diff_ids") or []
    made = [h.get("comment") == HISTORY_COMMENT for h in conf.get("history") or [] if not h.get("empty_layer")]
    count = len(doc["layers"])
    made = [False] * (count - len(made)) + made[-count:]  # (from the newest: a base may lack history)
    for layer, tar, diff_id, ours in zip(doc["layers"], saved["layers"], diff_ids, made, strict=False):
        target = blobs / str(layer["digest"]).split(":", 1)[1]
        plain = blobs / str(tar["digest"]).split(":", 1)[1]
        if target.is_file():
            continue
        if not ours or layer.get("mediaType") not in GZIP_TYPES:  # (not tried: its gzip is not ours to make again)
            why[layer["digest"]] = "a layer another tool compressed, whose gzip only that tool can make again"
            continue
        if tar["digest"] != diff_id or not plain.is_file():
            why[layer["digest"]] = "the tar the engine saves at its place is not the layer the config names"
            continue
        got = gzip_as_digest(plain, target, str(layer["digest"]))
        if got != layer["digest"]:
            why[layer["digest"]] = (f"its tar compressed as this tool compresses a layer is {got}: it was "
                                    "compressed otherwise (another tool's version or zlib)")
    return why


def _engine_manifest(image: str, digest: str, engine: str) -> bytes | None:
    """The manifest `digest` of `image` as podman's image store keeps it, when it does and it is that digest."""
    if engine != "podman":
        return None
    root = run([engine, "info", "--format", "{{.Store.GraphRoot}} {{.Store.GraphDriverName}}"], env=engine_env(),
               capture=True, check=False, timeout=120).stdout.split()
    ident = run([engine, "image", "inspect", "--format", "{{.Id}}", image], env=engine_env(), capture=True,
                check=False, timeout=120).stdout.strip()
    if len(root) != 2 or not SHA256_HEX.match(ident):
        return None
    key = base64.b64encode(f"manifest-{digest}".encode()).decode()
    path = Path(root[0]) / f"{root[1]}-images" / ident / f"={key}"
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return data if "sha256:" + sha256_bytes(data) == digest else None


def read_interpreter(image: str, engine: str, python: str, names: list[str], ui: UI,
                     memo_dir: Path | None = None, before: Callable[[], None] | None = None) -> Interpreter:
    """The base's interpreter (`python` in a one-off container of `image`, after `before()`) and what it holds of
    `names`. An image is immutable under its digest: with `memo_dir` the answer is remembered by image,
    interpreter and names, so a warm `toolchain image` starts no container."""
    from toolchain.core.probe_memo import remembered

    def probe() -> tuple[dict[str, Any], list[str]]:
        if before is not None:
            before()
        return _probe(image, engine, python, names, ui), []

    identity = {"image": image, "engine": engine, "python": python, "names": names, "answer": 2}  # (2: PEP 668 too)
    data = remembered(memo_dir, "image-python", identity, probe)
    replaced = _replaced(data, image)
    return Interpreter(executable=data["executable"], python_version=data["python-version"],
                       python_tag=data["python-tag"], soabi=data["soabi"], platform=data["platform"],
                       glibc=data["glibc"], scheme=dict(data["scheme"]), replaced=replaced,
                       externally_managed=str(data.get("externally-managed", "")))


def _replaced(data: dict[str, Any], image: str) -> tuple[Replaced, ...]:
    """The base's distributions the layer replaces, with the files and folders their RECORD names: each one
    inside the interpreter's scheme, named without `..` (core/owned.py `safe_under`); a RECORD naming anything
    else is corrupt, and no whiteout is made from it (BuildError)."""
    roots = [str(v) for v in dict(data["scheme"]).values()]
    out = []
    for r in data["replaced"]:
        what = f"the RECORD of {r['name']} {r['version']} in {image}"
        try:
            files = tuple(safe_under(f, roots, what) for f in r["files"])
            dirs = tuple(safe_under(d, roots, what) for d in r["dirs"])
        except CorruptRecord as exc:
            raise BuildError(str(exc), hint="the base image's installed distribution is damaged or crafted: use "
                                            "another base, or reinstall that distribution in it") from None
        out.append(Replaced(r["name"], r["version"], files, dirs))
    return tuple(out)


def _probe(image: str, engine: str, python: str, names: list[str], ui: UI) -> dict[str, Any]:
    from toolchain.recipe.model import TargetSpec
    from toolchain.target import make_runtime

    spec = TargetSpec(runtime=engine, image=image, python=python)
    with make_runtime(spec, ui) as runtime, ui.status(f"reading the interpreter of {image}"):
        done = runtime.run([python, runtime.script("image_python.py"), *names], capture=True, check=False,
                           timeout=300)
    if done.returncode in (126, 127):  # the engine could not start it: no such program in the base (bad input)
        raise UsageError(f"the base image {image} has no interpreter {python!r} (the engine cannot run it)",
                         hint="pass --python with the base's interpreter (a name on its PATH, e.g. python3, or its "
                              "path in the image)")
    try:
        data: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise BuildError(f"cannot read the interpreter {python} of the base image {image} "
                         f"(exit {done.returncode}): {(done.stderr or done.stdout).strip()[-300:]}",
                         hint="the base needs the lock's Python; pass --python PATH when it is not on PATH") from None
    return data


def _fromregistry_for(image: str, host: str, repository: str, digest: str, cache: Path, insecure: bool,
                   platform: str) -> BaseImage:
    """The base's manifest (the `platform` one of an index) and config from its registry, kept under `cache`."""
    layout = cache / digest.split(":", 1)[1]
    blobs = layout / "blobs" / "sha256"
    saved = layout / "manifest.json"
    if not saved.is_file():
        registry = registry_for(host, repository, insecure)
        got = registry.manifest(digest, accept=ACCEPT)
        if got is None or got[1] != digest:
            raise BuildError(f"the registry {host} holds no {repository}@{digest}",
                             hint="check the base image's name and digest")
        doc = got[0]
        if "manifests" in doc:  # an index: the manifest of the lock's platform
            arch = ARCH.get(platform.split("_", 1)[-1], platform.split("_", 1)[-1])
            child = next((m for m in doc["manifests"] if (m.get("platform") or {}).get("os") == "linux"
                          and (m.get("platform") or {}).get("architecture") == arch), None)
            if child is None:
                raise UsageError(f"the base {image} has no linux/{arch} image (the lock's platform {platform})")
            one = registry.manifest(child["digest"], accept=ACCEPT)
            if one is None:
                raise BuildError(f"the registry {host} lists {child['digest']} in {image} but does not serve it")
            doc = one[0]
        blobs.mkdir(parents=True, exist_ok=True)
        config = blobs / doc["config"]["digest"].split(":", 1)[1]
        tmp = config.with_name(f".{config.name}.{os.getpid()}.tmp")
        registry.blob_to(doc["config"], tmp, 64 << 20)
        os.replace(tmp, config)
        atomic_write_bytes(saved, json.dumps(doc).encode())
    manifest = json.loads(saved.read_bytes())
    config_doc = json.loads((blobs / manifest["config"]["digest"].split(":", 1)[1]).read_bytes())
    return BaseImage(name=image.split("@", 1)[0], digest=digest, layout=layout, manifest=manifest, config=config_doc,
                     registry=(host, repository, insecure))
