# normkit_embed_device_headers(TARGET <tgt> FUNCTION <name> BASE_DIR <dir> FILES <files...>)
#
# Compiles device headers into <tgt> so that NVRTC never reads them from disk at
# run time: a generated .cpp defines normkit::embedded::<name>(), which registers
# each file with normkit::rt::register_device_header() under its path relative to
# BASE_DIR (the name kernels #include it by). The generation runs at build time
# and depends on every file, so editing a header re-embeds it (and changes the
# cache keys of the kernels that include it).

set(_NORMKIT_EMBED_SCRIPT "${CMAKE_CURRENT_LIST_DIR}/EmbedDeviceHeadersScript.cmake")

function(normkit_embed_device_headers)
  cmake_parse_arguments(ARG "" "TARGET;FUNCTION;BASE_DIR" "FILES" ${ARGN})
  foreach(required TARGET FUNCTION BASE_DIR FILES)
    if(NOT ARG_${required})
      message(FATAL_ERROR "normkit_embed_device_headers: ${required} is required")
    endif()
  endforeach()
  if(NOT ARG_FUNCTION MATCHES "^[A-Za-z_][A-Za-z0-9_]*$")
    message(FATAL_ERROR "normkit_embed_device_headers: FUNCTION '${ARG_FUNCTION}' is not a C++ identifier")
  endif()

  get_filename_component(base_dir "${ARG_BASE_DIR}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  set(abs_files "")
  set(rel_names "")
  foreach(file IN LISTS ARG_FILES)
    get_filename_component(abs "${file}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    if(NOT EXISTS "${abs}")
      message(FATAL_ERROR "normkit_embed_device_headers: ${abs} does not exist")
    endif()
    file(RELATIVE_PATH rel "${base_dir}" "${abs}")
    if(rel MATCHES "^\\.\\./")
      message(FATAL_ERROR "normkit_embed_device_headers: ${abs} is not under BASE_DIR ${base_dir}")
    endif()
    list(APPEND abs_files "${abs}")
    list(APPEND rel_names "${rel}")
  endforeach()

  set(output "${CMAKE_CURRENT_BINARY_DIR}/normkit_embedded/${ARG_FUNCTION}.cpp")
  # The file list goes after "--" (one argument per file) rather than through a
  # -D list, because a ';' inside a custom command is mangled differently by the
  # Makefile and Ninja generators.
  add_custom_command(
    OUTPUT "${output}"
    COMMAND "${CMAKE_COMMAND}"
            "-DOUTPUT=${output}"
            "-DFUNCTION=${ARG_FUNCTION}"
            "-DBASE_DIR=${base_dir}"
            -P "${_NORMKIT_EMBED_SCRIPT}" -- ${rel_names}
    DEPENDS ${abs_files} "${_NORMKIT_EMBED_SCRIPT}"
    COMMENT "Embedding device headers for ${ARG_TARGET} (${ARG_FUNCTION})"
    VERBATIM)
  target_sources(${ARG_TARGET} PRIVATE "${output}")
endfunction()
