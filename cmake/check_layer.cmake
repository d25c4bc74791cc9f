# Run by tasksup_check_layer (TasksupLayers.cmake) at build time:
#   CXX, TARGET, SOURCES (|-separated), FORBID (|-separated name=regex),
#   INCLUDES (|-separated), STAMP.
cmake_minimum_required(VERSION 3.16)
string(REPLACE "|" ";" sources "${SOURCES}")
string(REPLACE "|" ";" forbid "${FORBID}")
string(REPLACE "|" ";" includes "${INCLUDES}")
set(flags -std=c++17)
foreach(dir IN LISTS includes)
  if(dir)
    list(APPEND flags "-I${dir}")
  endif()
endforeach()

set(all_headers "")
set(failures "")
foreach(src IN LISTS sources)
  file(STRINGS "${src}" climbing REGEX "^[ \t]*#[ \t]*include[ \t]*\"\\.\\./")
  if(climbing)
    list(GET climbing 0 line)
    string(APPEND failures
           "  ${src}: ${line}: an include may not climb out of its folder; "
           "link the target that owns the header instead\n")
  endif()
  execute_process(
    COMMAND "${CXX}" ${flags} -M "${src}"
    OUTPUT_VARIABLE deps
    ERROR_VARIABLE errors
    RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    string(APPEND failures "  ${src}: could not be preprocessed:\n${errors}\n")
    continue()
  endif()
  string(REGEX REPLACE "\\\\\n" " " deps "${deps}")
  string(REGEX REPLACE "^[^:]*:" "" deps "${deps}")
  string(REGEX REPLACE "[ \t\n]+" ";" deps "${deps}")
  set(reported "")
  foreach(dep IN LISTS deps)
    if(NOT dep OR dep STREQUAL src)
      continue()
    endif()
    list(APPEND all_headers "${dep}")
    foreach(rule IN LISTS forbid)
      string(REGEX MATCH "^([^=]+)=(.*)$" _ "${rule}")
      set(name "${CMAKE_MATCH_1}")
      set(pattern "${CMAKE_MATCH_2}")
      if(dep MATCHES "${pattern}" AND NOT name IN_LIST reported)
        list(APPEND reported "${name}")
        string(APPEND failures
               "  ${src} reaches ${dep}: ${TARGET} may not use ${name}\n")
        break()
      endif()
    endforeach()
  endforeach()
endforeach()

if(failures)
  message(FATAL_ERROR "layer rules of ${TARGET} broken:\n${failures}")
endif()
list(REMOVE_DUPLICATES all_headers)
string(REPLACE ";" " \\\n  " dep_text "${all_headers}")
file(WRITE "${STAMP}.d" "${STAMP}: \\\n  ${dep_text}\n")
file(WRITE "${STAMP}" "${TARGET}\n")
