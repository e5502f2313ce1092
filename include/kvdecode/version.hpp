// kvdecode version: defined once here; CMake reads it from this header.
#pragma once

#define KVDECODE_VERSION_MAJOR 0
#define KVDECODE_VERSION_MINOR 1
#define KVDECODE_VERSION_PATCH 0

namespace kvd {
/// The library version as "major.minor.patch".
inline constexpr const char* kVersion = "0.1.0";
}  // namespace kvd
