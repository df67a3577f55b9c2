"""The GitHub Actions pipeline: actionlint on the workflow, the matrix generated from the variant
list, and the completeness check of the merge job (sam3d/ci.py)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sam3d import ci
from sam3d.core import variants
from sam3d.device import run as device_run
from sam3d.results import record

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "variants.yml"
ACTIONLINT_CONFIG = ROOT / "ci" / "actionlint.yaml"


def _actionlint() -> str:
    here = Path(sys.executable).with_name("actionlint")
    found = str(here) if here.is_file() else shutil.which("actionlint")
    assert found, "actionlint not installed: it comes with requirements.lock (ci/bootstrap.sh)"
    return found


def test_workflow_passes_actionlint():
    r = subprocess.run(
        [_actionlint(), "-config-file", str(ACTIONLINT_CONFIG), "-no-color", str(WORKFLOW)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (r.returncode, r.stdout + r.stderr) == (0, "")


def test_actionlint_reports_a_broken_workflow(tmp_path):
    """The lint test above can fail: a bad expression is found."""
    bad = tmp_path / "bad.yml"
    bad.write_text(WORKFLOW.read_text().replace("needs.matrix.outputs.matrix", "needs.matrix.outputs.matirx", 1))
    r = subprocess.run(
        [_actionlint(), "-config-file", str(ACTIONLINT_CONFIG), "-no-color", str(bad)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1 and "matirx" in r.stdout


def _expected_pairs(vs) -> list[tuple[str, str]]:
    return [(v.name, o) for v in vs for o in ci.CONTAINERS]


def test_matrix_from_the_cli_has_one_entry_per_variant_and_container(tmp_path):
    """The two commands the workflow's matrix job runs, as it runs them."""
    out = subprocess.run(
        [sys.executable, "-m", "sam3d", "variants", "--json"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    (tmp_path / "variants.json").write_text(out)
    line = subprocess.run(
        [sys.executable, "-m", "sam3d.ci", "matrix", str(tmp_path / "variants.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert line.count("\n") == 1, "GITHUB_OUTPUT needs the matrix on one line"
    m = json.loads(line)
    assert [(e["variant"], e["os"]) for e in m["include"]] == _expected_pairs(variants.with_role(variants.CI))
    by_name = {v.name: v for v in variants.VARIANTS}
    for e in m["include"]:
        v = by_name[e["variant"]]
        assert e["container"] == ci.CONTAINERS[e["os"]]
        assert e["sanitize"] is (v.sanitizer is not None) and e["sanitizer"] == v.sanitizer
        assert e["run_name"] == f"ci-{v.name}-{e['os']}" and e["artifact"] == f"results-{v.name}-{e['os']}"
    assert {e["container"] for e in m["include"]} == {"debian:12", "debian:13"}
    assert [e["variant"] for e in m["include"] if e["sanitize"]] == [
        v.name for v in variants.with_role(variants.CI) if v.sanitizer for _ in ci.CONTAINERS
    ]


def test_adding_a_variant_changes_the_matrix_with_no_other_edit(monkeypatch):
    before = ci.matrix()
    extra = variants.Variant(
        name="cpu-asan-o2",
        summary="CPU backend, ASan, -O2",
        build_type="Debug",
        opt_flags=("-O2", "-g"),
        roles=(variants.CI,),
        sanitizer="Address",
    )
    idle = variants.Variant(
        name="cpu-idle", summary="CPU backend, no role", build_type="Release", opt_flags=("-O2",), roles=()
    )
    monkeypatch.setattr(variants, "VARIANTS", variants.VARIANTS + (extra, idle))
    after = ci.matrix()  # from the registry's records, as `python -m sam3d variants --json` prints them
    new = [e for e in after["include"] if e not in before["include"]]
    assert len(after["include"]) == len(before["include"]) + len(ci.CONTAINERS)
    assert [(e["variant"], e["os"], e["sanitize"]) for e in new] == [("cpu-asan-o2", o, True) for o in ci.CONTAINERS]
    assert _pairs(ci.expected_results()) == {
        (v.name, o) for v in variants.VARIANTS if variants.CI in v.roles for o in ci.CONTAINERS
    }
    assert ("cpu-asan-o2", "debian13") in _pairs(ci.expected_results())
    # ... and the workflow names no variant, so nothing else needs the edit.
    text = WORKFLOW.read_text()
    named = [v.name for v in variants.VARIANTS if v.name in text]
    assert not named, f"{WORKFLOW.name} names variants {named}: the matrix must come from the variant list"


def _pairs(es) -> set[tuple[str, str]]:
    return {(e.variant, e.os) for e in es}


def test_workflow_wiring():
    wf = yaml.safe_load(WORKFLOW.read_text())
    jobs = wf["jobs"]
    assert jobs["variant"]["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.matrix) }}"
    assert jobs["variant"]["container"]["image"] == "${{ matrix.container }}"
    steps = jobs["variant"]["steps"]
    runs = [s.get("run", "") for s in steps]
    # the jobs call the stage functions of ci/stages.sh, as .ci/run does
    assert '. ci/stages.sh && ci_stage build "$VARIANT"' in runs
    assert '. ci/stages.sh && ci_stage bench --name "$RUN_NAME" "$VARIANT"' in runs
    sanitize = next(s for s in steps if "ci_stage sanitize" in s.get("run", ""))
    assert sanitize["if"] == "matrix.sanitize"
    assert any('ci_summary >> "$GITHUB_STEP_SUMMARY"' in r for r in runs)
    reports = next(
        s
        for s in steps
        if s.get("uses", "").startswith("actions/upload-artifact@") and s["with"]["name"].startswith("reports-")
    )
    assert reports["if"] == "${{ !cancelled() }}" and "build/reports/" in reports["with"]["path"]
    merge_runs = " ".join(s.get("run", "") for s in jobs["merge"]["steps"])
    assert "python -m sam3d.ci junit ci-reports" in merge_runs and "python -m sam3d compare --force" in merge_runs
    stages = (ROOT / "ci" / "stages.sh").read_text()
    for fn in ("ci_run_build", "ci_run_sanitize", "ci_run_bench", "ci_run_test", "ci_run_package"):
        assert f"{fn}()" in stages and f"ci_sum_{fn[7:]}()" in stages
    # .ci/run still runs the README's test command, as a stage
    assert (
        "ci/bootstrap.sh nox -s lint tests sanitize validate" in stages
        and "ci_stage test" in (ROOT / ".ci" / "run").read_text()
    )
    keys = " ".join(s["with"]["key"] for s in steps if s.get("uses", "").startswith("actions/cache@"))
    for f in ("requirements.lock", "sam3d/core/variants.py", "conan/**", "conanfile.py"):
        assert f"'{f}'" in keys
    upload = next(
        s
        for s in steps
        if s.get("uses", "").startswith("actions/upload-artifact@") and s["with"]["name"] == "${{ matrix.artifact }}"
    )
    assert upload["with"]["path"].rstrip("/") == "generated/diagnostics"
    # The GPU job never holds up a default run, and the merge job runs even when a job failed.
    assert "self-hosted" in jobs["gpu"]["runs-on"] and "inputs.gpu" in jobs["gpu"]["if"]
    assert jobs["merge"]["if"] == "${{ always() }}"
    assert set(jobs["merge"]["needs"]) == {"matrix", "variant", "bundle", "gpu"}


def test_the_gpu_job_runs_the_bundle_and_both_checkers_over_every_configuration_the_driver_lists():
    """The GPU job's run.pyz commands parse with run.pyz's own flags; the benchmark takes every
    mode, layout and order from the driver ("all"), and each checker runs even after a failed
    step before it, into a folder of its own that is uploaded."""
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["gpu"]["steps"]
    commands = [
        line.strip()
        for st in steps
        for line in st.get("run", "").splitlines()
        if line.strip().startswith("python3 sam3d-device/run.pyz ")
    ]
    parsed = [device_run.parser(["release"]).parse_args(shlex.split(c)[2:]) for c in commands]
    plain, validation, sanitizer = parsed
    assert (plain.modes, plain.layout, plain.order, plain.transfer_only) == ("all", "all", "all", True)
    assert validation.vulkan_validation and not validation.compute_sanitizer
    assert sanitizer.compute_sanitizer == "all" and not sanitizer.vulkan_validation
    assert len({str(a.out) for a in parsed}) == 3
    checks = [
        st for st in steps if "--vulkan-validation" in st.get("run", "") or "--compute-sanitizer" in st.get("run", "")
    ]
    assert [st.get("if") for st in checks] == ["${{ !cancelled() }}"] * 2
    uploaded = {
        st["with"]["path"].rstrip("/") for st in steps if st.get("uses", "").startswith("actions/upload-artifact@")
    }
    assert all(any(a.out == Path(p) or Path(p) in a.out.parents for p in uploaded) for a in parsed)


# --- completeness check --------------------------------------------------------------------


@pytest.fixture
def result(make_result):
    """A result document of ``variant``: ok (two timed images), or failed as a build failure."""

    def make(variant: str, status: str = "ok", backend: str = "CPU", **configuration) -> dict:
        if status == "ok":
            return make_result(variant=variant, backend=backend, on_ms=[1.0, 1.0], off_ms=[2.0, 2.0], **configuration)
        return make_result(
            variant=variant, backend=backend, status="failed", reason="build failed: exit 1", **configuration
        )

    return make


def _lay_out(root: Path, expected: list[ci.Expected], result, skip=(), failed=()) -> None:
    """Folders as download-artifact lays out the results-* artifacts: each job's evidence folder,
    its result files in results/ (as bench writes them)."""
    for e in expected:
        if (e.variant, e.os) in skip:
            continue
        status = "failed" if (e.variant, e.os) in failed else "ok"
        d = root / e.artifact / e.run_name
        (d / "results").mkdir(parents=True)
        for i, backend in enumerate(("CPU", "Vulkan"), 1):
            (d / "results" / f"{i:02d}-{e.variant}-{backend}-host-a.json").write_text(
                json.dumps(result(e.variant, status, backend))
            )
        (d / "logs").mkdir()
        (d / "logs" / "compile_commands.json").write_text("[]")  # not a result file


def test_every_job_that_builds_keeps_its_compiler_cache_apart_from_the_conan_cache(monkeypatch):
    """The Conan cache's key changes with every recipe revision; the compiler cache must
    outlive it (restored by prefix, saved per commit, trimmed before the save), so every job
    that builds has it as its own entry, and the Conan home's entry leaves it out with a
    same-level exclusion (actions/cache applies none below a folder it includes whole:
    actions/toolkit#713)."""
    from sam3d.tools import ccache

    monkeypatch.delenv("SAM3D_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    rel = "~/.cache/sam3d/ccache"  # where the jobs' ccache.cache_dir() is
    assert ccache.cache_dir() == Path.home() / ".cache" / "sam3d" / "ccache"
    jobs = yaml.safe_load(WORKFLOW.read_text())["jobs"]
    building = 0
    for name, job in jobs.items():
        steps = job.get("steps", [])
        runs = " ".join(st.get("run", "") for st in steps)
        if not any(cmd in runs for cmd in ("ci_stage build", "nox -s mutants", "nox -s fuzz", "nox -s bundle")):
            continue
        if "nox -s mutants -- --python" in runs:  # mutmut over sam3d/results/ builds nothing
            continue
        building += 1
        caches = [st["with"] for st in steps if st.get("uses", "").startswith("actions/cache@")]
        (cc,) = [c for c in caches if c["path"].strip() == rel]
        assert cc["key"].endswith("-${{ github.sha }}"), name
        assert cc["restore-keys"].strip() == cc["key"].removesuffix("${{ github.sha }}"), name
        for c in caches:
            if c is not cc and "sam3d" in c["path"]:
                assert c["path"].split() == ["~/.cache/sam3d/*", f"!{rel}"], name
        trims = [st for st in steps if "--evict-older-than" in st.get("run", "")]
        assert len(trims) == 1 and f"ccache -d {rel} " in trims[0]["run"], name
        assert trims[0]["if"] == "${{ !cancelled() }}", name
    assert building == 5  # the variant matrix, the mutants, the generated mutants, the fuzz and the bundle jobs


def test_expected_results_one_per_variant_and_container():
    es = ci.expected_results()
    assert [(e.variant, e.os) for e in es] == _expected_pairs(variants.with_role(variants.CI))
    assert ci.expected_results(["a"], ["debian12"]) == [ci.Expected("a", "debian12")]
    assert ci.expected_results([{"name": "a"}], ["x"])[0].run_name == "ci-a-x"


def test_check_complete_passes_when_every_job_delivered(tmp_path, result):
    es = ci.expected_results()
    _lay_out(tmp_path, es, result)
    files = ci.result_files(tmp_path)
    assert len(files) == 2 * len(es)
    assert ci.check_complete(files, es) == []
    assert ci.evidence_dirs(tmp_path) == sorted(tmp_path / e.artifact / e.run_name / "results" for e in es)


def test_check_complete_fails_on_a_folder_marked_not_accepted(tmp_path, result):
    """A run whose results are ok but whose device tests (or a checker) failed is marked only by
    its folder's NOT-ACCEPTED file: the merge is not complete evidence then."""
    es = ci.expected_results()
    _lay_out(tmp_path, es, result)
    marker = tmp_path / es[0].artifact / es[0].run_name / "NOT-ACCEPTED"
    marker.write_text("release: device tests (plain) 80 passed, 4 failed, 0 skipped, exit 1\n")
    assert ci.check_complete(ci.result_files(tmp_path), es) == [
        f"{marker}: the evidence folder is marked NOT ACCEPTED (release: device tests (plain) 80 passed, 4 failed, "
        "0 skipped, exit 1)"
    ]


def test_check_complete_names_a_missing_variant(tmp_path, result):
    es = ci.expected_results()
    gone = (es[-1].variant, es[-1].os)
    _lay_out(tmp_path, es, result, skip=[gone])
    problems = ci.check_complete(ci.result_files(tmp_path), es)
    assert problems == [
        f"missing result: {gone[0]} on {gone[1]} (no accepted result in artifact results-{gone[0]}-{gone[1]})"
    ]


def test_check_complete_rejects_failed_and_misplaced_results(tmp_path, result):
    es = ci.expected_results()
    bad = (es[0].variant, es[0].os)
    _lay_out(tmp_path, es, result, failed=[bad])
    problems = ci.check_complete(ci.result_files(tmp_path), es)
    assert any("status 'failed'" in p and "build failed" in p for p in problems)
    assert any(p.startswith(f"missing result: {bad[0]} on {bad[1]}") for p in problems)

    other = tmp_path / "other"
    d = other / es[1].artifact / es[1].run_name
    d.mkdir(parents=True)
    (d / "x.json").write_text(json.dumps(result("not-" + es[1].variant)))
    problems = ci.check_complete(ci.result_files(other), [es[1]])
    assert any("but for variant" in p for p in problems)
    assert any(p.startswith("missing result") for p in problems)


def test_check_complete_with_no_results_lists_every_job():
    es = ci.expected_results()
    assert len(ci.check_complete([], es)) == len(es)


def test_gpu_results_required_only_when_the_gpu_job_ran(tmp_path, result):
    es = ci.expected_results()
    _lay_out(tmp_path, es, result)
    files = ci.result_files(tmp_path)
    assert ci.check_complete(files, es, require_gpu=False) == []
    # Every variant with the bundle role (what the GPU job's bundle packs), on each of its GPU backends.
    want = [(v.name, b) for v in variants.with_role(variants.BUNDLE) for b in v.backends if b != "CPU"]
    assert want and all(b in ("Vulkan", "CUDA") for _, b in want)
    assert ci.check_complete(files, es, require_gpu=True) == [
        f"missing result: {v} {b} from the GPU job (no accepted result in artifact results-gpu)" for v, b in want
    ]
    (tmp_path / "results-gpu").mkdir()
    for v, b in want[:-1]:
        (tmp_path / "results-gpu" / f"{v}-{b}.json").write_text(json.dumps(result(v, backend=b)))
    last_v, last_b = want[-1]
    assert ci.check_complete(ci.result_files(tmp_path), es, require_gpu=True) == [
        f"missing result: {last_v} {last_b} from the GPU job (no accepted result in artifact results-gpu)"
    ]
    (tmp_path / "results-gpu" / f"{last_v}-{last_b}.json").write_text(  # a transfer-only run counts too
        json.dumps(result(last_v, backend=last_b, transfer_only=True))
    )
    assert ci.check_complete(ci.result_files(tmp_path), es, require_gpu=True) == []


def test_check_jobs():
    assert ci.check_jobs({"variant": "success", "gpu": "skipped"}, optional=["gpu"]) == []
    assert ci.check_jobs({"variant": "failure"}) == ["job variant: failure"]
    assert ci.check_jobs({"gpu": "skipped"}) == ["job gpu: skipped"]
    assert ci.check_jobs({"variant": ""}) == ["job variant: no result"]


def test_check_cli_exit_status(tmp_path, capsys, result):
    es = ci.expected_results()
    _lay_out(tmp_path, es, result)
    ok_jobs = ["--job", "matrix=success", "--job", "variant=success", "--job", "bundle=skipped", "--job", "gpu=skipped"]
    assert ci.main(["check", str(tmp_path), "--gpu", "false", *ok_jobs]) == 0
    assert "complete" in capsys.readouterr().out
    # A failed job fails the check even when its results are there.
    assert ci.main(["check", str(tmp_path), "--job", "variant=failure"]) == 1
    assert "FAIL job variant: failure" in capsys.readouterr().out
    # With the GPU job enabled, a skipped GPU job and missing GPU results fail.
    assert ci.main(["check", str(tmp_path), "--gpu", "true", *ok_jobs]) == 1
    out = capsys.readouterr().out
    assert "job gpu: skipped" in out and "the GPU job" in out
    with pytest.raises(SystemExit):
        ci.main(["check", str(tmp_path), "--job", "variant"])


def test_merge_of_real_result_files_equals_the_local_table(tmp_path):
    """Three real result files from one local bench run (cpu-asan CPU, release CPU, release
    Vulkan), spread over per-job artifact folders as CI uploads them, merge into the same table
    the local run printed. Needs the drivers built (`nox -s tests` builds the default set)."""
    import os

    from sam3d.cli import bench
    from sam3d.core import paths
    from sam3d.core.errors import NotBuilt
    from sam3d.results import table as report
    from sam3d.running import bench as bench_runner

    name = f"pytest-merge-{os.getpid()}"
    vs = [variants.get("cpu-asan"), variants.get("release")]
    try:
        bench_runner.require_built(vs)
    except NotBuilt as e:
        pytest.skip(str(e))
    try:
        rc = bench.bench(vs, name=name, images=2, warmups=0, build=False)
        run_dir = paths.diagnostics_dir() / name
        assert rc == 0 and not list(run_dir.glob("*.json"))  # each result is written once, in results/
        files = record.result_files(run_dir)
        local_records = [record.read(f) for f in files]
        assert [(r.variant, r.backend) for r in local_records] == [
            ("cpu-asan", "CPU"),
            ("release", "CPU"),
            ("release", "Vulkan"),
        ]
        assert [f.parent for f in files] == [run_dir / "results"] * 3
        assert [f.name.split("-")[0] for f in files] == ["01", "02", "03"]
        local = report.render(local_records)
        artifacts = tmp_path / "ci-results"
        for f, r in zip(files, local_records):
            job = artifacts / f"results-{r.variant}-debian12" / name / "results"
            job.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, job / f.name)
        dirs = ci.evidence_dirs(artifacts)
        assert len(dirs) == 2
        merged = report.render(record.read_many(dirs))
        assert merged == local
        assert "cpu-asan" in merged and "Vulkan" in merged
    finally:
        shutil.rmtree(paths.diagnostics_dir() / name, ignore_errors=True)


def test_stage_functions_keep_a_log_an_exit_file_and_a_summary(tmp_path):
    """Two stages of ci/stages.sh run for real (bootstrap, and a failing build of an unknown
    variant) leave NAME.log, NAME.exit and NAME.seconds, and the summary table names both."""
    script = (
        '. ci/stages.sh; ci_stage bootstrap; ci_stage build no-such-variant; echo "rc=$?"; '
        'ci_summary > "$CI_OUT/summary.md"'
    )
    r = subprocess.run(
        ["bash", "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, CI_OUT=str(tmp_path), CI_REPORTS=str(tmp_path / "reports")),
    )
    assert "rc=1" in r.stdout, r.stdout + r.stderr
    assert (tmp_path / "bootstrap.exit").read_text().strip() == "0"
    assert (tmp_path / "build.exit").read_text().strip() == "1"
    assert "unknown variant 'no-such-variant'" in (tmp_path / "build.log").read_text()
    summary = (tmp_path / "summary.md").read_text()
    assert "| bootstrap | ok |" in summary and "| build | FAILED (exit 1) |" in summary


def test_the_readme_stage_runs_each_readme_command_as_written(tmp_path):
    """ci_run_readme: every indented line of the README in order, the note after "  #" dropped;
    a failing one fails the stage (the rest still run); `ci/bootstrap.sh true && ...` runs in a
    fresh clone of the commit; the test stage's command and the GPU machine's lines ("# there"
    and what follows them) are skipped, each in a line."""
    repo = tmp_path / "repo"
    (repo / "ci").mkdir(parents=True)
    shutil.copy(ROOT / "ci" / "stages.sh", repo / "ci" / "stages.sh")
    (repo / "README.md").write_text("""# x

    echo one > one.txt            # here

```
    echo not-a-command > fenced.txt
```

    false
    ci/bootstrap.sh nox -s lint tests sanitize validate
    ci/bootstrap.sh true && pwd > where.txt
    echo there > there.txt        # there
    echo after > after.txt        # here: the import
""")
    (repo / "ci" / "bootstrap.sh").write_text("#!/bin/sh\n[ $# -eq 0 ] || exec \"$@\"\n")
    (repo / "ci" / "bootstrap.sh").chmod(0o755)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "x"], check=True)
    r = subprocess.run(["bash", "-c", ". ci/stages.sh && ci_run_readme"], cwd=repo, capture_output=True, text=True)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("readme: ")]
    assert lines == [
        "readme: echo one > one.txt",
        "readme: false",
        "readme: FAILED: false",
        "readme: ci/bootstrap.sh nox -s lint tests sanitize validate: the test stage's command",
        "readme: ci/bootstrap.sh true && pwd > where.txt",
        "readme: echo there > there.txt: on the GPU machine (docs/gpu.md)",
        "readme: echo after > after.txt: on the GPU machine (docs/gpu.md)",
    ]
    assert (repo / "one.txt").read_text() == "one\n"
    assert not any((repo / f).exists() for f in ("fenced.txt", "there.txt", "after.txt", "where.txt"))
