# find_package(tileaot CONFIG) for C++ programs using the wheel's prebuilt kernels.
# Installed as <site-packages>/tileaot/share/cmake/tileaot/tileaotConfig.cmake; defines
#   tileaot::tileaot  (imported shared library: tileaot/lib/libtileaot.so + tileaot/include)
# Only the C ABI of <tileaot/tileaot.h> is public; no CUDA or torch headers are needed.
# At run time libtileaot.so must be findable (rpath to tileaot/lib, or LD_LIBRARY_PATH) and
# the NVIDIA driver present.
get_filename_component(_tileaot_root "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
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
