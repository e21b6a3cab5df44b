"""Journeys, round two (issue 33), each through the installed wheel in a temporary folder, as a user types them:
the user's folder moves and its lock is replayed; an inherited component is swapped for a prebuilt and back;
plan and doctor of a recipe whose base image is not here; podman failing on its default ulimits; verify-repro
of a bundle whose lock pins a closure.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spine_helpers import GitRepo, shipped_demo_commit
from tests.support.container_fixtures import podman_image  # noqa: F401  (pytest fixture)
from tests.support.realstack import read_toml, sha256_file

pytestmark = pytest.mark.slow

ENGINE_COMMIT = shipped_demo_commit("engine")  # as the shipped demo.toml pins them
ARK_COMMIT = shipped_demo_commit("ark")
MY_DEMO = '''\
description = "my demo: the shipped demo with my own engine patch and a kernel preset"
extends = "demo"

[components.engine]
extend-patches = ["engine/0001-user-note.patch"]   # after the demo's own engine patch
inputs = ["configs/preset.txt"]

[components.ark]
extend-patches = ["ark/0001-ark-note.patch"]   # made at the root of the suite repository (ARK builds extension/ark)
'''


def _user_patch(cache: Path, repo_name: str, commit: str, files: dict[str, str], dest: Path) -> None:
    """What a user does: clone (from the cache the first build filled), change, `git format-patch` at the root."""
    (repos,) = (cache / "demo-repos").glob("*/")
    clone = dest.parent / f"clone-{repo_name}"
    subprocess.run(["git", "clone", "--quiet", str(repos / f"{repo_name}.git"), str(clone)], check=True,
                   capture_output=True)
    repo = GitRepo(clone)
    repo.git("checkout", "--quiet", commit)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(repo.make_patch(files, f"{repo_name}: the user's note"))
    shutil.rmtree(clone)


def test_the_folder_moves_and_its_lock_replays(user, make_user, tmp_path):
    home = tmp_path / "home"
    me = home / "me"
    (me / "recipes").mkdir(parents=True)
    (me / "recipes" / "my-demo.toml").write_text(MY_DEMO)
    (me / "recipes" / "configs").mkdir()
    (me / "recipes" / "configs" / "preset.txt").write_text("variant = 'small'\n")
    mine = user.at(me)
    mine.ok("build", "--recipe", "demo", "--component", "engine", "--out", home / "engine-only")  # fills the cache
    patch = me / "patches" / "engine" / "0001-user-note.patch"
    _user_patch(home / "cache", "engine", ENGINE_COMMIT, {"demo_engine/user_note.py": "NOTE = 'mine'\n"}, patch)
    ark_patch = me / "patches" / "ark" / "0001-ark-note.patch"
    _user_patch(home / "cache", "suite", ARK_COMMIT, {"extension/ark/demo_ark/user_note.py": "NOTE = 'ark'\n"},
                ark_patch)
    # the plan's text says where each patch applies (ARK's: at the repository root, not inside extension/ark)
    text = mine.ok("plan", "--recipe", "my-demo", env={"COLUMNS": "200"}).stdout
    assert f"ark/0001-ark-note.patch {sha256_file(ark_patch)[:12]} (at the root)" in text, text
    built = mine.ok("build", "--recipe", "my-demo", "--out", "out", "--json").json()
    wheels = [(c["name"], c["sha256"]) for c in built["components"]]

    # the folder moves; the lock is replayed from elsewhere
    moved = home / "me-moved"
    me.rename(moved)
    lock = moved / "out" / "stack.lock.toml"
    assert not (me / "patches").exists()
    elsewhere = user.at(home / "elsewhere")
    replay = elsewhere.ok("build", "--from-lock", lock, "--out", home / "replayed", "--bundle", "--json").json()
    assert [(c["name"], c["sha256"]) for c in replay["components"]] == wheels  # the cache kept the files
    bundle = Path(replay["bundle"])  # and the bundle carries them, under the names the recipe gave them
    assert sha256_file(bundle / "patches" / "engine" / "0001-user-note.patch") == sha256_file(
        moved / "patches" / "engine" / "0001-user-note.patch")
    assert (bundle / "inputs" / "engine" / "preset.txt").read_text() == "variant = 'small'\n"
    # verify-repro of the moved folder's lock on the machine that built it: the same lookup, the same cache
    elsewhere.ok("verify-repro", "--lock", lock)

    # without the cache (another cache dir): each missing file named, with its sha256 and where it looked
    bare = make_user(home / "elsewhere", tmp_path / "other-home")
    r = bare("build", "--from-lock", lock, "--out", home / "replayed-bare", "--json")
    assert r.returncode == 2, str(r)
    err, hint = r.json()["error"], r.json()["hint"]
    assert "damaged" not in err + hint, str(r)
    assert f"patch engine/0001-user-note.patch (sha256 {sha256_file(moved / patch.relative_to(me))}) is missing" \
        in err, err
    assert str(me / "patches" / "engine" / "0001-user-note.patch") in err  # where it looked: the recorded folder
    assert f"input configs/preset.txt (sha256 {sha256_file(moved / 'recipes' / 'configs' / 'preset.txt')})" in err
    assert str(tmp_path / "other-home" / "cache" / "files") in err  # and the cache
    assert "demo/0001-engine-reject-empty-prompt.patch" not in err  # the shipped patch is where it always was
    assert "--patches-dir" in hint and "bundle" in hint
    assert err.startswith("a locked file is missing") and "invalid recipe" not in err, err  # (issue 40)
    assert not (home / "replayed-bare").exists()

    # the bundle unpacked somewhere else rebuilds with an empty cache from any current folder: its patches/
    # (the root's and ARK's) and inputs/ are found by their recorded names and sha256 (issue 40)
    unpacked = home / "unpacked" / bundle.name
    shutil.copytree(bundle, unpacked)
    fresh = make_user(home / "somewhere", tmp_path / "fresh-home")
    rebuilt = fresh.ok("build", "--from-lock", unpacked / "stack.lock.toml", "--out", home / "rb", "--json").json()
    assert [(c["name"], c["sha256"]) for c in rebuilt["components"]] == wheels
    fresh.ok("verify-repro", "--lock", unpacked / "stack.lock.toml")

    # --patches-dir adds the moved folder's patches: the shipped demo patch is still found, the input too
    # is named (it is no patch) until the user restores it where the recipe said
    r = bare("build", "--from-lock", lock, "--out", home / "replayed-bare", "--patches-dir", moved / "patches",
             "--json")
    assert r.returncode == 2, str(r)
    err = r.json()["error"]
    assert not re.search(r"\bpatch \S+ \(sha256", err), err  # no patch is missing (the folders looked in are named)
    assert "input configs/preset.txt" in err
    # --patches-dir is repeatable and supplies input files too (by their recorded name and sha256): issue 40
    both = bare.ok("build", "--from-lock", lock, "--out", home / "replayed-two-dirs", "--patches-dir",
                   moved / "patches", "--patches-dir", moved / "recipes", "--json").json()
    assert [(c["name"], c["sha256"]) for c in both["components"]] == wheels
    (me / "recipes" / "configs").mkdir(parents=True)
    shutil.copy(moved / "recipes" / "configs" / "preset.txt", me / "recipes" / "configs" / "preset.txt")
    again = bare.ok("build", "--from-lock", lock, "--out", home / "replayed-bare", "--patches-dir",
                    moved / "patches", "--json").json()
    assert [(c["name"], c["sha256"]) for c in again["components"]] == wheels


KERNELS_SOURCE = '''\
description = "back to the kernels from source"
extends = "my-prebuilt"

[components.kernels]
url = "https://demo.invalid/toolchain-demo/kernels.git"
commit = "cbeb92f560396f646f0964ff65e0e549cebcdb82"
built-against = ["standin-torch"]

[[components.kernels.fetchcontent]]
name = "demoheaders"
url = "https://demo.invalid/toolchain-demo/headers.git"
commit = "1f188319fd7c8620135ccd995afec193f5ef02eb"
'''


def _prebuilt_recipe(wheel: Path, sha: str) -> str:
    return (f'description = "the demo with my kernels wheel"\nextends = "demo"\n\n[components.kernels]\n'
            f'prebuilt = {{ url = "{wheel.as_uri()}", sha256 = "{sha}" }}\n')


def test_the_kernels_swapped_for_a_prebuilt_and_back(user, tmp_path):
    home = tmp_path / "home"
    me = home / "me"
    (me / "recipes").mkdir(parents=True)
    mine = user.at(me)
    demo = {c["name"]: c for c in mine.ok("build", "--recipe", "demo", "--out", home / "demo-out",
                                           "--json").json()["components"]}
    keep = home / "wheels"
    keep.mkdir()
    wheel = Path(shutil.copy(demo["kernels"]["path"], keep))
    sha = demo["kernels"]["sha256"]

    # a mistyped pin: blamed on the pin, with what the file hashes to
    typo = sha[:-1] + ("0" if sha[-1] != "0" else "1")
    (me / "recipes" / "my-prebuilt.toml").write_text(_prebuilt_recipe(wheel, typo))
    r = mine("build", "--recipe", "my-prebuilt", "--json")
    assert r.returncode == 1, str(r)
    assert f"it has sha256 {sha}, the pin says {typo}" in r.json()["error"]
    assert "mistyped" in r.json()["hint"] and sha in r.json()["hint"]
    assert "changed or replaced where it is served" not in r.json()["hint"]

    # the pin fixed: plan notes the swap (nothing of the inherited build is refused), the build takes the wheel
    (me / "recipes" / "my-prebuilt.toml").write_text(_prebuilt_recipe(wheel, sha))
    plan = mine.ok("plan", "--recipe", "my-prebuilt", "--json").json()
    (swap,) = plan["recipe"]["swapped"]
    assert (swap["component"], swap["to"]) == ("kernels", "prebuilt")
    assert {"url", "commit", "built-against", "fetchcontent"} <= set(swap["dropped"])
    kernels = next(c for c in plan["components"] if c["name"] == "kernels")
    assert kernels["prebuilt"]["url"] == wheel.as_uri()
    text = mine.ok("plan", "--recipe", "my-prebuilt", env={"COLUMNS": "200"}).stdout
    assert "kernels swapped for a prebuilt by my-prebuilt.toml: the inherited url, " in text, text
    built = {c["name"]: c for c in mine.ok("build", "--recipe", "my-prebuilt", "--json").json()["components"]}
    assert built["kernels"]["source"] == "prebuilt" and built["kernels"]["sha256"] == sha
    lock = read_toml(me / "dist" / "my-prebuilt" / "stack.lock.toml")
    locked = {c["name"]: c for c in lock["components"]}
    assert locked["kernels"]["prebuilt"]["sha256"] == sha and locked["ark"]["after"] == ["kernels"]

    # and back: a recipe extending mine gives the kernels' url and commit again; the same wheel, from the cache
    (me / "recipes" / "my-source.toml").write_text(KERNELS_SOURCE)
    plan = mine.ok("plan", "--recipe", "my-source", "--json").json()
    assert [(s["component"], s["to"]) for s in plan["recipe"]["swapped"]] == [("kernels", "prebuilt"),
                                                                             ("kernels", "source")]
    back = {c["name"]: c for c in mine.ok("build", "--recipe", "my-source", "--json").json()["components"]}
    assert back["kernels"]["sha256"] == sha and back["kernels"]["source"] == "local-cache"


OFFLINE = {"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
           "http_proxy": "http://127.0.0.1:9", "NO_PROXY": "", "no_proxy": ""}  # no registry answers
B70_BASE = "docker.io/intel/llm-scaler-vllm@sha256:3f0a8c60fbaf376ec09538f093cba91f171238b99c117445c0bcc6096272ec3e"


def _podman_images() -> list[str]:
    return sorted(subprocess.run(["podman", "images", "--no-trunc", "--format", "{{.ID}} {{.Repository}}"],
                                 check=True, capture_output=True, text=True).stdout.splitlines())


def _pulled_since(before: list[str]) -> list[str]:
    """Images that came from a registry since `before` (other tests build localhost/ images meanwhile)."""
    return [i for i in _podman_images() if i not in before and not i.split()[-1].startswith("localhost/")]


@pytest.mark.container
def test_plan_and_doctor_of_an_absent_base_image_pull_nothing(user, podman_image):  # noqa: F811
    before = _podman_images()
    assert not any("llm-scaler" in line for line in before)  # the image is not here
    plan = user("plan", "--recipe", "b70-direct-fix", "--json", env=OFFLINE)
    assert plan.returncode == 0, str(plan)
    image = plan.json()["image"]
    assert (image["key"], image["present"], image["size"]) == ("target.base", False, None)
    assert image["line"].startswith(f"not present: a build pulls {B70_BASE} (size unknown: the registry could not "
                                    "be asked"), image
    assert "not captured" in plan.json()["toolchain"]["status"]
    text = user.ok("plan", "--recipe", "b70-direct-fix", env={**OFFLINE, "COLUMNS": "400"}).stdout
    assert f"target.base: not present: a build pulls {B70_BASE}" in text, text

    doctor = user("doctor", "--recipe", "b70-direct-fix", "--json", env=OFFLINE)
    assert doctor.returncode == 0, str(doctor)
    topics = [f["topic"] for f in doctor.json()["findings"]]
    # every host fact first, then these (the shipped run-args' --device /dev/dri: a line of its own on a box
    # without a GPU, issue 40)
    last = ["image", "run-args", "container engine"] if not Path("/dev/dri").exists() else ["image", "container engine"]
    assert topics[-len(last):] == last, topics
    assert {"kernel", "Level Zero loader", "compute runtime", "oneAPI", "memory"} <= set(topics[:-2]), topics
    line = doctor.json()["findings"][-len(last)]
    assert line["status"] == "warn" and line["value"].startswith(f"target.base: not present: a build pulls {B70_BASE}")
    text = user.ok("doctor", "--recipe", "b70-direct-fix", env={**OFFLINE, "COLUMNS": "400"}).stdout
    assert "container engine" in text.splitlines()[-2] and "image" in text.splitlines()[-1 - len(last)], text
    trial = "toolchain-doctor-trial"  # (doctor's own tiny image, made here offline: issue 40)
    # nothing pulled: no image from a registry came (images other tests build at the same time are localhost/,
    # as is doctor's own trial image), and the recipe's base is still not here
    assert _pulled_since(before) == []
    after = _podman_images()
    assert not any("llm-scaler" in line for line in after), after
    assert any(trial in line and "localhost/" in line for line in after), after  # (doctor's own, built here)


@pytest.mark.container
def test_plan_says_the_size_a_build_would_pull_as_the_registry_says_it(user, tmp_path, podman_image, registry):  # noqa: F811
    """The image is in a registry (on 127.0.0.1) and not here: the plan's line has the compressed size the
    registry's manifest gives, and still nothing is pulled."""
    import json
    import urllib.request

    digest_file = tmp_path / "digest"
    # an image of its own to push (the test image plus a label): a push sets the pushed image's digest in podman,
    # and the shared test image is pinned by its digest in tests running beside this one (tests/test_image.py)
    (tmp_path / "Containerfile").write_text(f"FROM {podman_image}\nLABEL journey=pushed\n")
    own = "localhost/journey-pushed:1"
    subprocess.run(["podman", "build", "--pull=never", "-t", own, str(tmp_path)], check=True, capture_output=True,
                   timeout=600)
    subprocess.run(["podman", "push", "--tls-verify=false", "--digestfile", str(digest_file), own,
                    f"{registry.address}/journey/base:pushed"], check=True, capture_output=True, timeout=600)
    subprocess.run(["podman", "rmi", own], capture_output=True, timeout=300)
    base = f"{registry.address}/journey/base@{digest_file.read_text().strip()}"
    request = urllib.request.Request(f"http://{registry.address}/v2/journey/base/manifests/{base.split('@')[1]}",
                                     headers={"Accept": "application/vnd.oci.image.manifest.v1+json, "
                                                        "application/vnd.docker.distribution.manifest.v2+json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        size = sum(layer["size"] for layer in json.load(answer)["layers"])
    me = user.at(tmp_path / "home" / "me")
    (me.cwd / "recipes").mkdir(parents=True)
    (me.cwd / "recipes" / "over-base.toml").write_text(
        f'extends = "b70-direct-fix"\n\n[target]\nbase = "{base}"\nrun-args = []\n')
    before = _podman_images()
    image = me.ok("plan", "--recipe", "over-base", "--json").json()["image"]
    assert (image["present"], image["size"]) == (False, size), image
    assert image["line"] == f"not present: a build pulls {base} ({size / (1 << 30):.2f} GiB compressed, as the " \
                            "registry says)"
    assert _pulled_since(before) == []


NO_ULIMITS_MISSING = '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\n'  # podman's default ulimits stay


@pytest.mark.container
def test_podman_failing_on_its_default_ulimits_is_told_the_containers_conf_setting(user, tmp_path, podman_image):  # noqa: F811
    conf = tmp_path / "containers.conf"
    conf.write_text(NO_ULIMITS_MISSING)
    me = user.at(tmp_path / "home" / "me")
    (me.cwd / "recipes").mkdir(parents=True)
    (me.cwd / "recipes" / "in-podman.toml").write_text(
        f'extends = "demo"\n\n[target]\nruntime = "podman"\nimage = "{podman_image}"\n')
    broken = {"CONTAINERS_CONF": str(conf)}
    r = me("build", "--recipe", "in-podman", "--json", env=broken)
    assert r.returncode == 1, str(r)
    err, hint = r.json()["error"], r.json()["hint"]
    assert "rlimit" in err, err
    assert "[containers] default_ulimits = []" in hint and "CONTAINERS_CONF" in hint, hint
    assert "check [target] run-args" not in hint

    doctor = me("doctor", "--recipe", "in-podman", "--json", env=broken)
    assert doctor.returncode == 0, str(doctor)
    engine = doctor.json()["findings"][-1]
    assert (engine["topic"], engine["status"]) == ("container engine", "missing"), engine
    assert "podman's default ulimits cannot be applied here" in engine["value"], engine
    assert engine["fix"] == hint  # the build's TIP and doctor's fix say the same
    assert [f["topic"] for f in doctor.json()["findings"]][-2] == "image"

    # with the setting the tests use, the same engine starts the container and doctor reads the target
    fixed = me.ok("doctor", "--recipe", "in-podman", "--json",
                  env={"CONTAINERS_CONF": "/etc/containers/toolchain-tests.conf"}).json()
    engine = fixed["findings"][-1]
    assert (engine["topic"], engine["status"]) == ("container engine", "ok"), engine
    assert any(f["topic"] == "torch" for f in fixed["findings"])  # the image's interpreter was read


def test_verify_repro_of_a_bundle_whose_lock_pins_a_closure(user, tmp_path):
    """The demo resolves its closure offline from the wheels shipped with it: the bundle's lock pins it, and
    verify-repro as INSTALL.txt says it checks the rebuild against it, saying nothing of a lock without one."""
    me = user.at(tmp_path / "home" / "me")
    bundle = Path(me.ok("build", "--recipe", "demo", "--bundle", "--json").json()["bundle"])
    lock = read_toml(bundle / "stack.lock.toml")
    pinned = sorted(d["name"] for d in lock["dependencies"])
    assert len(pinned) == 3, pinned
    install = (bundle / "INSTALL.txt").read_text()
    assert "3 locked dependencies" in install and "NO resolved closure" not in install, install
    (line,) = [ln for ln in install.splitlines() if "toolchain verify-repro" in ln]
    r = user.at(bundle).ok(*line[line.index("toolchain verify-repro"):].split()[1:], env={"COLUMNS": "400"})
    assert "pins no closure" not in r.stdout + r.stderr, str(r)
    assert "reproducible: 3 wheel(s) identical" in r.stdout, str(r)
    assert f"the closure of {bundle / 'stack.lock.toml'}" in r.stdout, str(r)  # the install check took the pins
    # verify-repro's own scratch caches draw none (issue 40); nor a RUNPATH into this interpreter's prefix (the
    # build leaves the interpreter's LDSHARED rpath out: tests/test_runpath_audit.py)
    assert not _warnings(r.stdout + r.stderr), str(r)
    r = user.at(bundle.parent).ok("verify-repro", "--recipe", "demo")
    assert not _warnings(r.stdout + r.stderr), str(r)


def test_recipes_wraps_descriptions_at_spaces_in_80_columns(user):
    shown = user.ok("recipes", env={"COLUMNS": "80"}).stdout
    listed = user.ok("recipes", "--json").json()["recipes"]
    assert all(len(line) <= 80 for line in shown.splitlines()), shown
    assert "…" not in shown
    words = shown.split()
    for recipe in listed:
        assert recipe["name"] in words
        for word in recipe["description"].split():
            assert word in words, (word, shown)  # each word whole on some line


def _setuptools_wheel() -> Path:
    """A setuptools >= 70.1 wheel on this machine with no network: the one virtualenv embeds."""
    embed = pytest.importorskip("virtualenv.seed.wheels.embed", reason="no virtualenv: no setuptools wheel offline")
    found = sorted(Path(embed.BUNDLE_FOLDER).glob("setuptools-*.whl"))
    if not found:
        pytest.skip("virtualenv embeds no setuptools wheel")
    return found[-1]


def test_the_demo_builds_in_an_interpreter_without_the_wheel_package(user, tmp_path):
    """What `pip install xpu-toolchain` leaves in a fresh venv: pip and setuptools (the package requires 70.1 or
    later), no `wheel`, although the demo's projects name it in their build requirements."""
    target = tmp_path / "target"
    subprocess.run([sys.executable, "-m", "venv", str(target)], check=True, capture_output=True, timeout=300)
    python = target / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-index", "--upgrade", str(_setuptools_wheel())],
                   check=True, capture_output=True, timeout=300)
    have = subprocess.run([str(python), "-m", "pip", "list", "--format", "freeze"], check=True, capture_output=True,
                          text=True).stdout
    assert "wheel==" not in have and "setuptools==" in have, have
    me = user.at(tmp_path / "home" / "me")
    (me.cwd / "recipes").mkdir(parents=True)
    (me.cwd / "recipes" / "in-venv.toml").write_text(f'extends = "demo"\n\n[target]\npython = "{python}"\n')
    built = me.ok("build", "--recipe", "in-venv", "--json").json()
    assert [c["name"] for c in built["components"]] == ["engine", "kernels", "ark"]


def test_installing_the_package_brings_a_setuptools_that_needs_no_wheel(installed):
    requires = subprocess.run([str(installed.python), "-c", "from importlib.metadata import requires; "
                               "print('\\n'.join(requires('xpu-toolchain')))"], check=True, capture_output=True,
                              text=True).stdout.split("\n")
    assert "setuptools>=70.1" in requires, requires


def test_shipped_recipes_point_only_to_files_the_package_has(installed):
    """A comment naming a file of this project names one the installed package holds (docs/ and the checkout's
    notes are not installed)."""
    import re

    shipped = installed.package / "shipped" / "recipes"
    named = {(p.name, m) for p in shipped.glob("*.toml")
             for m in re.findall(r"(?<![\w/.-])((?:toolchain|docs|tests|patches|recipes)/[\w./-]*\w)", p.read_text())}
    assert named  # (they do name some: the demo its sources, gdn-outproj-fix its patch)
    # toolchain/...: in the installed package's folder; patches/..., recipes/...: beside the recipe's recipes/
    missing = [(f, m) for f, m in sorted(named)
               if not (installed.package.parent / m if m.startswith(("toolchain/", "docs/", "tests/"))
                       else shipped.parent / m).exists()]
    assert not missing, missing
    notes = [p.name for p in shipped.glob("*.toml") if re.search(r"UPSTREAM(-NOTES)?\.md|\.\./shared", p.read_text())]
    assert not notes, notes  # the project's notes on upstream are not installed


def _warnings(text: str) -> list[str]:
    """The warning lines of `text`."""
    return [ln for ln in text.splitlines() if "warning" in ln]
