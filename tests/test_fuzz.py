"""The fuzz target's seeds and how `python -m sam3d fuzz` runs it (sam3d/running/fuzz.py)."""

import filecmp
import subprocess
import sys
from pathlib import Path

from sam3d.core import paths, variants
from sam3d.running import fuzz

ROOT = Path(__file__).resolve().parent.parent


def test_seeds_are_what_make_corpus_writes(tmp_path):
    subprocess.run(
        [sys.executable, str(ROOT / "native" / "fuzz" / "make_corpus.py"), str(tmp_path)],
        check=True,
        capture_output=True,
    )
    for folder in ("corpus", "findings"):
        ours, theirs = ROOT / "native" / "fuzz" / folder, tmp_path / folder
        names = sorted(p.name for p in theirs.iterdir())
        assert sorted(p.name for p in ours.iterdir()) == names, f"run native/fuzz/make_corpus.py ({folder})"
        _, mismatch, errors = filecmp.cmpfiles(ours, theirs, names, shallow=False)
        assert (mismatch, errors) == ([], []), f"run native/fuzz/make_corpus.py ({folder})"


def test_one_variant_builds_the_fuzz_target():
    v = fuzz.variant()
    assert v.fuzz and v.compiler == "clang" and v.asan
    assert [x.name for x in variants.VARIANTS if x.fuzz] == [v.name]


def test_command_reads_the_seeds_and_writes_only_the_work_folder(tmp_path):
    cmd = fuzz.command(tmp_path / "exe", tmp_path / "work", max_total_time=600, runs=None)
    assert cmd[:4] == [
        str(tmp_path / "exe"),
        str(tmp_path / "work" / "corpus"),
        str(paths.root() / "native" / "fuzz" / "corpus"),
        str(paths.root() / "native" / "fuzz" / "findings"),
    ]
    assert "-max_total_time=600" in cmd and not any(a.startswith("-runs=") for a in cmd)
    assert f"-artifact_prefix={tmp_path / 'work' / 'artifacts'}/" in cmd
