# Writes the ctest entries of one gtest binary: one entry per test
# (--gtest_filter=Suite.Test), run after each build of the binary (see
# dlcache_add_test in tests/CMakeLists.txt).
#
#   cmake -D EXE=<binary> -D OUT=<file> -D NAME=<target> -D LABELS=<a,b>
#         -D TIMEOUT=<s> -D WORKDIR=<dir> [-D ENVIRONMENT=<A=1|B=2>]
#         -P gtest_ctest_list.cmake
#
# Unlike CMake's gtest_discover_tests, no SKIP_REGULAR_EXPRESSION: ctest
# lets an output regex win over the exit code, so a test that printed
# "[  SKIPPED ]" and then failed would show as Skipped. A skip is the exit
# code 77 instead (tests/testing/gtest_main.cc).
execute_process(COMMAND "${EXE}" --gtest_list_tests
  OUTPUT_VARIABLE listing ERROR_VARIABLE err RESULT_VARIABLE rc
  TIMEOUT 60)
if(NOT rc EQUAL 0)
  file(REMOVE "${OUT}")
  message(FATAL_ERROR "${EXE} --gtest_list_tests failed (${rc}): ${err}")
endif()
string(REPLACE "," ";" LABELS "${LABELS}")
set(env_property "")
if(NOT "${ENVIRONMENT}" STREQUAL "")
  string(REPLACE "|" ";" ENVIRONMENT "${ENVIRONMENT}")
  set(env_property " ENVIRONMENT [=[${ENVIRONMENT}]=]")
endif()
string(REPLACE ";" "\\;" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
set(script "")
set(suite "")
set(count 0)
foreach(line IN LISTS lines)
  # "Suite.  # TypeParam = ..." / "  Test  # GetParam() = ...": drop comments.
  string(REGEX REPLACE " *#.*$" "" line "${line}")
  if(line STREQUAL "")
    continue()
  endif()
  if(line MATCHES "^  (.+)$")
    set(test "${CMAKE_MATCH_1}")
    set(full "${suite}${test}")
    string(APPEND script
      "add_test([=[${full}]=] [=[${EXE}]=] [=[--gtest_filter=${full}]=] "
      "--gtest_also_run_disabled_tests)\n"
      "set_tests_properties([=[${full}]=] PROPERTIES SKIP_RETURN_CODE 77 "
      "TIMEOUT ${TIMEOUT} WORKING_DIRECTORY [=[${WORKDIR}]=] "
      "LABELS [=[${LABELS}]=]${env_property})\n")
    if(full MATCHES "(^|\\.)DISABLED_")
      string(APPEND script
        "set_tests_properties([=[${full}]=] PROPERTIES DISABLED TRUE)\n")
    endif()
    math(EXPR count "${count} + 1")
  else()
    set(suite "${line}")
  endif()
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "${EXE} lists no tests")
endif()
file(WRITE "${OUT}" "${script}")
