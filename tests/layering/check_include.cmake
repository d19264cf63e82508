# Checks one edge of the module order (Note [Include roots] in
# cmake/include_roots.cmake): with a target's include directories, ALLOWED
# preprocesses and FORBIDDEN is "No such file". The allowed header proves the
# probe itself works, so that the forbidden one cannot fail for another reason.
#   cmake -DCOMPILER=c++ -DINCLUDE_DIRS="a;b" -DALLOWED=core/tensor.h
#         -DFORBIDDEN=kernels/registry.h -DSCRATCH=dir -P check_include.cmake
set(flags -E -x c++ -std=c++20)
foreach(dir IN LISTS INCLUDE_DIRS)
  list(APPEND flags "-I${dir}")
endforeach()
file(MAKE_DIRECTORY "${SCRATCH}")

function(preprocess header result_var output_var)
  string(MAKE_C_IDENTIFIER "${header}" name)
  set(probe "${SCRATCH}/${name}.cc")
  file(WRITE "${probe}" "#include \"${header}\"\n")
  execute_process(COMMAND "${COMPILER}" ${flags} "${probe}" -o /dev/null
                  RESULT_VARIABLE result ERROR_VARIABLE output)
  set(${result_var} "${result}" PARENT_SCOPE)
  set(${output_var} "${output}" PARENT_SCOPE)
endfunction()

preprocess("${ALLOWED}" result output)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "the allowed header ${ALLOWED} does not preprocess:\n${output}")
endif()
preprocess("${FORBIDDEN}" result output)
if(result EQUAL 0)
  message(FATAL_ERROR "${FORBIDDEN} is reachable: an include that points the wrong way "
                      "would compile")
endif()
if(NOT output MATCHES "${FORBIDDEN}: No such file")
  message(FATAL_ERROR "${FORBIDDEN} failed for another reason than being out of reach:\n${output}")
endif()
message(STATUS "${ALLOWED} reachable, ${FORBIDDEN} not")
