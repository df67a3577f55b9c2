"""The commands of `python -m sam3d`, one function per command (cmd_<name>), each given the
parsed arguments of cli/main.py's parser. Imported only once a command runs, so `--help` and
`--version` load nothing of the rest (numpy, pydantic, the build tools)."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from ..core import paths, variants
from ..core.errors import Sam3dError
from ..core.files import staged_folder
from ..device.host import log_tail
from ..results import checks, compare, evidence, gate, record, table
from ..results.rows import config_words
from ..running import bench as bench_runner
from ..running import bundle, fuzz, generated_mutants, mutants, pymutants, validation
from ..tools import conan, ctest, publish
from ..tools.build import build_variants, built_here, indented, left_out_line, prepare, runs_here
from . import bench as bench_cmd
from . import generate


def cmd_variants(args: argparse.Namespace) -> int:
    """The variants named, or all of them, with their roles (the CI matrix takes those with the ci role)
    and whether this checkout has built them."""
    vs = variants.select(args.variants) if args.variants else list(variants.VARIANTS)
    if args.json:
        print(
            json.dumps(
                [r | {"built_here": built_here(v)} for r, v in zip(variants.records(vs), vs, strict=True)], indent=1
            )
        )
    else:
        for v in vs:
            print(
                f"{v.name:14} {v.summary} [{', '.join(v.roles) or 'by name only'}"
                + ("" if v.built else "; not yet built")
                + ("; built here" if built_here(v) else "")
                + "]"
            )
    return 0


def _here(command: str, names: list[str], keep=lambda v: True) -> list[variants.Variant]:
    """The variants named, or the default set's variants that run here (tools/build.py runs_here),
    with one line naming those left out; ``keep`` picks among the default set first."""
    if names:
        return variants.select(names)
    vs, left = runs_here([v for v in variants.select(None) if keep(v)])
    if left:
        print(left_out_line(command, left), flush=True)
    return vs


def cmd_build(args: argparse.Namespace) -> int:
    """Builds the variants named, or the default set's variants that run here."""
    vs = _here("build", args.variants)
    t0 = time.monotonic()
    failed = build_variants(vs)
    ok = len(vs) - len(failed)
    print(
        f"sam3d build: {ok}/{len(vs)} variants built in {time.monotonic() - t0:.1f} s"
        + (f"; failed: {', '.join(n for n, _ in failed)}" if failed else "")
    )
    return 1 if failed else 0


def cmd_ctest(args: argparse.Namespace) -> int:
    """Builds the variants (unless --no-build: then no Conan call, no lock), then runs
    `ctest -L <label>` in each; with --vulkan-validation in the Vulkan ones, under the Khronos
    validation layer, its canary test required to pass (sam3d/running/validation.py). With no
    variant named: the default set's variants that run here."""
    vs = _here(
        "ctest",
        args.variants,
        lambda v: (v.sanitizer or not args.sanitizers_only) and (v.vulkan or not args.vulkan_validation),
    )
    if args.sanitizers_only:
        vs = [v for v in vs if v.sanitizer]
        if not vs:
            raise Sam3dError(
                f"none of {', '.join(args.variants)} has a sanitizer; sanitizer variants: "
                + ", ".join(v.name for v in variants.sanitizer_variants())
            )
    if args.vulkan_validation:
        vs = [v for v in vs if v.vulkan]
        if not vs:
            raise Sam3dError(
                "--vulkan-validation: none of the variants has a Vulkan backend; Vulkan variants: "
                + ", ".join(v.name for v in variants.VARIANTS if v.vulkan)
            )
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
    print(
        f"sam3d {what}: {ok}/{len(vs)} variants passed in {time.monotonic() - t0:.1f} s"
        + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


def cmd_clean(args: argparse.Namespace) -> int:
    """Removes the variants' build folders (every one, with the rest of build/ and mutmut's
    mutants/, when none is named); the shared caches (compiler cache, Conan home, toolkits) only
    with --caches. Never generated/ (the evidence) nor .venv."""
    root = paths.root()
    if args.variants:
        targets = [root / "build" / v.name for v in variants.select(args.variants)]
    else:
        targets = [root / "build", root / "mutants"]
    if args.caches:
        targets.append(paths.cache_dir())
    removed = 0
    for t in targets:
        if t.is_symlink() or not t.exists():
            continue
        size = sum(f.stat().st_size for f in t.rglob("*") if f.is_file() and not f.is_symlink())
        shutil.rmtree(t)
        removed += size
        print(f"sam3d clean: removed {t} ({size / 2**20:.0f} MiB)", flush=True)
    print(
        f"sam3d clean: {removed / 2**20:.0f} MiB freed"
        + ("" if args.caches else f"; the shared caches in {paths.cache_dir()} stay (--caches removes them)")
    )
    return 0


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
        print(
            f"[{i}/{len(vs)}] {v.name}: created and tested in {time.monotonic() - t0:.1f} s"
            + (f" ({said[-1]})" if said else ""),
            flush=True,
        )
    print(
        f"sam3d package: {len(vs) - len(failed)}/{len(vs)} packages created"
        + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


def cmd_report(args: argparse.Namespace) -> int:
    """Renders result files/folders into the one table (stdout) and an evidence folder."""
    out = Path(args.out) if args.out else paths.diagnostics_dir()
    folder = paths.new_folder(args.name or time.strftime("report-%Y%m%d-%H%M%S"), "--name", out, args.force)
    files = record.files_of(args.paths)
    rs = [record.read(f) for f in files]  # before anything is written: a bad input replaces nothing
    inherited = [f"an input's evidence folder is not accepted: {m}" for m in evidence.markers(files)]
    with staged_folder(folder, args.force) as staged:
        evidence.write_evidence(
            rs, staged, accepted=not inherited, reason="; ".join(inherited) or None, title=folder.name
        )
    if args.format == "json":  # stdout is the document alone; the summary goes to stderr
        print(json.dumps(table.document(rs).model_dump(mode="json", by_alias=True), indent=1))
    else:
        print(table.render_terminal(rs, full=folder / "table.md"), end="")
    problems = inherited + checks.problems(rs)
    print(
        f"sam3d report: {len(rs)} result(s); evidence in {folder}"
        + (
            f" (NOT ACCEPTED: {len(problems)} problem(s), see {folder / evidence.NOT_ACCEPTED_FILE})"
            if problems
            else ""
        ),
        file=sys.stderr if args.format == "json" else sys.stdout,
    )
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
        print(
            f"sam3d compare: {len(rows)} row(s) {args.fail_on if args.fail_on != 'any' else 'changed'}: "
            + "; ".join(
                " ".join([x.variant, x.backend, *config_words(x.configuration), x.batching])
                + f" B/A {x.ratio:.3f} (p {x.p:.2g})"
                for x in rows
            ),
            file=sys.stderr,
        )
    if unmet:
        print(
            f"sam3d compare: the gate cannot pass: {'; '.join(unmet)} (--accept "
            f"{','.join(gate.UNMET)} names what to let pass)",
            file=sys.stderr,
        )
    return 1 if rows or unmet else 0


def cmd_bench(args: argparse.Namespace) -> int:
    """Builds the variants, runs the benchmark driver on every backend each has, writes the results
    and the evidence folder generated/diagnostics/<run-name>/ (see sam3d/cli/bench.py). With no
    variant named: the default set's variants that run here (tools/build.py runs_here)."""
    vs = _here("bench", args.variants)
    if args.modes is not None or args.duplex is not None:
        bench_cmd.check_choices(vs, args.modes, args.duplex)
    driver_args = (
        (("--modes", args.modes) if args.modes else ())
        + (("--transfer-only",) if args.transfer_only else ())
        + (("--duplex", args.duplex) if args.duplex else ())
    )
    return bench_cmd.bench(
        vs,
        name=args.name,
        images=args.images,
        warmups=args.warmups,
        build=not args.no_build,
        driver_args=driver_args,
        force=args.force,
    )


def cmd_bundle(args: argparse.Namespace) -> int:
    """Builds the GPU variants (unless --no-build), then packs them into build/bundle/sam3d-device.tar.gz
    (or one bundle per variant, sam3d-device-<variant>.tar.gz, when one would be too large to
    carry). Packing reads each build's GGML record (sam3d/tools/ggml_package.py): no Conan call."""
    vs = variants.select(args.variants) if args.variants else bundle.default_variants()
    no_gpu = [v.name for v in vs if not v.gpu]
    if no_gpu:
        raise Sam3dError(
            f"{', '.join(no_gpu)} has no GPU backend; GPU variants: "
            + ", ".join(v.name for v in variants.gpu_variants())
        )
    if args.no_build:  # before anything is fetched or the previous bundle is replaced
        bench_runner.require_built(vs)
    failed = [] if args.no_build else build_variants(vs)
    if failed:
        print(f"sam3d bundle: build failed: {', '.join(n for n, _ in failed)}", file=sys.stderr)
        return 1
    limit = {} if args.limit_mib is None else {"limit": args.limit_mib * 2**20 or None}  # 0: one bundle
    for tarball in bundle.make(vs=vs, **limit):
        top = tarball.name.removesuffix(".tar.gz")
        print(
            f"sam3d bundle: {tarball} ({tarball.stat().st_size / 2**20:.1f} MiB); on the GPU machine: "
            f"tar xzf {tarball.name} && python3 {top}/run.pyz --out results-{top}",
            flush=True,
        )
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
    """Renders the raw files of the bundle's run.pyz into result files and the one table."""
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
    print(
        f"sam3d mutants: {len(outcomes) - len(bad)}/{len(outcomes)} killed as listed in "
        f"{time.monotonic() - t0:.0f} s" + (f"; not: {', '.join(o.mutant.name for o in bad)}" if bad else "")
    )
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
            raise Sam3dError(
                f"unknown generated mutant {', '.join(unknown)}: list them with "
                "`python -m sam3d mutants --generated --dry-run`"
            )
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
        print(
            f"not checked: {len(s.unfinished)} mutants (e.g. {s.unfinished[0]}): the run stopped before them; "
            "run `sam3d mutants --python` again (it goes on where it stopped)"
        )
    for e in s.stale:
        print(
            f"listed as equivalent but no survivor of {e.function} changes {e.change!r} (killed now, or the "
            f"code changed): update or remove it in {pymutants.EQUIVALENTS}"
        )
    print(s.table())
    print(
        f"sam3d mutants --python: {s.summary()} in {time.monotonic() - t0:.0f} s"
        + (
            f"; {len(s.unexplained)} survivors neither killed nor listed in {pymutants.EQUIVALENTS}"
            if s.unexplained
            else ""
        )
    )
    return 0 if s.ok else 1


def cmd_generate(args: argparse.Namespace) -> int:
    """Writes (or with --check, checks) the files and page parts derived from the code."""
    from .main import parser

    return generate.run(args.check, parser())
