#!/bin/sh
# CTest's TEST_LAUNCHER for every test executable (native/CMakeLists.txt): runs it as it is, or,
# when SAM3D_TEST_LOADER is set, under that dynamic loader and its arguments (words split on
# spaces): sam3d/tools/checkers.py sets it where the Vulkan validation layer needs a newer glibc
# than the host's (docs/gpu-checks.md).
# shellcheck disable=SC2086
exec ${SAM3D_TEST_LOADER:-} "$@"
