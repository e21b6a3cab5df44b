"""A fixture stack shaped like the real one (vLLM + vllm-xpu-kernels + auto-round ARK), not the demo.

`make_realstack(root)` makes, under `root`:

  repos/engine    like vLLM: pure Python (tiny backend), version from `git describe` (setuptools-scm scheme)
                  with a +xpu label, override REALSTACK_ENGINE_VERSION_OVERRIDE. Tags v0.2.0, v0.3.0, then
                  two commits: pinned at v0.3.0-2.
  repos/kernels   like vllm-xpu-kernels: a setuptools C extension (gcc) that needs the oneAPI env and two
                  pre-fetched FetchContent sources (-DFETCHCONTENT_SOURCE_DIR_ONEDNN in CMAKE_ARGS and
                  $REALSTACK_CUTLASS_SRC_DIR); fails when either is not handed. First-parent history
                  K[0] (v0.1.0) .. K[8] with a merge at K[3], the regression at K[FIRST_BAD] = K[5]
                  (scale() 2.0 -> 3.0) and a tag v0.1.1 at K[7]. Pinned at K[8] (v0.1.1-1).
  repos/onednn, repos/cutlass
                  the FetchContent dependencies: pinned at a tag; a later commit changes the header (so a
                  wrong commit handed to the build shows in the wheel).
  repos/suite     like intel/auto-round: the kernel package lives in ext/ark (subdir), distribution
                  realstack-ark-lib, BUILD_MODE=release for the plain version, ARK's compiler check. A side
                  branch `icx-only` holds a commit whose build needs `icx` (the stand-in has none).
  base/recipes/stack.toml   the stack: stand-in oneAPI (absolute path), patches on engine and ark
  base/recipes/bisect.toml  the same stack with no local patches (bisect baselines; no `extends`)
  base/recipes/stack-b60.toml  `extends = "stack"` (like ark-latest-b60), ARK_SYCL_TARGET for the B60
  base/patches/             engine/0001-engine-reject-empty-prompt.patch, ark/0001-ark-supported-devices.patch
  user/recipes/             a user's override recipes in their own directory:
      child.toml            extends the base BY PATH (absolute); inherits the engine patch, replaces ark's
                            patches with its own (user/patches/ark/0001-ark-user-tuning.patch)
      child-relpath.toml    the same, extends by a path relative to the child's own file
      child-by-name.toml    the same, `extends = "stack"` (found with --recipes-dir base/recipes)
      team.toml             `extends = "stack"` (a team's shared override living beside the user's recipes)
      child-own-dir.toml    `extends = "team"`: found in its own directory first, "stack" then via --recipes-dir
      my-b60.toml           extends base/recipes/stack-b60.toml by path, which extends "stack" (ITS own dir)
  user/patches/             ark/0001-ark-user-tuning.patch

Paths and commits come back in a frozen `RealStack`. Nothing in it is modified by the tests that share it
(session scope): a test that needs other history makes its own repositories.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import tomlkit

from tests.spine_helpers import BACKEND, PACKAGES, STANDIN, STANDIN_SETVARS, Cli, GitRepo, Result, isolated_env

SRC = PACKAGES / "realstack"
RS_BACKEND = SRC / "_backend" / "realstack_backend.py"
FIRST_BAD = 5  # index into RealStack.kernels_commits
ENGINE_DIST, KERNELS_DIST, ARK_DIST = "realstack-engine", "realstack-kernels", "realstack-ark-lib"
ENGINE_PATCH = "engine/0001-engine-reject-empty-prompt.patch"
ARK_PATCH = "ark/0001-ark-supported-devices.patch"
USER_ARK_PATCH = "ark/0001-ark-user-tuning.patch"

# A test command for `bisect --test-cmd`: import the kernels wheel of the step and check its scale().
KERNELS_TEST = """\
import os, sys, tempfile, zipfile
wheels = [w for w in os.environ["TOOLCHAIN_BISECT_WHEELS"].split(os.pathsep)
          if os.path.basename(w).startswith("realstack_kernels-")]
assert len(wheels) == 1, wheels
with tempfile.TemporaryDirectory() as d:
    zipfile.ZipFile(wheels[0]).extractall(d)
    sys.path.insert(0, d)
    import realstack_kernels
    print("scale", realstack_kernels.scale(), "cutlass", realstack_kernels.cutlass_revision())
    assert realstack_kernels.cutlass_revision() == "pinned"   # the pre-fetched dependency was used
    sys.exit(0 if realstack_kernels.scale() == 2.0 else 1)
"""


@dataclass(frozen=True)
class RealStack:
    root: Path
    engine: GitRepo
    kernels: GitRepo
    onednn: GitRepo
    cutlass: GitRepo
    suite: GitRepo
    base: Path                 # the base project: recipes/ and patches/
    user: Path                 # the user's override project: recipes/ and patches/
    setvars: Path              # the labelled oneAPI stand-in
    engine_commit: str
    kernels_commits: tuple[str, ...]   # first-parent K[0]..K[8]; K[FIRST_BAD] is the first bad one
    kernels_feature: str               # the commit merged at K[3] (second parent)
    onednn_commit: str                 # pinned (tag v3.13)
    cutlass_commit: str                # pinned (tag 260630)
    ark_commit: str                    # pinned (main)
    ark_icx_only: str                  # on branch icx-only: its build needs `icx`

    # ---- recipes -------------------------------------------------------------------------------------
    @property
    def base_recipes(self) -> Path:
        return self.base / "recipes"

    @property
    def base_patches(self) -> Path:
        return self.base / "patches"

    @property
    def user_recipes(self) -> Path:
        return self.user / "recipes"

    @property
    def user_patches(self) -> Path:
        return self.user / "patches"

    @property
    def stack(self) -> Path:
        return self.base_recipes / "stack.toml"

    @property
    def bisect_recipe(self) -> Path:
        return self.base_recipes / "bisect.toml"

    def user_recipe(self, name: str) -> Path:
        return self.user_recipes / f"{name}.toml"

    # ---- expectations --------------------------------------------------------------------------------
    @property
    def kernels_commit(self) -> str:
        return self.kernels_commits[-1]

    @property
    def first_bad(self) -> str:
        return self.kernels_commits[FIRST_BAD]

    @property
    def last_good(self) -> str:
        return self.kernels_commits[FIRST_BAD - 1]

    def patch_file(self, rel: str, *, user: bool = False) -> Path:
        return (self.user_patches if user else self.base_patches) / rel

    def commit_of(self, component: str) -> str:
        return {"engine": self.engine_commit, "kernels": self.kernels_commit, "ark": self.ark_commit}[component]

    def repo_of(self, component: str) -> GitRepo:
        return {"engine": self.engine, "kernels": self.kernels, "ark": self.suite}[component]


# (tag, commits after it) of each pinned commit: what `git describe --tags --long` must say
DESCRIBE = {"engine": ("v0.3.0", 2), "kernels": ("v0.1.1", 1), "ark": ("v0.5.0", 1)}


def _new_repo(path: Path) -> GitRepo:
    path.mkdir(parents=True)
    repo = GitRepo(path)
    repo.git("init", "--quiet", "--initial-branch=main")
    return repo


def _overlay(repo: GitRepo, project: str, dest: str = "") -> None:
    """Copy tests/packages/realstack/<project> into the work tree; each pyproject.toml that names
    realstack_backend gets it and tiny_backend beside it."""
    target = repo.path / dest if dest else repo.path
    shutil.copytree(SRC / project, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    for pyproject in target.rglob("pyproject.toml"):
        if "realstack_backend" in pyproject.read_text():
            shutil.copyfile(RS_BACKEND, pyproject.parent / RS_BACKEND.name)
            shutil.copyfile(BACKEND, pyproject.parent / BACKEND.name)


def _subdir_patch(repo: GitRepo, files: dict[str, str], subject: str, subdir: str) -> str:
    """GitRepo.make_patch for a component built from `subdir`: paths relative to it (`git apply --directory`)."""
    start = repo.head()
    repo.commit(subject, files)
    text = repo.git("format-patch", "-1", "--stdout", f"--relative={subdir}", "HEAD")
    repo.git("reset", "--quiet", "--hard", start)
    return text


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def make_engine(path: Path) -> tuple[GitRepo, str, str]:
    """The engine repository; returns (repo, pinned commit, the base recipe's patch text)."""
    repo = _new_repo(path)
    _overlay(repo, "engine")
    repo.commit("engine: initial import", tag="v0.2.0")
    init = repo.path / "realstack_engine" / "__init__.py"
    repo.commit("engine: generate() answers with the model's greeting",
                {"realstack_engine/__init__.py": init.read_text().replace("realstack engine: ", "Hello from realstack: ")},
                tag="v0.3.0")
    repo.commit("engine: add a tokens counter", {"realstack_engine/tokens.py": "def count(text):\n    return len(text.split())\n"})
    pinned = repo.commit("docs: the engine's README", {"README.md": "realstack engine (stands in for vLLM)\n"})
    text = init.read_text()
    patch = repo.make_patch({"realstack_engine/__init__.py": text.replace(
        "def generate(prompt):\n",
        "def generate(prompt):\n    if not prompt:\n        raise ValueError(\"empty prompt\")\n")},
        "engine: reject an empty prompt")
    return repo, pinned, patch


def make_dependency(path: Path, project: str, tag: str, header: str, later: tuple[str, str]) -> tuple[GitRepo, str]:
    """A FetchContent dependency: pinned at `tag`; a later commit replaces `later[0]` with `later[1]`."""
    repo = _new_repo(path)
    _overlay(repo, project)
    pinned = repo.commit(f"{project}: release {tag}", tag=tag)
    text = (repo.path / header).read_text()
    repo.commit(f"{project}: after the release", {header: text.replace(*later)})
    return repo, pinned


def make_kernels(path: Path) -> tuple[GitRepo, tuple[str, ...], str]:
    """First-parent K[0] (v0.1.0) .. K[8]: K[3] merges a feature branch, K[FIRST_BAD] = K[5] changes the
    scale (the regression), K[7] is tagged v0.1.1. Returns (repo, first-parent commits, the feature commit)."""
    repo = _new_repo(path)
    _overlay(repo, "kernels")
    k = [repo.commit("kernels: add scale, oneDNN and sycl-tla entry points", tag="v0.1.0")]
    k.append(repo.commit("kernels: describe the build in the README", {"README.md": "realstack kernels\n"}))
    repo.branch("feature/moe")
    repo.switch("feature/moe")
    feature = repo.commit("moe: add the routing table", {"realstack_kernels/moe.py": "EXPERTS = 8\n"})
    repo.switch("main")
    k.append(repo.commit("kernels: a NEWS file", {"NEWS": "0.1.1: unreleased\n"}))
    k.append(repo.merge("feature/moe", "Merge branch 'feature/moe'"))
    k.append(repo.commit("kernels: tidy the NEWS", {"NEWS": "0.1.1: moe routing\n"}))
    bad_scale = "/* the kernels' scale (a regression changes it) */\n#define KERNEL_SCALE 3.0\n"
    k.append(repo.commit("kernels: fold the rms epsilon into the scale", {"csrc/scale.h": bad_scale}))
    k.append(repo.commit("kernels: comment the scale", {"csrc/scale.h": bad_scale + "/* folded */\n"}))
    k.append(repo.commit("kernels: release notes for 0.1.1", {"NEWS": "0.1.1: moe routing, folded scale\n"},
                         tag="v0.1.1"))
    k.append(repo.commit("ci: build the kernels on every push", {".ci.yml": "build: true\n"}))
    assert k[FIRST_BAD] == k[5]
    assert len(k) == 9
    return repo, tuple(k), feature


def make_suite(path: Path) -> tuple[GitRepo, str, str, str]:
    """auto-round-like: returns (repo, pinned main commit, icx-only commit, the base recipe's ark patch)."""
    repo = _new_repo(path)
    _overlay(repo, "suite")
    repo.commit("suite: initial import with the ark extension", tag="v0.5.0")
    init_rel = "ext/ark/realstack_ark/__init__.py"
    init = (repo.path / init_rel).read_text()
    pinned = repo.commit("ark: add the int4 dequantize kernel", {init_rel: init + (
        "\n\ndef dequantize_int4(packed, high, scale):\n"
        "    return dequantize((packed >> 4) if high else (packed & 0xF), scale)\n")})
    init = (repo.path / init_rel).read_text()
    patch = _subdir_patch(repo, {init_rel: init + '\nSUPPORTED_DEVICES = ("bmg-g21", "bmg-g31")\n'},
                          "ark: list the supported devices", "ext/ark")
    repo.branch("icx-only")
    repo.switch("icx-only")
    pyproject = (repo.path / "ext/ark/pyproject.toml").read_text()
    icx_only = repo.commit("ark: read the compiler version from icx only",
                           {"ext/ark/pyproject.toml": pyproject.replace('compiler = "ark"', 'compiler = "icx"')})
    repo.switch("main")
    return repo, pinned, icx_only, patch


def user_ark_patch(suite: GitRepo) -> str:
    init_rel = "ext/ark/realstack_ark/__init__.py"
    init = (suite.path / init_rel).read_text()
    return _subdir_patch(suite, {init_rel: init + "\nUSER_TUNED = True\n"}, "ark: the user's tuning", "ext/ark")


def stack_recipe(s: RealStack, *, python: str = sys.executable, setvars: str | None = None,
                 patches: bool = True, description: str = "") -> str:
    """The base recipe text (like recipes/ark-latest.toml); `patches=False` leaves out the local patches."""
    setvars = str(s.setvars) if setvars is None else setvars
    text = f'''\
# realstack: engine (vLLM) + kernels (vllm-xpu-kernels) + ark (auto-round-lib in ext/ark), built from
# local git repositories, with the labelled oneAPI STAND-IN (tests/.. toolchain/demo_src/oneapi-standin).
description = "{description or 'realstack: engine + C-extension kernels with FetchContent deps + ARK in a subdirectory'}"

[toolchain]
setvars = "{setvars}"
setvars-args = ["--force"]

[target]
runtime = "host"
python = "{python}"

[env]
MAX_JOBS = "2"

# Like vLLM: pure Python, version from git describe (+xpu), the version override env of vLLM's setup.py.
[components.engine]
url = "{s.engine.url}"
ref = "main"
commit = "{s.engine_commit}"   # docs: the engine's README (v0.3.0-2)
patches = ["{ENGINE_PATCH}"]
version-env = "REALSTACK_ENGINE_VERSION_OVERRIDE"
dist = "{ENGINE_DIST}"
import = "realstack_engine"
install-args = []

[components.engine.env]
REALSTACK_TARGET_DEVICE = "xpu"

# Like vllm-xpu-kernels: a C extension; its FetchContent sources are pre-fetched at pinned commits.
[components.kernels]
url = "{s.kernels.url}"
ref = "main"
commit = "{s.kernels_commit}"   # ci: build the kernels on every push (v0.1.1-1)
after = ["engine"]
version-env = "VLLM_VERSION_OVERRIDE"
dist = "{KERNELS_DIST}"
import = "realstack_kernels"
# setup.py directly (a second, not pip's five): the same setuptools build of the same C extension
command = ["{{python}}", "setup.py", "-q", "bdist_wheel", "--dist-dir", "{{out}}"]

[components.kernels.env]
CMAKE_BUILD_TYPE = "Release"

[[components.kernels.fetchcontent]]
name = "oneDNN"
url = "{s.onednn.url}"
commit = "{s.onednn_commit}"   # v3.13

[[components.kernels.fetchcontent]]
name = "cutlass-sycl"
url = "{s.cutlass.url}"
commit = "{s.cutlass_commit}"   # 260630
env = "REALSTACK_CUTLASS_SRC_DIR"

# Like ARK in auto_round_extension/ark: the package is in a subdirectory; BUILD_MODE=release.
[components.ark]
url = "{s.suite.url}"
ref = "main"
commit = "{s.ark_commit}"   # ark: add the int4 dequantize kernel (v0.5.0-1)
subdir = "ext/ark"
patches = ["{ARK_PATCH}"]
after = ["kernels"]
dist = "{ARK_DIST}"
import = "realstack_ark"

[components.ark.env]
BUILD_MODE = "release"
ARK_SYCL_TARGET = "intel_gpu_bmg_g31"

[smoke]
model = "realstack-tiny-model"
device = "b70"
tensor-parallel-size = 1
serve-args = ["--enforce-eager"]
cases = ["models", "first", "math"]
'''
    if not patches:
        text = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("patches = "))
    return text


OVERRIDE = f'''\
description = "a user's override of the realstack base: their own ARK patch and target"

[components.ark]
patches = ["{USER_ARK_PATCH}"]   # replaces the base's ark patches; the engine's patch is inherited

[components.ark.env]
ARK_SYCL_TARGET = "intel_gpu_bmg_g21"
'''


def make_realstack(root: Path) -> RealStack:
    root = Path(root)
    repos = root / "repos"
    engine, engine_commit, engine_patch = make_engine(repos / "engine")
    kernels, kcommits, feature = make_kernels(repos / "kernels")
    onednn, onednn_commit = make_dependency(repos / "onednn", "onednn", "v3.13", "include/onednn_version.h",
                                            ('"3.13"', '"3.14-dev"'))
    cutlass, cutlass_commit = make_dependency(repos / "cutlass", "cutlass", "260630", "include/cutlass_revision.h",
                                              ('"pinned"', '"later"'))
    suite, ark_commit, icx_only, ark_patch = make_suite(repos / "suite")
    s = RealStack(root=root, engine=engine, kernels=kernels, onednn=onednn, cutlass=cutlass, suite=suite,
                  base=root / "base", user=root / "user", setvars=STANDIN_SETVARS, engine_commit=engine_commit,
                  kernels_commits=kcommits, kernels_feature=feature, onednn_commit=onednn_commit,
                  cutlass_commit=cutlass_commit, ark_commit=ark_commit, ark_icx_only=icx_only)
    write(s.base_patches / ENGINE_PATCH, engine_patch)
    write(s.base_patches / ARK_PATCH, ark_patch)
    write(s.stack, stack_recipe(s))
    write(s.bisect_recipe, stack_recipe(s, patches=False, description="realstack without local patches"))
    write(s.base_recipes / "stack-b60.toml", '''\
description = "realstack for the B60 (like ark-latest-b60 extends ark-latest)"
extends = "stack"

[components.ark.env]
ARK_SYCL_TARGET = "intel_gpu_bmg_g21"
''')
    write(s.user_patches / USER_ARK_PATCH, user_ark_patch(suite))
    write(s.user_recipe("child"), f'extends = "{s.stack}"\n' + OVERRIDE)
    write(s.user_recipe("child-relpath"), 'extends = "../../base/recipes/stack.toml"\n' + OVERRIDE)
    write(s.user_recipe("child-by-name"), 'extends = "stack"\n' + OVERRIDE)
    write(s.user_recipe("team"), 'extends = "stack"\ndescription = "the team\'s shared settings"\n\n'
                                  '[env]\nMAX_JOBS = "1"\n')
    write(s.user_recipe("child-own-dir"), 'extends = "team"\n' + OVERRIDE)
    write(s.user_recipe("my-b60"), f'extends = "{s.base_recipes / "stack-b60.toml"}"\n'
                                    'description = "my B60 box"\n\n[env]\nMAX_JOBS = "1"\n')
    return s


# ---- the stack built once, and looking inside wheels ----------------------------------------------------

@dataclass(frozen=True)
class RealStackBuild:
    """`toolchain build --recipe <base>/recipes/stack.toml` into a fresh cache, once. Tests may build more
    into `cache` (entries only add up) but must not change `out`."""
    stack: RealStack
    root: Path
    cache: Path
    out: Path
    result: Result
    cli: Cli

    @property
    def lock_path(self) -> Path:
        return self.out / "stack.lock.toml"

    def lock(self) -> dict:
        return read_toml(self.lock_path)

    def component(self, name: str) -> dict:
        (comp,) = [c for c in self.lock()["components"] if c["name"] == name]
        return comp


def build_realstack(stack: RealStack, root: Path) -> RealStackBuild:
    root.mkdir(parents=True, exist_ok=True)
    cli = Cli(root, isolated_env(root))
    r = cli("build", "--recipe", stack.stack, "--cache-dir", root / "cache", "--out", root / "out", "--json")
    assert r.returncode == 0, str(r)
    return RealStackBuild(stack, root, root / "cache", root / "out", r, cli)


def cli_in(path: Path) -> Cli:
    """The CLI running in `path` (made if needed) with an isolated environment (cache under `path`)."""
    path.mkdir(parents=True, exist_ok=True)
    return Cli(path, isolated_env(path))


def read_toml(path: Path) -> dict:
    return tomlkit.parse(Path(path).read_text()).unwrap()


def run_with_wheels(wheels: Iterable[Path], code: str, where: Path) -> subprocess.CompletedProcess:
    """Unpack `wheels` into `where`/site and run `code` there with a fresh interpreter (no install needed:
    the C extensions were built for this interpreter)."""
    site = where / "site"
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            z.extractall(site)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "TOOLCHAIN_"))}
    env["PYTHONPATH"] = str(site)
    return subprocess.run([sys.executable, "-c", code], cwd=where, env=env, capture_output=True, text=True,
                          timeout=60)


def sha256_file(path: Path) -> str:
    """(Here, not imported from toolchain/: the tests drive the tool only through its CLI.)"""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()



__all__ = [
    "ARK_DIST",
    "ARK_PATCH",
    "DESCRIBE",
    "ENGINE_DIST",
    "ENGINE_PATCH",
    "FIRST_BAD",
    "KERNELS_DIST",
    "KERNELS_TEST",
    "STANDIN",
    "USER_ARK_PATCH",
    "RealStack",
    "RealStackBuild",
    "build_realstack",
    "cli_in",
    "make_engine",
    "make_realstack",
    "read_toml",
    "run_with_wheels",
    "sha256_file",
    "stack_recipe",
    "write",
]
