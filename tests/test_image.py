"""`toolchain image`: a lock turned into an OCI image (its base by digest + one layer), reproducibly, run in real
podman and docker, pushed to and read back from the real registry with auth; and `toolchain lock --image`."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.spine_helpers import Cli, DemoBuild, isolated_env
from tests.support.container_fixtures import podman_image  # noqa: F401  (pytest fixture)
from tests.support.debian_image import containers_env
from tests.support.registry_fixtures import AUTH_PASSWORD, AUTH_USER
from tests.test_overlay import STACK_PYTHON, _podman, stack_image  # noqa: F401  (the overlay's base image fixture)
from toolchain.core import toml as tomlio
from toolchain.errors import UsageError
from toolchain.image.base import Interpreter, Replaced
from toolchain.image.compat import check_wheels
from toolchain.image.layer import LOCK_PATH, entries, stage, write_layer


def _engine(engine: str, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([engine, *args], env=containers_env(), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    assert not check or done.returncode == 0, done.stdout + done.stderr
    return done


def _image(tmp: Path, name: str, lock: Path, *args: object) -> dict:
    """`toolchain image` run from a folder of its own with a cache of its own: the --json document."""
    cwd = tmp / f"cwd-{name}"
    cwd.mkdir(parents=True)
    cli = Cli(cwd, {**isolated_env(cwd), **containers_env()})
    if not {"--oci-dir", "--load", "--push"} & {str(a) for a in args}:  # (delivered somewhere: a layout)
        args = (*args, "--oci-dir", tmp / f"oci-{name}")
    r = cli("image", "--lock", lock, "--cache-dir", tmp / f"cache-{name}", "--json", *args, timeout=1200)
    assert r.returncode == 0, str(r)
    return dict(r.json())


def _layer_names(oci: Path, digest: str) -> list[str]:
    with gzip.open(oci / "blobs" / "sha256" / digest.split(":", 1)[1]) as gz, tarfile.open(fileobj=gz) as tar:
        members = tar.getmembers()
    assert all(m.uid == 0 and m.gid == 0 and m.mtime == members[0].mtime for m in members)
    return [m.name for m in members]


@pytest.fixture(scope="session")
def test_base(podman_image) -> str:  # noqa: F811
    """The Debian test image pinned by digest."""
    digest = _engine("podman", "image", "inspect", "--format", "{{.Digest}}", podman_image).stdout.strip()
    return f"{podman_image.rsplit(':', 1)[0]}@{digest}"


@pytest.mark.slow
@pytest.mark.container
def test_demo_lock_image_is_reproducible_runs_in_podman_and_docker_and_carries_its_lock(demo_build, test_base,
                                                                                         tmp_path):
    lock = demo_build.out / "stack.lock.toml"
    first = _image(tmp_path, "a", lock, "--tag", "localhost/i42-demo:a", "--base", test_base,
                   "--oci-dir", tmp_path / "oci-a", "--load", "podman")
    second = _image(tmp_path, "b", lock, "--tag", "localhost/i42-demo:a", "--base", test_base,
                    "--oci-dir", tmp_path / "oci-b", "--load", "docker")
    assert first["digest"] == second["digest"] and first["layer"] == second["layer"], (first, second)
    assert (tmp_path / "oci-a" / "index.json").read_bytes() == (tmp_path / "oci-b" / "index.json").read_bytes()
    names = _layer_names(tmp_path / "oci-a", first["layer"]["digest"])
    assert names == sorted(names, key=lambda n: n.split("/")) and LOCK_PATH in names
    pyc = [n for n in names if n.endswith(".pyc")]  # compiled by the base's own Python (tests/test_image_bytecode.py)
    assert all(".cpython-311." in n for n in pyc) and pyc, names
    labels = first["labels"]
    assert labels["vnd.xpu-toolchain.recipe"] == "demo"
    assert labels["vnd.xpu-toolchain.commit.engine"] == tomlio.load_file(lock)["components"][0]["commit"]
    # podman holds it under the same digest; it runs there as it is
    assert _engine("podman", "image", "inspect", "--format", "{{.Digest}}", "localhost/i42-demo:a").stdout.strip() \
        == first["digest"]
    names = json.loads(_engine("podman", "image", "inspect", "--format", "{{json .RepoTags}}",
                               "localhost/i42-demo:a").stdout)
    assert names == ["localhost/i42-demo:a"], names  # no name after the folder it was loaded from
    check = "python3 -m pip check && python3 -c 'import demo_engine, demo_kernels, demo_ark; print(demo_engine.__file__)'"
    for engine in ("podman", "docker"):
        out = _engine(engine, "run", "--rm", "--network=none", "localhost/i42-demo:a", "sh", "-c", check).stdout
        assert "No broken requirements found." in out and "/usr/local/lib/python3.11/dist-packages/" in out, out
    # the lock comes back out of the image, byte for byte
    back = Cli(tmp_path, {**isolated_env(tmp_path), **containers_env()})
    r = back.ok("lock", "--image", "localhost/i42-demo:a", "--out", tmp_path / "back", "--json")
    assert (tmp_path / "back" / "stack.lock.toml").read_bytes() == lock.read_bytes()
    assert r.json()["components"]["engine"] == labels["vnd.xpu-toolchain.commit.engine"]
    _engine("podman", "rmi", "localhost/i42-demo:a", check=False)
    _engine("docker", "rmi", "localhost/i42-demo:a", check=False)


def _podman_of_its_own(tmp_path: Path) -> dict[str, str]:
    """The environment of a podman whose every folder is under `tmp_path`: its storage, and its engine's own
    (tmp_dir, the volumes, the network configs), so that its `system reset` removes nothing of the machine's
    podman. (With the storage alone given, `system reset` removed /run/libpod, the engine's folder every podman
    on the machine shares: a podman starting beside it failed with "creating runtime status file: open
    /run/libpod/alive: no such file or directory".)"""
    storage = tmp_path / "storage.conf"
    storage.write_text(f'[storage]\ndriver = "overlay"\ngraphroot = "{tmp_path / "graph"}"\n'
                       f'runroot = "{tmp_path / "run"}"\n')
    conf = tmp_path / "containers.conf"
    shared = containers_env().get("CONTAINERS_CONF", "")
    engine = (f'tmp_dir = "{tmp_path / "libpod"}"\nvolume_path = "{tmp_path / "volumes"}"\n'
              f'static_dir = "{tmp_path / "graph" / "libpod"}"\n')
    text = Path(shared).read_text() if shared and Path(shared).is_file() else ""
    for table, keys in (("[engine]\n", engine), ("[network]\n", f'network_config_dir = "{tmp_path / "networks"}"\n')):
        text = text.replace(table, table + keys, 1) if table in text else f"{text}\n{table}{keys}"
    conf.write_text(text)
    return {**containers_env(), "CONTAINERS_STORAGE_CONF": str(storage), "CONTAINERS_CONF": str(conf)}


@pytest.mark.slow
@pytest.mark.container
def test_podman_without_the_base_is_given_the_whole_layout_and_names_the_image_alone(demo_build, test_base, tmp_path):
    """podman is first offered the image without its base's layers (one process, named by the archive); a podman
    whose storage lacks the base refuses that, stores nothing, and is given the whole layout: the same digest,
    one name, and it runs."""
    lock = demo_build.out / "stack.lock.toml"
    first = _image(tmp_path, "a", lock, "--tag", "localhost/i42-thin:1", "--base", test_base, "--load", "podman")
    empty = _podman_of_its_own(tmp_path)

    def in_empty(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["podman", *args], env=empty, capture_output=True, text=True, timeout=600,
                              stdin=subprocess.DEVNULL)

    try:
        assert in_empty("image", "exists", test_base.split("@")[0]).returncode == 1  # the base is not there
        cwd = tmp_path / "cwd-empty"
        cwd.mkdir()
        r = Cli(cwd, {**isolated_env(cwd), **empty})("image", "--lock", lock, "--cache-dir", tmp_path / "cache-a",
                                                     "--tag", "localhost/i42-thin:1", "--base", test_base,
                                                     "--load", "podman", "--json", timeout=1200)
        assert r.returncode == 0, str(r)
        assert r.json()["digest"] == first["digest"]
        tags = in_empty("image", "inspect", "--format", "{{json .RepoTags}}", "localhost/i42-thin:1")
        assert json.loads(tags.stdout) == ["localhost/i42-thin:1"], tags.stdout + tags.stderr
        listed = in_empty("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split()
        assert listed == ["localhost/i42-thin:1"], listed  # nothing named after a folder, no base name
        ran = in_empty("run", "--rm", "--network=none", "localhost/i42-thin:1", "python3", "-c",
                       "import demo_engine; print('runs')")
        assert ran.stdout.strip() == "runs", ran.stdout + ran.stderr
    finally:
        in_empty("system", "reset", "--force")
        _engine("podman", "rmi", "localhost/i42-thin:1", check=False)


@pytest.mark.slow
@pytest.mark.container
def test_overlay_lock_image_replaces_the_base_distribution_reproducibly(stack_image, tmp_path):  # noqa: F811
    from tests.support.closure import demo_variant

    recipes = tmp_path / "recipes"
    recipe = demo_variant(recipes, "overlay", {"indexes": ["http://127.0.0.1:9/simple"]},
                          target={"runtime": "podman", "base": stack_image, "python": STACK_PYTHON})
    data = tomlio.load_file(recipe)
    ark = dict(data["components"]["ark"], **{"built-against": ["standin-torch"]})
    data["components"] = {"ark": {k: v for k, v in ark.items() if k != "after"}}
    recipe.write_text(tomlio.dumps(data))
    cli = Cli(tmp_path, {**isolated_env(tmp_path), **containers_env()})
    cli.ok("build", "--recipe", recipe, "--out", tmp_path / "out", "--cache-dir", tmp_path / "cache", "--json",
           timeout=1200)
    lock = tmp_path / "out" / "stack.lock.toml"
    first = _image(tmp_path, "a", lock, "--tag", "localhost/i42-overlay:a", "--load", "podman")
    second = _image(tmp_path, "b", lock, "--tag", "localhost/i42-overlay:b")
    assert first["digest"] == second["digest"], (first, second)
    assert first["base"] == stack_image.split("@")[0]
    # streamed into `podman load` over a base other than the demo's: podman holds it under the digest printed,
    # and verify-repro makes it again from the lock alone to that digest
    held = _podman("image", "inspect", "--format", "{{.Digest}}", "localhost/i42-overlay:a")
    assert held == first["digest"], (held, first["digest"])
    vr = cli("verify-repro", "--lock", lock, "--image", "localhost/i42-overlay:a", "--work-dir", tmp_path / "vr",
             "--cache-dir", tmp_path / "cache", "--json", timeout=1200)
    assert vr.returncode == 0 and vr.json()["ok"] and vr.json()["given"] == first["digest"], str(vr)
    # what pip installed into the base's venv beside the old ARK's files (its REQUESTED, direct_url.json)
    # is whited out: --force-reinstall uninstalls it first
    old = _podman("run", "--rm", "--network=none", stack_image, "sh", "-c",
                  "ls -d /opt/stack/lib/python3.11/site-packages/demo_ark_lib-*.dist-info/*")
    gone = [p for p in old.split() if Path(p).name in ("REQUESTED", "direct_url.json")]
    assert gone, old
    whited = sorted("/" + w.replace(".wh.", "") for w in first["layer"]["whiteouts"])
    assert set(gone) <= set(whited), (gone, whited)
    # each whiteout names what the base holds (the old bytecode too); in the image none of them is left
    _podman("run", "--rm", "--network=none", stack_image, "ls", "-d", *whited)
    run = _podman("run", "--rm", "--network=none", "localhost/i42-overlay:a", "sh", "-c",
                  f"ls /opt/stack/lib/python3.11/site-packages/demo_ark_lib-*.dist-info/; ls -d {' '.join(whited)}; "
                  f"echo listed; {STACK_PYTHON} -m pip check; {STACK_PYTHON} -c 'import demo_ark, demo_engine'")
    assert "No broken requirements found." in run and "RECORD" in run and "listed" in run, run
    assert not [w for w in whited if w in run], run
    _podman("rmi", "localhost/i42-overlay:a")


@pytest.mark.slow
@pytest.mark.container
def test_push_with_auth_then_over_a_base_the_registry_holds_only_the_new_blobs_travel_and_lock_image_reads_back(
        demo_build, test_base, auth_registry, tmp_path):
    lock = demo_build.out / "stack.lock.toml"
    reg = auth_registry.address
    login = ("--tls-verify=false", "--creds", f"{AUTH_USER}:{AUTH_PASSWORD}")
    creds = {"TOOLCHAIN_REGISTRY_USERNAME": AUTH_USER, "TOOLCHAIN_REGISTRY_PASSWORD": AUTH_PASSWORD}
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    cli = Cli(cwd, {**isolated_env(cwd), **containers_env(), **creds, "TOOLCHAIN_REMOTE_INSECURE": reg})
    # an empty registry: everything goes up, the local base's layers too
    r = cli("image", "--lock", lock, "--base", test_base, "--cache-dir", tmp_path / "cache", "--push", "--json",
            "--tag", f"{reg}/stack/first:1", timeout=1200)
    assert r.returncode == 0, str(r)
    first = r.json()
    assert first["pushed"]["uploaded-bytes"] > first["layer"]["size"] + 100_000_000, first
    # podman pulls it with the same digest; it runs
    ref = f"{reg}/stack/first:1"
    _engine("podman", "pull", *login, ref, timeout=900)
    assert _engine("podman", "image", "inspect", "--format", "{{.Digest}}", ref).stdout.strip() == first["digest"]
    assert _engine("podman", "run", "--rm", "--network=none", ref, "python3", "-c", "import demo_engine").returncode == 0
    # over a base the registry holds (that image, named by digest there): its manifest and config are read from
    # the registry, no layer of it comes down, and only the new layer and the config go up (the base's are mounted)
    base = f"{reg}/stack/first@{first['digest']}"
    # not in podman under that name: the tool pulls it (to read its interpreter) with the credentials it was
    # given (TOOLCHAIN_REGISTRY_USERNAME/PASSWORD), through an auth file of its own, not podman's login
    _engine("podman", "rmi", ref, check=False)
    r = cli("image", "--lock", lock, "--base", base, "--cache-dir", tmp_path / "cache2", "--push", "--json",
            "--tag", f"{reg}/stack/second:1", timeout=1200)
    assert r.returncode == 0, str(r)
    second = r.json()
    manifest = json.loads(_get(auth_registry, "/v2/stack/second/manifests/1"))
    assert manifest["layers"][:-1] == json.loads(_get(auth_registry, "/v2/stack/first/manifests/1"))["layers"]
    # (the same lock over its own image: the same layer again, which the registry holds too; only the config is new)
    new = [d["size"] for d in manifest["layers"] if d["digest"] not in {x["digest"] for x in manifest["layers"][:-1]}]
    assert second["layer"]["digest"] == first["layer"]["digest"] and not new
    assert second["pushed"]["uploaded-bytes"] == manifest["config"]["size"], second
    kept = sorted((tmp_path / "cache2" / "images" / "base").rglob("blobs/sha256/*"))
    assert kept and all(f.stat().st_size < 100_000 for f in kept), kept  # its config only: no layer came down
    # without credentials the registry refuses (and no password is shown); with them the lock comes back
    denied = Cli(cwd, {**isolated_env(cwd), **containers_env(), "TOOLCHAIN_REMOTE_INSECURE": reg})
    no = denied("lock", "--image", f"{reg}/stack/second:1", "--json")
    assert no.returncode != 0 and AUTH_PASSWORD not in no.stdout + no.stderr, str(no)
    back = cli("lock", "--image", f"{reg}/stack/second:1", "--out", tmp_path / "back", "--json")
    assert back.returncode == 0, str(back)
    assert (tmp_path / "back" / "stack.lock.toml").read_bytes() == lock.read_bytes()
    assert back.json()["digest"] == second["digest"]
    assert back.json()["labels"]["org.opencontainers.image.base.digest"] == first["digest"]
    _engine("podman", "rmi", ref, base, check=False)


def _get(reg, path: str) -> bytes:
    import requests

    r = requests.get(f"{reg.url}{path}", auth=reg.auth, timeout=30,
                     headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    assert r.status_code == 200, r.text
    return r.content


# ---- the layer itself, without an engine ----------------------------------------------------------------

def _wheel(folder: Path, name: str, version: str, files: dict[str, str], tag: str = "py3-none-any",
           scripts: str = "") -> Path:
    """A real wheel, written as a build backend writes one."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-{version}-{tag}.whl"
    info = f"{name}-{version}.dist-info"
    body = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
            f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tag}\n"}
    if scripts:
        body[f"{info}/entry_points.txt"] = f"[console_scripts]\n{scripts}\n"
    import base64
    import hashlib

    record = [f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b'=').decode()},"
              f"{len(t.encode())}" for p, t in body.items()]
    body[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    with zipfile.ZipFile(path, "w") as zf:
        for p, t in body.items():
            zf.writestr(p, t)
    return path


INTERP = Interpreter(executable="/opt/venv/bin/python", python_version="3.11.2", python_tag="cp311",
                     soabi="cpython-311-x86_64-linux-gnu", platform="linux_x86_64", glibc="2.36",
                     scheme={"purelib": "/opt/venv/lib/python3.11/site-packages",
                             "platlib": "/opt/venv/lib/python3.11/site-packages", "scripts": "/opt/venv/bin",
                             "data": "/opt/venv", "include": "/opt/venv/include"})


@pytest.mark.slow
@pytest.mark.container
def test_the_images_console_scripts_run_in_podman_and_docker(demo_build, test_base, tmp_path):
    """A component whose wheel has a console script (a prebuilt one here, beside the demo's built ones): in the
    image the script is on PATH, points at the image's interpreter and runs, in real podman and docker."""
    import hashlib

    from tests.support.closure import warm_builds

    wheel = _wheel(tmp_path / "w", "democli", "1.0",
                   {"democli/__init__.py": "import sys\n\ndef main():\n    print('democli runs on', sys.executable)\n"},
                   scripts="democli = democli:main")
    root, _cli, build = warm_builds(demo_build.cache, tmp_path / "warm")
    (root / "recipes").mkdir()
    recipe = root / "recipes" / "with-cli.toml"
    recipe.write_text(f'extends = "demo"\n\n[components.democli]\nprebuilt = {{ url = "{wheel.as_uri()}", '
                      f'sha256 = "{hashlib.sha256(wheel.read_bytes()).hexdigest()}" }}\n')
    r, out = build(recipe, "out")
    assert r.returncode == 0, str(r)
    made = _image(tmp_path, "cli", out / "stack.lock.toml", "--tag", "localhost/i42-cli:1", "--base", test_base,
                  "--load", "podman")
    assert made["digest"].startswith("sha256:")
    _image(tmp_path, "cli-docker", out / "stack.lock.toml", "--tag", "localhost/i42-cli:1", "--base", test_base,
           "--load", "docker")
    try:
        for engine in ("podman", "docker"):
            ran = _engine(engine, "run", "--rm", "--network=none", "localhost/i42-cli:1", "sh", "-c",
                          "command -v democli && head -n 1 \"$(command -v democli)\" && democli").stdout.split("\n")
            assert ran[0] == "/usr/local/bin/democli", (engine, ran)
            assert ran[1] == "#!/usr/bin/python3", (engine, ran)
            assert ran[2] == "democli runs on /usr/bin/python3", (engine, ran)
    finally:
        _engine("podman", "rmi", "localhost/i42-cli:1", check=False)
        _engine("docker", "rmi", "localhost/i42-cli:1", check=False)


def test_layer_points_console_scripts_at_the_image_interpreter_and_whites_out_what_the_old_version_left(tmp_path):
    site = "opt/venv/lib/python3.11/site-packages"
    wheel = _wheel(tmp_path / "w", "tool", "2.0", {"tool/__init__.py": "def main():\n    print('hi')\n"},
                   scripts="tool = tool:main")
    interp = Interpreter(**{**{f: getattr(INTERP, f) for f in ("executable", "python_version", "python_tag", "soabi",
                                                                 "platform", "glibc", "scheme")},
                            "replaced": (Replaced("tool", "1.0", files=(
                                f"/{site}/tool/__init__.py", f"/{site}/tool/old.py",
                                f"/{site}/tool/__pycache__/old.cpython-311.pyc",
                                f"/{site}/tool-1.0.dist-info/RECORD", f"/{site}/tool-1.0.dist-info/METADATA",
                                "/opt/venv/bin/tool", "/opt/venv/bin/tool-legacy"),
                                dirs=(f"/{site}/tool-1.0.dist-info", f"/{site}/tool/__pycache__")),)})
    stage([wheel], interp, tmp_path / "root")
    script = (tmp_path / "root" / "opt/venv/bin/tool").read_text()
    assert script.startswith("#!/opt/venv/bin/python\n"), script
    items = entries(tmp_path / "root", interp, b"lock = 1\n")
    paths = [e.path for e in items]
    assert paths == sorted(paths, key=lambda p: p.split("/"))
    whiteouts = sorted(e.path for e in items if e.kind == "whiteout")
    assert whiteouts == sorted([f"{site}/.wh.tool-1.0.dist-info", f"{site}/tool/.wh.__pycache__",
                                f"{site}/tool/.wh.old.py", "opt/venv/bin/.wh.tool-legacy"]), whiteouts
    assert "opt/venv/bin" not in paths and f"{site}" not in paths  # the base's folders stay as they are
    a = write_layer(items, 1_700_000_000, tmp_path / "a.tar.gz")
    b = write_layer(entries(tmp_path / "root", interp, b"lock = 1\n"), 1_700_000_000, tmp_path / "b.tar.gz")
    assert (a.digest, a.diff_id) == (b.digest, b.diff_id)
    assert (tmp_path / "a.tar.gz").read_bytes()[4:8] == b"\0\0\0\0"  # gzip mtime 0
    with tarfile.open(tmp_path / "a.tar.gz") as tar:
        tool = tar.getmember("opt/venv/bin/tool")
    assert tool.mode == 0o755 and tool.mtime == 1_700_000_000 and tool.uid == 0


def test_a_base_whose_interpreter_cannot_take_the_wheels_is_refused_naming_both_sides(tmp_path):
    compiled = _wheel(tmp_path, "fast", "1.0", {"fast/__init__.py": ""}, tag="cp312-cp312-manylinux_2_39_x86_64")
    pure = _wheel(tmp_path, "slow", "1.0", {"slow/__init__.py": ""})
    fine = _wheel(tmp_path, "ok", "1.0", {"ok/__init__.py": ""}, tag="cp311-cp311-manylinux_2_28_x86_64")
    check_wheels([pure, fine], INTERP, "cp311", "linux_x86_64", "base@sha256:" + "0" * 64)
    with pytest.raises(UsageError) as err:
        check_wheels([compiled, pure], INTERP, "cp312", "linux_x86_64", "base@sha256:" + "0" * 64)
    text = str(err.value)
    assert err.value.return_code == 2
    assert "fast-1.0-cp312-cp312-manylinux_2_39_x86_64.whl" in text and "slow" not in text
    assert "cp312" in text and "Python 3.11.2 (cp311" in text and "glibc 2.36" in text, text


def test_image_refuses_an_unpinned_base_before_writing_anything(demo_build, tmp_path):
    cli = Cli(tmp_path, isolated_env(tmp_path))
    r = cli("image", "--lock", demo_build.out / "stack.lock.toml", "--tag", "localhost/x:1", "--base", "debian:12",
            "--oci-dir", tmp_path / "oci", "--cache-dir", tmp_path / "cache")
    assert r.returncode == 2, str(r)
    assert "not pinned by digest" in r.stderr and not (tmp_path / "oci").exists()
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)


@pytest.mark.slow
@pytest.mark.container
def test_smoke_image_serves_from_the_image_as_it_is_and_records_its_digest(demo_build, test_base, tmp_path):
    from tests.smoke.smoke_helpers import HERE, free_port

    lock = demo_build.out / "stack.lock.toml"
    made = _image(tmp_path, "a", lock, "--tag", "localhost/i42-smoke:1", "--base", test_base, "--load", "podman")
    faults = "/toolchain-test/faults"
    cli = Cli(tmp_path, {**isolated_env(tmp_path), **containers_env()})
    r = cli("smoke", "--image", "localhost/i42-smoke:1", "--skip-device-check", "--ready-timeout", "120",
            "--request-timeout", "120", "--port", free_port(), "--out", tmp_path / "report", "--json",
            "--serve-cmd", f"{{python}} {faults}/fault_server.py --port {{port}} --mode healthy "
                           "--served-model-name {model}",
            f"--run-arg=--mount=type=bind,source={HERE},destination={faults},readonly", timeout=900)
    assert r.returncode == 0, str(r)
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["image"]["digest"] == made["digest"], report["image"]
    assert report["image"]["ref"] == f"localhost/i42-smoke@{made['digest']}"
    # nothing was installed: the image's own interpreter served, and its versions are the lock's
    assert not report["install"]["steps"] and report["install"]["python"] == "python3"
    assert {v["dist"] for v in report["install"]["versions"] if v["ok"]} >= {"demo-engine", "demo-kernels"}, report["install"]
    assert report["verdict"] == "pass"
    _engine("podman", "rmi", "localhost/i42-smoke:1", check=False)


@pytest.mark.slow
@pytest.mark.container
def test_verify_repro_image_rebuilds_the_digest_and_names_the_first_differing_file(demo_build, test_base, tmp_path):
    lock = demo_build.out / "stack.lock.toml"
    made = _image(tmp_path, "a", lock, "--tag", "localhost/i42-vr:1", "--base", test_base, "--load", "podman")
    cli = Cli(tmp_path, {**isolated_env(tmp_path), **containers_env()})
    same = cli("verify-repro", "--lock", lock, "--image", "localhost/i42-vr:1", "--json", timeout=900)
    assert same.returncode == 0, str(same)
    assert same.json()["rebuilt"] == same.json()["given"] == made["digest"]
    # the same lock made without bytecode: another image, and the first entry that differs is named
    _image(tmp_path, "b", lock, "--tag", "localhost/i42-vr:2", "--base", test_base, "--load", "podman",
           "--no-bytecode")
    differs = cli("verify-repro", "--lock", lock, "--image", "localhost/i42-vr:2", "--json", timeout=900)
    assert differs.returncode == 1, str(differs)
    found = differs.json()
    assert found["first-difference"].startswith("usr/local/lib/python3.11/dist-packages/demo_ark/__pycache__: only "
                                                "in one layer"), found
    assert "kept for comparing" not in found and Path(found["work-dir"]).is_dir()  # (the two layers, to compare)
    # the same wheels under a lock with one more line: the image's lock.sha256 label tells it, nothing is built
    other = tmp_path / "other"
    shutil.copytree(demo_build.out, other)
    (other / "stack.lock.toml").write_text((other / "stack.lock.toml").read_text() + "# shipped\n")
    differs = cli("verify-repro", "--lock", other / "stack.lock.toml", "--image", "localhost/i42-vr:1", "--json",
                  timeout=900)
    assert differs.returncode == 1 and "carries another lock" in differs.json().get("first-difference", ""), \
        str(differs)
    _engine("podman", "rmi", "localhost/i42-vr:1", "localhost/i42-vr:2", check=False)


@pytest.mark.container
def test_an_engine_that_fails_otherwise_than_for_want_of_the_image_is_named_not_taken_for_not_holding_it(tmp_path):
    """`lock --image` reads a local engine first: podman failing for another reason (here its storage, a real
    podman given a storage.conf with a driver it has not) stops the run naming podman's command and message;
    the registry is not asked in its place (where `localhost` fails again, hiding the cause)."""
    conf = tmp_path / "storage.conf"
    conf.write_text(f'[storage]\ndriver = "nosuchdriver"\ngraphroot = "{tmp_path / "graph"}"\n'
                    f'runroot = "{tmp_path / "run"}"\n')
    cli = Cli(tmp_path, {**isolated_env(tmp_path), **containers_env(), "CONTAINERS_STORAGE_CONF": str(conf)})
    r = cli("lock", "--image", "localhost/i42-unread:1", "--out", tmp_path / "back", "--json")
    assert r.returncode == 1, str(r)
    error = r.json()["error"]
    assert "podman image inspect localhost/i42-unread:1" in error and "driver not supported" in error, error
    assert "registry" not in error, error
    assert not (tmp_path / "back").exists()


@pytest.mark.slow
@pytest.mark.container
def test_build_image_makes_the_same_image_as_toolchain_image_from_its_lock(test_base, tmp_path):
    cli = Cli(tmp_path, {**isolated_env(tmp_path), **containers_env()})
    r = cli("build", "--recipe", "demo", "--out", tmp_path / "out", "--cache-dir", tmp_path / "cache", "--json",
            "--image", "localhost/i42-build:1", "--image-base", test_base, timeout=1200)
    assert r.returncode == 0, str(r)
    built = r.json()["image"]
    assert built["loaded"] == {"engine": "podman", "name": "localhost/i42-build:1"}
    # the base under the name given is in the build record (never in the image), which reads back with the lock
    record = tomlio.load_file(tmp_path / "out" / "build-record.toml")
    assert record["image"] == {"name": "localhost/i42-build:1", "digest": built["digest"], "base": test_base}
    assert test_base.split("@")[0] not in (tmp_path / "out" / "stack.lock.toml").read_text()
    from toolchain.lock import read_lock

    assert read_lock(tmp_path / "out" / "stack.lock.toml").components[0].build_seconds > 0  # (the record, read back)
    again = _image(tmp_path, "again", tmp_path / "out" / "stack.lock.toml", "--tag", "localhost/i42-build:1",
                   "--base", test_base)
    assert again["digest"] == built["digest"]
    assert _engine("podman", "image", "inspect", "--format", "{{.Digest}}", "localhost/i42-build:1").stdout.strip() \
        == built["digest"]
    _engine("podman", "rmi", "localhost/i42-build:1", check=False)


def _bisect_setup(demo_build: DemoBuild, tmp_path: Path) -> tuple[Cli, Path]:
    """A CLI over a copy of the demo build's cache, and a --test-cmd script: bad once `word_count` miscounts."""
    cache = tmp_path / "cache"
    shutil.copytree(demo_build.cache, cache, symlinks=True)
    test = tmp_path / "word-count.py"
    test.write_text("import glob, os, sys\n"
                    "sys.path[:0] = glob.glob(os.path.join(os.environ['TOOLCHAIN_BISECT_WHEEL_DIR'], 'demo_engine-*.whl'))\n"
                    "from demo_engine.text import word_count\n"
                    "sys.exit(0 if word_count('two  words ') == 2 else 1)\n")
    return Cli(tmp_path, {**isolated_env(tmp_path), **containers_env(), "TOOLCHAIN_CACHE_DIR": str(cache)}), test


@pytest.mark.slow
@pytest.mark.container
def test_bisect_keep_images_loads_the_commit_it_names_as_an_image_that_runs(demo_build, test_base, tmp_path):
    cli, test = _bisect_setup(demo_build, tmp_path)
    r = cli("bisect", "--recipe", "demo", "--component", "engine", "--good", "v0.3.1", "--bad", "v0.4.0",
            "--test-cmd", f"python3 {test}", "--out", tmp_path / "bisect", "--json", "--keep-images",
            "--image-base", test_base, timeout=1200)
    assert r.returncode == 0, str(r)
    doc = r.json()
    bad = doc["result"]["first_bad"]["key"]
    name = doc["images"]["bad"]
    assert name.startswith(f"localhost/bisect-demo:bad-{bad[:12]}@sha256:"), doc["images"]
    tag = name.split("@")[0]
    run = _engine("podman", "run", "--rm", "--network=none", tag, "python3", "-c",
                  "from demo_engine.text import word_count; print(word_count('two  words '))")
    assert run.stdout.strip() != "2"  # the regression, runnable at once
    good = _engine("podman", "run", "--rm", "--network=none", doc["images"]["good"].split("@")[0], "python3", "-c",
                   "from demo_engine.text import word_count; print(word_count('two  words '))")
    assert good.stdout.strip() == "2"
    _engine("podman", "rmi", tag, doc["images"]["good"].split("@")[0], check=False)


@pytest.mark.slow
@pytest.mark.container
def test_bisect_keep_images_never_moves_a_name_an_image_it_did_not_make_holds(demo_build, test_base, tmp_path):
    """A bisect with --keep-images, then the same bisect again after an image the tool did not make (one this
    test imports) took the bad end's name and the next one (NAME-2): the second run leaves both to it and
    loads the bad end as NAME-3, saying so (a warning, and `images-renamed` in --json); the good end's name
    still holds the tool's own earlier image, which is replaced."""
    cli, test = _bisect_setup(demo_build, tmp_path)
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "keep47.toml").write_text('extends = "demo"\n')  # (names of this test's own)

    def bisect(out: str) -> dict:
        r = cli("bisect", "--recipe", "keep47", "--component", "engine", "--good", "v0.3.1", "--bad", "v0.4.0",
                "--test-cmd", f"python3 {test}", "--out", tmp_path / out, "--json", "--keep-images",
                "--image-base", test_base, timeout=1200)
        assert r.returncode == 0, str(r)
        return {**r.json(), "stderr": " ".join(r.stderr.split())}

    def image_id(name: str) -> str:
        return _engine("podman", "image", "inspect", "--format", "{{.Id}}", name).stdout.strip()

    foreign = f"localhost/keep-images-foreign-{os.getpid()}:1"
    empty = tmp_path / "empty.tar"
    with tarfile.open(empty, "w"):
        pass
    made: list[str] = []
    try:
        first = bisect("bisect-1")
        good, bad = (first["images"][end].split("@")[0] for end in ("good", "bad"))
        made += [image_id(good), image_id(bad)]
        assert first["images-renamed"] == {} and bad.startswith("localhost/bisect-keep47:bad-"), first["images"]
        _engine("podman", "import", str(empty), foreign)
        made.append(image_id(foreign))
        for name in (bad, f"{bad}-2"):
            _engine("podman", "tag", foreign, name)  # (the user's own images under those names)
        assert image_id(bad) == image_id(f"{bad}-2") == made[2]

        second = bisect("bisect-2")
        assert second["images"]["bad"].split("@") == [f"{bad}-3", first["images"]["bad"].split("@")[1]], second
        assert second["images-renamed"] == {"bad": {"wanted": bad, "used": f"{bad}-3"}}, second
        assert f"{bad} names an image toolchain did not make in podman" in second["stderr"], second["stderr"]
        assert f"the bad image is {bad}-3" in second["stderr"], second["stderr"]
        assert image_id(bad) == image_id(f"{bad}-2") == made[2]  # (left to the image that held them)
        assert image_id(f"{bad}-3") == made[1]
        assert second["images"]["good"] == first["images"]["good"] and image_id(good) == made[0]
        run = _engine("podman", "run", "--rm", "--network=none", f"{bad}-3", "python3", "-c",
                      "from demo_engine.text import word_count; print(word_count('two  words '))")
        assert run.stdout.strip() != "2"  # the regression, under the name it took
    finally:
        for ident in made:
            _engine("podman", "rmi", "-f", ident, check=False)


@pytest.mark.slow
@pytest.mark.container
def test_a_recipes_image_base_is_the_base_of_its_locks_image_and_must_be_pinned(demo_build, test_base, tmp_path):
    cli = Cli(tmp_path, {**isolated_env(tmp_path), **containers_env(), "TOOLCHAIN_CACHE_DIR": str(demo_build.cache)})
    (tmp_path / "recipes").mkdir()
    loose = tmp_path / "recipes" / "loose.toml"
    loose.write_text('extends = "demo"\n[image]\nbase = "debian:12"\n')
    refused = cli("build", "--recipe", loose, "--out", tmp_path / "loose", "--json")
    assert refused.returncode == 2 and "image.base" in refused.stdout and "pinned by digest" in refused.stdout, \
        str(refused)
    recipe = tmp_path / "recipes" / "imaged.toml"
    recipe.write_text(f'extends = "demo"\n[image]\nbase = "{test_base}"\n')
    built = cli("build", "--recipe", recipe, "--out", tmp_path / "out", "--json", timeout=1200)
    assert built.returncode == 0, str(built)
    made = _image(tmp_path, "a", tmp_path / "out" / "stack.lock.toml", "--tag", "localhost/i42-recipe-base:1")
    name, digest = test_base.split("@")
    assert made["labels"]["org.opencontainers.image.base.digest"] == digest
    assert made["base"] == name and "org.opencontainers.image.base.name" not in made["labels"]  # (by digest only)


@pytest.mark.slow
@pytest.mark.container
def test_the_realstack_bundle_unpacked_elsewhere_becomes_an_image_that_runs_its_compiled_stack(realstack_built,
                                                                                                 test_base, tmp_path):
    """A journey on the realstack (engine, C-extension kernels with pre-fetched FetchContent sources, ARK in a
    subdirectory, local patches): its bundle, made by one user and unpacked by another in a folder of their own,
    turned into an image from there with a new cache; the image runs the patched engine and the compiled kernels
    with the image's own Python, and the lock comes back out of it byte for byte."""
    from tests.support.realstack import cli_in
    from tests.test_realstack import CHECK_WHEELS

    s = realstack_built.stack
    made = cli_in(tmp_path / "maker").ok("build", "--recipe", s.stack, "--cache-dir", realstack_built.cache,
                                         "--out", tmp_path / "maker" / "dist", "--bundle", "--json")
    bundle = Path(made.json()["bundle"])
    unpacked = tmp_path / "user" / "unpacked"
    with tarfile.open(bundle.with_name(bundle.name + ".tar.gz")) as tar:
        tar.extractall(unpacked, filter="data")
    (lock,) = unpacked.rglob("stack.lock.toml")
    tag = "localhost/i42-realstack:1"
    # the lock names its interpreter by name, never by the maker's path of it (the maker's build record keeps that)
    user = Cli(tmp_path / "user", {**isolated_env(tmp_path / "user"), **containers_env()})
    assert tomlio.load_file(lock)["target"]["python"] == Path(sys.executable).name
    # (the recipe's own text, as its author wrote it, names what it names: it is the recipe, hashed as such)
    traces = [ln for ln in lock.read_text().splitlines()
              if (str(tmp_path / "maker") in ln or sys.prefix in ln) and not ln.startswith("text = ")]
    assert not traces, traces
    first = _image(tmp_path / "user", "a", lock, "--tag", tag, "--base", test_base, "--python", "python3",
                   "--load", "podman")
    second = _image(tmp_path / "user", "b", lock, "--tag", "localhost/i42-realstack:2", "--base", test_base,
                    "--python", "python3")
    assert first["digest"] == second["digest"], (first, second)
    try:
        ran = json.loads(_engine("podman", "run", "--rm", "--network=none", tag, "python3", "-c",
                                 CHECK_WHEELS).stdout)
        built = {c["name"]: c for c in tomlio.load_file(lock)["components"]}
        assert ran["engine_patched"] is True and ran["scale"], ran  # the local patch, the compiled extension
        assert ran["versions"] == [built[n]["version"] for n in ("engine", "kernels", "ark")], (ran, built)
        assert _engine("podman", "run", "--rm", "--network=none", tag, "python3", "-m", "pip", "check").returncode == 0
        user.ok("lock", "--image", tag, "--out", tmp_path / "user" / "back", "--json")
        assert (tmp_path / "user" / "back" / "stack.lock.toml").read_bytes() == lock.read_bytes()
    finally:
        _engine("podman", "rmi", tag, check=False)
