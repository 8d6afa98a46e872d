# CFDB_SANITIZE builds everything defined after this file with sanitizers:
# "" (none), "address,undefined" (ASan + UBSan, undefined behaviour is fatal)
# or "thread" (TSan). System libraries (gRPC, protobuf, abseil) stay
# uninstrumented; see tsan.supp for what that costs.
set(CFDB_SANITIZE "" CACHE STRING
  "Sanitizers to build with: empty, address,undefined, or thread")
set_property(CACHE CFDB_SANITIZE PROPERTY STRINGS "" "address,undefined" "thread")

# UBSan's vptr check is left out: its slow path asks whether a vtable is
# readable by writing it to a pipe(2), so in a process out of descriptors
# (FaultDaemonTest.TinyFdLimitFailsAJobNotTheDaemon) it reports sound objects
# as having an "invalid vptr". ASan still catches calls on freed objects.
if(CFDB_SANITIZE STREQUAL "address,undefined")
  set(CFDB_SANITIZE_FLAGS -fsanitize=address,undefined -fno-sanitize=vptr
    -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  # For the code that must know (GCC and clang say ASan differently).
  add_compile_definitions(CFDB_ASAN=1)
  # CI's biggest build compiles at -O1 (ASan's own advice) with line tables
  # only: half the time of -O2 -g, and its reports still name file and line.
  # TSan's build is small and keeps the build type's flags.
  add_compile_options(-O1 -g1)
elseif(CFDB_SANITIZE STREQUAL "thread")
  set(CFDB_SANITIZE_FLAGS -fsanitize=thread -fno-omit-frame-pointer)
  add_compile_definitions(CFDB_TSAN=1)
elseif(NOT CFDB_SANITIZE STREQUAL "")
  message(FATAL_ERROR "CFDB_SANITIZE='${CFDB_SANITIZE}': use empty, "
    "address,undefined or thread")
endif()

if(CFDB_SANITIZE_FLAGS)
  add_compile_options(${CFDB_SANITIZE_FLAGS})
  add_link_options(${CFDB_SANITIZE_FLAGS})
endif()

# TSan cannot see the uninstrumented abseil's absl::Mutex order memory, nor
# spdlog's lazily built registry; tests/support/tsan_absl.cc tells it, in
# every program linked from here on.
if(CFDB_SANITIZE STREQUAL "thread")
  find_package(spdlog CONFIG REQUIRED)
  add_library(cfdb_tsan_absl STATIC
    ${CMAKE_CURRENT_LIST_DIR}/../tests/support/tsan_absl.cc)
  target_link_libraries(cfdb_tsan_absl PRIVATE spdlog::spdlog)
  link_libraries(cfdb_tsan_absl)
endif()

# CFDB_FUZZ builds the libFuzzer targets in fuzz/ (clang only): everything is
# instrumented for coverage, with ASan and UBSan, and fuzz/CMakeLists.txt is
# added at the end of the top-level file.
option(CFDB_FUZZ "Build the libFuzzer targets in fuzz/ (needs clang)" OFF)
if(CFDB_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "CFDB_FUZZ=ON needs clang: "
      "-DCMAKE_CXX_COMPILER=clang++ (found ${CMAKE_CXX_COMPILER_ID})")
  endif()
  if(CFDB_SANITIZE_FLAGS)
    message(FATAL_ERROR "CFDB_FUZZ=ON brings its own sanitizers; "
      "leave CFDB_SANITIZE empty")
  endif()
  # -Wno-unknown-warning-option: clang does not know gcc's -Wshadow=local.
  # -O1 -g1 as in the ASan build: the smoke runs a fixed number of inputs.
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined
    -fno-sanitize-recover=undefined -fno-omit-frame-pointer
    -Wno-unknown-warning-option -O1 -g1)
  add_link_options(-fsanitize=address,undefined)
endif()
