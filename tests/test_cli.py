"""Bad command-line input fails at once, before any build, naming what is wrong."""

import subprocess
import sys

import pytest


def _run(*args):
    return subprocess.run([sys.executable, "-m", "sam3d", *args], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize("args, expect", [
    (("bundle", "cpu-asan"), "cpu-asan has no Vulkan backend; GPU variants: vulkan-ubsan, release"),
    (("ctest", "-L", "bogus", "release"), "unknown CTest label 'bogus'; labels: normal, device"),
    (("ctest", "--sanitizers-only", "release"), "none of release has a sanitizer; sanitizer variants: cpu-asan, vulkan-ubsan"),
    (("report", "generated", "--name", "../escape"), "--name '../escape': use letters, digits"),
    (("bench", "--images", "0", "release"), "must be >= 1"),
    (("bench", "--modes", "off,zerocopy", "release"), "off and staged are required"),
    (("bench", "--modes", "off,staged,", "release"), "unknown mode ''"),
    (("bench", "--modes", "off,staged,OFF", "release"), "unknown mode 'OFF' (use staged, off, zerocopy, queued)"),
])
def test_bad_input_fails_before_any_work(args, expect):
    r = _run(*args)
    assert r.returncode != 0
    assert expect in r.stdout + r.stderr
    assert "building GGML" not in r.stdout
