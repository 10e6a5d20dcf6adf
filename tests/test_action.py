"""The GitHub Action (``action.yml``) and the example workflows in ``docs/examples/``.

actionlint lints workflows, not composite-action metadata, so the action's steps are also linted
inside a generated workflow, its structure is checked here, and its shell steps are run for real
against a temporary repository (with a stand-in ``gh``) to see what they write and call.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import KERNEL, REPO

ACTION = yaml.safe_load((REPO / "action.yml").read_text())
STEPS = ACTION["runs"]["steps"]
EXAMPLES = sorted((REPO / "docs" / "examples").glob("*.yml"))


def step(name_part: str) -> dict:
    (found,) = [s for s in STEPS if name_part in s.get("name", "")]
    return found


def actionlint(*files: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("actionlint")
    assert exe, "actionlint is not installed (it is in the test extra)"
    return subprocess.run([exe, "-no-color", *map(str, files)], capture_output=True, text=True, timeout=120)


# -- linting ---------------------------------------------------------------------------------


def test_example_workflows_pass_actionlint():
    assert len(EXAMPLES) >= 2
    result = actionlint(*EXAMPLES)
    assert result.returncode == 0, result.stdout + result.stderr


def _as_workflow(steps: list[dict]) -> dict:
    inputs = {name: {"type": "string", "required": False} for name in ACTION["inputs"]}
    return {"name": "action-steps", "on": {"workflow_dispatch": {"inputs": inputs}},
            "jobs": {"action": {"runs-on": "ubuntu-latest", "steps": steps}}}


def test_action_steps_pass_actionlint_inside_a_workflow(tmp_path):
    good = tmp_path / "good.yml"
    good.write_text(yaml.safe_dump(_as_workflow(STEPS), sort_keys=False))
    result = actionlint(good)
    assert result.returncode == 0, result.stdout + result.stderr
    # the same lint catches a broken reference, so passing above means something
    broken = json.loads(json.dumps(STEPS).replace("steps.check.outputs.sarif-file", "steps.chek.outputs.sarif-file"))
    bad = tmp_path / "bad.yml"
    bad.write_text(yaml.safe_dump(_as_workflow(broken), sort_keys=False))
    assert actionlint(bad).returncode != 0


# -- structure -------------------------------------------------------------------------------


def test_action_is_a_composite_with_shells_and_pinned_actions():
    assert ACTION["runs"]["using"] == "composite"
    for s in STEPS:
        assert "name" in s
        if "run" in s:
            assert s.get("shell") == "bash", s["name"]
        if "uses" in s:
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", s["uses"]), s["uses"]


PINNED = re.compile(r"uses: [\w.-]+/[\w./-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+")


@pytest.mark.parametrize("path", [REPO / "action.yml", *sorted((REPO / ".github" / "workflows").glob("*.yml")),
                                  *EXAMPLES], ids=lambda p: p.name)
def test_every_third_party_action_is_pinned_by_sha_with_its_version(path):
    for line in path.read_text().splitlines():
        if "uses:" in line and not line.lstrip().startswith("#") and "kcheck/kcheck@" not in line:
            assert PINNED.search(line), f"{path.name}: {line.strip()}"


def test_a_failed_sarif_upload_is_said_in_the_job_summary():
    upload = step("Upload SARIF")
    warn = step("SARIF upload failed")
    assert upload.get("id") == "sarif" and warn["if"] == "steps.sarif.outcome == 'failure'"
    assert "GITHUB_STEP_SUMMARY" in warn["run"] and "security-events" in warn["run"]
    assert "GITHUB_STEP_SUMMARY" in step("comments could not be posted")["run"]
    assert upload["with"]["ref"] == "${{ inputs.sarif-ref }}" and upload["with"]["sha"] == "${{ inputs.sarif-sha }}"


def test_the_pull_request_target_example_names_the_pull_requests_ref_and_sha():
    (target,) = [p for p in EXAMPLES if "target" in p.name]
    workflow = yaml.safe_load(target.read_text())
    (job,) = workflow["jobs"].values()
    (kcheck,) = [s for s in job["steps"] if s.get("uses", "").startswith("kcheck/kcheck@")]
    assert kcheck["with"]["sarif-ref"] == "refs/pull/${{ github.event.pull_request.number }}/head"
    assert kcheck["with"]["sarif-sha"] == "${{ github.event.pull_request.head.sha }}"
    checkout = job["steps"][0]
    assert checkout["with"]["persist-credentials"] is False
    assert checkout["with"]["ref"] == "${{ github.event.pull_request.head.sha }}"
    # nothing from the checkout runs: no run step at all in this job
    assert not any("run" in s for s in job["steps"])


def test_the_summary_comment_is_found_by_its_marker_alone():
    run = step("summary comment")["run"]
    assert "startswith" in run and ".user" not in run


def test_release_workflow_builds_checks_and_publishes_by_trusted_publishing():
    path = REPO / ".github" / "workflows" / "release.yml"
    assert actionlint(path).returncode == 0
    workflow = yaml.safe_load(path.read_text())
    assert workflow[True]["push"]["tags"]  # "on" reads as True in YAML 1.1
    build, publish = workflow["jobs"]["build"], workflow["jobs"]["publish"]
    script = "\n".join(s.get("run", "") for s in build["steps"])
    assert "GITHUB_REF_NAME" in script or "${TAG#v}" in script
    assert "python -m build" in script and "twine check" in script and "--version" in script
    assert publish["permissions"] == {"id-token": "write"} and publish["environment"]["name"] == "pypi"
    assert any(s.get("uses", "").startswith("pypa/gh-action-pypi-publish@") for s in publish["steps"])
    assert "password" not in path.read_text()  # trusted publishing: no token


def test_no_expression_is_pasted_into_a_shell_script():
    """Values reach scripts through env only: an expression inside run: is a script-injection hole."""
    for s in STEPS:
        if "run" in s:
            assert "${{" not in s["run"], s["name"]


def test_every_reference_resolves():
    text = (REPO / "action.yml").read_text()
    used_inputs = set(re.findall(r"inputs\.([\w-]+)", text))
    assert used_inputs <= set(ACTION["inputs"]), used_inputs - set(ACTION["inputs"])
    ids = {s["id"] for s in STEPS if "id" in s}
    for step_id, output in re.findall(r"steps\.([\w-]+)\.outputs\.([\w-]+)", text):
        assert step_id in ids, step_id
        if step_id == "check":
            assert f'echo "{output}=' in step("Run kcheck")["run"], output
    assert not set(ACTION["inputs"]) - used_inputs, "inputs nobody reads"


def test_kcheck_comes_from_the_action_never_from_the_pull_request():
    install = step("Install kcheck")
    assert install["env"]["ACTION_PATH"] == "${{ github.action_path }}"
    assert '"${KCHECK_SPEC:-$ACTION_PATH}"' in install["run"]
    everything = "\n".join(s.get("run", "") for s in STEPS)
    for forbidden in ("pip install .", "pip install -e", "GITHUB_WORKSPACE", "python -m pytest", "setup.py"):
        assert forbidden not in everything
    assert "uses: ./" not in (REPO / "action.yml").read_text()


def test_summary_and_reviews_follow_the_documented_contract():
    from kcheck.reporters.markdown import MARKER

    assert MARKER in step("summary comment")["run"]
    assert "-reporter=github-pr-review" in step("review comments")["run"]
    assert "-f=rdjson" in step("review comments")["run"]
    sarif = step("Upload SARIF")
    assert sarif["uses"].startswith("github/codeql-action/upload-sarif@")
    assert sarif["with"]["sarif_file"] == "${{ steps.check.outputs.sarif-file }}"


# -- the shell steps, run for real -----------------------------------------------------------



def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", "-c", "commit.gpgsign=false", *args], cwd=cwd, env=env, check=True,
                          capture_output=True, text=True).stdout


@pytest.fixture
def runner(tmp_path):
    """A fake runner: RUNNER_TEMP with kcheck's venv pointing at this interpreter, output files,
    and a pull request that adds one host sync to a file that already has one."""
    temp = tmp_path / "runner"
    (temp / "kcheck-venv" / "bin").mkdir(parents=True)
    kcheck = shutil.which("kcheck")
    assert kcheck
    (temp / "kcheck-venv" / "bin" / "kcheck").symlink_to(kcheck)
    (temp / "kcheck-venv" / "bin" / "python").symlink_to(sys.executable)
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "pyproject.toml").write_text('[tool.kcheck]\nroot = true\nselect = ["KC201"]\n')
    (repo / "bench.py").write_text(KERNEL)
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "base")
    base = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "bench.py").write_text(KERNEL.replace("        fn(x)\n", "        fn(x)\n        total = x.sum().item()\n"))
    _git(repo, "commit", "-q", "-am", "change")
    env = {**os.environ, "RUNNER_TEMP": str(temp), "GITHUB_OUTPUT": str(tmp_path / "output"),
           "GITHUB_STEP_SUMMARY": str(tmp_path / "summary")}
    return repo, base, env, tmp_path


BASH = ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c"]  # how GitHub runs `shell: bash`


def _run_step(s: dict, cwd: Path, env: dict, inputs: dict) -> subprocess.CompletedProcess:
    step_env = {}
    for key, value in s.get("env", {}).items():
        m = re.fullmatch(r"\$\{\{ inputs\.([\w-]+) \}\}", str(value))
        step_env[key] = inputs.get(m.group(1), "") if m else inputs.get(key, "")
    return subprocess.run([*BASH, s["run"]], cwd=cwd, env={**env, **step_env}, capture_output=True,
                          text=True, timeout=300)


def _outputs(path: Path) -> dict:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_check_step_reports_only_the_change_and_writes_every_file(runner):
    repo, base, env, tmp = runner
    inputs = {"base-ref": base, "paths": ".", "filter-mode": "new", "fail-level": "", "baseline": "",
              "annotations": "true"}
    result = _run_step(step("Run kcheck"), repo, env, inputs)
    out = _outputs(tmp / "output")
    assert result.returncode == 0, result.stdout + result.stderr
    assert out["exit-code"] == "1" and out["findings"] == "1"
    # annotations: only the added .item(), not the old synchronize()
    annotations = [line for line in result.stdout.splitlines() if line.startswith("::error ")]
    assert len(annotations) == 1 and "line=10" in annotations[0] and ".item()" in annotations[0]
    sarif = json.loads(Path(out["sarif-file"]).read_text())
    assert [r["locations"][0]["physicalLocation"]["region"]["startLine"] for r in sarif["runs"][0]["results"]] == [10]
    summary = (tmp / "summary").read_text()
    assert summary.startswith("<!-- kcheck:summary -->") and "1 finding outside the changed lines" in summary
    rdjson = json.loads(Path(out["rdjson-file"]).read_text())
    assert [d["location"]["range"]["start"]["line"] for d in rdjson["diagnostics"]] == [10]


def test_check_step_with_fail_level_none_never_fails(runner):
    repo, base, env, tmp = runner
    inputs = {"base-ref": base, "paths": ".", "filter-mode": "nofilter", "fail-level": "none", "baseline": "",
              "annotations": "false"}
    result = _run_step(step("Run kcheck"), repo, env, inputs)
    out = _outputs(tmp / "output")
    assert result.returncode == 0, result.stderr
    # both syncs sit in one function's window: one finding, the other place a related location
    assert out["exit-code"] == "0" and out["findings"] == "1"
    assert "::error" not in result.stdout


def test_check_step_stops_on_a_kcheck_error(runner):
    repo, _, env, tmp = runner
    inputs = {"base-ref": "no-such-ref", "paths": ".", "filter-mode": "added", "fail-level": "", "baseline": "",
              "annotations": "true"}
    result = _run_step(step("Run kcheck"), repo, env, inputs)
    assert result.returncode == 2
    assert "--diff-base no-such-ref" in result.stderr


def _fake_gh(bin_dir: Path, existing: str) -> Path:
    """A ``gh`` that logs its arguments and answers the comment listing with ``existing``."""
    log = bin_dir / "gh.log"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "gh"
    script.write_text(f"#!/bin/bash\necho \"$*\" >> {log}\n"
                      f"if [[ \"$*\" == *\"--jq\"* ]]; then printf '%s' '{existing}'; fi\n")
    script.chmod(0o755)
    return log


@pytest.mark.parametrize("existing, findings, expected", [
    ("", "2", "POST repos/o/r/issues/7/comments"),
    ("111\n222", "2", "PATCH repos/o/r/issues/comments/111"),
    ("111", "0", "PATCH repos/o/r/issues/comments/111"),
    ("", "0", None),
], ids=["first-run-posts", "rerun-edits-the-first", "clean-rerun-edits", "clean-first-run-stays-quiet"])
def test_summary_comment_is_posted_once_then_edited(tmp_path, existing, findings, expected):
    log = _fake_gh(tmp_path / "bin", existing)
    body = tmp_path / "summary.md"
    body.write_text("<!-- kcheck:summary -->\nbody\n")
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    s = step("summary comment")
    inputs = {"GH_TOKEN": "t", "REPO": "o/r", "PR": "7", "BODY": str(body), "FINDINGS": findings}
    result = subprocess.run([*BASH, s["run"]], cwd=tmp_path, env={**env, **inputs}, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    calls = log.read_text().splitlines()
    assert calls[0].startswith("api --paginate repos/o/r/issues/7/comments")
    writes = [c for c in calls[1:]]
    if expected is None:
        assert writes == []
    else:
        assert len(writes) == 1 and writes[0].startswith(f"api --method {expected}") and f"body=@{body}" in writes[0]
