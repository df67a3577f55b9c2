"""Bad command-line input fails at once, before any build, naming what is wrong."""

import argparse
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sam3d import __version__
from sam3d.core import variants
from sam3d.core.errors import NotBuilt
from sam3d.running import bench as bench_runner
from sam3d.tools import ctest


def _run(*args, root=None):
    """python -m sam3d ARGS; with ``root``, SAM3D_ROOT=root (its output folders go there)."""
    env = dict(os.environ, SAM3D_ROOT=str(root)) if root else None
    return subprocess.run([sys.executable, "-m", "sam3d", *args], capture_output=True, text=True, timeout=30, env=env)


_CPU = next(v.name for v in variants.VARIANTS if not v.gpu)  # a variant without a GPU backend
_PLAIN = next(v.name for v in variants.VARIANTS if not v.sanitizer)  # one without a sanitizer
_GPU = next(v.name for v in variants.VARIANTS if v.gpu)


@pytest.mark.parametrize(
    "args, expect",
    [
        (
            ("bundle", _CPU),
            f"{_CPU} has no GPU backend; GPU variants: " + ", ".join(v.name for v in variants.gpu_variants()),
        ),
        (
            ("ctest", "-L", "bogus", _GPU),
            f"{_GPU} has no CTest label 'bogus'; its labels: " + ", ".join(ctest.labels(variants.get(_GPU))[0]),
        ),  # its build folder's, once built
        (("ctest", "-L", "device", _CPU), f"{_CPU} has no CTest label 'device'; its labels: bench, normal"),
        (
            ("ctest", "--sanitizers-only", _PLAIN),
            f"none of {_PLAIN} has a sanitizer; sanitizer variants: "
            + ", ".join(v.name for v in variants.sanitizer_variants()),
        ),
        (("report", "generated", "--name", "../escape"), "--name '../escape': use letters, digits"),
        (("bench", "--images", "0", "release"), "must be >= 1"),
        (("fuzz", "--runs", "0"), "must be >= 1"),
        (("bench", "--modes", "off,zerocopy", "release"), "off and staged are required"),
        (("bench", "--modes", "off,staged,", "release"), "unknown mode ''"),
        (("bench", "--modes", "off,staged,OFF", "release"), "unknown mode 'OFF' (use staged, off, zerocopy, queued)"),
        (("bench", "--duplex", "both", "release"), "--duplex both: expected one of off, auto, on"),
    ],
)
def test_bad_input_fails_before_any_work(args, expect):
    if "--modes" in args or "--duplex" in args:  # checked by the driver's own lists (sam3d_bench --list-modes)
        try:
            bench_runner.require_built([variants.get("release")])
        except NotBuilt as e:
            pytest.skip(str(e))
    r = _run(*args)
    assert r.returncode != 0
    assert expect in r.stdout + r.stderr
    assert "building GGML" not in r.stdout


def test_bench_label_is_accepted(tmp_path):
    ctest.check_label(list(variants.VARIANTS), "bench")  # a real CTest label (native/bench), in every variant


def test_version_and_console_script():
    r = _run("--version")
    assert (r.returncode, r.stdout.strip()) == (0, f"sam3d {__version__}")
    script = Path(sys.executable).with_name("sam3d")
    r = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=30)
    assert r.stdout.strip() == f"sam3d {__version__}"


def _summary(tmp_path, **change):
    """A summary.json as run.pyz writes it (one variant, one benchmark entry), with ``change``
    applied as dotted paths."""
    s = {
        "machine": {"hostname": "gpu-host", "cpu": "x", "os": "Linux", "glibc": "2.39", "gpu": ""},
        "manifest": {
            "profile": {"sha256": "a" * 64, "version": 1},
            "git_commit": "0" * 40,
            "build_machine": {},
            "variants": {"release": {"build": {}, "extra": {}, "sanitizer": None}},
        },
        "variants": {"release": {"bench": [{"exit_code": 0, "driver_output": "release-vulkan.driver.json"}]}},
    }
    for path, value in change.items():
        *parents, last = path.split("__")
        obj = s
        for p in parents:
            obj = obj[p]
        obj[last] = value
    (tmp_path / "summary.json").write_text(json.dumps(s))
    return tmp_path


@pytest.mark.parametrize(
    "change, expect",
    [
        ({}, None),
        ({"machine__hostname": "../../etc"}, "field 'machine.hostname'"),
        ({"variants": {"../x": {"bench": []}}}, "field 'variants'"),
        ({"variants": {"cpu-asan": {"bench": []}}}, "field 'variants.cpu-asan': not in the manifest's variants"),
        (
            {"variants": {"release": {"bench": [{"driver_output": "../../secret.json"}]}}},
            "driver_output is '../../secret.json': expected the name of a file in that folder",
        ),
        ({"variants": {"release": {"bench": [{"driver_output": "/etc/passwd"}]}}}, "expected the name of a file"),
        ({"manifest": []}, "field 'manifest'"),
        (
            {"variants": {"release": {"device_tests": {"plain": {"passed": 1}}}}},
            "field 'variants.release.device_tests.plain.exit_code': missing",
        ),
        (
            {
                "variants": {
                    "release": {
                        "device_tests": {
                            "plain": {"exit_code": 0, "passed": 1, "failed": 0, "skipped": 0, "report": "../x.xml"}
                        }
                    }
                }
            },
            "device_tests report is '../x.xml': expected the name of a file in that folder",
        ),
    ],
)
def test_device_import_refuses_a_malformed_summary_in_one_line(tmp_path, change, expect):
    raw = _summary(tmp_path, **change)
    r = _run("device-import", str(raw), root=tmp_path / "root")
    out = r.stdout + r.stderr
    assert "Traceback" not in out
    if expect is None:  # well-formed: the missing driver output is a failed result, not an error
        assert "summary.json" not in r.stderr
        return
    assert r.returncode == 2
    assert expect in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


_DEFAULT = {
    "layout": "scattered",
    "order": "profile",
    "transfer_only": False,
    "transfer_queue": False,
    "duplex": "off",
}


@pytest.mark.parametrize(
    "facts, configuration",
    [
        ({}, {}),
        ({"layout": "areas", "transfer_only": True}, {"layout": "areas", "transfer_only": True}),
        ({"layout": "scattered", "vulkan_transfer_queue": True}, {"transfer_queue": True}),
        (
            {"layout": "areas", "transfer_only": True, "vulkan_transfer_queue": True},
            {"layout": "areas", "transfer_only": True, "transfer_queue": True},
        ),
        (
            {"layout": "areas", "graph_order": "levels", "transfer_only": True},
            {"layout": "areas", "order": "levels", "transfer_only": True},
        ),
        ({"layout": "areas", "duplex": "on"}, {"layout": "areas", "duplex": "on"}),
    ],
)
def test_a_run_without_driver_output_keeps_its_configuration(tmp_path, facts, configuration):
    """A failed bench run (no driver output) is imported under the configuration run.pyz's
    summary entry records (layout, issue order, transfer-only, Vulkan transfer queue, duplex), so it never lands in
    another configuration's row of the table."""
    raw = _summary(
        tmp_path,
        variants__release__bench=[{"exit_code": 1, "driver_output": None, "error": "sam3d_bench exit 1", **facts}],
        manifest__variants__release__build={
            "compile_flags": ["-O2"],
            "build_type": "Release",
            "ggml_version": "0.20.2",
        },
    )
    r = _run("device-import", str(raw), "--name", "facts", root=tmp_path / "root")
    assert "Traceback" not in r.stderr
    from sam3d.results import record

    files = record.result_files(tmp_path / "root" / "generated" / "diagnostics" / "facts")
    assert len(files) == 1, r.stdout + r.stderr
    assert files[0].parent.name == "results" and files[0].name.startswith("01-release-Vulkan-")
    result = record.read(files[0])
    assert result.status == "failed" and result.reason == "sam3d_bench exit 1"
    assert result.backend == "Vulkan"
    assert result.configuration() == {**_DEFAULT, **configuration}


def test_device_import_on_json_that_does_not_parse(tmp_path):
    (tmp_path / "summary.json").write_text('{"machine": ')
    r = _run("device-import", str(tmp_path))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "summary.json: not valid JSON (line 1" in r.stderr


_BUILT = {
    "manifest__variants__release__build": {"compile_flags": ["-O2"], "build_type": "Release", "ggml_version": "0.20.2"}
}


@pytest.mark.parametrize("what", ["driver_output", "floor_probe", "report", "summary.json"])
@pytest.mark.parametrize("kind", ["symlink", "fifo", "oversized"])
def test_device_import_reads_the_folder_s_own_regular_files_only(tmp_path, what, kind):
    """A file summary.json names (or summary.json itself) that is a symbolic link (here to a
    file outside the folder), not a regular file, or over 16 MiB: refused in one line naming it,
    exit 2, nothing imported; the outside file is never read into the evidence."""
    secret = tmp_path / "outside.json"
    secret.write_text('{"secret": "outside the folder"}')
    raw = tmp_path / "raw"
    raw.mkdir()
    tests = {"plain": {"exit_code": 0, "passed": 1, "failed": 0, "skipped": 0, "report": "report.xml"}}
    _summary(
        raw,
        variants__release__bench=[{"exit_code": 0, "driver_output": "driver_output", "floor_probe": "floor_probe"}],
        variants__release__device_tests=tests,
        **_BUILT,
    )
    target = raw / ("report.xml" if what == "report" else what)
    if what == "summary.json":
        target.rename(tmp_path / "summary-real.json")
        secret = tmp_path / "summary-real.json"
    if kind == "symlink":
        target.symlink_to(secret)
    elif kind == "fifo":
        os.mkfifo(target)
    else:
        with open(target, "wb") as f:
            f.truncate(16 * 2**20 + 1)
    r = _run("device-import", str(raw), "--name", "untrusted", root=tmp_path / "root")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stdout + r.stderr
    (line,) = r.stderr.strip().splitlines()
    want = {
        "symlink": "is a symbolic link: refused",
        "fifo": "not a regular file: refused",
        "oversized": "larger than 16 MiB, more than a run writes: refused",
    }[kind]
    assert line == f"sam3d device-import: {target}: {want}" or line.startswith(f"sam3d device-import: {target}: {want}")
    assert not (tmp_path / "root" / "generated" / "diagnostics" / "untrusted").exists()


@pytest.mark.parametrize("command", ["report", "compare"])
def test_a_result_file_that_is_not_utf8_is_one_line(tmp_path, command):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"schema": "sam3d-bench-result/3", "host": "\xff"}')
    args = (
        ("report", "--out", str(tmp_path / "out"), str(bad)) if command == "report" else ("compare", str(bad), str(bad))
    )
    r = _run(*args)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert (
        r.stderr.strip()
        == f"sam3d {command}: {bad}: not UTF-8 text (byte 44: b'\\xff'); a result or run file is UTF-8 JSON"
    )


def test_ci_matrix_of_no_variants_is_one_line(tmp_path):
    (tmp_path / "v.json").write_text("[]")
    for arg in (str(tmp_path / "v.json"), str(tmp_path / "missing.json")):
        r = subprocess.run(
            [sys.executable, "-m", "sam3d.ci", "matrix", arg], capture_output=True, text=True, timeout=30
        )
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("sam3d.ci matrix: ")


def test_a_missing_or_unreadable_path_is_one_line(tmp_path):
    for args in (
        ("compare", str(tmp_path / "no-a"), str(tmp_path / "no-b")),
        ("report", "--out", str(tmp_path), str(tmp_path / "missing.json")),
    ):
        r = _run(*args)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "no such file" in r.stderr


@pytest.mark.parametrize("command", ["bench", "build"])
@pytest.mark.parametrize("gpu", [False, True])
def test_with_no_variant_named_a_command_runs_what_this_machine_can(monkeypatch, capsys, gpu, command):
    """Without an NVIDIA GPU the default set's CUDA variants are left out, in one line that says
    why and how to run them; named, a CUDA variant is taken (its CPU parts) anyway."""
    from sam3d.cli import bench as bench_cmd

    cli = importlib.import_module("sam3d.cli.main")
    commands = importlib.import_module("sam3d.cli.commands")
    from sam3d.core import variants
    from sam3d.tools import system

    ran = []
    monkeypatch.setattr(system, "has_nvidia_gpu", lambda: gpu)
    monkeypatch.setattr(bench_cmd, "bench", lambda vs, **kw: ran.append([v.name for v in vs]) or 0)
    monkeypatch.setattr(commands, "build_variants", lambda vs: ran.append([v.name for v in vs]) or [])
    default = [v.name for v in variants.select(None)]
    cuda = [v.name for v in variants.select(None) if v.cuda]
    assert cuda, "the default set has a CUDA variant"
    assert cli.main([command]) == 0
    out = capsys.readouterr().out.splitlines()
    left = [line for line in out if "left out" in line]
    if gpu:
        assert ran == [default] and not left
    else:
        assert ran == [[n for n in default if n not in cuda]]
        (line,) = left
        assert line.startswith(f"sam3d {command}: left out {', '.join(cuda)}: CUDA needs an NVIDIA GPU")
        assert f"`python -m sam3d {command} {cuda[0]}`" in line and "`python -m sam3d bundle`" in line
    ran.clear()
    assert cli.main([command, cuda[0]]) == 0
    assert ran == [[cuda[0]]] and "left out" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["ctest", "--no-build", "release"],
        ["bundle", "--no-build", "release"],
        ["bench", "--no-build", "--name", "nolock", "release"],
    ],
)
def test_no_build_commands_never_take_the_conan_lock(monkeypatch, tmp_path, capsys, argv):
    """What only uses the build folders runs beside another clone's build: the lock is never
    asked for. release's build folder holds, written here, a CTest suite of one test (`true`,
    label normal) and the three binaries a bundle packs (copies of `true`), but no GGML record
    and no compile_commands.json: ctest runs the suite to the end, the bundle and the benchmark
    refuse before any work and say how to build."""
    import shutil

    from sam3d.cli.main import main
    from sam3d.core import paths
    from sam3d.tools import conan_lock

    def taken(*a, **k):
        raise AssertionError("the Conan lock was asked for")

    profiles = Path("native") / "bench" / "profiles"
    shutil.copytree(paths.root() / profiles, tmp_path / profiles)  # the committed profile, read first
    build = tmp_path / "build" / "release" / "Release"
    build.mkdir(parents=True)
    (build / "CTestTestfile.cmake").write_text(
        f'add_test([=[t]=] "{shutil.which("true")}")\nset_tests_properties([=[t]=] PROPERTIES LABELS "normal")\n'
    )
    for rel in (
        "tests/device/sam3d_device_tests",
        "tests/gpu_canary_vulkan",
        "bench/sam3d_bench",
        "bench/sam3d_floor_probe",
    ):
        (build / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(shutil.which("true"), build / rel)
    monkeypatch.setenv("SAM3D_ROOT", str(tmp_path))
    monkeypatch.setattr(conan_lock, "held", taken)
    rc = main(argv)
    out = capsys.readouterr()
    if argv[0] == "ctest":
        assert rc == 0, out.out + out.err
        log = (tmp_path / "build" / "logs" / "ctest-normal-release.log").read_text()
        assert "100% tests passed, 0 tests failed out of 1" in log
        assert "1/1 variants passed" in out.out
        return
    assert rc != 0 and "python -m sam3d build release" in out.out + out.err
    assert f"release is not built ({build / 'compile_commands.json'} is missing)" in out.err


def test_bench_no_build_of_an_unbuilt_variant_refuses_at_once(monkeypatch, tmp_path, capsys):
    """Like ctest and fuzz: exit 2, one line naming the variant, what is missing and the build
    command; no run folder is made."""
    import shutil

    from sam3d.cli.main import main
    from sam3d.core import paths

    profiles = Path("native") / "bench" / "profiles"
    shutil.copytree(paths.root() / profiles, tmp_path / profiles)
    monkeypatch.setenv("SAM3D_ROOT", str(tmp_path))
    assert main(["bench", "--no-build", "--name", "unbuilt", "release"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("sam3d bench: release is not built (") and "python -m sam3d build release" in line
    assert not (tmp_path / "generated" / "diagnostics" / "unbuilt").exists()


def test_checked_replays_are_listed_per_configuration(tmp_path):
    """run.pyz runs a checked replay per layout, order and compute or transfer-only, in the duplex
    mode it was given (device/run.py run_checked): the device-tests table names each apart, and a
    finding in one names its configuration among the reasons the evidence is not accepted."""
    replays = [
        {"backend": "cuda", "exit_code": 0, "checker": "memcheck", "layout": "scattered", "sanitizer_errors": 0},
        {
            "backend": "cuda",
            "exit_code": 0,
            "checker": "memcheck",
            "layout": "areas",
            "graph_order": "profile",
            "transfer_only": False,
            "sanitizer_errors": 0,
        },
        {
            "backend": "cuda",
            "exit_code": 0,
            "checker": "memcheck",
            "layout": "areas",
            "graph_order": "levels",
            "transfer_only": True,
            "sanitizer_errors": 2,
        },
        {
            "backend": "cuda",
            "exit_code": 0,
            "checker": "racecheck",
            "layout": "areas",
            "graph_order": "levels",
            "transfer_only": True,
            "duplex": "on",
            "sanitizer_errors": 0,
        },
    ]
    raw = _summary(
        tmp_path,
        variants__release__checked_replays=replays,
        variants__release__bench=[],
        manifest__variants__release__build={
            "compile_flags": ["-O2"],
            "build_type": "Release",
            "ggml_version": "0.20.2",
        },
    )
    r = _run("device-import", str(raw), "--name", "checked", root=tmp_path / "root")
    assert "Traceback" not in r.stderr
    folder = tmp_path / "root" / "generated" / "diagnostics" / "checked"
    tests_md = (folder / "device-tests.md").read_text()
    assert "| cuda replay, 1 image, scattered layout (memcheck) " in tests_md
    assert "| cuda replay, 1 image, areas layout, profile order (memcheck) " in tests_md
    assert "| cuda replay, 1 image, areas layout, levels order, transfer-only (memcheck) " in tests_md
    assert "| cuda replay, 1 image, areas layout, levels order, transfer-only, duplex on (racecheck) " in tests_md
    assert (
        (folder / "NOT-ACCEPTED").read_text().strip()
        == "release: the checked replay, areas layout, levels order, transfer-only (memcheck): exit 0, "
        "2 compute-sanitizer error(s)"
    )


def test_the_folders_of_a_split_matrix_import_into_one_evidence_folder(tmp_path):
    """A checker matrix split over run.pyz commands (per checker here) is imported in one call:
    one device-tests table with the runs of every folder, the findings of any one keeping the
    evidence from being accepted."""
    build = {"compile_flags": ["-O2"], "build_type": "Release", "ggml_version": "0.20.2"}
    raws = []
    for tool, errors in (("memcheck", 0), ("initcheck", 3)):
        (tmp_path / tool).mkdir()
        replay = {
            "backend": "cuda",
            "exit_code": 0,
            "checker": tool,
            "layout": "areas",
            "graph_order": "levels",
            "transfer_only": False,
            "sanitizer_errors": errors,
        }
        raws.append(
            str(
                _summary(
                    tmp_path / tool,
                    variants__release__checked_replays=[replay],
                    variants__release__bench=[],
                    manifest__variants__release__build=build,
                )
            )
        )
    r = _run("device-import", *raws, "--name", "split", root=tmp_path / "root")
    assert "Traceback" not in r.stderr
    folder = tmp_path / "root" / "generated" / "diagnostics" / "split"
    tests_md = (folder / "device-tests.md").read_text()
    assert "areas layout, levels order (memcheck)" in tests_md and "areas layout, levels order (initcheck)" in tests_md
    assert (
        (folder / "NOT-ACCEPTED").read_text().strip()
        == "release: the checked replay, areas layout, levels order (initcheck): exit 0, 3 compute-sanitizer error(s)"
    )


def test_every_command_says_what_it_does_in_its_own_help(capsys):
    from sam3d.cli.main import parser

    (commands,) = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
    for name, sub in commands.choices.items():
        with pytest.raises(SystemExit):
            sub.parse_args(["--help"])
        text = capsys.readouterr().out
        assert sub.description and " ".join(sub.description.split()[:4]) in " ".join(text.split()), name
        for action in sub._actions:
            if action.option_strings != ["-h", "--help"]:
                assert action.help, f"{name} {action.dest}: no help text"


def test_bundle_no_build_of_a_variant_not_built_refuses_before_touching_the_bundle():
    unbuilt = []
    for v in variants.gpu_variants():
        try:
            bench_runner.require_built([v])
        except NotBuilt:
            unbuilt.append(v.name)
    if not unbuilt:
        pytest.skip("every GPU variant is built here")
    bundle_dir = Path(__file__).resolve().parents[1] / "build" / "bundle"
    before = sorted((p.name, p.stat().st_mtime_ns) for p in bundle_dir.iterdir()) if bundle_dir.is_dir() else None
    r = _run("bundle", "--no-build", unbuilt[0])
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{unbuilt[0]} is not built" in r.stderr and "python -m sam3d build " in r.stderr
    after = sorted((p.name, p.stat().st_mtime_ns) for p in bundle_dir.iterdir()) if bundle_dir.is_dir() else None
    assert after == before


def test_variants_json_says_which_variants_this_checkout_has_built(monkeypatch, tmp_path, capsys):
    """built_here: a finished build folder (CTest suite, core library, compile_commands.json) of
    this checkout; the registry's built stays true for every variant that takes roles."""
    from sam3d.cli.main import main
    from sam3d.core import paths, variants

    monkeypatch.setenv("SAM3D_ROOT", str(tmp_path))
    assert main(["variants", "--json", "release", "cpu-tsan"]) == 0
    assert [(r["name"], r["built"], r["built_here"]) for r in json.loads(capsys.readouterr().out)] == [
        ("cpu-tsan", True, False),
        ("release", True, False),
    ]
    v = variants.get("release")
    d = paths.build_dir(v.name, v.build_type)
    d.mkdir(parents=True)
    for f in ("CTestTestfile.cmake", "libsam3d_core.a"):
        (d / f).write_text("")
    assert main(["variants", "--json", "release"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["built_here"] is False  # no compile_commands.json: unfinished
    (d / "compile_commands.json").write_text("[]")
    assert main(["variants", "--json", "release"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["built_here"] is True


def test_clean_removes_the_build_folders_and_keeps_the_evidence_and_the_caches(monkeypatch, tmp_path, capsys):
    from sam3d.cli.main import main

    monkeypatch.setenv("SAM3D_ROOT", str(tmp_path / "checkout"))
    monkeypatch.setenv("SAM3D_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "checkout"
    for f in (
        "build/release/Release/libsam3d_core.a",
        "build/cpu-tsan/RelWithDebInfo/x",
        "build/logs/a.log",
        "mutants/sam3d/x.py",
        "generated/diagnostics/run/table.md",
        "../cache/ccache/x",
    ):
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_text("x" * 10)
    assert main(["clean", "release"]) == 0
    assert not (root / "build/release").exists() and (root / "build/cpu-tsan/RelWithDebInfo/x").is_file()
    assert main(["clean"]) == 0
    out = capsys.readouterr().out
    assert not (root / "build").exists() and not (root / "mutants").exists()
    assert (root / "generated/diagnostics/run/table.md").is_file() and (tmp_path / "cache/ccache/x").is_file()
    assert "--caches removes them" in out
    assert main(["clean", "--caches"]) == 0
    assert not (tmp_path / "cache").exists() and (root / "generated/diagnostics/run/table.md").is_file()
