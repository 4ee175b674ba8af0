# find_package(tileaot CONFIG) for C++ programs using the wheel's prebuilt kernels.
# Installed as <site-packages>/tileaot/share/cmake/tileaot/tileaotConfig.cmake; found with
#   cmake -DCMAKE_PREFIX_PATH="$(python -m tileaot --cmake-prefix-path)" ...
# Defines
#   tileaot::tileaot  imported shared library tileaot/lib/libtileaot.so, with tileaot/include:
#                     <tileaot/tileaot.h> (C ABI) and <tileaot/tileaot.hpp> (C++17 layer)
# Neither header needs CUDA or torch headers. At run time libtileaot.so must be findable (the
# build tree's RPATH, which CMake sets; an INSTALL_RPATH to tileaot/lib; or LD_LIBRARY_PATH) and
# the NVIDIA driver present. examples/cpp in the tileaot repository shows a complete program.
get_filename_component(_tileaot_root "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT EXISTS "${_tileaot_root}/lib/libtileaot.so"
   OR NOT EXISTS "${_tileaot_root}/include/tileaot/tileaot.h")
  set(tileaot_FOUND FALSE)
  string(CONCAT tileaot_NOT_FOUND_MESSAGE
         "${_tileaot_root} lacks lib/libtileaot.so or include/tileaot/tileaot.h: reinstall the "
         "tileaot wheel (pip install --force-reinstall tileaot)")
  return()
endif()
if(NOT TARGET tileaot::tileaot)
  add_library(tileaot::tileaot SHARED IMPORTED)
  set_target_properties(tileaot::tileaot PROPERTIES
    IMPORTED_LOCATION "${_tileaot_root}/lib/libtileaot.so"
    IMPORTED_SONAME "libtileaot.so"
    INTERFACE_INCLUDE_DIRECTORIES "${_tileaot_root}/include")
endif()
set(tileaot_LIBRARY_DIR "${_tileaot_root}/lib")
set(tileaot_INCLUDE_DIR "${_tileaot_root}/include")
set(tileaot_MANIFEST "${_tileaot_root}/manifest.json")
unset(_tileaot_root)
