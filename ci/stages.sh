# CI stage functions, sourced by .ci/run and by the jobs of .github/workflows/variants.yml, so a
# local run of a stage leaves the same files a CI job uploads. The pattern of ggml's ci/run.sh:
# per stage NAME a run function ci_run_NAME and a summary function ci_sum_NAME (Markdown);
# `ci_stage NAME ARGS...` runs one, with its output in $CI_OUT/NAME.log, its exit status in
# $CI_OUT/NAME.exit and its seconds in $CI_OUT/NAME.seconds; `ci_summary` prints the Markdown
# summary of every stage run so far and the counts of the JUnit reports (build/reports/).
# Usage: . ci/stages.sh && ci_stage build release && ci_summary

CI_OUT=${CI_OUT:-build/ci}
CI_REPORTS=${CI_REPORTS:-build/reports}

ci_run_bootstrap() { ci/bootstrap.sh true; }
ci_sum_bootstrap() { echo "- .venv from requirements.lock (\`ci/bootstrap.sh\`)"; }

ci_run_build() { ci/bootstrap.sh nox -s build -- "$@"; }
ci_sum_build() { grep -E '^\[[0-9]+/[0-9]+\] .*: (built in|FAILED)|^sam3d build:' "$1" | sed 's/^/- /'; }

# The README's test command: lint, pytest, then the normal CTest suite in every variant that runs here.
ci_test_command() { echo "ci/bootstrap.sh nox -s lint tests sanitize validate"; }
ci_run_test() { $(ci_test_command); }
ci_sum_test() {
    grep -E '[0-9]+ (passed|failed)[ ,].* in [0-9.]+s|^sam3d ctest -L' "$1" | sed 's/^=* *//; s/ *=*$//; s/^/- /'
}

# The registry's names: the default set, and those of its variants that cannot run here (the test
# command leaves them out; .ci/run builds them and runs their normal suite, the CPU cases, by name).
default_variants() { ci/bootstrap.sh python -c 'from sam3d.core.variants import select; print(*(v.name for v in select(None)))'; }
left_out_here() {
    ci/bootstrap.sh python -c 'from sam3d.core.variants import select; from sam3d.tools.build import runs_here
print(*(v.name for v in runs_here(select(None))[1]))'
}

ci_run_ctest() { ci/bootstrap.sh python -m sam3d ctest --no-build -L normal "$@"; }
ci_sum_ctest() { grep -E '^sam3d ctest -L' "$1" | sed 's/^/- /'; }

# The README's commands as written: each indented line of README.md, its trailing "# note"
# dropped, in order. A command that only makes the environment and then runs (it starts
# `ci/bootstrap.sh true &&`: the pytest suite alone) runs in a fresh clone of this commit, where
# nothing is built; the others here, after the build. Skipped, each in a line: the test command
# (the test stage runs it) and the GPU machine's lines ("# there", and the import of their results
# after them: docs/gpu.md; the device run checks them).
readme_commands() { awk '/^```/ {f = !f} !f && /^    [^ ]/ {sub(/^    /, ""); print}' README.md; }
ci_run_readme() {
    local cmd there=0 rc=0 fresh
    while IFS= read -r cmd; do
        case $cmd in *"# there"*) there=1 ;; esac
        cmd=${cmd%%  #*}
        cmd=${cmd%"${cmd##*[! ]}"}
        if [ "$cmd" = "$(ci_test_command)" ]; then echo "readme: $cmd: the test stage's command"; continue; fi
        if [ $there = 1 ]; then echo "readme: $cmd: on the GPU machine (docs/gpu.md)"; continue; fi
        echo "readme: $cmd"
        case $cmd in
            "ci/bootstrap.sh true && "*)
                fresh=$(mktemp -d) && git clone -q . "$fresh/clone" && (cd "$fresh/clone" && bash -c "$cmd") \
                    && rm -rf "$fresh" || { echo "readme: FAILED: $cmd (in a fresh clone, $fresh/clone)"; rc=1; } ;;
            *) (bash -c "$cmd") || { echo "readme: FAILED: $cmd"; rc=1; } ;;
        esac
    done < <(readme_commands)
    return $rc
}
ci_sum_readme() { grep -E '^readme: ' "$1" | sed 's/^readme: /- /'; }

ci_run_sanitize() { ci/bootstrap.sh nox -s sanitize -- "$@"; }
ci_sum_sanitize() { grep -E '^sam3d ctest -L' "$1" | sed 's/^/- /'; }

ci_run_validate() { ci/bootstrap.sh nox -s validate -- "$@"; }
ci_sum_validate() { grep -E '^sam3d ctest -L|validation message' "$1" | sed 's/^/- /'; }

ci_run_bench() { ci/bootstrap.sh nox -s bench -- "$@"; }
ci_sum_bench() {
    local table
    table=$(sed -n 's/^sam3d bench: run \S* -> //p' "$1" | tail -1)/table.md
    grep -E '^sam3d bench: [0-9]' "$1" | sed 's/^/- /'
    if [ -f "$table" ]; then echo; cat "$table"; fi
}

# A Conan user's path (docs/sharing.md, "Conan without sam3d"): a fresh Conan home with Conan's
# detected profile (GGML with the CPU backend only, the cheapest build that shows it), the
# documented remote add of the recipe index, `conan create .` of the core with test_package/
# (GGML built there from the index's recipe), then GGML's own test_package.
ci_run_package() (
    set -euo pipefail
    ci/bootstrap.sh true
    export PATH="$PWD/.venv/bin:$PATH" CONAN_HOME
    CONAN_HOME=$(mktemp -d)
    trap 'rm -rf "$CONAN_HOME"' EXIT
    conan profile detect
    conan remote add sam3d-recipes conan --type=local-recipes-index
    conan create . -r sam3d-recipes --update=ggml --build=missing -c tools.build:skip_test=True
    ggml=$(conan list 'ggml/*' --format=json | python -c 'import json, sys; (r,) = json.load(sys.stdin)["Local Cache"]; print(r)')
    conan test conan/recipes/ggml/all/test_package "$ggml" -r sam3d-recipes
)
ci_sum_package() { grep -E '^(test_package: |ERROR: )' "$1" | sed 's/^/- /'; }

ci_stage() {
    local name=$1 t0=$SECONDS rc=0
    shift
    mkdir -p "$CI_OUT"
    grep -qx "$name" "$CI_OUT/stages" 2>/dev/null || echo "$name" >> "$CI_OUT/stages"
    echo "::: stage $name: $*"
    "ci_run_$name" "$@" 2>&1 | tee "$CI_OUT/$name.log"
    rc=${PIPESTATUS[0]}
    echo "$rc" > "$CI_OUT/$name.exit"
    echo $((SECONDS - t0)) > "$CI_OUT/$name.seconds"
    echo "::: stage $name: $((SECONDS - t0)) s, exit $rc"
    return "$rc"
}

ci_summary() {
    local name rc
    echo "## sam3d CI"
    echo
    echo "| stage | result | seconds |"
    echo "| --- | --- | ---: |"
    while read -r name; do
        rc=$(cat "$CI_OUT/$name.exit" 2>/dev/null || echo "?")
        echo "| $name | $([ "$rc" = 0 ] && echo ok || echo "FAILED (exit $rc)") | $(cat "$CI_OUT/$name.seconds" 2>/dev/null) |"
    done < "$CI_OUT/stages"
    while read -r name; do
        echo
        echo "### $name"
        echo
        "ci_sum_$name" "$CI_OUT/$name.log" || true
    done < "$CI_OUT/stages"
    if compgen -G "$CI_REPORTS/*.xml" > /dev/null; then
        echo
        echo "### JUnit reports ($CI_REPORTS)"
        echo
        ci/bootstrap.sh python -m sam3d.ci junit "$CI_REPORTS"
    fi
}
