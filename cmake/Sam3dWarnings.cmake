# sam3d_warnings(<target>): the warning set every sam3d target compiles with.
function(sam3d_warnings target)
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wshadow -Wconversion -Wno-sign-conversion)
endfunction()
