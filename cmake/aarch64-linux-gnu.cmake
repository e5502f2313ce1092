# Cross-compiling for 64-bit ARM Linux with Debian's g++-aarch64-linux-gnu, the
# arm64 libraries installed through multiarch (dpkg --add-architecture arm64), and
# qemu-aarch64 (qemu-user) to run what it builds: gtest's test discovery and ctest
# start every test program through it. .ci/run uses it:
#   cmake -S . -B build-aarch64-armv8-a -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DCMAKE_CXX_FLAGS=-march=armv8-a
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# No -L /usr/aarch64-linux-gnu: qemu-aarch64 7.2 hangs at the first thread a program
# starts under the cross toolchain's own glibc runtime there (even a plain std::thread);
# the arm64 runtime of multiarch (libc6:arm64, libstdc++6:arm64, libgomp1:arm64) runs.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
# pkg-config (PCRE2, utf8proc) reads the arm64 .pc files, not the host's.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
# -march=native means nothing to a cross compiler: the flags come from CMAKE_CXX_FLAGS.
set(KVDECODE_NATIVE OFF CACHE BOOL "" FORCE)
