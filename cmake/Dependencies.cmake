# Third-party libraries, found as Debian installs them (tools/install.sh).

find_package(Threads REQUIRED)

# RapidJSON's config sets only RAPIDJSON_INCLUDE_DIRS; make a target.
find_package(RapidJSON CONFIG QUIET)
find_path(MPAKT_RAPIDJSON_INCLUDE rapidjson/document.h HINTS ${RAPIDJSON_INCLUDE_DIRS} REQUIRED)
add_library(mpakt_rapidjson INTERFACE)
target_include_directories(mpakt_rapidjson SYSTEM INTERFACE ${MPAKT_RAPIDJSON_INCLUDE})
target_compile_definitions(mpakt_rapidjson INTERFACE RAPIDJSON_HAS_STDSTRING=1)

find_package(GTest CONFIG QUIET)
if(NOT GTest_FOUND)
  find_package(GTest REQUIRED)
endif()

# Boost (Beast/Asio, header-only use). 1.81: 1.74's Asio does not compile as C++20 with g++ 12.
find_package(Boost 1.81 CONFIG REQUIRED COMPONENTS headers)
find_package(OpenSSL REQUIRED)
find_package(SQLite3 REQUIRED)

# CAF 0.17.6 ships no CMake config and no .pc file: find it and make imported targets.
find_path(MPAKT_CAF_INCLUDE caf/all.hpp REQUIRED)
find_library(MPAKT_CAF_CORE caf_core REQUIRED)
find_library(MPAKT_CAF_IO caf_io REQUIRED)
# The cluster port speaks TLS through CAF's OpenSSL module (actors/cluster_tls.hpp).
find_library(MPAKT_CAF_OPENSSL caf_openssl REQUIRED)
add_library(mpakt_caf INTERFACE)
target_include_directories(mpakt_caf SYSTEM INTERFACE ${MPAKT_CAF_INCLUDE})
target_link_libraries(mpakt_caf INTERFACE ${MPAKT_CAF_OPENSSL} ${MPAKT_CAF_IO} ${MPAKT_CAF_CORE} OpenSSL::SSL OpenSSL::Crypto
  Threads::Threads)
