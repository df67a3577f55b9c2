# cmake -DCANARY=<exe> -DPATTERN=<regex> -P expect_report.cmake
# Passes only when the canary exits non-zero AND its output matches PATTERN (the sanitizer's
# report), so a canary that fails for another reason does not pass.
execute_process(COMMAND "${CANARY}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(rc EQUAL 0)
    message(FATAL_ERROR "canary ${CANARY} exited 0: the sanitizer did not stop it")
endif()
if(NOT "${out}${err}" MATCHES "${PATTERN}")
    message(FATAL_ERROR "canary ${CANARY} failed (${rc}) without a report matching '${PATTERN}'")
endif()
message("canary ${CANARY}: exit ${rc}, report matches '${PATTERN}'")
