# boards/toolchains/aarch64-linux-gnu.cmake - cross-compiles edgemon for 64-bit Arm boards with
# Debian's cross toolchain (gcc-aarch64-linux-gnu, g++-aarch64-linux-gnu) against an arm64
# sysroot of the oldest release the packages support: Debian 11 "bullseye", glibc 2.31, as
# Ubuntu 20.04 and JetPack 5 (docs/PACKAGING.md says why). Programs built this way run on
# glibc 2.31 and every later one. Built programs run on this machine through qemu-user on the
# sysroot's loader and libraries, so ctest works as on a native build.
# scripts/lib/cross.sh makes the sysroot (em_cross_sysroot) and uses this file; by hand:
#   source scripts/lib/common.sh; source scripts/lib/cross.sh
#   cmake -S . -B build/aarch64 -G Ninja --toolchain boards/toolchains/aarch64-linux-gnu.cmake \
#     -DEM_CROSS_SYSROOT="$(em_cross_sysroot)"
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(EM_CROSS_TRIPLET aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${EM_CROSS_TRIPLET}-gcc)
set(CMAKE_CXX_COMPILER ${EM_CROSS_TRIPLET}-g++)

# The sysroot: -DEM_CROSS_SYSROOT=DIR (kept in the cache) or the environment's EM_CROSS_SYSROOT.
# CMake reads this file again for every check it compiles, in this process: the environment
# carries the directory there.
if(NOT EM_CROSS_SYSROOT AND DEFINED ENV{EM_CROSS_SYSROOT})
  set(EM_CROSS_SYSROOT "$ENV{EM_CROSS_SYSROOT}")
endif()
if(NOT EM_CROSS_SYSROOT OR NOT EXISTS "${EM_CROSS_SYSROOT}/usr/include/stdio.h")
  message(FATAL_ERROR "aarch64: no arm64 sysroot at '${EM_CROSS_SYSROOT}': configure with "
    "-DEM_CROSS_SYSROOT=DIR, DIR made by em_cross_sysroot (scripts/lib/cross.sh)")
endif()
set(EM_CROSS_SYSROOT "${EM_CROSS_SYSROOT}" CACHE PATH "arm64 sysroot (scripts/lib/cross.sh)")
set(ENV{EM_CROSS_SYSROOT} "${EM_CROSS_SYSROOT}")
set(CMAKE_SYSROOT "${EM_CROSS_SYSROOT}")

# Libraries, headers and packages from the sysroot only; programs CMake looks for (pkg-config,
# python3) are this machine's.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# pkg-config reads the sysroot's arm64 .pc files only and puts the sysroot before the paths
# they name.
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${EM_CROSS_SYSROOT}")
set(ENV{PKG_CONFIG_LIBDIR}
  "${EM_CROSS_SYSROOT}/usr/lib/${EM_CROSS_TRIPLET}/pkgconfig:${EM_CROSS_SYSROOT}/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# Debian's cross gcc searches its own arm64 C library (libc6-dev-arm64-cross: this machine's
# glibc, 2.36) before any sysroot's: its headers in /usr/aarch64-linux-gnu/include come before
# the sysroot's /usr/include, its crt1.o and libc.so in /usr/aarch64-linux-gnu/lib before the
# sysroot's libraries. Left so, the programs would need GLIBC_2.34. So: no standard header
# directory (-nostdinc), then the compiler's own (libstdc++'s, gcc's) and the sysroot's in
# gcc's order, without that one; start files first from the sysroot (-B) and its library
# directories before the compiler's (-L).
get_filename_component(em_tool_include "/usr/${EM_CROSS_TRIPLET}/include" REALPATH)
foreach(em_lang C CXX)
  if(em_lang STREQUAL C)
    set(em_x c)
  else()
    set(em_x c++)
  endif()
  execute_process(COMMAND ${CMAKE_${em_lang}_COMPILER} --sysroot=${EM_CROSS_SYSROOT} -v -E
    -x ${em_x} /dev/null -o /dev/null ERROR_VARIABLE em_out OUTPUT_QUIET RESULT_VARIABLE em_rc)
  if(NOT em_rc EQUAL 0 OR NOT em_out MATCHES "search starts here:\n(.*)\nEnd of search list")
    message(FATAL_ERROR "aarch64: cannot read ${CMAKE_${em_lang}_COMPILER}'s header search list")
  endif()
  string(REGEX REPLACE "\n" ";" em_dirs "${CMAKE_MATCH_1}")
  set(em_flags "-nostdinc")
  foreach(em_dir IN LISTS em_dirs)
    string(STRIP "${em_dir}" em_dir)
    get_filename_component(em_real "${em_dir}" REALPATH)
    if(em_dir MATCHES "^/" AND NOT em_real STREQUAL em_tool_include)
      string(APPEND em_flags " -isystem ${em_real}")
    endif()
  endforeach()
  set(CMAKE_${em_lang}_FLAGS_INIT "${em_flags}")
endforeach()
# libstdc++ and libgcc_s are the sysroot's (gcc 10's), as on the oldest board: the sysroot's
# libstdc++.so link (em_cross_sysroot) and libgcc_s.so.1 come before gcc 12's in the search
# path. Linking gcc 12's instead fails: its libstdc++.a needs __libc_single_threaded (glibc
# 2.32), its libgcc_eh.a _dl_find_object (2.35); and a symbol that gcc 10's libstdc++ lacks
# fails the link here rather than the program on a board.
set(em_link "")
foreach(em_dir "${EM_CROSS_SYSROOT}/usr/lib/${EM_CROSS_TRIPLET}"
    "${EM_CROSS_SYSROOT}/lib/${EM_CROSS_TRIPLET}")
  # -B: crt1.o, crti.o, crtn.o; -L: libc.so and the rest; -rpath-link: what a library needs
  # (libcurl's libssl, ...).
  string(APPEND em_link " -B${em_dir}/ -L${em_dir} -Wl,-rpath-link,${em_dir}")
endforeach()
set(CMAKE_EXE_LINKER_FLAGS_INIT "${em_link}")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "${em_link}")
set(CMAKE_MODULE_LINKER_FLAGS_INIT "${em_link}")

# ctest runs every test program through qemu-aarch64 on the sysroot: its loader and glibc 2.31,
# the libraries the packages find on the oldest baseline. -L alone is not enough where this
# machine has arm64 libraries of its own (multiarch): qemu takes a path the sysroot lacks from
# this machine, and the loader tries /lib/aarch64-linux-gnu first, where bullseye has few of
# them; LD_LIBRARY_PATH names the sysroot's directories before any other.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L "${EM_CROSS_SYSROOT}" -E
  "LD_LIBRARY_PATH=${EM_CROSS_SYSROOT}/lib/${EM_CROSS_TRIPLET}:${EM_CROSS_SYSROOT}/usr/lib/${EM_CROSS_TRIPLET}")
