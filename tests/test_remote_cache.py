"""The remote wheel cache on a real OCI registry (issue 12): Debian's docker-registry on 127.0.0.1, started per
test (tests/support/registry.py), the tool driven through its CLI in subprocesses.

A build that pushes, then a clean machine that compiles nothing (the realstack: patches, FetchContent, a
subdirectory package, versions from git describe); a bisect whose every step downloads; a tampered entry
refused; the registry killed mid-download and mid-upload; wrong credentials, a registry that is down or
silent, a plain-HTTP host not opted in: one warning, a correct local build, no password anywhere; two
builders pushing the same key at once."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import sys
from pathlib import Path

import pytest
import requests

from tests.spine_helpers import Cli, GitRepo, Workspace, component, isolated_env, recipe_data
from tests.support.cutproxy import CutProxy
from tests.support.registry_fixtures import AUTH_PASSWORD, AUTH_USER
from toolchain.errors import UsageError
from toolchain.recipe.cachespec import CacheSpec
from toolchain.sharing.auth import Credentials, find_credentials
from toolchain.sharing.registry import ARTIFACT_TYPE, MT_LOG, MT_META, MT_WHEEL
from toolchain.sharing.settings import RemoteRequest, resolve_settings

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
T = 30


def sources(result) -> list[str]:
    return [c["source"] for c in result.json()["components"]]


def warnings(result) -> list[str]:
    """Each warning printed on stderr, its wrapped lines joined."""
    text = " ".join(result.stderr.split())
    return ["warning:" + w.split(" ERROR:")[0].split(" ==> ")[0] for w in text.split("warning:")[1:]]


def manifest(reg, key: str, auth=None) -> dict:
    r = requests.get(f"{reg.url}/v2/team/wheels/manifests/{key}", headers={"Accept": OCI_MANIFEST}, auth=auth,
                     timeout=T)
    assert r.status_code == 200, r.text
    return r.json()


def tags(reg, auth=None) -> list[str]:
    r = requests.get(f"{reg.url}/v2/team/wheels/tags/list", auth=auth, timeout=T)
    return (r.json().get("tags") or []) if r.status_code == 200 else []


def local_entries(cache: Path) -> list[Path]:
    return sorted(p.parent for p in (cache / "wheels").glob("??/*/entry.json"))


def no_partial_entries(cache: Path) -> None:
    """Every local entry is whole (its wheel hashes as recorded) and no temporary directory is left."""
    for d in local_entries(cache):
        meta = json.loads((d / "entry.json").read_text())
        assert hashlib.sha256((d / meta["wheel"]).read_bytes()).hexdigest() == meta["sha256"]
    leftovers = [p for p in (cache / "wheels").rglob(".tmp-*")] + [p for p in (cache / "work").glob("*remote*")]
    assert leftovers == [], leftovers


def tiny_ws(ws: Workspace, repos: dict[str, GitRepo], remote: str = "", **cache) -> None:
    data = recipe_data({name: component(repo, dist="tiny", version=f"{i + 1}.0.0")
                        for i, (name, repo) in enumerate(repos.items())})
    if remote:
        data["cache"] = {"remote": remote, **cache}
    ws.recipe("r", data)


# ---- a build that pushes, then a clean machine --------------------------------------------------------------

@pytest.mark.slow
def test_a_pushed_build_serves_a_clean_machine_that_compiles_nothing(registry, realstack, tmp_path):
    s = realstack
    remote = ["--remote-cache", f"oci://{registry.address}/team", "--remote-insecure"]
    ci = Cli(tmp_path, isolated_env(tmp_path / "ci"))
    first = ci("build", "--recipe", s.stack, "--cache-dir", tmp_path / "ci-cache", "--out", tmp_path / "ci-out",
               "--json", "--push", *remote)
    assert first.returncode == 0, str(first)
    assert sources(first) == ["built"] * 3
    assert all(c["pushed"] for c in first.json()["components"])
    keys = [c["cache-key"] for c in first.json()["components"]]
    assert sorted(tags(registry)) == sorted(keys)

    m = manifest(registry, keys[1])  # kernels: one artifact, its parts typed, its identity annotated
    assert m["artifactType"] == ARTIFACT_TYPE
    assert m["config"]["mediaType"] == "application/vnd.oci.empty.v1+json"
    assert [layer["mediaType"] for layer in m["layers"]] == [MT_WHEEL, MT_META, MT_LOG]
    kern = first.json()["components"][1]
    a = m["annotations"]
    assert (a["vnd.xpu-toolchain.component"], a["vnd.xpu-toolchain.commit"], a["vnd.xpu-toolchain.describe"]) == \
           ("kernels", s.kernels_commit, kern["describe"])
    assert a["vnd.xpu-toolchain.wheel.sha256"] == kern["sha256"] == m["layers"][0]["digest"].removeprefix("sha256:")
    assert json.loads(a["vnd.xpu-toolchain.toolchain"])["oneapi-version"]
    assert json.loads(a["vnd.xpu-toolchain.target"])["python_version"]
    ark = manifest(registry, keys[2])["annotations"]
    assert ark["vnd.xpu-toolchain.patches"] == hashlib.sha256(s.patch_file("ark/0001-ark-supported-devices.patch")
                                                             .read_bytes()).hexdigest()

    dev = Cli(tmp_path, isolated_env(tmp_path / "dev"))  # a clean machine: new cache, nothing fetched yet
    second = dev("build", "--recipe", s.stack, "--cache-dir", tmp_path / "dev-cache", "--out", tmp_path / "dev-out",
                 "--json", *remote)
    assert second.returncode == 0, str(second)
    assert sources(second) == ["remote-cache"] * 3
    assert warnings(second) == []
    assert not (tmp_path / "dev-cache" / "git").exists()
    assert not (tmp_path / "dev-cache" / "trees").exists()
    assert (tmp_path / "dev-out" / "stack.lock.toml").read_text() == (tmp_path / "ci-out" / "stack.lock.toml").read_text()
    for c in second.json()["components"]:
        assert hashlib.sha256(Path(c["path"]).read_bytes()).hexdigest() == c["sha256"]
    no_partial_entries(tmp_path / "dev-cache")
    kern_entry = next(d for d in local_entries(tmp_path / "dev-cache") if d.name == keys[1])
    assert (kern_entry / "build.log").read_text() == \
           next(d for d in local_entries(tmp_path / "ci-cache") if d.name == keys[1]).joinpath("build.log").read_text()
    assert json.loads((kern_entry / "entry.json").read_text())["remote"]["url"] == f"oci://{registry.address}/team"

    ls = dev("cache", "ls", "--remote", f"oci://{registry.address}/team", "--remote-insecure", "--component",
             "kernels", "--json")
    assert ls.returncode == 0, str(ls)
    (row,) = ls.json()["entries"]
    assert (row["key"], row["commit"], row["describe"], row["sha256"]) == \
           (keys[1], s.kernels_commit, kern["describe"], kern["sha256"])
    local = dev("cache", "ls", "--cache-dir", tmp_path / "dev-cache", "--json").json()["entries"]
    assert sorted(r["key"] for r in local) == sorted(keys)
    assert {r["from"] for r in local} == {"remote"}


# ---- bisect ---------------------------------------------------------------------------------------------------

BISECT_TEST = """\
import os, sys, zipfile
(wheel,) = [w for w in os.environ["TOOLCHAIN_BISECT_WHEELS"].split(os.pathsep) if "tiny-" in os.path.basename(w)]
sys.exit(1 if "BROKEN" in zipfile.ZipFile(wheel).read("tiny/__init__.py").decode() else 0)
"""


def test_a_bisect_on_a_clean_machine_downloads_every_step(registry, ws, make_repo, tmp_path):
    repo = make_repo("tiny", "tiny")
    init = (repo.path / "tiny" / "__init__.py").read_text()
    commits = [repo.head()] + [repo.commit(f"tiny: change {i}", {"tiny/__init__.py": init + f"\nSTEP = {i}\n"
                                           + ("BROKEN = True\n" if i >= 5 else "")}) for i in range(1, 9)]
    tiny_ws(ws, {"tiny": repo})
    remote = f"oci://{registry.address}/team"
    for i, sha in enumerate(commits):  # the CI prebuild job: every first-parent commit, pinned by `extends`
        ws.recipe(f"pin{i}", f'extends = "r"\n\n[components.tiny]\ncommit = "{sha}"\n')
        r = ws.build(f"pin{i}", f"pre{i}", "--push", "--remote-cache", remote, "--remote-insecure")
        assert r.returncode == 0 and r.json()["components"][0]["pushed"], str(r)
    assert len(tags(registry)) == len(commits)

    script = tmp_path / "test_step.py"
    script.write_text(BISECT_TEST)
    clean = tmp_path / "clean-cache"
    counter = tmp_path / "builds"  # the tiny backend counts the wheels it builds here
    env = {"TOOLCHAIN_REMOTE_CACHE": remote, "TOOLCHAIN_REMOTE_INSECURE": registry.address,
           "TINY_BUILD_COUNTER": str(counter)}
    r = ws.cli("bisect", "--recipe", ws.recipes / "r.toml", "--component", "tiny", "--good", commits[0],
               "--bad", commits[-1], "--test-cmd", f"{sys.executable} {script}", "--cache-dir", clean,
               "--out", tmp_path / "bisect", "--json", env=env)
    assert r.returncode == 0, str(r)
    result = r.json()["result"]
    assert result["first_bad"]["key"] == commits[5]
    steps = result["steps"]
    assert steps
    assert {s["source"] for s in steps} == {"downloaded"}
    assert all(s["cached"] for s in steps)
    assert not counter.exists()
    assert not (clean / "trees").exists()
    log = (tmp_path / "bisect" / "bisect.log").read_text()
    assert log.count("wheels downloaded") == len(steps)


# ---- a tampered entry ----------------------------------------------------------------------------------------

def test_a_tampered_remote_wheel_is_refused_and_built_locally(registry, ws, tiny_repo, tmp_path):
    remote = f"oci://{registry.address}/team"
    tiny_ws(ws, {"tiny": tiny_repo}, remote, insecure=True)
    first = ws.build("r", "o1", "--push")
    assert first.returncode == 0, str(first)
    (c,) = first.json()["components"]
    good = Path(c["path"]).read_bytes()
    m = manifest(registry, c["cache-key"])
    wheel_layer = m["layers"][0]

    # 1. the blob's bytes changed in the registry's storage (same size): the digest check refuses it
    digest = wheel_layer["digest"].removeprefix("sha256:")
    data = registry.storage / "docker/registry/v2/blobs/sha256" / digest[:2] / digest / "data"
    evil = bytearray(data.read_bytes())
    evil[len(evil) // 2] ^= 0xFF
    data.write_bytes(bytes(evil))
    r = ws.build("r", "o2", cache=tmp_path / "c2")
    assert r.returncode == 0, str(r)
    assert sources(r) == ["built"]
    (w,) = warnings(r)
    assert "refused the entry for tiny" in w
    assert "sha256" in w
    assert Path(r.json()["components"][0]["path"]).read_bytes() == good
    no_partial_entries(tmp_path / "c2")

    # 2. a new manifest through the registry API: another wheel under the same tag, the old metadata kept
    other = b"PK\x03\x04 not the wheel the metadata records"
    up = requests.post(f"{registry.url}/v2/team/wheels/blobs/uploads/", timeout=T)
    loc = up.headers["Location"]
    put = requests.put(f"{loc}{'&' if '?' in loc else '?'}digest=sha256:{hashlib.sha256(other).hexdigest()}",
                       data=other, timeout=T)
    assert put.status_code == 201
    m["layers"][0] = dict(wheel_layer, digest=f"sha256:{hashlib.sha256(other).hexdigest()}", size=len(other))
    assert requests.put(f"{registry.url}/v2/team/wheels/manifests/{c['cache-key']}", data=json.dumps(m),
                        headers={"Content-Type": OCI_MANIFEST}, timeout=T).status_code == 201
    r = ws.build("r", "o3", cache=tmp_path / "c3")
    assert r.returncode == 0 and sources(r) == ["built"], str(r)
    (w,) = warnings(r)
    assert "refused the entry for tiny" in w
    assert "is not the wheel its metadata records" in w
    assert Path(r.json()["components"][0]["path"]).read_bytes() == good
    no_partial_entries(tmp_path / "c3")


# ---- the registry dies mid-transfer ---------------------------------------------------------------------------

def test_registry_killed_mid_download_leaves_no_partial_entry(registry, ws, make_repo, tmp_path):
    repos = {"one": make_repo("one", "tiny"), "two": make_repo("two", "tiny")}
    tiny_ws(ws, repos)
    pushed = ws.build("r", "o1", "--push", "--remote-cache", f"oci://{registry.address}/team", "--remote-insecure")
    assert pushed.returncode == 0, str(pushed)
    wheel_digests = {manifest(registry, c["cache-key"])["layers"][0]["digest"] for c in pushed.json()["components"]}
    with CutProxy(registry, lambda method, path: method == "GET" and path.rsplit("/", 1)[-1] in wheel_digests) as px:
        r = ws.build("r", "o2", "--remote-cache", f"oci://{px.address}/team", "--remote-insecure",
                     cache=tmp_path / "c2")
        assert px.cut_done.is_set()
    assert r.returncode == 0, str(r)
    assert not registry.alive()
    assert set(sources(r)) <= {"built", "remote-cache"}
    assert "built" in sources(r)
    (w,) = warnings(r)
    assert "broke off" in w or "cannot reach" in w
    assert [c["sha256"] for c in r.json()["components"]] == [c["sha256"] for c in pushed.json()["components"]]
    no_partial_entries(tmp_path / "c2")


def test_registry_killed_mid_upload_fails_no_build_and_publishes_nothing(registry, ws, tiny_repo, tmp_path):
    from tests.support.registry import run_registry

    tiny_ws(ws, {"tiny": tiny_repo})
    with CutProxy(registry, lambda method, path: method == "PUT" and "/blobs/uploads/" in path) as px:
        r = ws.build("r", "o1", "--push=best-effort", "--remote-cache", f"oci://{px.address}/team",
                     "--remote-insecure")
        assert px.cut_done.is_set(), str(r)
    assert r.returncode == 0, str(r)
    assert sources(r) == ["built"]
    assert r.json()["components"][0]["pushed"] is False
    (w,) = warnings(r)
    assert "not pushing" in w or "building locally without it" in w
    no_partial_entries(ws.cache)
    assert r.json()["remote"]["pushed"] == []
    with run_registry(registry.storage.parent) as again:  # the same storage: no tag names a half entry
        r = requests.get(f"{again.url}/v2/team/wheels/tags/list", timeout=T)
        assert r.status_code == 404 or not r.json().get("tags"), r.text


# ---- credentials, and a registry that cannot be used ----------------------------------------------------------

def leaked(root: Path, *texts: str, skip: tuple[Path, ...] = ()) -> list[str]:
    """Files under `root` (and the given outputs) that contain the password."""
    found = [t[:60] for t in texts if AUTH_PASSWORD in t]
    for p in root.rglob("*"):
        if p.is_file() and p not in skip and AUTH_PASSWORD.encode() in p.read_bytes():
            found.append(str(p))
    return found


def test_credentials_from_env_and_auth_files_and_wrong_ones_leak_nothing(auth_registry, ws, tiny_repo, tmp_path):
    reg = auth_registry
    remote = f"oci://{reg.address}/team"
    tiny_ws(ws, {"tiny": tiny_repo}, remote, insecure=True)
    env_creds = {"TOOLCHAIN_REGISTRY_USERNAME": AUTH_USER, "TOOLCHAIN_REGISTRY_PASSWORD": AUTH_PASSWORD}
    r = ws.build("r", "o1", "--push", env=env_creds)
    assert r.returncode == 0 and r.json()["components"][0]["pushed"] and warnings(r) == [], str(r)
    key = r.json()["components"][0]["cache-key"]
    assert tags(reg, reg.auth) == [key]

    docker = tmp_path / "dockercfg"  # `docker login`'s file
    docker.mkdir()
    token = base64.b64encode(f"{AUTH_USER}:{AUTH_PASSWORD}".encode()).decode()
    (docker / "config.json").write_text(json.dumps({"auths": {reg.address: {"auth": token}}}))
    r = ws.build("r", "o2", cache=tmp_path / "c2", env={"DOCKER_CONFIG": str(docker)})
    assert r.returncode == 0 and sources(r) == ["remote-cache"] and warnings(r) == [], str(r)

    podman = tmp_path / "auth.json"  # `podman login`'s file, a key scoped to the namespace
    podman.write_text(json.dumps({"auths": {f"{reg.address}/team": {"auth": token}}}))
    r = ws.build("r", "o3", cache=tmp_path / "c3", env={"REGISTRY_AUTH_FILE": str(podman)})
    assert r.returncode == 0 and sources(r) == ["remote-cache"] and warnings(r) == [], str(r)

    wrong = {"TOOLCHAIN_REGISTRY_USERNAME": AUTH_USER, "TOOLCHAIN_REGISTRY_PASSWORD": "not-" + AUTH_PASSWORD}
    r = ws.build("r", "o4", "--push=best-effort", cache=tmp_path / "c4", env=wrong)
    assert r.returncode == 0 and sources(r) == ["built"], str(r)
    (w,) = warnings(r)
    assert f"refused the credentials of user {AUTH_USER!r}" in w
    assert "HTTP 401" in w
    assert "not-" not in w
    assert r.json()["remote"]["off"]
    assert "not-" + AUTH_PASSWORD not in r.stdout + r.stderr

    r = ws.build("r", "o5", cache=tmp_path / "c5")  # no credentials at all
    assert r.returncode == 0 and sources(r) == ["built"], str(r)
    (w,) = warnings(r)
    assert "wants credentials" in w
    assert "none were found" in w
    assert "docker login" in w

    ls = ws.cli("cache", "ls", "--remote", remote, "--remote-insecure", "--json", env=wrong)
    assert ls.returncode == 1
    assert "refused the credentials" in ls.json()["error"]
    assert leaked(tmp_path, r.stdout, r.stderr, ls.stdout, ls.stderr, skip=(docker / "config.json", podman)) == []


def _silent_listener() -> socket.socket:
    """Accepts connections (the kernel's backlog) and never answers: a registry that hangs."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    return s


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("case", ["down", "silent", "not-opted-in"])
def test_an_unusable_registry_is_one_warning_and_a_local_build(case, registry, ws, make_repo, tmp_path):
    repos = {"one": make_repo("one", "tiny"), "two": make_repo("two", "tiny"), "three": make_repo("three", "tiny")}
    listener = _silent_listener()
    try:
        host = {"down": f"127.0.0.1:{_closed_port()}", "silent": f"127.0.0.1:{listener.getsockname()[1]}",
                "not-opted-in": registry.address}[case]
        # 2 s for the registry that never answers; the others answer at once, however busy the machine
        tiny_ws(ws, repos, f"oci://{host}/team", insecure=case != "not-opted-in", timeout=2 if case == "silent" else 120,
                push=True)
        r = ws.build("r", "o1")
        r2 = ws.build("r", "o1")  # nothing missing locally: the registry is not even asked
    finally:
        listener.close()
    assert r.returncode == 0 and sources(r) == ["built"] * 3 and len(warnings(r)) == 1, str(r)
    (w,) = warnings(r)
    assert {"down": "cannot reach the registry", "silent": "did not answer within 2s",
            "not-opted-in": "TLS failed"}[case] in w, str(r)
    if case == "not-opted-in":
        assert f"TOOLCHAIN_REMOTE_INSECURE={registry.address}" in w
    assert r2.returncode == 0 and sources(r2) == ["local-cache"] * 3, str(r2)
    no_partial_entries(ws.cache)


# ---- two builders push one key at once ------------------------------------------------------------------------

def test_two_builders_pushing_the_same_key_at_once(registry, ws, make_repo, tmp_path):
    repos = {"one": make_repo("one", "tiny"), "two": make_repo("two", "tiny")}
    tiny_ws(ws, repos, f"oci://{registry.address}/team", insecure=True, push=True)
    procs = [ws.cli.start("build", "--recipe", "r", "--out", tmp_path / f"o{i}", "--cache-dir", tmp_path / f"c{i}",
                          "--json") for i in range(2)]
    results = [ws.cli.finish(p) for p in procs]
    for r in results:
        assert r.returncode == 0 and sources(r) == ["built"] * 2 and warnings(r) == [], str(r)
    assert [c["sha256"] for c in results[0].json()["components"]] == \
           [c["sha256"] for c in results[1].json()["components"]]
    assert len(tags(registry)) == 2
    r = ws.build("r", "o3", cache=tmp_path / "c3")  # whichever manifest won, it is a whole, valid entry
    assert r.returncode == 0 and sources(r) == ["remote-cache"] * 2 and warnings(r) == [], str(r)
    assert [c["sha256"] for c in r.json()["components"]] == [c["sha256"] for c in results[0].json()["components"]]


def test_a_blob_link_rewritten_under_the_manifest_push_is_uploaded_again(registry, ws, tiny_repo, tmp_path):
    """What two builders pushing one wheel at once do to a `distribution` registry on filesystem storage: one
    rewrites a blob's link (truncate, then write) while the other's manifest PUT looks it up, and the registry
    answers 400 MANIFEST_BLOB_UNKNOWN for a blob it holds. Here the links are emptied right before the first
    manifest PUT reaches the registry; the push uploads what the registry no longer sees and retries."""
    tiny_ws(ws, {"tiny": tiny_repo})
    layers = registry.storage / "docker/registry/v2/repositories/team/wheels/_layers/sha256"
    emptied: list[str] = []

    def relink(method: str, path: str) -> None:
        if method == "PUT" and "/manifests/" in path and not emptied:
            for link in sorted(layers.glob("*/link")):
                link.write_bytes(b"")
                emptied.append(link.parent.name)

    with CutProxy(registry, lambda method, path: False, before=relink) as px:
        url = f"oci://{px.address}/team"
        r = ws.build("r", "o1", "--push", "--remote-cache", url, "--remote-insecure")
    assert len(emptied) >= 2, emptied  # the wheel, its metadata, the empty config...
    assert r.returncode == 0 and warnings(r) == [], str(r)
    assert r.json()["components"][0]["pushed"] is True
    assert all(len((layers / d / "link").read_bytes()) > 0 for d in emptied)
    r = ws.build("r", "o2", "--remote-cache", f"oci://{registry.address}/team", "--remote-insecure",
                 cache=tmp_path / "c2")
    assert r.returncode == 0 and sources(r) == ["remote-cache"] and warnings(r) == [], str(r)


# ---- settings and credentials (no registry) -------------------------------------------------------------------

def test_settings_precedence_and_per_host_insecure_opt_in():
    spec = CacheSpec(remote="oci://reg.lan:5000/team", push=True, insecure=True, timeout=7)
    s = resolve_settings(spec, RemoteRequest(), env={})
    assert s is not None
    assert (s.url, s.push, s.insecure, s.timeout, s.where.repository) == \
           ("oci://reg.lan:5000/team", True, True, 7.0, "team/wheels")
    s = resolve_settings(spec, RemoteRequest(), env={"TOOLCHAIN_REMOTE_CACHE": "oci://other.lan/ns"})
    assert s is not None
    assert (s.url, s.insecure) == ("oci://other.lan/ns", False)  # the recipe's opt-in is for its own host only
    s = resolve_settings(spec, RemoteRequest(url="oci://third.lan/x", push=False),
                         env={"TOOLCHAIN_REMOTE_CACHE": "oci://other.lan/ns", "TOOLCHAIN_REMOTE_INSECURE": "third.lan"})
    assert s is not None
    assert (s.url, s.push, s.insecure) == ("oci://third.lan/x", False, True)
    assert resolve_settings(spec, RemoteRequest(url="none"), env={}) is None
    assert resolve_settings(CacheSpec(), RemoteRequest(), env={}) is None
    with pytest.raises(UsageError, match="credentials") as err:
        resolve_settings(CacheSpec(), RemoteRequest(url="oci://me:hunter2@reg.lan/team"), env={})
    assert "hunter2" not in str(err.value)


def test_recipe_cache_table_is_validated(ws, tiny_repo):
    ws.recipe("r", recipe_data({"tiny": component(tiny_repo)},
                               cache={"remote": "oci://me:hunter2@reg.lan/team", "pussh": True, "timeout": -1}))
    r = ws.build("r")
    assert r.returncode == 2
    err = r.json()["error"]
    assert "cache.remote" in err
    assert "holds credentials" in err
    assert "hunter2" not in r.stdout + r.stderr
    assert "cache.pussh: unknown key (did you mean 'push'?)" in err
    assert "cache.timeout" in err


def test_credentials_lookup_order_and_no_password_in_repr(tmp_path):
    token = base64.b64encode(b"fileuser:filepass").decode()
    cfg = tmp_path / "docker"
    cfg.mkdir()
    (cfg / "config.json").write_text(json.dumps({"auths": {"https://reg.lan": {"auth": token}}}))
    env = {"HOME": str(tmp_path), "DOCKER_CONFIG": str(cfg)}
    got = find_credentials("reg.lan", "team/wheels", env)
    assert got == Credentials("fileuser", "filepass", str(cfg / "config.json"))
    assert "filepass" not in repr(got) + str(got)
    podman = tmp_path / "auth.json"
    podman.write_text(json.dumps({"auths": {"reg.lan/team": {"auth": base64.b64encode(b"pod:man").decode()},
                                            "reg.lan/other": {"auth": base64.b64encode(b"no:no").decode()}}}))
    from_podman = find_credentials("reg.lan", "team/wheels", {**env, "REGISTRY_AUTH_FILE": str(podman)})
    assert from_podman is not None and from_podman.username == "pod"
    both = {**env, "TOOLCHAIN_REGISTRY_USERNAME": "envuser", "TOOLCHAIN_REGISTRY_PASSWORD": "envpass"}
    from_env = find_credentials("reg.lan", "team/wheels", both)
    assert from_env is not None and from_env.username == "envuser"
    assert find_credentials("elsewhere.lan", "team/wheels", env) is None


def test_a_push_that_cannot_push_fails_the_build_unless_best_effort(registry, ws, tiny_repo):
    """Issue 22: `--push` to a plain-HTTP registry without --remote-insecure pushes nothing: exit 1, naming why
    (CI notices); `--push=best-effort` keeps it a warning and exit 0."""
    tiny_ws(ws, {"tiny": tiny_repo})
    remote = ("--remote-cache", f"oci://{registry.address}/team")
    r = ws.build("r", "o1", "--push", *remote)
    assert r.returncode == 1, str(r)
    err = r.json()
    assert "--push: nothing more was pushed" in err["error"] and "TLS failed" in err["error"], str(r)
    assert "--push=best-effort" in err["hint"]
    assert (ws.root / "o1" / "stack.lock.toml").is_file()
    r = ws.build("r", "o2", "--push=best-effort", *remote)
    assert r.returncode == 0 and r.json()["components"][0]["pushed"] is False, str(r)
    assert any("TLS failed" in w for w in warnings(r)), str(r)
    r = ws.build("r", "o3", "--push", *remote, "--remote-insecure")
    assert r.returncode == 0 and r.json()["components"][0]["pushed"] is True, str(r)
