# Runs the fuzz target over seed folders (cmake -P; CTest's Fuzz.*), in one of two ways:
#   -DFUZZER=<exe> -DSEEDS=<folder;...> -DREPLAY=ON
#       every kept input of the folders once, by name, whatever the toolchain's libFuzzer would
#       pick (Fuzz.capi_kept_inputs);
#   -DFUZZER=<exe> -DWORK=<folder> -DSEEDS=<folder;...> -DRUNS=<n>
#       n inputs from the seeds, seed 1 (Fuzz.capi_2000_runs). WORK is emptied first and receives
#       the inputs libFuzzer adds (corpus/) and any crashing input (artifacts/), so the seed
#       folders in the source tree are only read and every run starts alike.
# -entropic=0: libFuzzer's entropic scheduler spent a fifth of this target's time updating its
# feature frequencies (perf) and ran it 3.5 times slower, for no more coverage.
if(REPLAY)
    set(inputs)
    foreach(dir IN LISTS SEEDS)
        file(GLOB kept "${dir}/*")
        list(APPEND inputs ${kept})
    endforeach()
    list(LENGTH inputs n)
    if(n EQUAL 0)
        message(FATAL_ERROR "no kept inputs in ${SEEDS}")
    endif()
    execute_process(COMMAND "${FUZZER}" ${inputs} RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "${FUZZER} exited with ${rc} on a kept input (the last 'Running:' line names it)")
    endif()
    message("replayed ${n} kept inputs")
    return()
endif()
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}/corpus" "${WORK}/artifacts")
execute_process(
    COMMAND "${FUZZER}" "${WORK}/corpus" ${SEEDS} -runs=${RUNS} -seed=1 -max_len=512 -timeout=30 -entropic=0
            -print_final_stats=1 -artifact_prefix=${WORK}/artifacts/
    RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
    file(GLOB crashes "${WORK}/artifacts/*")
    message(FATAL_ERROR "${FUZZER} exited with ${rc}; the failing input: ${crashes} "
                        "(reproduce: ${FUZZER} <that file>)")
endif()
