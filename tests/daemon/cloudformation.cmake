# The template tests: cloudformation/workers.yml against the worker's
# constants and AWS's CloudFormation resource specification, which
# scripts/fetch-npm.sh installs under the build directory (make deps runs
# it). Only headers of the library are used, so cfdb_worker is not linked.
find_package(yaml-cpp CONFIG REQUIRED)
find_package(nlohmann_json 3 CONFIG REQUIRED)

set(CFDB_CFNSPEC_JSON
  ${CMAKE_BINARY_DIR}/cfnspec/node_modules/@aws-cdk/cfnspec/spec/specification.json
  CACHE FILEPATH "CloudFormation resource specification (@aws-cdk/cfnspec)")

add_executable(cloudformation_test daemon/cloudformation_test.cc)
target_compile_options(cloudformation_test PRIVATE ${CFDB_WARNINGS})
target_include_directories(cloudformation_test PRIVATE
  ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src
  $<TARGET_PROPERTY:absl::statusor,INTERFACE_INCLUDE_DIRECTORIES>
  $<TARGET_PROPERTY:absl::synchronization,INTERFACE_INCLUDE_DIRECTORIES>)
target_compile_definitions(cloudformation_test PRIVATE
  CFDB_WORKERS_TEMPLATE="${PROJECT_SOURCE_DIR}/cloudformation/workers.yml"
  CFDB_CFNSPEC_JSON="${CFDB_CFNSPEC_JSON}")
target_link_libraries(cloudformation_test PRIVATE
  GTest::gmock_main yaml-cpp nlohmann_json::nlohmann_json)
gtest_discover_tests(cloudformation_test DISCOVERY_TIMEOUT 30)
