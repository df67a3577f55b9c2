"""Build progress: the compiler that runs now, named from /proc, and which log a build keeps."""

import subprocess
import time

from sam3d.tools import build


def test_a_running_compile_is_named(tmp_path):
    src = tmp_path / "slow_unit.cpp"
    # enough template work to keep g++ busy for a moment
    src.write_text(
        "#include <regex>\n#include <map>\n#include <string>\n"
        "std::map<std::string, std::regex> m{{\"a\", std::regex(\"[a-z]+\")}};\n"
        "int main() { return std::regex_match(\"abc\", m[\"a\"]) ? 0 : 1; }\n"
    )
    proc = subprocess.Popen(["g++", "-O2", "-c", str(src), "-o", str(tmp_path / "o.o")])
    since: dict = {}
    try:
        time.sleep(0.3)
        first = build._compiling(since)
        time.sleep(0.5)
        second = build._compiling(since)
    finally:
        proc.wait(timeout=120)
    assert [s for s, _ in first] == [str(src)]
    assert second and second[0][0] == str(src) and second[0][1] >= 0.4  # seconds since first seen
    assert build._compiling(since) == [] and since == {}  # finished: forgotten


def test_only_a_build_that_compiled_counts_as_real(tmp_path):
    noop, real = tmp_path / "noop.log", tmp_path / "real.log"
    noop.write_text("$ conan build ...\nninja: no work to do.\n")
    real.write_text("$ conan build ...\n[1/3] Building CXX object src/CMakeFiles/x.dir/a.cpp.o\n")
    assert not build._did_work(noop) and build._did_work(real)
