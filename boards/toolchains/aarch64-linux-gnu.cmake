# boards/toolchains/aarch64-linux-gnu.cmake - cross-compiles edgemon for 64-bit Arm boards with
# Debian's cross toolchain (gcc-aarch64-linux-gnu, g++-aarch64-linux-gnu) against Debian
# multiarch arm64 -dev packages (libuv1-dev:arm64 and friends): the sysroot is /, the arm64
# libraries live in /usr/lib/aarch64-linux-gnu and their .pc files in its pkgconfig/.
# Built programs run on this machine through qemu-user, so ctest works as on a native build.
# scripts/lib/cross.sh installs all of it and uses this file; by hand:
#   cmake -S . -B build/aarch64 -G Ninja --toolchain boards/toolchains/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(EM_CROSS_TRIPLET aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${EM_CROSS_TRIPLET}-gcc)
set(CMAKE_CXX_COMPILER ${EM_CROSS_TRIPLET}-g++)

# Headers and libraries come from the multiarch paths the cross compiler already searches
# (/usr/include/aarch64-linux-gnu, /usr/lib/aarch64-linux-gnu); programs CMake looks for
# (pkg-config, python3) are this machine's.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)

# pkg-config reads the arm64 .pc files only, never this machine's (which name the same
# libraries in /usr/lib/x86_64-linux-gnu). The sysroot is /, so no PKG_CONFIG_SYSROOT_DIR.
set(ENV{PKG_CONFIG_LIBDIR}
  /usr/lib/${EM_CROSS_TRIPLET}/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")
unset(ENV{PKG_CONFIG_SYSROOT_DIR})

# ctest runs every test program through qemu-aarch64. No -L prefix: libc6:arm64 (multiarch,
# pulled in by the arm64 -dev packages) puts the dynamic loader at /lib/ld-linux-aarch64.so.1,
# where the programs ask for it, and it finds every library in the multiarch paths. With
# -L /usr/aarch64-linux-gnu, Debian 12's qemu-user (7.2) leaves a forked child blocked before
# it runs a single instruction, which hangs every test that forks.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
