# What a build was asked for besides the options: a bundled gen folder (an sdist made by
# `python -m build_tools sdist`) or a bring-your-shapes TOML (-DTILEAOT_CONFIG=FILE).

# An sdist carries gen/ (device sources, manifest, registry, cubins.cmake, the headers they
# include) and gen/bundle.cmake, which sets TILEAOT_BUNDLE_ARCHS, TILEAOT_BUNDLE_OPS,
# TILEAOT_BUNDLE_CONFIG and TILEAOT_BUNDLE_CUBINS. Sets TILEAOT_BUNDLE_GEN ("" if none).
macro(tileaot_find_bundle)
  set(TILEAOT_BUNDLE_GEN "")
  if(EXISTS "${CMAKE_CURRENT_SOURCE_DIR}/gen/bundle.cmake")
    include("${CMAKE_CURRENT_SOURCE_DIR}/gen/bundle.cmake")
    set(TILEAOT_BUNDLE_GEN "${CMAKE_CURRENT_SOURCE_DIR}/gen")
  endif()
endmacro()

# The bundled sources were generated for exactly one (archs, ops) choice: building anything
# else from them would silently ship a different wheel, so a different request stops here.
function(tileaot_check_bundle archs ops config)
  tileaot_normalize_archs(bundled "${TILEAOT_BUNDLE_ARCHS}")
  set(problems "")
  if(NOT archs STREQUAL bundled)
    string(APPEND problems "\n  TILEAOT_ARCHS=${archs}, bundled: ${bundled}")
  endif()
  if(NOT ops STREQUAL TILEAOT_BUNDLE_OPS)
    string(APPEND problems "\n  TILEAOT_OPS=${ops}, bundled: ${TILEAOT_BUNDLE_OPS}")
  endif()
  if(config)
    string(APPEND problems "\n  TILEAOT_CONFIG=${config}: the bundle was generated already"
                           " (from config: '${TILEAOT_BUNDLE_CONFIG}')")
  endif()
  if(problems)
    message(FATAL_ERROR
      "tileaot: this source distribution bundles generated sources for other options:"
      "${problems}\nBuild it without these options, or make a source distribution for them "
      "from a git checkout with tilelang installed: python -m build_tools sdist --archs ... "
      "--ops ... [--config FILE]")
  endif()
endfunction()

# -DTILEAOT_CONFIG=FILE: check the file now (errors name the key and the allowed values) and
# read its archs and ops. OUT_ARCHS is "" when the file leaves the archs to TILEAOT_ARCHS.
function(tileaot_read_config file out_archs out_ops)
  tileaot_specs_option(specs)
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -m build_tools config "${file}" --cmake ${specs}
    WORKING_DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "tileaot: TILEAOT_CONFIG=${file} cannot be used:\n${err}")
  endif()
  string(REGEX MATCH "archs=([^\n]*)" _ "${out}")
  set(${out_archs} "${CMAKE_MATCH_1}" PARENT_SCOPE)
  string(REGEX MATCH "ops=([^\n]*)" _ "${out}")
  set(${out_ops} "${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()

# `--specs MODULE` where TILEAOT_SPECS names kernels other than this repository's (a wheel of
# kernels kept elsewhere: python -m build_tools wheel --kernels); nothing for kernels_py.
function(tileaot_specs_option out)
  set(option "")
  if(TILEAOT_SPECS AND NOT TILEAOT_SPECS STREQUAL "kernels_py")
    set(option --specs "${TILEAOT_SPECS}")
  endif()
  set(${out} ${option} PARENT_SCOPE)
endfunction()
