# mpakt_embed_text(<input file> <function name> <output .cpp>)
# Generates a C++ source defining `std::string_view mpakt::<function name>()` that returns
# the file's bytes, so the binary carries its data (e.g. schemas/ops.json). Regenerated
# when the input changes.
function(mpakt_embed_text input func output)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${input})
  file(READ ${input} content HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," bytes "${content}")
  file(WRITE ${output}.tmp
    "// Generated from ${input}; do not edit.\n#include <string_view>\n"
    "namespace mpakt {\nnamespace { const char data[] = {${bytes} 0}; }\n"
    "std::string_view ${func}() { return std::string_view(data, sizeof(data) - 1); }\n"
    "}  // namespace mpakt\n")
  configure_file(${output}.tmp ${output} COPYONLY)
endfunction()
