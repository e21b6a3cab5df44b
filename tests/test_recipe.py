"""Recipe validation, `extends`, and the shipped recipes.

Every bad recipe goes through the real CLI (`python -m toolchain build|plan --recipe PATH --json`): exit 2,
the problem names the file, the key and what to do, and nothing at all is written (no output directory, no
cache directory, the recipe file untouched).
"""

from __future__ import annotations

import textwrap

import pytest

from toolchain.recipe.load import DEFAULT_COMMAND, load_recipe

GOOD = """\
description = "a valid recipe the bad ones are variations of"
[toolchain]
setvars = ""
[target]
runtime = "host"
python = "python3"
[env]
MAX_JOBS = "2"
[components.engine]
url = "https://example.invalid/engine.git"
ref = "main"
commit = "0123456789abcdef0123456789abcdef01234567"
[components.app]
url = "https://example.invalid/app.git"
ref = "main"
commit = "89abcdef0123456789abcdef0123456789abcdef"
after = ["engine"]
[smoke]
model = "some/model"
device = "b70"
"""


def bad(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new, 1)


# (id, recipe text, the key the problem names, fragments of the message: what is wrong and what to do)
BAD_RECIPES = [
    ("unknown-top-key", bad("description =", "descripton ="),
     "descripton", ["unknown key", "did you mean 'description'", "remove it or fix the name"]),
    ("unknown-component-key", bad('ref = "main"\ncommit', 'comit = "x"\nref = "main"\ncommit'),
     "components.engine.comit", ["unknown key", "did you mean 'commit'"]),
    ("unknown-toolchain-key", bad('setvars = ""', 'setvar = ""'),
     "toolchain.setvar", ["unknown key", "did you mean 'setvars'"]),
    ("unknown-smoke-key", bad('model = "some/model"', 'modle = "some/model"'),
     "smoke.modle", ["unknown key", "did you mean 'model'"]),
    ("wrong-type", bad('description = "a valid recipe the bad ones are variations of"', "description = 3"),
     "description", ["must be a string", "got an integer 3"]),
    ("no-components", GOOD.split("[components.engine]", maxsplit=1)[0] + "[smoke]\nmodel = \"m\"\n",
     "components", ["at least one [components.NAME] table"]),
    ("missing-url", bad('url = "https://example.invalid/app.git"\n', ""),
     "components.app.url", ["missing", "git repository URL"]),
    ("short-commit", bad('commit = "0123456789abcdef0123456789abcdef01234567"', 'commit = "0123456"'),
     "components.engine.commit", ["not a full 40-hex commit id", "toolchain update", "--component engine"]),
    ("absolute-subdir", bad('ref = "main"\ncommit = "89', 'subdir = "/etc"\nref = "main"\ncommit = "89'),
     "components.app.subdir", ["relative path inside the repository"]),
    ("dotdot-subdir", bad('ref = "main"\ncommit = "89', 'subdir = "a/../../b"\nref = "main"\ncommit = "89'),
     "components.app.subdir", ["relative path inside the repository"]),
    ("missing-patch", bad('after = ["engine"]', 'after = ["engine"]\npatches = ["app/0001-nope.patch"]'),
     "components.app.patches[0]", ["'app/0001-nope.patch' not found", "relative to patches/"]),
    # patches are confined to the patches/ directory of the recipe that names them (issue 14.5)
    ("patch-absolute", bad('after = ["engine"]', 'after = ["engine"]\npatches = ["/etc/passwd"]'),
     "components.app.patches[0]", ["'/etc/passwd' is not a path relative to", "pinned table {url, commit, path, sha256}"]),
    ("patch-dotdot", bad('after = ["engine"]', 'after = ["engine"]\npatches = ["app/../../../../../etc/passwd"]'),
     "components.app.patches[0]", ["leaves", "'..' is not allowed", "pinned table"]),
    ("patch-url-string", bad('after = ["engine"]', 'after = ["engine"]\npatches = ["https://example.invalid/x.patch"]'),
     "components.app.patches[0]", ["not found", "a patch from anywhere else is a pinned table"]),
    ("patch-remote-path-escapes", bad('after = ["engine"]', 'after = ["engine"]\npatches = [{ url = '
                                      '"https://example.invalid/x.git", commit = "' + "ab" * 20 + '", path = '
                                      '"../x.patch", sha256 = "' + "cd" * 32 + '" }]'),
     "components.app.patches[0].path", ["must be a path inside that repository", "no '..'"]),
    ("patch-table-incomplete", bad('after = ["engine"]', 'after = ["engine"]\npatches = '
                                   '[{ url = "https://example.invalid/x.git", path = "p.patch" }]'),
     "components.app.patches[0]", ["needs url, commit, path and sha256; missing commit, sha256"]),
    ("empty-command", bad('after = ["engine"]', 'after = ["engine"]\ncommand = []'),
     "components.app.command", ["must not be empty"]),
    ("unknown-placeholder", bad('after = ["engine"]', 'after = ["engine"]\ncommand = ["{python}", "{sorce}"]'),
     "components.app.command", ["unknown placeholder {sorce}", "did you mean 'src'", "known: {python}, {src}, {out}"]),
    ("command-not-strings", bad('after = ["engine"]', 'after = ["engine"]\ncommand = ["make", 2]'),
     "components.app.command", ["must be a list of strings", "quote 2"]),
    ("bad-version-env", bad('after = ["engine"]', 'after = ["engine"]\nversion-env = "MY-VERSION"'),
     "components.app.version-env", ["not a valid environment variable name"]),
    ("after-unknown", bad('after = ["engine"]', 'after = ["engin"]'),
     "components.app.after", ["unknown component 'engin'", "did you mean 'engine'"]),
    ("after-itself", bad('after = ["engine"]', 'after = ["app"]'),
     "components.app.after", ["cannot come after itself"]),
    ("after-cycle", bad('ref = "main"\ncommit = "0123', 'after = ["app"]\nref = "main"\ncommit = "0123'),
     "components", ["`after` forms a cycle among: engine, app"]),
    ("secret-in-env", bad('MAX_JOBS = "2"', 'MAX_JOBS = "2"\nHF_TOKEN = "hf_abc"'),
     "env.HF_TOKEN", ["looks like a secret", "export it in your environment instead"]),
    ("secret-in-component-env", GOOD + '[components.app.env]\nDB_PASSWORD = "hunter2"\n',
     "components.app.env.DB_PASSWORD", ["looks like a secret"]),
    ("secret-in-smoke-env", GOOD + '[smoke.env]\nAPI_KEY = "k"\n',
     "smoke.env.API_KEY", ["looks like a secret"]),
    ("env-not-string", bad('MAX_JOBS = "2"', "MAX_JOBS = 2"),
     "env.MAX_JOBS", ['environment values are strings; write MAX_JOBS = "2"']),
    ("env-bad-name", bad('MAX_JOBS = "2"', '"1BAD" = "x"'),
     "env.1BAD", ["not a valid environment variable name"]),
    ("unknown-runtime", bad('runtime = "host"', 'runtime = "hots"'),
     "target.runtime", ["unknown runtime 'hots'", "did you mean 'host'", "use one of host, podman, docker"]),
    ("container-without-image", bad('runtime = "host"', 'runtime = "podman"'),
     "target", ["needs exactly one of `image`", "or `container`"]),
    ("host-with-image", bad('runtime = "host"', 'runtime = "host"\nimage = "docker.io/library/debian"'),
     "target", ['need runtime = "podman" or "docker"']),
    ("empty-python", bad('python = "python3"', 'python = " "'),
     "target.python", ["must name an interpreter"]),
    ("unknown-device", bad('device = "b70"', 'device = "b80"'),
     "smoke.device", ["unknown device 'b80'", "use b60 or b70"]),
    ("tp-not-supported", bad('device = "b70"', 'device = "b60"\ntensor-parallel-size = 2'),
     "smoke.tensor-parallel-size", ["2 is not supported on b60", "allowed: 1"]),
    ("tp-boolean", bad('device = "b70"', 'device = "b70"\ntensor-parallel-size = true'),
     "smoke.tensor-parallel-size", ["must be an integer"]),
    ("port-zero", bad('device = "b70"', 'device = "b70"\nport = 0'),
     "smoke.port", ["must be a positive integer"]),
    ("fetchcontent-bad-commit", GOOD + '[[components.app.fetchcontent]]\nname = "oneDNN"\n'
                                       'url = "https://example.invalid/onednn.git"\ncommit = "v3.13"\n',
     "components.app.fetchcontent[0].commit", ["must be a 40-hex commit id, got 'v3.13'"]),
    ("fetchcontent-twice", GOOD + ('[[components.app.fetchcontent]]\nname = "oneDNN"\n'
                                   'url = "https://example.invalid/onednn.git"\n'
                                   'commit = "0123456789abcdef0123456789abcdef01234567"\n') * 2,
     "components.app.fetchcontent[1].name", ["'oneDNN' is declared twice"]),
    ("mirror-not-string", GOOD + '[mirrors]\n"https://example.invalid/" = 1\n',
     "mirrors.https://example.invalid/", ["must map a URL prefix to a URL prefix or directory"]),
    ("bad-component-name", bad("[components.app]", "[components.App]").replace('after = ["engine"]', ""),
     "components.App", ["lower-case letters, digits"]),
    ("component-not-table", bad("[components.engine]", '[components]\nother = "x"\n[components.engine]'),
     "components.other", ["must be a table"]),
    ("demo-not-bool", bad("[toolchain]", 'demo = "yes"\n[toolchain]'),
     "demo", ["must be true or false", "got a string 'yes'"]),
    ("extends-missing-parent", 'extends = "nowhere"\n' + GOOD,
     "extends", ["no recipe 'nowhere'"]),
]


@pytest.mark.parametrize(("text", "key", "fragments"), [case[1:] for case in BAD_RECIPES],
                         ids=[case[0] for case in BAD_RECIPES])
def test_bad_recipe_is_refused_with_its_key_and_writes_nothing(ws, text, key, fragments):
    path = ws.recipe("bad", text)
    before = ws.snapshot()
    r = ws.cli("build", "--recipe", path, "--json")  # default --out dist/bad and the default cache dir
    assert r.returncode == 2, str(r)
    data = r.json()
    assert data["ok"] is False
    assert data["exit_code"] == 2
    assert data["kind"] == "RecipeError"
    problems = data.get("problems", [])
    assert len(problems) == 1, problems  # exactly the one mistake, nothing spurious
    problem = problems[0]
    assert problem.startswith(f"bad.toml: {key}: ") or f"bad.toml: {key}: " in problem, problem
    for fragment in fragments:
        assert fragment in problem, (fragment, problem)
    assert "ERROR:" in r.stderr
    assert "Traceback" not in r.output
    assert ws.snapshot() == before  # no dist/, no cache/, the recipe unchanged
    assert not ws.cache.exists()
    assert not (ws.root / "dist").exists()


def test_the_base_of_the_bad_recipes_is_valid(ws):
    """Control for the table above: without the mistake the same recipe plans (exit 0)."""
    path = ws.recipe("good", GOOD)
    r = ws.cli("plan", "--recipe", path, "--json")
    assert r.returncode == 0, str(r)
    assert [c["name"] for c in r.json()["components"]] == ["engine", "app"]


def test_there_are_at_least_twenty_distinct_bad_recipes():
    assert len({case[1] for case in BAD_RECIPES}) == len(BAD_RECIPES) >= 20


@pytest.mark.parametrize("command", ["plan", "update", "build"])
def test_every_problem_is_reported_at_once(ws, command):
    text = (bad('runtime = "host"', 'runtime = "hots"')
            .replace("description =", "descripton =")
            .replace('commit = "0123456789abcdef0123456789abcdef01234567"', 'commit = "abc"')
            .replace('after = ["engine"]', 'after = ["engin"]')
            .replace('MAX_JOBS = "2"', 'GITHUB_TOKEN = "ghp_x"'))
    path = ws.recipe("many", text)
    before = ws.snapshot()
    r = ws.cli(command, "--recipe", path, "--json")
    assert r.returncode == 2, str(r)
    problems = r.json()["problems"]
    keys = ["descripton", "target.runtime", "env.GITHUB_TOKEN", "components.engine.commit", "components.app.after"]
    if command == "update":
        keys.remove("components.engine.commit")  # update is how a missing or wrong commit gets pinned
    assert sorted(p.split(": ")[1] for p in problems) == sorted(keys), problems
    assert all(p.startswith("many.toml: ") for p in problems)
    assert "invalid recipe:" in r.stderr
    assert all(p in r.stderr for p in problems)
    assert "fix " in r.json()["hint"]
    assert str(path) in r.json()["hint"]
    assert ws.snapshot() == before


def test_invalid_toml_names_the_file_and_line(ws):
    path = ws.recipe("broken", GOOD.replace('ref = "main"', 'ref = "main', 1))
    r = ws.cli("plan", "--recipe", path, "--json")
    assert r.returncode == 2, str(r)
    assert "broken.toml: not valid TOML" in r.json()["error"]
    assert "line 11" in r.json()["error"]


def test_unknown_recipe_name_suggests_the_close_one(ws):
    ws.recipe("ark-latest", GOOD)
    r = ws.cli("plan", "--recipe", "ark-lates", "--recipes-dir", ws.recipes, "--json")
    assert r.returncode == 2, str(r)
    assert "no recipe 'ark-lates'" in r.json()["error"]
    assert "did you mean 'ark-latest'" in r.json()["error"]
    assert "ark-latest," in r.json()["hint"].split("available: ", 1)[1]


# ---- extends -------------------------------------------------------------------------------------------

BASE = """\
description = "the base"
[toolchain]
setvars = ""
[target]
python = "python3"
[env]
MAX_JOBS = "8"
SHARED = "base"
[components.engine]
url = "https://example.invalid/engine.git"
ref = "main"
commit = "0123456789abcdef0123456789abcdef01234567"
patches = ["engine/0001-a.patch", "engine/0002-b.patch"]
[components.engine.env]
ENGINE_A = "1"
ENGINE_B = "2"
[smoke]
model = "base/model"
device = "b70"
serve-args = ["--enforce-eager"]
"""


def test_extends_merges_tables_deeply_and_replaces_arrays(ws):
    ws.patch("engine/0001-a.patch", "a\n")
    ws.patch("engine/0002-b.patch", "b\n")
    ws.recipe("base", BASE)
    ws.recipe("variant", textwrap.dedent("""\
        # a workaround recipe is a few lines
        extends = "base"
        [env]
        MAX_JOBS = "2"
        [components.engine]
        patches = ["engine/0002-b.patch"]
        [components.engine.env]
        ENGINE_B = "override"
        [smoke.env]
        VLLM_XPU_INC_WNA16_BACKEND = "w4a16"
        """))
    r = ws.cli("plan", "--recipe", "variant", "--recipes-dir", ws.recipes, "--json")
    assert r.returncode == 0, str(r)
    (engine,) = r.json()["components"]
    assert engine["commit"] == "0123456789abcdef0123456789abcdef01234567"  # inherited
    assert engine["env"] == {"MAX_JOBS": "2", "SHARED": "base", "ENGINE_A": "1", "ENGINE_B": "override"}
    assert [p["path"] for p in engine["patches"]] == ["engine/0002-b.patch"]  # arrays are replaced
    recipe = load_recipe("variant", ws.recipes)
    assert recipe.description == ""  # a variant says what it is itself
    assert recipe.smoke.model == "base/model"
    assert recipe.smoke.serve_args == ("--enforce-eager",)
    assert dict(recipe.smoke.env) == {"VLLM_XPU_INC_WNA16_BACKEND": "w4a16"}
    assert "extends" not in recipe.text
    assert 'ENGINE_B = "override"' in recipe.text


def test_extends_chain_of_three(ws):
    ws.patch("engine/0001-a.patch", "a\n")
    ws.patch("engine/0002-b.patch", "b\n")
    ws.recipe("base", BASE)
    ws.recipe("mid", 'extends = "base"\n[env]\nSHARED = "mid"\n')
    ws.recipe("top", 'extends = "mid"\ndescription = "top"\n[components.engine.env]\nENGINE_A = "top"\n')
    recipe = load_recipe("top", ws.recipes)
    assert recipe.description == "top"
    assert dict(recipe.env) == {"MAX_JOBS": "8", "SHARED": "mid"}
    assert dict(recipe.component("engine").env) == {"ENGINE_A": "top", "ENGINE_B": "2"}


def test_extends_cycle_is_refused(ws):
    ws.recipe("one", 'extends = "two"\n')
    ws.recipe("two", 'extends = "three"\n')
    ws.recipe("three", 'extends = "one"\n')
    before = ws.snapshot()
    r = ws.cli("build", "--recipe", "one", "--recipes-dir", ws.recipes, "--json")
    assert r.returncode == 2, str(r)
    assert "extends: cycle one -> two -> three -> one" in r.json()["error"]
    assert "remove one `extends`" in r.json()["hint"]
    assert ws.snapshot() == before


def test_extends_missing_parent_suggests_the_close_one(ws):
    ws.recipe("base", BASE.replace('patches = ["engine/0001-a.patch", "engine/0002-b.patch"]\n', ""))
    ws.recipe("child", 'extends = "bsae"\n')
    before = ws.snapshot()
    r = ws.cli("build", "--recipe", "child", "--recipes-dir", ws.recipes, "--json")
    assert r.returncode == 2, str(r)
    err = r.json()["error"]
    assert "child.toml: extends: no recipe 'bsae'" in err
    assert "did you mean 'base'" in err
    assert ws.snapshot() == before


def test_a_child_mistake_is_reported_against_the_merged_recipe(ws):
    ws.recipe("base", BASE.replace('patches = ["engine/0001-a.patch", "engine/0002-b.patch"]\n', ""))
    ws.recipe("child", 'extends = "base"\n[components.engine]\ncomit = "x"\n')
    r = ws.cli("plan", "--recipe", "child", "--recipes-dir", ws.recipes, "--json")
    assert r.returncode == 2, str(r)
    assert r.json()["problems"] == ["child.toml: components.engine.comit: unknown key (did you mean 'commit'?) "
                                    "(remove it or fix the name)"]


# ---- the demo recipe (the real ones: tests/test_shipped_recipes.py) ------------------------------

def test_demo_recipe_uses_the_default_command_and_the_standin():
    demo = load_recipe("demo")
    assert demo.demo
    assert demo.toolchain.setvars.endswith("oneapi-standin/setvars.sh")
    assert all(c.command == DEFAULT_COMMAND for c in demo.components)
    assert [c.name for c in demo.components] == ["engine", "kernels", "ark"]
    assert demo.component("ark").subdir == "extension/ark"


# ---- relative paths resolve against the recipe that declared them (issue 9.2, 14.8) ----------------------

def _project(root, *, setvars: str) -> None:
    """A project at `root`: recipes/base.toml (engine with one patch, setvars relative to recipes/) and
    patches/engine/0001-a.patch; the stand-in oneAPI copied to root/oneapi."""
    import shutil

    from tests.spine_helpers import STANDIN

    shutil.copytree(STANDIN, root / "oneapi")
    (root / "patches" / "engine").mkdir(parents=True, exist_ok=True)
    (root / "patches" / "engine" / "0001-a.patch").write_text("the base's patch\n")
    (root / "recipes").mkdir(parents=True, exist_ok=True)
    (root / "recipes" / "base.toml").write_text(
        BASE.replace('setvars = ""', f'setvars = "{setvars}"')
            .replace('patches = ["engine/0001-a.patch", "engine/0002-b.patch"]', 'patches = ["engine/0001-a.patch"]'))


@pytest.mark.parametrize("extends", ["base", "{project}/recipes/base.toml", "../../project/recipes/base.toml"],
                         ids=["by-name-via-recipes-dir", "by-absolute-path", "by-path-relative-to-the-child"])
def test_a_user_recipe_in_another_directory_inherits_patches_and_setvars_from_their_declaring_recipe(
        ws, tmp_path, extends):
    from toolchain.core.fs import sha256_file

    project = tmp_path / "project"
    _project(project, setvars="../oneapi/setvars.sh")
    mine = tmp_path / "me" / "recipes"
    mine.mkdir(parents=True)
    (tmp_path / "me" / "patches").mkdir()
    (mine / "mine.toml").write_text(f'extends = "{extends.format(project=project)}"\n[env]\nMAX_JOBS = "1"\n')
    r = ws.cli("plan", "--recipe", mine / "mine.toml", "--recipes-dir", project / "recipes", "--json")
    assert r.returncode == 0, str(r)
    data = r.json()
    (engine,) = data["components"]
    assert engine["patches"] == [{"path": "engine/0001-a.patch",  # found in the declaring recipe's patches/
                                  "sha256": sha256_file(project / "patches/engine/0001-a.patch"),
                                  "found-in": str(project / "patches")}]
    assert data["toolchain"]["setvars"] == str(project / "oneapi" / "setvars.sh")  # not beside mine.toml
    assert data["toolchain"]["oneapi-version"] == "2025.2.0"
    assert engine["env"]["MAX_JOBS"] == "1"


def test_a_name_is_looked_up_beside_the_recipe_first_then_in_the_project(ws, tmp_path):
    project = tmp_path / "project"
    _project(project, setvars="")
    mine = tmp_path / "me" / "recipes"
    mine.mkdir(parents=True)
    (mine / "team.toml").write_text('extends = "base"\n[env]\nSHARED = "team"\n')  # beside mine.toml
    (mine / "mine.toml").write_text('extends = "team"\n')
    r = ws.cli("plan", "--recipe", mine / "mine.toml", "--recipes-dir", project / "recipes", "--json")
    assert r.returncode == 0, str(r)
    assert r.json()["components"][0]["env"]["SHARED"] == "team"
    missing = ws.cli("plan", "--recipe", mine / "mine.toml", "--json")  # the default project has no "base"
    assert missing.returncode == 2, str(missing)
    assert "team.toml: extends: no recipe 'base'" in missing.json()["error"]


# ---- patches stay inside the patches/ directory of the recipe that names them (issue 14.5) ----------------

def test_a_patch_symlink_leading_out_of_patches_is_refused_without_reading_it(ws, tmp_path):
    from toolchain.core.fs import sha256_file

    outside = tmp_path / "outside" / "evil.patch"
    outside.parent.mkdir()
    outside.write_text("--- a/x\n+++ b/x\n")
    (ws.patches / "app").mkdir()
    (ws.patches / "app" / "0001-link.patch").symlink_to(outside)
    path = ws.recipe("bad", bad('after = ["engine"]', 'after = ["engine"]\npatches = ["app/0001-link.patch"]'))
    before = ws.snapshot()
    r = ws.cli("plan", "--recipe", path, "--json")
    assert r.returncode == 2, str(r)
    (problem,) = r.json()["problems"] if "problems" in r.json() else [r.json()["error"]]
    assert problem.startswith("bad.toml: components.app.patches[0]: patch 'app/0001-link.patch' is a symlink to "), problem
    assert str(outside) in problem
    assert "pinned table {url, commit, path, sha256}" in problem
    assert sha256_file(outside) not in r.output
    assert ws.snapshot() == before
    # a symlink that stays inside patches/ is an ordinary patch
    (ws.patches / "app" / "real.patch").write_text("--- a/y\n+++ b/y\n")
    (ws.patches / "app" / "0001-link.patch").unlink()
    (ws.patches / "app" / "0001-link.patch").symlink_to(ws.patches / "app" / "real.patch")
    ok = ws.cli("plan", "--recipe", path, "--json")
    assert ok.returncode == 0, str(ok)
    assert ok.json()["components"][1]["patches"][0]["sha256"] == sha256_file(ws.patches / "app" / "real.patch")


def test_an_inherited_patch_that_escapes_is_reported_against_the_recipe_that_names_it(ws, tmp_path):
    other = tmp_path / "other"
    (other / "recipes").mkdir(parents=True)
    (other / "recipes" / "parent.toml").write_text(
        BASE.replace('patches = ["engine/0001-a.patch", "engine/0002-b.patch"]', 'patches = ["../../etc/passwd"]'))
    path = ws.recipe("child", f'extends = "{other / "recipes" / "parent.toml"}"\n[env]\nMAX_JOBS = "1"\n')
    r = ws.cli("build", "--recipe", path, "--json")
    assert r.returncode == 2, str(r)
    assert r.json()["problems"] == [r.json()["problems"][0]]
    assert r.json()["problems"][0].startswith("parent.toml: components.engine.patches[0]: patch '../../etc/passwd' leaves ")
    assert str(path) in r.json()["hint"]


# ---- files that are not recipes (issue 14.9, 14.10) --------------------------------------------------------

NOT_RECIPES = [
    ("binary", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "not UTF-8 text"),
    ("deeply-nested-array", b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested too deeply"),
    ("nested-tables", b"[" + b".".join(b"t%d" % i for i in range(200)) + b"]\nx = 1\n", "nested too deeply"),
    ("huge-description", b'description = "' + b"x" * (50 << 20) + b'"\n', "too large"),
]


@pytest.mark.parametrize(("content", "reason"), [c[1:] for c in NOT_RECIPES], ids=[c[0] for c in NOT_RECIPES])
def test_a_file_that_is_not_a_recipe_is_a_clean_error_naming_it(ws, content, reason):
    path = ws.recipes / "bad.toml"
    path.write_bytes(content)
    for command in ("plan", "build"):
        r = ws.cli(command, "--recipe", path, "--json")
        assert r.returncode == 2, str(r)
        assert r.json()["error"].startswith(f"{path}: {reason}"), r.json()["error"]
        assert "Traceback" not in r.output
    child = ws.recipe("child", 'extends = "bad"\n')  # the same through extends
    r = ws.cli("plan", "--recipe", child, "--json")
    assert r.returncode == 2 and r.json()["error"].startswith(f"{path}: {reason}"), str(r)
    assert not ws.cache.exists()
    assert not (ws.root / "dist").exists()


def test_recipes_lists_every_readable_recipe_and_flags_each_bad_one(ws):
    ws.recipe("alpha", 'description = "the first"\n')
    ws.recipe("zulu", 'description = "the last"\n')
    for name, content, _ in NOT_RECIPES:
        (ws.recipes / f"{name}.toml").write_bytes(content)
    r = ws.cli("recipes", "--recipes-dir", ws.recipes, "--json")
    assert r.returncode == 0, str(r)
    listed = {x["name"]: x["description"] for x in r.json()["recipes"] if x["found-in"] == "--recipes-dir"}
    assert listed == {"alpha": "the first", "zulu": "the last",
                      **{name: f"({reason})" for name, _, reason in NOT_RECIPES}}
    human = ws.cli("recipes", "--recipes-dir", ws.recipes)
    assert human.returncode == 0
    assert "Traceback" not in human.output
    assert "alpha" in human.stdout
    assert "not UTF-8 text" in human.stdout


def test_one_patch_type_from_the_recipe_through_the_plan_to_the_lock():
    """Issue 10: one frozen Patch (recipe.model), not PatchSpec/Patch/PatchRef; recipe/ split into model (the
    types), load (files, extends) and validate (tables → Recipe)."""
    import dataclasses
    import typing

    from toolchain import lock
    from toolchain.build import plan
    from toolchain.recipe import load, model, validate
    from toolchain.sources import patches

    hints = [typing.get_type_hints(model.Component)["patches"], typing.get_type_hints(lock.LockedComponent)["patches"],
             typing.get_type_hints(vars(plan.ComponentPlan)["patches"].fget)["return"]]
    assert hints == [tuple[model.Patch, ...]] * 3
    assert vars(patches)["Patch"] is model.Patch  # the sources stage's is the recipe's
    # what is not the patch's identity comes last and takes no part in equality: its file, and where it applied
    assert [f.name for f in dataclasses.fields(model.Patch)][-2:] == ["file", "applied"]
    assert [f.name for f in dataclasses.fields(model.Patch) if not f.compare] == ["file", "applied"]
    assert not any(hasattr(m, n) for m in (lock, load, patches) for n in ("PatchRef", "PatchSpec", "load_series"))
    assert load.validated is validate.validated
    assert load.Recipe is model.Recipe
