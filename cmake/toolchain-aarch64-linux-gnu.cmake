# Cross-compiles tileaot's host code (libtileaot, tileaot._C) for aarch64 Linux on an x86-64
# machine: scripts/build_wheel_aarch64.sh passes it as CMAKE_TOOLCHAIN_FILE (docs/RELEASE.md).
#
# Compilers: Debian's gcc-aarch64-linux-gnu / g++-aarch64-linux-gnu (their own glibc sysroot).
# TILEAOT_AARCH64_ROOT (environment): an aarch64 Debian root holding what the target needs and
# the toolchain lacks: Python's headers with the aarch64 pyconfig.h, zlib's header and libz.so.
# The device code is not compiled here: the cubins come prebuilt in the gen folder.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_ASM_COMPILER aarch64-linux-gnu-gcc)

set(_root "$ENV{TILEAOT_AARCH64_ROOT}")
file(GLOB _python_h "${_root}/usr/include/python3*/Python.h")
if(NOT _root OR NOT _python_h)
  message(FATAL_ERROR "tileaot: TILEAOT_AARCH64_ROOT='${_root}' is not an aarch64 root with "
                      "Python's headers: make one with `bash scripts/build_wheel_aarch64.sh root`")
endif()
set(CMAKE_FIND_ROOT_PATH "${_root}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)  # build_tools and ninja run on the host
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)   # libz.so: the target's, never the host's
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)   # nanobind's CMake config is on the host

# Debian's Python.h includes <aarch64-linux-gnu/python3.11/pyconfig.h> (a multiarch wrapper):
# searched after the toolchain's own headers, so glibc's come from the toolchain.
set(CMAKE_C_FLAGS_INIT "-idirafter ${_root}/usr/include")
set(CMAKE_CXX_FLAGS_INIT "-idirafter ${_root}/usr/include")
