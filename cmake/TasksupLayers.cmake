# The layering rules of tasksup's folders, checked by the build.
#
# Each folder is one target; which folders a folder may use is what its
# target links (target_link_libraries), and a target sees only the headers of
# the targets it links: its own folder's include directory and theirs. Two
# things an include path cannot stop are checked here, for each target that
# calls tasksup_check_layer:
#   - a header of a forbidden library that lives in a system directory (CAF,
#     spdlog, OpenSSL, SQLite are all under /usr/include), reached directly
#     or through any header the target includes;
#   - an include that climbs out of its folder ("../").
# The check preprocesses each source of the target for its dependencies
# (-MM) and fails the build naming the source and the header. It is re-run
# when a source or any header it reached changes (a depfile).
if(POLICY CMP0116)
  cmake_policy(SET CMP0116 NEW)
endif()
set(TASKSUP_LAYER_SCRIPT "${CMAKE_CURRENT_LIST_DIR}/check_layer.cmake")

# tasksup_check_layer(<target> [FORBID <name>=<regex> ...])
#   FORBID: a library the target must not see: its name for the message and
#   a regular expression matched against each header's path.
function(tasksup_check_layer target)
  cmake_parse_arguments(arg "" "" "FORBID" ${ARGN})
  get_target_property(sources ${target} SOURCES)
  get_target_property(source_dir ${target} SOURCE_DIR)
  set(files "")
  foreach(src IN LISTS sources)
    if(src MATCHES "\\.cpp$")
      if(NOT IS_ABSOLUTE "${src}")
        set(src "${source_dir}/${src}")
      endif()
      list(APPEND files "${src}")
    endif()
  endforeach()
  set(stamp "${CMAKE_CURRENT_BINARY_DIR}/${target}.layer")
  string(REPLACE ";" "|" forbid "${arg_FORBID}")
  string(REPLACE ";" "|" file_list "${files}")
  add_custom_command(
    OUTPUT "${stamp}"
    COMMAND
      ${CMAKE_COMMAND} "-DCXX=${CMAKE_CXX_COMPILER}" "-DTARGET=${target}"
      "-DSOURCES=${file_list}" "-DFORBID=${forbid}"
      "-DINCLUDES=$<JOIN:$<TARGET_PROPERTY:${target},INCLUDE_DIRECTORIES>,|>"
      "-DSTAMP=${stamp}" -P "${TASKSUP_LAYER_SCRIPT}"
    DEPENDS ${files} "${TASKSUP_LAYER_SCRIPT}"
    DEPFILE "${stamp}.d"
    COMMENT "Checking the layer rules of ${target}"
    VERBATIM)
  add_custom_target(${target}_layer DEPENDS "${stamp}")
  add_dependencies(${target} ${target}_layer)
endfunction()
