# Precompiled headers (GCC builds; -DCFDB_PCH=OFF turns them off). The
# headers below are most of what a gRPC-facing file parses: gRPC, protobuf
# with the generated code, abseil and spdlog, and for tests gtest, gmock and
# nlohmann/json. Each set is parsed once per build instead of once per file,
# which takes a quarter to a third off such a file's compile time
# (docs/RELIABILITY.md, "CI's time"). One target owns each set; the targets
# compiled with the same flags reuse it (GCC refuses a PCH built with other
# flags, and -Winvalid-pch says so, an error under CFDB_WERROR). The core and
# exec layers get none, as they must not see gRPC. A file still includes
# what it uses: `make tidy` parses every file of src/ without them.
# clang builds (the fuzz build) go without: clang's PCH checks macros more
# strictly, and that build is small.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  option(CFDB_PCH "Precompile the heaviest headers (gRPC, protobuf, gtest)" ON)
else()
  set(CFDB_PCH OFF)
endif()
# gRPC's and gtest's targets give -pthread (which defines _REENTRANT) to the
# targets that link them directly, and only to those; every target compiles
# with it, so that one PCH fits them all.
if(CFDB_PCH)
  add_compile_options(-pthread)
endif()

set(CFDB_LIBRARY_PCH
  <grpcpp/grpcpp.h>
  <cfdb/worker/v1/worker.grpc.pb.h>
  <absl/status/statusor.h>
  <absl/strings/str_cat.h>
  <absl/synchronization/mutex.h>
  <spdlog/spdlog.h>
  <chrono> <functional> <memory> <optional> <string> <string_view> <thread>
  <vector>)
set(CFDB_TEST_PCH ${CFDB_LIBRARY_PCH}
  <gmock/gmock.h>
  <gtest/gtest.h>
  <nlohmann/json.hpp>
  <filesystem> <fstream> <regex>)

# cfdb_reuse_pch(TARGET OWNER): TARGET, compiled with OWNER's flags, uses
# OWNER's precompiled headers.
function(cfdb_reuse_pch target owner)
  if(CFDB_PCH)
    target_precompile_headers(${target} REUSE_FROM ${owner})
  endif()
endfunction()
