"""The corpus of bad inputs (issue 21): recipes, environment variables, the command line, locks, pylock.toml,
wheel cache entries and registry answers, each table-driven. Every case is checked the same way
(tests/corpus/harness.py): its exit code, ONE cause line naming the file, key or variable, no traceback,
nothing written, no secret and no raw terminal control in the output. After each group, the next valid build
(through the group's own cache) still gives the reference wheels byte for byte: once per group, not per case.

Cases run in this process (`toolchain.cli.main`), so the corpus costs what the refusals cost, not an
interpreter start each. The tiny recipe is built once per session; the lock groups share the session's demo
build (tests/conftest.py `demo_build`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tomlkit

from tests.corpus.fake_registry import REPO, Answer, FakeRegistry, json_answer
from tests.corpus.harness import SECRET, Case, Report, run_call, run_cli, snapshot
from tests.spine_helpers import component, isolated_env, recipe_data

DROP = ("TOOLCHAIN_", "TINY_", "SETVARS_", "CMPLR_ROOT", "ONEAPI_ROOT", "MAX_JOBS", "CMAKE_BUILD_PARALLEL_LEVEL",
        "ARK_SYCL_TLA_JOBS")


def case_env(root: Path) -> dict[str, str | None]:
    """The isolated environment of tests/spine_helpers.py, as an overlay of this process's environment."""
    return {**{k: None for k in os.environ if k.startswith(DROP)}, **isolated_env(root)}


def wheels(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((out / "wheels").glob("*.whl"))}


class Base:
    """The tiny recipe, built once: its workspace, cache, out dir and reference wheels."""

    def __init__(self, root: Path, data: dict[str, Any]) -> None:
        self.root, self.data = root, data
        self.ws = root / "ws"
        (self.ws / "recipes").mkdir(parents=True)
        (self.ws / "patches").mkdir()
        self.recipe = self.ws / "recipes" / "ok.toml"
        self.recipe.write_text(tomlkit.dumps(data))
        self.env = case_env(root)
        r = run_cli(["build", "--recipe", self.recipe, "--out", root / "out", "--cache-dir", root / "cache"],
                    cwd=self.ws, env=self.env)
        assert r.code == 0, str(r)
        self.reference = wheels(root / "out")
        assert len(self.reference) == 1

    def group(self, name: str) -> Path:
        """A directory of the group's own, with a copy of the built cache."""
        d = self.root / name
        shutil.copytree(self.root / "cache", d / "cache", symlinks=True)
        return d

    def rebuild_identical(self, group: Path, cache: Path | None = None, env: dict[str, str | None] | None = None
                          ) -> None:
        """The next valid build through the group's cache gives the reference wheels, byte for byte."""
        out = group / "next-valid-build"
        r = run_cli(["build", "--recipe", self.recipe, "--out", out, "--cache-dir", cache or group / "cache"],
                    cwd=self.ws, env={**self.env, **(env or {})})
        assert r.code == 0, str(r)
        assert wheels(out) == self.reference, f"{group.name}: the next valid build's wheels differ"
        shutil.rmtree(out)


@pytest.fixture(scope="session")
def base(tmp_path_factory, tiny_repo) -> Base:
    data = recipe_data({"tiny": component(tiny_repo, dist="tiny")}, resolve={"indexes": []})
    return Base(tmp_path_factory.mktemp("corpus"), data)


# ---- recipes --------------------------------------------------------------------------------------------------

Mutation = Callable[[dict[str, Any]], Any]


def setter(path: str, value: Any) -> Mutation:
    """Set a dotted key (created as tables on the way)."""
    def apply(d: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for p in parents:
            d = d.setdefault(p, {})
        d[last] = value
    return apply


def comp(key: str, value: Any) -> Mutation:
    return setter(f"components.tiny.{key}", value)


def dropper(path: str) -> Mutation:
    def apply(d: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for p in parents:
            d = d[p]
        del d[last]
    return apply


def many(*ms: Mutation) -> Mutation:
    def apply(d: dict[str, Any]) -> None:
        for m in ms:
            m(d)
    return apply


def thousands(commit: str) -> bytes:
    """10,000 components in a chain (under the 1 MiB a recipe may have), the last after a name none has."""
    lines = ['description = "ten thousand"', "[components]"]
    lines += [f'c{i} = {{url = "u", commit = "{commit}"{f", after = [{chr(34)}c{i - 1}{chr(34)}]" if i else ""}}}'
              for i in range(9_999)]
    lines.append(f'c9999 = {{url = "u", commit = "{commit}", after = ["c10000"]}}')
    return ("\n".join(lines) + "\n").encode()


def cycle(d: dict[str, Any]) -> None:
    tiny = d["components"]["tiny"]
    d["components"] = {"a": {**tiny, "after": ["b"]}, "b": {**tiny, "after": ["a"]}}


ESC = "\x1b[2J\x1b]0;owned\x07"
RECIPE_CASES: list[tuple[str, Mutation, tuple[str, ...]]] = [
    ("description-int", setter("description", 5), ("description",)),
    ("unknown-top-key", setter("componets", {}), ("componets", "did you mean")),
    ("toolchain-not-table", setter("toolchain", "x"), ("toolchain",)),
    ("setvars-int", setter("toolchain.setvars", 1), ("toolchain.setvars",)),
    ("setvars-args-str", setter("toolchain.setvars-args", "x"), ("toolchain.setvars-args",)),
    ("setvars-args-int-item", setter("toolchain.setvars-args", [1]), ("toolchain.setvars-args",)),
    ("runtime-unknown", setter("target.runtime", "lxc"), ("target.runtime",)),
    ("python-empty", setter("target.python", " "), ("target.python",)),
    ("podman-no-image", setter("target.runtime", "podman"), ("target",)),
    ("host-with-image", setter("target.image", "debian"), ("target",)),
    ("run-args-int", setter("target.run-args", [1]), ("target.run-args",)),
    ("target-unknown-key", setter("target.imgae", "x"), ("target.imgae",)),
    ("env-int", setter("env.FOO", 1), ("env.FOO",)),
    ("env-bad-name", setter("env.1BAD", "x"), ("env.1BAD",)),
    ("env-secret", setter("env.API_TOKEN", SECRET), ("env.API_TOKEN",)),
    ("env-max-jobs-0", setter("env.MAX_JOBS", "0"), ("env.MAX_JOBS",)),
    ("env-max-jobs-negative", setter("env.MAX_JOBS", "-3"), ("env.MAX_JOBS",)),
    ("env-max-jobs-word", setter("env.MAX_JOBS", "many"), ("env.MAX_JOBS",)),
    ("env-cmake-parallel-0", setter("env.CMAKE_BUILD_PARALLEL_LEVEL", "0"), ("env.CMAKE_BUILD_PARALLEL_LEVEL",)),
    ("env-ark-jobs-negative", setter("env.ARK_SYCL_TLA_JOBS", "-1"), ("env.ARK_SYCL_TLA_JOBS",)),
    ("build-jobs-0", setter("build.jobs", 0), ("build.jobs",)),
    ("build-jobs-str", setter("build.jobs", "4"), ("build.jobs",)),
    ("build-memory-word", setter("build.memory-per-job", "lots"), ("build.memory-per-job",)),
    ("build-compiler-cache", setter("build.compiler-cache", "sccache"), ("build.compiler-cache",)),
    ("build-unknown-key", setter("build.jbos", 2), ("build.jbos",)),
    ("mirrors-int", setter("mirrors.https://x/", 1), ("mirrors.",)),
    ("components-empty", setter("components", {}), ("components",)),
    ("component-not-table", setter("components.tiny", "x"), ("components.tiny",)),
    ("component-upper-name", lambda d: d["components"].update(Tiny=d["components"].pop("tiny")),
     ("components.Tiny",)),
    ("component-no-url", dropper("components.tiny.url"), ("components.tiny.url",)),
    ("commit-short", comp("commit", "abc123"), ("components.tiny.commit",)),
    ("commit-int", comp("commit", 40), ("components.tiny.commit",)),
    ("subdir-absolute", comp("subdir", "/etc"), ("components.tiny.subdir",)),
    ("subdir-up", comp("subdir", "../up"), ("components.tiny.subdir",)),
    ("patch-up", comp("patches", ["../x.patch"]), ("components.tiny.patches[0]",)),
    ("patch-absolute", comp("patches", ["/etc/passwd"]), ("components.tiny.patches[0]",)),
    ("patch-missing", comp("patches", ["missing.patch"]), ("components.tiny.patches[0]", "missing.patch")),
    ("patch-int", comp("patches", [5]), ("components.tiny.patches[0]",)),
    ("patch-table-incomplete", comp("patches", [{"url": "https://x/y.git"}]), ("components.tiny.patches[0]",)),
    ("patch-table-bad-sha", comp("patches", [{"url": "u", "commit": "a" * 40, "path": "p", "sha256": "zz"}]),
     ("components.tiny.patches[0].sha256",)),
    ("command-empty", comp("command", []), ("components.tiny.command",)),
    ("command-placeholder", comp("command", ["{python}", "{sauce}"]), ("components.tiny.command", "{sauce}")),
    ("command-int", comp("command", [1]), ("components.tiny.command",)),
    ("version-env-bad", comp("version-env", "1X"), ("components.tiny.version-env",)),
    ("after-unknown", comp("after", ["nope"]), ("components.tiny.after", "nope")),
    ("after-self", comp("after", ["tiny"]), ("components.tiny.after",)),
    ("after-cycle", cycle, ("components", "cycle")),
    ("fetchcontent-str", comp("fetchcontent", ["x"]), ("components.tiny.fetchcontent[0]",)),
    ("fetchcontent-commit", comp("fetchcontent", [{"name": "a", "url": "u", "commit": "zz"}]),
     ("components.tiny.fetchcontent[0].commit",)),
    ("built-against-bad", comp("built-against", ["bad name!"]), ("components.tiny.built-against",)),
    ("component-jobs-0", comp("jobs", 0), ("components.tiny.jobs",)),
    ("component-memory-word", comp("memory-per-job", "x"), ("components.tiny.memory-per-job",)),
    ("component-env-int", comp("env", {"X": 1}), ("components.tiny.env.X",)),
    ("component-env-max-jobs", comp("env", {"MAX_JOBS": "0"}), ("components.tiny.env.MAX_JOBS",)),
    ("component-unknown-key", comp("urll", "x"), ("components.tiny.urll", "did you mean")),
    ("install-args-str", comp("install-args", "x"), ("components.tiny.install-args",)),
    ("dist-int", comp("dist", 5), ("components.tiny.dist",)),
    ("smoke-device", setter("smoke.device", "b80"), ("smoke.device",)),
    ("smoke-tp", many(setter("smoke.device", "b70"), setter("smoke.tensor-parallel-size", 4)),
     ("smoke.tensor-parallel-size",)),
    ("smoke-port-0", setter("smoke.port", 0), ("smoke.port",)),
    ("smoke-unknown", setter("smoke.modle", "x"), ("smoke.modle",)),
    ("cache-timeout-nan", setter("cache.timeout", float("nan")), ("cache.timeout",)),
    ("cache-timeout-inf", setter("cache.timeout", float("inf")), ("cache.timeout",)),
    ("cache-timeout-minus-inf", setter("cache.timeout", float("-inf")), ("cache.timeout",)),
    ("cache-timeout-negative", setter("cache.timeout", -1), ("cache.timeout",)),
    ("cache-timeout-zero", setter("cache.timeout", 0), ("cache.timeout",)),
    ("cache-timeout-str", setter("cache.timeout", "20"), ("cache.timeout",)),
    ("cache-timeout-huge", setter("cache.timeout", 1e9), ("cache.timeout",)),
    ("cache-timeout-bool", setter("cache.timeout", True), ("cache.timeout",)),
    ("cache-remote-http", setter("cache.remote", "http://reg.lan/team"), ("cache.remote",)),
    ("cache-remote-credentials", setter("cache.remote", f"oci://me:{SECRET}@reg.lan/team"), ("cache.remote",)),
    ("cache-remote-no-namespace", setter("cache.remote", "oci://reg.lan"), ("cache.remote",)),
    ("cache-remote-upper", setter("cache.remote", "oci://reg.lan/Team"), ("cache.remote",)),
    ("cache-remote-query", setter("cache.remote", "oci://reg.lan/team?x=1"), ("cache.remote",)),
    ("cache-push-str", setter("cache.push", "yes"), ("cache.push",)),
    ("cache-unknown", setter("cache.pussh", True), ("cache.pussh", "did you mean")),
    ("resolve-not-url", setter("resolve.indexes", ["notaurl"]), ("resolve.indexes",)),
    ("resolve-credentials", setter("resolve.indexes", [f"https://u:{SECRET}@idx.lan/simple"]), ("resolve.indexes",)),
    ("resolve-strategy", setter("resolve.index-strategy", "best"), ("resolve.index-strategy",)),
    ("resolve-python", setter("resolve.python-version", "3"), ("resolve.python-version",)),
    ("resolve-find-links-int", setter("resolve.find-links", [1]), ("resolve.find-links",)),
    ("demo-str", setter("demo", "yes"), ("demo",)),
    ("nul-env-value", setter("env.FOO", "a\x00b"), ("env.FOO", "NUL")),
    ("nul-url", comp("url", "file:///x\x00y"), ("components.tiny.url", "NUL")),
    ("nul-command", comp("command", ["{python}", "a\x00b"]), ("components.tiny.command[1]", "NUL")),
    ("nul-description", setter("description", "x\x00"), ("description", "NUL")),
    ("nul-patch", comp("patches", ["a\x00.patch"]), ("components.tiny.patches[0]", "NUL")),
    ("nul-key", setter("env.A\x00B", "x"), ("env.A", "NUL")),
    ("nul-python", setter("target.python", "python3\x00"), ("target.python", "NUL")),
    ("nul-mirror", setter("mirrors.https://x/", "file:///m\x00"), ("mirrors.", "NUL")),
    ("nul-component-env", comp("env", {"X": "\x00"}), ("components.tiny.env.X", "NUL")),
    ("nul-resolve-index", setter("resolve.indexes", ["https://idx\x00.lan/simple"]), ("resolve.indexes[0]", "NUL")),
    ("esc-component-name", lambda d: d["components"].update({f"t{ESC}": d["components"].pop("tiny")}),
     ("components.t\\x1b[2J",)),
    ("esc-unknown-key", setter(f"target.x{ESC}", "y"), ("target.x\\x1b[2J",)),
]
RAW_RECIPES: list[tuple[str, bytes, tuple[str, ...]]] = [
    ("toml-syntax", b"[components.tiny\nurl = 1\n", ("raw-toml-syntax.toml",)),
    ("not-utf8", b"description = \"\xff\xfe\"\n", ("raw-not-utf8.toml",)),
    ("empty", b"", ("components",)),
    ("binary", bytes(range(256)), ("raw-binary.toml",)),
    ("extends-missing", b'extends = "nowhere"\n', ("nowhere",)),
    ("extends-self", b'extends = "raw-extends-self"\n', ("raw-extends-self",)),
    ("too-big", b"# " + b"x" * (1 << 20) + b"\n", ("raw-too-big.toml",)),
]


def test_bad_recipes_are_refused_before_anything_is_written(base):
    group = base.group("recipes")
    report = Report("recipes")
    cases: list[tuple[Case, Path]] = []
    for name, mutate, names in RECIPE_CASES:
        data = copy.deepcopy(base.data)
        mutate(data)
        path = base.ws / "recipes" / f"case-{name}.toml"
        path.write_text(tomlkit.dumps(data))
        cases.append((Case(name, 2, (path.name, *names)), path))
    for name, raw, names in [*RAW_RECIPES, ("ten-thousand-components", thousands("a" * 40),
                                            ("components.c9999.after", "c10000"))]:
        path = base.ws / "recipes" / f"raw-{name}.toml"
        path.write_bytes(raw)
        cases.append((Case(name, 2, names), path))
    for case, path in cases:
        before = snapshot(group)
        r = run_cli(["build", "--recipe", path, "--out", group / "out", "--cache-dir", group / "cache"],
                    cwd=base.ws, env=base.env)
        report.check(case, r, before, snapshot(group))
    report.done(at_least=100)
    base.rebuild_identical(group)


def test_recipes_command_escapes_control_sequences(base, tmp_path):
    d = tmp_path / "recipes"
    d.mkdir()
    (d / "hostile.toml").write_text(tomlkit.dumps({"description": f"clears your screen {ESC} and retitles it"}))
    r = run_cli(["recipes", "--recipes-dir", d], cwd=tmp_path, env=base.env)
    assert r.code == 0 and "\x1b" not in r.text and "\\x1b[2J" in r.text, str(r)
    r = run_cli(["recipes", "--recipes-dir", d, "--json"], cwd=tmp_path, env=base.env)
    (hostile,) = [e for e in json.loads(r.out)["recipes"] if e["name"] == "hostile"]
    assert hostile["description"].count("\x1b") == 2  # JSON keeps the text (json.dumps escapes it)


# ---- environment variables and the command line ---------------------------------------------------------------

ENV_CASES: list[tuple[str, dict[str, str], int, tuple[str, ...]]] = [
    *[(f"timeout-{v}", {"TOOLCHAIN_REMOTE_CACHE": "oci://127.0.0.1:9/team", "TOOLCHAIN_REMOTE_TIMEOUT": v}, 2,
       ("TOOLCHAIN_REMOTE_TIMEOUT",))
      for v in ("nan", "inf", "-inf", "-1", "0", "abc", "1e400", "1e9", "0x10", " ")],
    *[(f"remote-{i}", {"TOOLCHAIN_REMOTE_CACHE": v}, 2, ("TOOLCHAIN_REMOTE_CACHE",))
      for i, v in enumerate(("http://reg.lan/team", f"oci://me:{SECRET}@reg.lan/team", "oci://reg.lan",
                             "oci://reg.lan/Team", "oci://reg.lan/team#x", "oci:///team"))],
    *[(f"{var}-{v}", {var: v}, 2, (var,))
      for var, v in (("MAX_JOBS", "0"), ("MAX_JOBS", "-1"), ("MAX_JOBS", "x"), ("MAX_JOBS", "1.5"),
                     ("CMAKE_BUILD_PARALLEL_LEVEL", "0"), ("ARK_SYCL_TLA_JOBS", "-2"), ("MAX_JOBS", "9" * 5000))],
]


def test_bad_environment_variables_are_refused_before_anything_is_written(base):
    group = base.group("environment")
    (group / "a-file").write_text("not a directory\n")
    cases = [(Case(n, code, names), env) for n, env, code, names in ENV_CASES]
    cases.append((Case("cache-dir-file", 2, ("a-file",)), {"TOOLCHAIN_CACHE_DIR": str(group / "a-file")}))
    report = Report("environment")
    for case, env in cases:
        before = snapshot(group)
        argv: list[object] = ["build", "--recipe", base.recipe, "--out", group / "out"]
        if "TOOLCHAIN_CACHE_DIR" not in env:
            argv += ["--cache-dir", group / "cache"]
        r = run_cli(argv, cwd=base.ws, env={**base.env, **env})
        report.check(case, r, before, snapshot(group))
    report.done(at_least=20)
    base.rebuild_identical(group)


def test_bad_command_lines_are_refused_before_anything_is_written(base):
    group = base.group("cli")
    (group / "a-file").write_text("x\n")
    (group / "foreign").mkdir()
    (group / "foreign" / "thesis.tex").write_text("mine\n")
    out, cache, recipe = group / "out", group / "cache", base.recipe
    b = ["build", "--recipe", recipe, "--cache-dir", cache]
    cases: list[tuple[str, list[object], tuple[str, ...]]] = [
        ("recipe-missing", ["build", "--recipe", "no-such-recipe", "--out", out], ("no-such-recipe",)),
        ("recipe-and-lock", [*b, "--out", out, "--from-lock", group / "x.toml"], ("--from-lock", "--recipe")),
        ("with-deps-alone", [*b, "--out", out, "--with-deps"], ("--with-deps", "--bundle")),
        ("with-deps-no-resolve", [*b, "--out", out, "--bundle", "--with-deps", "--no-resolve"], ("--no-resolve",)),
        ("builds-at-once-0", [*b, "--out", out, "--builds-at-once", "0"], ("--builds-at-once",)),
        ("builds-at-once-negative", [*b, "--out", out, "--builds-at-once", "-2"], ("--builds-at-once",)),
        ("builds-at-once-word", [*b, "--out", out, "--builds-at-once", "x"], ("--builds-at-once",)),
        ("mirror-no-equals", [*b, "--out", out, "--mirror", "nothing"], ("--mirror",)),
        ("remote-http", [*b, "--out", out, "--remote-cache", "http://reg.lan/team"], ("--remote-cache",)),
        ("remote-credentials", [*b, "--out", out, "--remote-cache", f"oci://me:{SECRET}@reg.lan/t"],
         ("--remote-cache",)),
        ("push-without-remote", [*b, "--out", out, "--push"], ("--push",)),
        ("out-root", [*b, "--out", "/"], ("/",)),
        ("out-file", [*b, "--out", group / "a-file"], ("a-file",)),
        ("out-foreign", [*b, "--out", group / "foreign"], ("foreign", "thesis.tex")),
        ("cache-dir-file", ["build", "--recipe", recipe, "--out", out, "--cache-dir", group / "a-file"], ("a-file",)),
        ("unknown-option", [*b, "--out", out, "--no-cahce"], ("--no-cahce", "--no-cache")),
        ("unknown-command", ["biuld"], ("biuld", "build")),
        ("cache-no-action", ["cache"], ("cache ls",)),
        ("cache-ls-insecure-alone", ["cache", "ls", "--remote-insecure", "--cache-dir", cache], ("--remote",)),
        ("cache-ls-remote-http", ["cache", "ls", "--remote", "http://x/y"], ("--remote-cache",)),
        ("from-lock-missing", ["build", "--from-lock", group / "nope.toml", "--out", out], ("nope.toml",)),
        ("lock-missing", ["lock", "--lock", group / "nope.toml", "--cache-dir", cache], ("nope.toml",)),
        ("plan-recipe-missing", ["plan", "--recipe", "no-such-recipe"], ("no-such-recipe",)),
        ("recipes-dir-file", ["recipes", "--recipes-dir", group / "a-file"], ("a-file",)),
        ("nul-in-mirror", [*b, "--out", out, "--mirror", "https://x/=file:///m\x00"], ("--mirror", "NUL")),
        ("esc-in-recipe-name", ["build", "--recipe", f"x{ESC}", "--out", out], ("x\\x1b[2J",)),
    ]
    report = Report("cli")
    for name, argv, names in cases:
        before = snapshot(group)
        r = run_cli(argv, cwd=base.ws, env=base.env)
        report.check(Case(name, 2, names), r, before, snapshot(group))
    report.done(at_least=25)
    base.rebuild_identical(group)


# ---- wheel cache entries --------------------------------------------------------------------------------------

def _entry_dir(cache: Path) -> Path:
    (entry,) = [p.parent for p in (cache / "wheels").glob("??/*/entry.json")]
    return entry


META_CASES: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [
    ("build-seconds-word", lambda m: m.update(build_seconds="fast")),
    ("build-seconds-negative", lambda m: m.update(build_seconds=-1)),
    ("build-seconds-list", lambda m: m.update(build_seconds=[1])),
    ("jobs-word", lambda m: m.update(jobs="x")),
    ("jobs-float", lambda m: m.update(jobs=1.5)),
    ("jobs-source-int", lambda m: m.update(jobs_source=3)),
    ("version-int", lambda m: m.update(version=5)),
    ("describe-list", lambda m: m.update(describe=["v1"])),
    ("stored-word", lambda m: m.update(stored="yesterday")),
    ("normalizations-str", lambda m: m.update(normalizations="zip-dates")),
    ("normalizations-ints", lambda m: m.update(normalizations=[1, 2])),
    ("metrics-list", lambda m: m.update(metrics=[1])),
    ("metrics-wall-word", lambda m: m.update(metrics={"wall-seconds": "long"})),
    ("metrics-peak-float", lambda m: m.update(metrics={"peak-memory-bytes": 1.5})),
    ("compiler-cache-str", lambda m: m.update(compiler_cache="ccache")),
    ("compiler-cache-hits-word", lambda m: m.update(compiler_cache={"hits": "many"})),
    ("built-against-ints", lambda m: m.update(built_against=[1])),
    ("built-against-no-version", lambda m: m.update(built_against=[{"name": "torch"}])),
    ("built-against-name-int", lambda m: m.update(built_against=[{"name": 1, "version": "2"}])),
    ("size-str", lambda m: m.update(size="1")),
    ("size-negative", lambda m: m.update(size=-1)),
    ("sha-short", lambda m: m.update(sha256="abc")),
    ("wheel-escapes", lambda m: m.update(wheel="../x.whl")),
    ("wheel-int", lambda m: m.update(wheel=3)),
    ("component-int", lambda m: m.update(component=3)),
    ("remote-str", lambda m: m.update(remote="yes")),
]
META_RAW: list[tuple[str, bytes | None]] = [
    ("not-json", b"{not json"), ("json-list", b"[1, 2]"), ("empty", b""), ("not-utf8", b'{"a": "\xff"}'),
    ("nan", None), ("missing", None),
]


def test_malformed_cache_entries_are_skipped_by_cache_ls_and_evicted_then_rebuilt(base):
    from toolchain.build.cache import WheelCache

    group = base.group("cache-entries")
    cache = group / "cache"
    entry = _entry_dir(cache)
    good = (entry / "entry.json").read_bytes()
    key = entry.name
    report = Report("cache-entries")
    cases: list[tuple[str, bytes | None]] = []
    for name, mutate in META_CASES:
        meta = json.loads(good)
        mutate(meta)
        cases.append((name, json.dumps(meta).encode()))
    for name, raw in META_RAW:
        if name == "nan":
            raw = good.replace(b'"build-seconds": ', b'"build-seconds": NaN, "x": ')  # (entry.json's key: build/entry.py)
        cases.append((name, raw))
    for name, raw in cases:
        if not entry.is_dir():  # evicted by the case before: put the good entry back
            shutil.copytree(base.root / "cache" / "wheels" / entry.parent.name / key, entry)
        if raw is None:
            (entry / "entry.json").unlink()
        else:
            (entry / "entry.json").write_bytes(raw)
        before = snapshot(group)
        r = run_cli(["cache", "ls", "--cache-dir", cache], cwd=base.ws, env=base.env)
        case = Case(name, 0, (key,), kind="warning:")
        extra = [] if "0 entries" in r.out else ["cache ls listed the malformed entry"]
        report.check(case, r, before, snapshot(group), extra)
        # a build looking the key up evicts it (one warning naming it): the next build makes it again
        warned: list[str] = []
        got, _ = run_call(lambda: WheelCache(cache, warned.append).get(key), cwd=base.ws, env=base.env)
        if got is not None or entry.exists() or len(warned) != 1 or key not in warned[0]:
            report.failures.append(f"cache-entries/{name}: not evicted with one warning ({got}, {warned})")
    report.done(at_least=30)
    base.rebuild_identical(group)  # the last case's entry was evicted: rebuilt, the same bytes


def test_a_malformed_entry_is_rebuilt_by_the_next_build_not_a_traceback(base):
    """The issue's case end to end: `build_seconds: "fast"` passed the hash checks and failed every build."""
    group = base.group("poisoned")
    entry = _entry_dir(group / "cache")
    meta = json.loads((entry / "entry.json").read_text())
    (entry / "entry.json").write_text(json.dumps({**meta, "build_seconds": "fast"}))
    out = group / "out"
    r = run_cli(["build", "--recipe", base.recipe, "--out", out, "--cache-dir", group / "cache", "--json"],
                cwd=base.ws, env=base.env)
    assert r.code == 0, str(r)
    assert json.loads(r.out)["components"][0]["source"] == "built"
    assert any(entry.name in w and "evicted" in w for w in r.lines("warning:")), str(r)
    assert wheels(out) == base.reference


# ---- locks and pylock.toml (the session's demo build) ----------------------------------------------------------

def _lock_cases(lock_text: str) -> list[tuple[str, str | bytes, int, tuple[str, ...]]]:
    data = tomlkit.parse(lock_text).unwrap()

    def edit(fn: Callable[[dict[str, Any]], Any]) -> str:
        d = copy.deepcopy(data)
        fn(d)
        return tomlkit.dumps(d)

    c0 = "components"
    return [
        ("not-toml", "lock-version = \n", 2, ("stack.lock.toml", "TOML")),
        ("empty", "", 2, ("stack.lock.toml", "lock-version")),
        ("binary", bytes(range(256)), 2, ("stack.lock.toml",)),
        ("version-99", edit(lambda d: d.update({"lock-version": 99})), 2, ("lock-version",)),
        ("version-str", edit(lambda d: d.update({"lock-version": "1"})), 2, ("lock-version",)),
        ("components-int", edit(lambda d: d.update({c0: 5})), 2, ("components",)),
        ("components-missing", edit(lambda d: d.pop(c0)), 2, ("components",)),
        ("commit-edited", edit(lambda d: d[c0][0].update(commit="0" * 40)), 2, (data[c0][0]["name"],)),
        ("commit-short", edit(lambda d: d[c0][0].update(commit="abc")), 2, ("commit",)),
        ("wheel-sha-edited", edit(lambda d: d[c0][0]["wheel"].update(sha256="0" * 64)), 2, ("sha256",)),
        ("wheel-file-escapes", edit(lambda d: d[c0][0]["wheel"].update(file="../x.whl")), 2, ("file",)),
        ("wheel-size-negative", edit(lambda d: d[c0][0]["wheel"].update(size=-1)), 2, ("size",)),
        ("wheel-size-str", edit(lambda d: d[c0][0]["wheel"].update(size="1")), 2, ("size",)),
        ("recipe-text-edited", edit(lambda d: d["recipe"].update(text=d["recipe"]["text"] + "\n# x\n")), 2,
         ("recipe",)),
        ("recipe-sha-edited", edit(lambda d: d["recipe"].update(sha256="0" * 64)), 2, ("recipe",)),
        ("recipe-missing", edit(lambda d: d.pop("recipe")), 2, ("recipe",)),
        ("nul-name", edit(lambda d: d[c0][0].update(name="a\x00b")), 2, ("name",)),
        ("nul-recipe-text", edit(lambda d: d["recipe"].update(text="x\x00")), 2, ("recipe",)),
        ("esc-name", edit(lambda d: d[c0][0].update(name=f"k{ESC}")), 2, ("k\\x1b[2J",)),
        ("command-empty", edit(lambda d: d[c0][0].update(command=[])), 2, ("command",)),
        ("env-int", edit(lambda d: d[c0][0].update(env={"A": 1})), 2, ("env",)),
        ("dependencies-str", edit(lambda d: d.update(dependencies="x")), 2, ("dependencies",)),
        ("dependency-sha-short", edit(lambda d: d["dependencies"][0].update(sha256="abc")), 2, ("sha256",)),
        ("dependency-size-negative", edit(lambda d: d["dependencies"][0].update(size=-5)), 2, ("size",)),
        ("resolve-str", edit(lambda d: d.update(resolve="x")), 2, ("resolve",)),
    ]


def test_bad_locks_are_refused_before_anything_is_written(demo_build, base, tmp_path):
    group = tmp_path / "locks"
    group.mkdir()
    lock_text = demo_build.lock_path.read_text()
    report = Report("locks")
    cases = _lock_cases(lock_text)
    for name, text, _code, _names in cases:
        d = group / name
        shutil.copytree(demo_build.out / "wheels", d / "wheels")
        path = d / "stack.lock.toml"
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
    for name, _text, code, names in cases:
        before = snapshot(group)
        r = run_cli(["build", "--from-lock", group / name / "stack.lock.toml", "--out", group / "out",
                     "--cache-dir", demo_build.cache], cwd=group, env=case_env(demo_build.root))
        report.check(Case(name, code, names), r, before, snapshot(group))
    report.done(at_least=25)


def _demo_copy(demo_build, dest: Path) -> Path:
    shutil.copytree(demo_build.out, dest, symlinks=True)
    return dest


def test_a_changed_closure_hash_fails_the_rebuild_naming_the_dependency(demo_build, tmp_path):
    data = demo_build.lock()
    dep = data["dependencies"][0]
    data["dependencies"][0] = {**dep, "sha256": "0" * 64}
    lock_dir = tmp_path / "edited"
    shutil.copytree(demo_build.out / "wheels", lock_dir / "wheels")
    (lock_dir / "stack.lock.toml").write_text(tomlkit.dumps(data))
    out = tmp_path / "out"
    r = run_cli(["build", "--from-lock", lock_dir / "stack.lock.toml", "--out", out, "--cache-dir",
                 demo_build.cache], cwd=tmp_path, env=case_env(demo_build.root))
    assert r.code == 1, str(r)
    assert f"dependency {dep['name']}: the rebuild resolved sha256 {dep['sha256']}, the lock records {'0' * 64}" \
        in r.err, str(r)
    assert not (out / "stack.lock.toml").exists()
    assert "Traceback" not in r.text
    marker = json.loads((out / ".toolchain-out").read_text())
    assert "does not match" in marker["incomplete"]


PYLOCK_CASES: list[tuple[str, Callable[[Path], Any]]] = [
    ("hash-edited", lambda p: p.write_text(p.read_text().replace(p.read_text().split('sha256 = "')[1][:64], "0" * 64))),
    ("truncated", lambda p: p.write_text(p.read_text()[: len(p.read_text()) // 2])),
    ("garbage", lambda p: p.write_bytes(bytes(range(256)))),
    ("removed", lambda p: p.unlink()),
    ("empty", lambda p: p.write_text("")),
    ("entry-removed", lambda p: p.write_text(p.read_text().split("[[packages]]")[0])),
    ("not-utf8", lambda p: p.write_bytes(b"\xff\xfe" + p.read_bytes())),
    ("comment-added", lambda p: p.write_text(p.read_text() + "# hand edit\n")),
]


def test_a_pylock_that_disagrees_with_its_lock_is_written_again(demo_build, tmp_path):
    from toolchain.lock import pylock_text, read_lock

    report = Report("pylock")
    out = _demo_copy(demo_build, tmp_path / "out")
    lock_before = (out / "stack.lock.toml").read_bytes()
    for name, damage in PYLOCK_CASES:
        damage(out / "pylock.toml")
        r = run_cli(["build", "--recipe", "demo", "--out", out, "--cache-dir", demo_build.cache],
                    cwd=tmp_path, env=case_env(demo_build.root))
        extra = []
        if (out / "pylock.toml").read_text() != pylock_text(read_lock(out / "stack.lock.toml")):
            extra.append("pylock.toml still disagrees with stack.lock.toml")
        if (out / "stack.lock.toml").read_bytes() != lock_before:
            extra.append("stack.lock.toml changed")
        report.check(Case(name, 0, ("pylock.toml",), kind="warning:", writes_nothing=False), r, extra=extra)
    report.done(at_least=8)
    assert wheels(out) == wheels(demo_build.out)


# ---- registry answers (a fake registry on 127.0.0.1) -----------------------------------------------------------

KEY = "ab" * 16


def _manifest(**over: Any) -> dict[str, Any]:
    from toolchain.sharing.registry import ARTIFACT_TYPE, MT_META, MT_WHEEL

    doc = {"schemaVersion": 2, "artifactType": ARTIFACT_TYPE,
           "annotations": {"vnd.xpu-toolchain.cache-key": KEY, "vnd.xpu-toolchain.wheel.sha256": "c" * 64},
           "layers": [{"mediaType": MT_META, "digest": "sha256:" + "d" * 64, "size": 10},
                      {"mediaType": MT_WHEEL, "digest": "sha256:" + "c" * 64, "size": 10,
                       "annotations": {"org.opencontainers.image.title": "tiny-1.0.0-py3-none-any.whl"}}]}
    doc.update(over)
    return doc


def _blob_manifest(meta: bytes, wheel: bytes = b"PK\x05\x06" + b"\x00" * 18, **meta_over: Any
                   ) -> tuple[dict[str, Any], dict[str, bytes]]:
    """A manifest whose blobs are served: its metadata `meta` (bytes as given) and a wheel."""
    from toolchain.sharing.registry import MT_META, MT_WHEEL

    wsha, msha = hashlib.sha256(wheel).hexdigest(), hashlib.sha256(meta).hexdigest()
    doc = _manifest(annotations={"vnd.xpu-toolchain.cache-key": KEY, "vnd.xpu-toolchain.wheel.sha256": wsha},
                    layers=[{"mediaType": MT_META, "digest": f"sha256:{msha}", "size": len(meta)},
                            {"mediaType": MT_WHEEL, "digest": f"sha256:{wsha}", "size": len(wheel),
                             "annotations": {"org.opencontainers.image.title": "tiny-1.0.0-py3-none-any.whl"}}])
    return doc, {f"sha256:{msha}": meta, f"sha256:{wsha}": wheel}


def _meta(**over: Any) -> bytes:
    wheel = b"PK\x05\x06" + b"\x00" * 18
    return json.dumps({"wheel": "tiny-1.0.0-py3-none-any.whl", "sha256": hashlib.sha256(wheel).hexdigest(),
                       "size": len(wheel), **over}).encode()


def _fetch_cases(reg: FakeRegistry) -> list[tuple[str, Callable[[], None]]]:
    """Each scripts the fake registry's answers to one lookup of KEY."""
    m = f"/v2/{REPO}/manifests/{KEY}"

    def manifest(doc: Any, **kw: Any) -> Callable[[], None]:
        return lambda: reg.route("GET", m, json_answer(doc, **kw))

    def raw(status: int, body: bytes, headers: dict[str, str] | None = None) -> Callable[[], None]:
        return lambda: reg.route("GET", m, Answer(status, headers or {}, body))

    def served(doc: dict[str, Any], blobs: dict[str, bytes], tamper: Callable[[bytes], bytes] = lambda b: b
               ) -> Callable[[], None]:
        def script() -> None:
            reg.route("GET", m, json_answer(doc))
            for digest, body in blobs.items():
                reg.route("GET", f"/v2/{REPO}/blobs/{digest}", Answer(200, {}, tamper(body)))
        return script

    def challenge(token_answer: Answer, header: str | None = None) -> Callable[[], None]:
        def script() -> None:
            reg.route("GET", m, Answer(401, {"WWW-Authenticate": header or
                                             f'Bearer realm="{reg.base}/token",service="fake"'}, b"{}"))
            reg.route("GET", "/token", token_answer)
        return script

    from toolchain.sharing.registry import MT_META, MT_WHEEL
    return [
        ("manifest-not-json", raw(200, b"{nope")),
        ("manifest-list", manifest([1, 2])),
        ("manifest-string", manifest("x")),
        ("artifact-type-wrong", manifest(_manifest(artifactType="application/x-evil"))),
        ("annotations-list", manifest(_manifest(annotations=["a", "b"]))),
        ("annotations-string", manifest(_manifest(annotations="x"))),
        ("annotations-int", manifest(_manifest(annotations=7))),
        ("layers-int", manifest(_manifest(layers=5))),
        ("layers-string", manifest(_manifest(layers="abc"))),
        ("layers-dict", manifest(_manifest(layers={"a": 1}))),
        ("layers-ints", manifest(_manifest(layers=[1, 2]))),
        ("cache-key-oversized", manifest(_manifest(annotations={"vnd.xpu-toolchain.cache-key": "k" * (1 << 20)}))),
        ("cache-key-other", manifest(_manifest(annotations={"vnd.xpu-toolchain.cache-key": "ef" * 16}))),
        ("cache-key-list", manifest(_manifest(annotations={"vnd.xpu-toolchain.cache-key": [KEY]}))),
        ("two-wheel-layers", manifest(_manifest(layers=[{"mediaType": MT_WHEEL}, {"mediaType": MT_WHEEL}]))),
        ("no-meta-layer", manifest(_manifest(layers=[{"mediaType": MT_WHEEL}]))),
        ("layer-digest-bad", manifest(_manifest(layers=[{"mediaType": MT_META, "digest": "md5:x", "size": 1},
                                                        {"mediaType": MT_WHEEL}]))),
        ("layer-size-str", manifest(_manifest(layers=[{"mediaType": MT_META, "digest": "sha256:" + "d" * 64,
                                                       "size": "10"}, {"mediaType": MT_WHEEL}]))),
        ("layer-size-huge", manifest(_manifest(layers=[{"mediaType": MT_META, "digest": "sha256:" + "d" * 64,
                                                        "size": 10 ** 30}, {"mediaType": MT_WHEEL}]))),
        ("layer-media-type-list", manifest(_manifest(layers=[{"mediaType": [MT_META]}]))),
        ("meta-not-json", served(*_blob_manifest(b"{nope"))),
        ("meta-list", served(*_blob_manifest(b"[1]"))),
        ("meta-build-seconds-word", served(*_blob_manifest(_meta(build_seconds="fast")))),
        ("meta-built-against-ints", served(*_blob_manifest(_meta(built_against=[1])))),
        ("meta-metrics-list", served(*_blob_manifest(_meta(metrics=[1])))),
        ("meta-wheel-escapes", served(*_blob_manifest(_meta(wheel="../evil.whl")))),
        ("meta-sha-other", served(*_blob_manifest(_meta(sha256="e" * 64)))),
        ("meta-size-word", served(*_blob_manifest(_meta(size="22")))),
        ("meta-not-utf8", served(*_blob_manifest(b'{"wheel": "\xff"}'))),
        ("blob-missing", lambda: reg.route("GET", m, json_answer(_blob_manifest(_meta())[0]))),
        ("blob-tampered", served(*_blob_manifest(_meta()), tamper=lambda b: b[:-1] + b"X")),
        ("blob-longer", served(*_blob_manifest(_meta()), tamper=lambda b: b + b"more")),
        ("digest-header-lies", raw(200, json.dumps(_manifest()).encode(), {"Docker-Content-Digest": "sha256:" + "0" * 64})),
        ("manifest-500", raw(500, b"oops")),
        ("manifest-418", raw(418, b"")),
        ("manifest-oversized", raw(200, b" " * (5 << 20))),
        ("bearer-token-list", challenge(json_answer([1, 2]))),
        ("bearer-token-value-list", challenge(json_answer({"token": ["a", "b"]}))),
        ("bearer-token-int", challenge(json_answer({"token": 5}))),
        ("bearer-token-not-json", challenge(Answer(200, {}, b"<html>"))),
        ("bearer-token-newline", challenge(json_answer({"token": "a\r\nX-Evil: 1"}))),
        ("bearer-realm-elsewhere", challenge(json_answer({"token": "t"}), 'Bearer realm="ftp://x/token"')),
        ("challenge-garbage", challenge(json_answer({}), "\x00\x01 garbage")),
        ("challenge-empty-realm", challenge(json_answer({}), 'Bearer realm=""')),
        ("basic-refused", challenge(json_answer({}), 'Basic realm="x"')),
    ]


@pytest.fixture
def fake_registry():
    with FakeRegistry() as reg:
        yield reg


def test_hostile_registry_answers_are_one_warning_and_a_local_build(base, fake_registry, tmp_path):
    """Each answer to one lookup: exactly one warning naming the registry, no entry in the local cache,
    nothing left under the work directory, the registry's password nowhere; then a real build against the
    same hostile registry compiles locally and gives the reference wheel."""
    from toolchain.build.cache import WheelCache
    from toolchain.build.remotecache import RemoteCache
    from toolchain.console import UI
    from toolchain.recipe.cachespec import parse_remote_url
    from toolchain.sharing.settings import RemoteSettings

    reg = fake_registry
    settings = RemoteSettings(parse_remote_url(reg.url), insecure=True, timeout=5)
    report = Report("registry-answers")
    cases = _fetch_cases(reg)
    for name, script in cases:
        reg.reset()
        script()
        cache_root = tmp_path / name
        (cache_root / "work").mkdir(parents=True)  # the build's work directory (a fetch's scratch space)
        before = snapshot(cache_root)

        def fetch() -> object:
            return RemoteCache(settings).fetch(KEY, "tiny", WheelCache(cache_root), cache_root / "work", UI())

        got, r = run_call(fetch, cwd=tmp_path, env=base.env)
        extra = [] if got is None else [f"an entry was accepted: {got}"]
        report.check(Case(name, 0, (reg.address,), kind="warning:"), r, before, snapshot(cache_root), extra)
    report.done(at_least=40)
    reg.reset()  # the case, an integer `layers`, for the real key: a real build warns once and compiles
    key = _entry_dir(base.root / "cache").name
    reg.route("GET", f"/v2/{REPO}/manifests/{key}",
              json_answer(_manifest(layers=5, annotations={"vnd.xpu-toolchain.cache-key": key})))
    group = base.group("registry-build")
    out = group / "out"
    r = run_cli(["build", "--recipe", base.recipe, "--out", out, "--cache-dir", group / "empty-cache",
                 "--remote-cache", reg.url, "--remote-insecure", "--json"], cwd=base.ws, env=base.env)
    assert r.code == 0 and json.loads(r.out)["components"][0]["source"] == "built", str(r)
    assert len(r.lines("warning:")) == 1 and "Traceback" not in r.text, str(r)
    assert wheels(out) == base.reference


def test_hostile_tag_lists_and_listings_are_one_error_line(base, fake_registry, tmp_path):
    reg = fake_registry
    tags = f"/v2/{REPO}/tags/list"
    m = f"/v2/{REPO}/manifests/{KEY}"
    loop = {"Link": f'<{tags}?n=1000>; rel="next"'}
    cases: list[tuple[str, dict[tuple[str, str], Answer], int, tuple[str, ...]]] = [
        ("tags-int", {("GET", tags): json_answer({"tags": 5})}, 1, (reg.address, "tag list")),
        ("tags-ints", {("GET", tags): json_answer({"tags": [1, 2]})}, 1, (reg.address, "tag list")),
        ("tags-not-json", {("GET", tags): Answer(200, {}, b"<html>")}, 1, (reg.address, "tag list")),
        ("tags-list-body", {("GET", tags): json_answer(["a"])}, 1, (reg.address, "tag list")),
        ("tags-dict", {("GET", tags): json_answer({"tags": {"a": 1}})}, 1, (reg.address, "tag list")),
        ("tags-link-loop", {("GET", tags): json_answer({"tags": []}, headers=loop)}, 1, (reg.address, "page")),
        ("tags-link-ping-pong", {("GET", tags): json_answer({"tags": []}, headers={"Link": f'<{tags}?last=b>; rel="next"'})},
         1, (reg.address, "page")),
        ("tags-500", {("GET", tags): Answer(500, {}, b"")}, 1, (reg.address, "500")),
        ("tags-401", {("GET", tags): Answer(401, {"WWW-Authenticate": 'Basic realm="x"'}, b"")}, 1,
         (reg.address, "credentials")),
        ("tags-oversized", {("GET", tags): Answer(200, {}, b" " * (5 << 20))}, 1, (reg.address, "tag list")),
        ("annotations-list", {("GET", tags): json_answer({"tags": [KEY]}), ("GET", m): json_answer(_manifest(annotations=[1]))},
         0, ()),
        ("size-annotation-huge", {("GET", tags): json_answer({"tags": [KEY]}), ("GET", m): json_answer(_manifest(annotations={
            "vnd.xpu-toolchain.wheel.size": "9" * 5000, "vnd.xpu-toolchain.component": f"c{ESC}"}))}, 0, ()),
        ("manifest-garbage", {("GET", tags): json_answer({"tags": [KEY]}), ("GET", m): Answer(200, {}, b"{")}, 0, ()),
    ]
    report = Report("registry-listings")
    for name, routes, code, names in cases:
        reg.reset()
        reg.routes.update(routes)
        before = snapshot(tmp_path)
        r = run_cli(["cache", "ls", "--remote", reg.url, "--remote-insecure"], cwd=tmp_path, env=base.env)
        extra = [f"{reg.hits[tags]} tag list requests"] if reg.hits[tags] > 1001 else []
        report.check(Case(name, code, names, kind="ERROR:" if code else "entries"), r, before, snapshot(tmp_path),
                     extra)
    report.done(at_least=13)


def test_a_credential_helper_answering_nonsense_gives_no_credentials(tmp_path):
    from toolchain.sharing.auth import find_credentials

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    report = Report("credential-helpers")
    for name, answer in (("list", "[1, 2]"), ("string", '"u:p"'), ("number", "5"), ("not-json", "<<"),
                         ("secret-list", '{"Username": "u", "Secret": ["x"]}'), ("null", "null")):
        helper = bin_dir / "docker-credential-corpus"
        helper.write_text(f"#!/bin/sh\ncat >/dev/null\necho '{answer}'\n")
        helper.chmod(0o755)
        (tmp_path / "config.json").write_text(json.dumps({"credsStore": "corpus"}))
        env = {"DOCKER_CONFIG": str(tmp_path), "HOME": str(tmp_path), "PATH": f"{bin_dir}:{os.environ['PATH']}",
               "TOOLCHAIN_REGISTRY_USERNAME": None, "TOOLCHAIN_REGISTRY_PASSWORD": None}
        got, r = run_call(lambda: find_credentials("reg.lan", "team/wheels", None), cwd=tmp_path, env=env)
        report.check(Case(name, 0, (), kind="no output"), r, extra=[] if got is None else [f"credentials {got}"])
    report.done(at_least=6)


def test_the_corpus_holds_at_least_150_cases():
    """Counted from the module's tables alone (the command line, lock, registry and helper groups add about
    110 more, each group asserting its own minimum as it runs)."""
    count = len(RECIPE_CASES) + len(RAW_RECIPES) + 1 + len(ENV_CASES) + len(META_CASES) + len(META_RAW) \
        + len(PYLOCK_CASES)
    assert count >= 150, count


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
