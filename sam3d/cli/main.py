"""`python -m sam3d <command>`: what the nox sessions and CI call.

Each command prints progress ("[i/n] variant: step"), writes its logs under build/logs/,
and ends with a one-line summary; the exit status is non-zero when any step failed. Every
error a command reports is a Sam3dError, printed by main() as one line (exit status 2).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

from .. import __version__
from ..core import paths, variants
from ..core.errors import Sam3dError, Terminated
from ..core.files import staged_folder
from ..core.host import log_tail
from ..results import checks, compare, evidence, record, table
from ..results.rows import config_words
from ..running import bench as bench_runner
from ..running import bundle, fuzz, generated_mutants, mutants, pymutants, validation
from ..tools import conan, ctest, publish
from ..tools.build import build_variants, indented, prepare
from . import bench as bench_cmd
from . import generate

def cmd_variants(args: argparse.Namespace) -> int:
    """The variants named, or all of them, with their roles (the CI matrix takes those with the ci role)."""
    vs = variants.select(args.variants) if args.variants else list(variants.VARIANTS)
    if args.json:
        print(json.dumps(variants.records(vs), indent=1))
    else:
        for v in vs:
            print(f"{v.name:14} {v.summary} [{', '.join(v.roles) or 'by name only'}"
                  + ("" if v.built else "; not yet built") + "]")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    vs = variants.select(args.variants)
    t0 = time.monotonic()
    failed = build_variants(vs)
    ok = len(vs) - len(failed)
    print(f"sam3d build: {ok}/{len(vs)} variants built in {time.monotonic() - t0:.1f} s"
          + (f"; failed: {', '.join(n for n, _ in failed)}" if failed else ""))
    return 1 if failed else 0


def cmd_ctest(args: argparse.Namespace) -> int:
    """Builds the variants (unless --no-build: then no Conan call, no lock), then runs
    `ctest -L <label>` in each; with --vulkan-validation in the Vulkan ones, under the Khronos
    validation layer, its canary test required to pass (sam3d/running/validation.py)."""
    vs = variants.select(args.variants)
    if args.sanitizers_only:
        vs = [v for v in vs if v.sanitizer]
        if not vs:
            raise Sam3dError(f"none of {', '.join(args.variants)} has a sanitizer; sanitizer variants: "
                             + ", ".join(v.name for v in variants.sanitizer_variants()))
    if args.vulkan_validation:
        vs = [v for v in vs if v.vulkan]
        if not vs:
            raise Sam3dError("--vulkan-validation: none of the variants has a Vulkan backend; Vulkan variants: "
                             + ", ".join(v.name for v in variants.VARIANTS if v.vulkan))
    ctest.check_label(vs, args.label)
    t0 = time.monotonic()
    failed = {} if args.no_build else dict(build_variants(vs))
    run = f"{args.label}-vulkan-validation" if args.vulkan_validation else args.label
    what = f"ctest -L {args.label}" + (" under the Vulkan validation layer" if args.vulkan_validation else "")
    for i, v in enumerate(vs, 1):
        if v.name in failed:
            continue
        env, extra = None, None
        if args.vulkan_validation:
            env = validation.environment(v)
            extra = validation.excluded(v, env)
        log = paths.logs_dir() / f"ctest-{run}-{v.name}.log"
        print(f"[{i}/{len(vs)}] {v.name}: {what} ... (log: {log})", flush=True)
        rc = ctest.run(v, args.label, log=log, extra=extra, env=env, report=run)
        summary = [line for line in log.read_text(errors="replace").splitlines() if "tests passed" in line]
        found = f"; {validation.count_messages(log)} validation message(s)" if args.vulkan_validation else ""
        print(f"[{i}/{len(vs)}] {v.name}: {summary[-1].strip() if summary else f'ctest exit {rc}'}{found}", flush=True)
        if rc != 0:
            print(indented(log_tail(log, 40)), flush=True)
            failed[v.name] = f"ctest exit {rc}"
        elif args.vulkan_validation and (why := validation.canary_verdict(ctest.junit_path(v, run))):
            print(f"[{i}/{len(vs)}] {v.name}: FAILED: {why}: the layer is not proven live", flush=True)
            failed[v.name] = "validation canary"
    ok = len(vs) - len(failed)
    print(f"sam3d {what}: {ok}/{len(vs)} variants passed in {time.monotonic() - t0:.1f} s"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def cmd_publish(args: argparse.Namespace) -> int:
    """Uploads the variants' GGML and core packages to the Conan remote (SAM3D_CONAN_REMOTE)."""
    vs = variants.select(args.variants)
    t0 = time.monotonic()
    publish.publish_variants(vs)
    print(f"sam3d publish: {len(vs)} variant(s) published in {time.monotonic() - t0:.1f} s")
    return 0


def cmd_package(args: argparse.Namespace) -> int:
    """`conan create .` on each variant's profile: the sam3d-core package, then test_package/."""
    vs = variants.select(args.variants or ["release"])
    prepare(vs)
    failed = []
    for i, v in enumerate(vs, 1):
        log = paths.logs_dir() / f"package-{v.name}.log"
        log.unlink(missing_ok=True)
        t0 = time.monotonic()
        print(f"[{i}/{len(vs)}] {v.name}: conan create . (with test_package) ... (log: {log})", flush=True)
        try:
            conan.create(v, log=log)
        except conan.ConanError as e:
            print(f"[{i}/{len(vs)}] {v.name}: FAILED: {e}", flush=True)
            print(indented(log_tail(log, 30)), flush=True)
            failed.append(v.name)
            continue
        said = [ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith("test_package: ")]
        print(f"[{i}/{len(vs)}] {v.name}: created and tested in {time.monotonic() - t0:.1f} s"
              + (f" ({said[-1]})" if said else ""), flush=True)
    print(f"sam3d package: {len(vs) - len(failed)}/{len(vs)} packages created"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def cmd_report(args: argparse.Namespace) -> int:
    """Renders result files/folders into the one table (stdout) and an evidence folder."""
    out = Path(args.out) if args.out else paths.diagnostics_dir()
    folder = paths.new_folder(args.name or time.strftime("report-%Y%m%d-%H%M%S"), "--name", out, args.force)
    files = record.files_of(args.paths)
    rs = [record.read(f) for f in files]  # before anything is written: a bad input replaces nothing
    inherited = [f"an input's evidence folder is not accepted: {m}" for m in evidence.markers(files)]
    with staged_folder(folder, args.force) as staged:
        evidence.write_evidence(rs, staged, accepted=not inherited, reason="; ".join(inherited) or None,
                                title=folder.name)
    if args.format == "json":  # stdout is the document alone; the summary goes to stderr
        print(json.dumps(table.document(rs).model_dump(mode="json", by_alias=True), indent=1))
    else:
        print(table.render_terminal(rs, full=folder / "table.md"), end="")
    problems = inherited + checks.problems(rs)
    print(f"sam3d report: {len(rs)} result(s); evidence in {folder}"
          + (f" (NOT ACCEPTED: {len(problems)} problem(s), see {folder / evidence.NOT_ACCEPTED_FILE})"
             if problems else ""), file=sys.stderr if args.format == "json" else sys.stdout)
    return 1 if problems else 0


def cmd_compare(args: argparse.Namespace) -> int:
    """Prints run B against run A; exit 1 when a row changed the way --fail-on names."""
    if args.accept and not args.fail_on:
        raise Sam3dError("--accept says what a gate lets pass: it needs --fail-on")
    c = compare.compare(args.a, args.b, min_effect=args.min_effect, alpha=args.alpha, force=args.force)
    print(c.json() if args.format == "json" else c.markdown(), end="")
    if not args.fail_on:
        return 0
    rows, unmet = c.changed(args.fail_on), c.unmet(args.accept)
    if rows:
        print(f"sam3d compare: {len(rows)} row(s) {args.fail_on if args.fail_on != 'any' else 'changed'}: "
              + "; ".join(" ".join([x.variant, x.backend, *config_words(x.configuration), x.batching])
                          + f" B/A {x.ratio:.3f} (p {x.p:.2g})" for x in rows),
              file=sys.stderr)
    if unmet:
        print(f"sam3d compare: the gate cannot pass: {'; '.join(unmet)} (--accept "
              f"{','.join(compare.UNMET)} names what to let pass)", file=sys.stderr)
    return 1 if rows or unmet else 0


def cmd_bench(args: argparse.Namespace) -> int:
    """Builds the variants, runs the benchmark driver on every backend each has, writes the results
    and the evidence folder generated/diagnostics/<run-name>/ (see sam3d/cli/bench.py). With no
    variant named: the default set's variants that can run here (running/bench.py left_out_here)."""
    vs = variants.select(args.variants)
    if not args.variants:
        vs, left = bench_runner.left_out_here(vs)
        if left:
            print(bench_runner.left_out_line(left), flush=True)
    if args.modes is not None:
        bench_cmd.check_modes(vs, args.modes)
    driver_args = (("--modes", args.modes) if args.modes else ()) + (("--transfer-only",) if args.transfer_only else ())
    return bench_cmd.bench(vs, name=args.name, images=args.images, warmups=args.warmups, build=not args.no_build,
                           driver_args=driver_args, force=args.force)


def cmd_bundle(args: argparse.Namespace) -> int:
    """Builds the GPU variants (unless --no-build), then packs them into build/bundle/sam3d-device.tar.gz
    (or one bundle per variant, sam3d-device-<variant>.tar.gz, when one would be too large to
    carry). Packing reads each build's GGML record (sam3d/tools/ggml_package.py): no Conan call."""
    vs = variants.select(args.variants) if args.variants else bundle.default_variants()
    no_gpu = [v.name for v in vs if not v.gpu]
    if no_gpu:
        raise Sam3dError(f"{', '.join(no_gpu)} has no GPU backend; GPU variants: "
                         + ", ".join(v.name for v in variants.gpu_variants()))
    if args.no_build:  # before anything is fetched or the previous bundle is replaced
        bench_runner.require_built(vs)
    failed = [] if args.no_build else build_variants(vs)
    if failed:
        print(f"sam3d bundle: build failed: {', '.join(n for n, _ in failed)}", file=sys.stderr)
        return 1
    for tarball in bundle.make(vs=vs, limit=args.limit_mib * 2**20 if args.limit_mib else None):
        top = tarball.name.removesuffix(".tar.gz")
        print(f"sam3d bundle: {tarball} ({tarball.stat().st_size / 2**20:.1f} MiB); on the GPU machine: "
              f"tar xzf {tarball.name} && python3 {top}/run.py --out results-{top}", flush=True)
    return 0


def cmd_fuzz(args: argparse.Namespace) -> int:
    """Builds the fuzz variant, then runs the libFuzzer target over native/fuzz's seeds."""
    v = fuzz.variant()
    if not args.no_build and build_variants([v]):
        print(f"sam3d fuzz: building {v.name} failed", file=sys.stderr)
        return 1
    rc = fuzz.run(args.max_total_time, args.runs)
    found = sorted((fuzz.work_dir() / "artifacts").iterdir())
    print(f"sam3d fuzz: exit {rc}" + (f"; failing input: {', '.join(map(str, found))}" if found else ""))
    return 1 if rc else 0


def cmd_device_import(args: argparse.Namespace) -> int:
    """Renders the raw files of the bundle's run.py into result files and the one table."""
    rd, _, accepted = bench_cmd.device_import(args.raw, name=args.name, force=args.force)
    print(f"sam3d device-import: evidence in {rd}{'' if accepted else ' (NOT ACCEPTED)'}")
    return 0 if accepted else 1


def cmd_mutants(args: argparse.Namespace) -> int:
    """Builds the variants the mutants name (unless --no-build), then applies, builds and tests each mutant of the list.
    With --generated: the generated campaign over native/src/ (_generated_mutants); with --python: mutmut's
    campaign over sam3d/results/ (_python_mutants)."""
    if args.generated and args.python:
        raise Sam3dError("--generated and --python are two campaigns (native/src/, sam3d/results/): give one")
    if args.generated:
        return _generated_mutants(args)
    if args.python:
        return _python_mutants(args)
    if args.file or args.shard or args.dry_run or args.fresh:
        raise Sam3dError("--file, --shard, --dry-run and --fresh choose generated mutants: add --generated")
    if args.last:
        raise Sam3dError("--last is an option of --python")
    ms = mutants.load(Path(args.list) if args.list else None)
    if args.mutants:
        unknown = sorted(set(args.mutants) - {m.name for m in ms})
        if unknown:
            raise Sam3dError(f"unknown mutant {', '.join(unknown)}; mutants: {', '.join(m.name for m in ms)}")
        ms = [m for m in ms if m.name in args.mutants]
    if args.variant:
        ms = [m for m in ms if m.variant in args.variant]
        if not ms:
            raise Sam3dError(f"no mutant of the list runs in {', '.join(args.variant)}")
    vs = variants.select(sorted({m.variant for m in ms}))
    failed = [] if args.no_build else build_variants(vs)
    if failed:
        print(f"sam3d mutants: build failed: {', '.join(n for n, _ in failed)}", file=sys.stderr)
        return 1
    t0 = time.monotonic()
    outcomes = mutants.run(ms, progress=lambda line: print(line, flush=True))
    print(mutants.table(outcomes))
    bad = [o for o in outcomes if not o.ok]
    print(f"sam3d mutants: {len(outcomes) - len(bad)}/{len(outcomes)} killed as listed in "
          f"{time.monotonic() - t0:.0f} s" + (f"; not: {', '.join(o.mutant.name for o in bad)}" if bad else ""))
    return 1 if bad else 0


def _generated_mutants(args: argparse.Namespace) -> int:
    """The generated campaign (running/generated_mutants.py): every mutant, or those of --file and
    of the --shard piece, in each variant in turn while it survives; ends with the report."""
    if args.list:
        raise Sam3dError("--list names a curated list; the generated campaign reads native/src/ (leave out --list)")
    everything = generated_mutants.generate()
    equivalents = generated_mutants.load_equivalents(everything)
    ms = generated_mutants.generate(args.file) if args.file else everything
    if args.mutants:
        unknown = sorted(set(args.mutants) - {g.name for g in ms})
        if unknown:
            raise Sam3dError(f"unknown generated mutant {', '.join(unknown)}: list them with "
                             "`python -m sam3d mutants --generated --dry-run`")
        ms = [g for g in ms if g.name in args.mutants]
    if args.shard:
        ms = generated_mutants.shard(ms, args.shard)
    if args.dry_run:
        for g in ms:
            mark = " (equivalent)" if g.name in equivalents else ""
            print(f"{g.name} {g.file}:{g.line} {g.kind}{mark}: {g.change}")
        print(f"sam3d mutants: {len(ms)} generated mutants ({sum(g.name in equivalents for g in ms)} equivalent)")
        return 0
    names = list(args.variant or generated_mutants.VARIANTS)
    for n in names:
        variants.get(n)
    if not args.no_build:
        failed = build_variants(variants.select([n for n in names if args.variant or n in generated_mutants.REQUIRED]))
        if failed:
            print(f"sam3d mutants: build failed: {', '.join(n for n, _ in failed)}", file=sys.stderr)
            return 1
    progress = lambda line: print(line, flush=True)  # noqa: E731
    names = generated_mutants.available(names, progress)
    t0 = time.monotonic()
    results = generated_mutants.run(ms, equivalents, names, fresh=args.fresh, progress=progress)
    text = generated_mutants.report(results, names, time.monotonic() - t0)
    out = paths.root() / "build" / "mutants" / "generated-report.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    print(text)
    survived = sum(r.verdict == "survived" for r in results)
    print(f"sam3d mutants: {len(results)} generated, {survived} survived (report: {out})")
    return 1 if survived else 0


def _python_mutants(args: argparse.Namespace) -> int:
    """mutmut over sam3d/results/ (sam3d/running/pymutants.py): the score, every survivor not
    listed as equivalent, and exit 1 below the target or on any unexplained survivor."""
    wrong = [o for o, v in (("--variant", args.variant), ("--list", args.list), ("--no-build", args.no_build)) if v]
    if wrong:
        raise Sam3dError(f"{', '.join(wrong)}: options of the core's mutants, not of --python")
    if args.last and args.mutants:
        raise Sam3dError("--last scores the last run: it takes no mutant names")
    equivalents = pymutants.load_equivalents()
    log = paths.logs_dir() / pymutants.LOG
    t0 = time.monotonic()
    if not args.last:
        print(f"mutants: mutmut over sam3d/results/ with {args.jobs} workers (log: {log})", flush=True)
        pymutants.run(args.mutants, args.jobs, log, progress=lambda line: print(line, flush=True))
    s = pymutants.score(equivalents)
    for name in s.unexplained:
        print(f"survived: {name}: {s.changes[name]}  (.venv/bin/mutmut show {name})")
    if s.unfinished:
        print(f"not checked: {len(s.unfinished)} mutants (e.g. {s.unfinished[0]}): the run stopped before them; "
              "run `sam3d mutants --python` again (it goes on where it stopped)")
    for e in s.stale:
        print(f"listed as equivalent but no survivor of {e.function} changes {e.change!r} (killed now, or the "
              f"code changed): update or remove it in {pymutants.EQUIVALENTS}")
    print(s.table())
    print(f"sam3d mutants --python: {s.summary()} in {time.monotonic() - t0:.0f} s"
          + (f"; {len(s.unexplained)} survivors neither killed nor listed in {pymutants.EQUIVALENTS}"
             if s.unexplained else ""))
    return 0 if s.ok else 1


def cmd_generate(args: argparse.Namespace) -> int:
    """Writes (or with --check, checks) the files and page parts derived from the code."""
    return generate.run(args.check, parser())


def _at_least(minimum: int):
    """An argparse type: an integer >= minimum."""
    def parse(text: str) -> int:
        n = int(text)
        if n < minimum:
            raise argparse.ArgumentTypeError(f"{text}: must be >= {minimum}")
        return n
    return parse


def _kinds(text: str) -> tuple[str, ...]:
    """An argparse type: a comma-separated list of compare.UNMET's kinds."""
    kinds = tuple(k for k in text.split(",") if k)
    wrong = [k for k in kinds if k not in compare.UNMET]
    if wrong or not kinds:
        raise argparse.ArgumentTypeError(f"{text}: expected one or more of {', '.join(compare.UNMET)}, comma-separated")
    return kinds


def _fraction(zero: bool, example: str):
    """An argparse type: a number below 1 and at least 0 (``zero``) or above 0 (a significance
    level of 0 would make every row "no change")."""
    def parse(text: str) -> float:
        try:
            x = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text}: not a number") from None
        if not (0 <= x < 1 if zero else 0 < x < 1):
            raise argparse.ArgumentTypeError(f"{text}: must be {'>=' if zero else '>'} 0 and < 1 ({example})")
        return x
    return parse


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sam3d", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="version", version=f"sam3d {__version__}")
    commands = p.add_subparsers(dest="command", required=True)

    def command(name: str, text: str) -> argparse.ArgumentParser:
        """A command whose one-line help is also the description its own --help shows."""
        return commands.add_parser(name, help=text, description=text)

    force = {"action": "store_true", "help": "replace an existing evidence folder of that name, once the new one is complete"}

    s = command("variants", "list the variants (--json: as records; sam3d.ci builds the CI matrix "
                                        "from the same records)")
    s.add_argument("variants", nargs="*", metavar="VARIANT", help="variant names (default: every variant; `sam3d variants` lists them)")
    s.add_argument("--json", action="store_true", help="print the variants as JSON records (the registry's "
                   "fields and roles: what sam3d.ci builds the CI matrix from)")
    s.set_defaults(func=cmd_variants)

    s = command("build", "build GGML and the core in each variant named (the default set when none is)")
    s.add_argument("variants", nargs="*", metavar="VARIANT", help="variant names (default: the default set)")
    s.set_defaults(func=cmd_build)

    s = command("publish", "upload each variant's GGML and core packages to the Conan remote "
                                       "(SAM3D_CONAN_REMOTE; the default set when no variant is named)")
    s.add_argument("variants", nargs="*", metavar="VARIANT", help="variant names (default: the default set)")
    s.set_defaults(func=cmd_publish)

    s = command("ctest", "build, then run a CTest label in each variant named (the default set when "
                                     "none is)")
    s.add_argument("variants", nargs="*", metavar="VARIANT", help="variant names (default: the default set)")
    s.add_argument("-L", "--label", default="normal", help="a CTest label of every variant named (default normal; "
                   "`ctest --print-labels` in a build folder lists them)")
    s.add_argument("--sanitizers-only", action="store_true", help="only the variants with a sanitizer")
    s.add_argument("--no-build", action="store_true", help="test the build folders as they are: no Conan call, no lock")
    s.add_argument("--vulkan-validation", action="store_true",
                   help="only the Vulkan variants, each under the Khronos validation layer with synchronization "
                        "validation; a message fails its test, and so does the suite unless its canary is "
                        "reported (docs/gpu-checks.md)")
    s.set_defaults(func=cmd_ctest)

    s = command("package", "`conan create .` on each variant's profile (default release): the sam3d-core "
                                       "package and its test_package")
    s.add_argument("variants", nargs="*", metavar="VARIANT", help="variant names (default: release)")
    s.set_defaults(func=cmd_package)

    s = command("report", "render result files/folders into one table and an evidence folder")
    s.add_argument("paths", nargs="+", metavar="PATH", help="result files, or folders searched recursively")
    s.add_argument("--name", help="the evidence folder's name (default report-<date>-<time>)")
    s.add_argument("--out", metavar="DIR", help="where the evidence folder goes (default generated/diagnostics)")
    s.add_argument("--force", **force)
    s.add_argument("--format", choices=("markdown", "json"), default="markdown",
                   help="stdout: the table (markdown) or its rows as JSON, numbers as numbers "
                   "(docs/schemas/report.schema.json)")
    s.set_defaults(func=cmd_report)

    s = command("compare", "compare two runs (B against A): medians and a Mann-Whitney U test per "
                                       "row; refuses different profiles or machines unless --force")
    s.add_argument("a", metavar="A", help="folder (or file) of the baseline run")
    s.add_argument("b", metavar="B", help="folder (or file) of the run compared with it")
    s.add_argument("--fail-on", choices=sorted(compare.FAIL_ON), help="exit 1 when a row is slower, faster, "
                   "or either (any); and, unless --accept names it, when a row is on one side only, a result "
                   "failed or a side is not accepted evidence")
    s.add_argument("--accept", type=_kinds, default=(), metavar="KIND[,KIND...]",
                   help=f"with --fail-on, what lets the gate pass anyway: {', '.join(compare.UNMET)}")
    s.add_argument("--min-effect", type=_fraction(True, "0.05 = 5%"), default=compare.MIN_EFFECT,
                   help=f"smallest change of B/A that counts, as a share (default {compare.MIN_EFFECT:g} = 5%%)")
    s.add_argument("--alpha", type=_fraction(False, "e.g. 0.05"), default=compare.ALPHA,
                   help=f"significance level of the test (default {compare.ALPHA:g})")
    s.add_argument("--force", action="store_true", help="compare runs of different profiles or machines anyway")
    s.add_argument("--format", choices=("markdown", "json"), default="markdown",
                   help="stdout: the comparison (markdown) or its rows as JSON, numbers as numbers "
                   "(docs/schemas/comparison.schema.json)")
    s.set_defaults(func=cmd_compare)

    s = command("bench", "build, then run the transfer benchmark in each variant and backend; "
                                     "writes generated/diagnostics/<run-name>/; with no variant named, the default "
                                     "set's variants that run here (CUDA ones only with an NVIDIA GPU)")
    s.add_argument("variants", nargs="*", metavar="VARIANT", help="variant names (default: the default set's variants that run here)")
    s.add_argument("--name", help="run name, the evidence folder's name (default: bench-<UTC time>)")
    s.add_argument("--images", type=_at_least(1), default=20, help="timed images per batching mode (default 20)")
    s.add_argument("--warmups", type=_at_least(0), default=5, help="warm-up images per batching mode (default 5)")
    s.add_argument("--no-build", action="store_true", help="measure the drivers already built")
    s.add_argument("--modes", help="driver modes (`sam3d_bench --list-modes` lists them; off and staged "
                                   "required), e.g. off,staged,zerocopy,queued (default off,staged)")
    s.add_argument("--transfer-only", action="store_true", help="replay the transfers without compute")
    s.add_argument("--force", **force)
    s.set_defaults(func=cmd_bench)

    s = command("bundle", "pack the GPU variants into a relocatable bundle for a machine "
                                      "with only a GPU driver and python3")
    s.add_argument("variants", nargs="*", metavar="VARIANT",
                   help="GPU variants (default: those with the bundle role)")
    s.add_argument("--limit-mib", type=_at_least(0), default=bundle.BUNDLE_LIMIT // 2**20, metavar="MIB",
                   help="above this many MiB compressed, one bundle per variant (default %(default)s, what one "
                        "transfer to the GPU machine carries; 0: always one bundle)")
    s.add_argument("--no-build", action="store_true", help="pack the variants already built: no Conan call, no lock")
    s.set_defaults(func=cmd_bundle)

    s = command("fuzz", "build the fuzz variant, then run the libFuzzer target of the C API")
    s.add_argument("--max-total-time", type=_at_least(1), metavar="S", help="stop after S seconds")
    s.add_argument("--runs", type=_at_least(1), metavar="N", help="stop after N inputs")
    s.add_argument("--no-build", action="store_true", help="run the target already built")
    s.set_defaults(func=cmd_fuzz)

    s = command("device-import", "wrap the bundle runner's raw files into result files and render them")
    s.add_argument("raw", type=Path, metavar="DIR", help="the folder run.py wrote (--out)")
    s.add_argument("--name", help="the evidence folder's name (default device-<GPU hostname>)")
    s.add_argument("--force", **force)
    s.set_defaults(func=cmd_device_import)

    s = command("mutants", "apply each mutant of native/mutants.toml to a scratch copy of the core, "
                                       "build it and run the normal suite; every mutant must be killed")
    s.add_argument("mutants", nargs="*", metavar="MUTANT", help="mutant names (default: all; with --python, "
                                                                "mutmut's names, globs allowed)")
    s.add_argument("--python", action="store_true",
                   help="instead: mutmut over sam3d/results/; fails below 90%% or on a survivor not listed in "
                        f"{pymutants.EQUIVALENTS}")
    s.add_argument("--jobs", type=_at_least(1), default=2, metavar="N",
                   help="with --python: mutmut's workers (default %(default)s)")
    s.add_argument("--last", action="store_true",
                   help="with --python: score the verdicts mutmut keeps in mutants/ without running it")
    s.add_argument("--variant", action="append", metavar="VARIANT", help="only the mutants of this variant")
    s.add_argument("--list", metavar="FILE", help="the mutant list (default native/mutants.toml)")
    s.add_argument("--no-build", action="store_true",
                   help="use the variants' build folders as they are (no Conan build first)")
    s.add_argument("--generated", action="store_true",
                   help="run the generated campaign instead: single-site mutants derived from native/src/ "
                        "(docs/contract.md), each in release, cpu-asan and vulkan-ubsan in turn while it survives "
                        "(the first two built unless --no-build; vulkan-ubsan only where built), cached by file "
                        "and tests; exit 1 when a mutant survives")
    s.add_argument("--file", action="append", metavar="FILE",
                   help="with --generated: only the mutants of this file (native/src/ring.cpp; repeatable)")
    s.add_argument("--shard", metavar="K/N", help="with --generated: only piece K of N (by each name's hash)")
    s.add_argument("--dry-run", action="store_true", help="with --generated: list the mutants, run nothing")
    s.add_argument("--fresh", action="store_true", help="with --generated: ignore the cached results")
    s.set_defaults(func=cmd_mutants)

    s = command("generate", "write the files and page parts derived from the code (the variant registry, "
                                        "the sessions, these commands, the result schema)")
    s.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each derived file that differs")
    s.set_defaults(func=cmd_generate)
    return p


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return args.func(args)
    except Sam3dError as e:  # the one handler: every error a command reports, as one line
        print(f"sam3d {args.command}: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a file or folder the command cannot use (it names it): one line too
        print(f"sam3d {args.command}: {e.filename or ''}{': ' if e.filename else ''}{e.strerror or e}",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"sam3d {args.command}: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print(f"sam3d {args.command}: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
