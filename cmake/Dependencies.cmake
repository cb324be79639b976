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
