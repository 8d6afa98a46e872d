# The template tests: cloudformation/workers.yml and docs/DEPLOY.md's
# parameter table against the worker's knob table (src/serve/config.cc),
# and the template against AWS's CloudFormation resource specification,
# which scripts/fetch-npm.sh installs under the build directory (make deps
# runs it).
find_package(yaml-cpp CONFIG REQUIRED)
find_package(nlohmann_json 3 CONFIG REQUIRED)

set(CFDB_CFNSPEC_JSON
  ${CMAKE_BINARY_DIR}/cfnspec/node_modules/@aws-cdk/cfnspec/spec/specification.json
  CACHE FILEPATH "CloudFormation resource specification (@aws-cdk/cfnspec)")

# cfn-validate (tools/cfn_validate.cc), the spec check an operator who
# edits the template runs; the test below runs it on the template.
add_executable(cfn-validate ${PROJECT_SOURCE_DIR}/tools/cfn_validate.cc)
target_compile_options(cfn-validate PRIVATE ${CFDB_WARNINGS})
target_include_directories(cfn-validate PRIVATE ${PROJECT_SOURCE_DIR}/tools)
target_link_libraries(cfn-validate PRIVATE yaml-cpp
  nlohmann_json::nlohmann_json)
add_test(NAME cfn_validate_workers_template COMMAND cfn-validate
  ${CFDB_CFNSPEC_JSON} ${PROJECT_SOURCE_DIR}/cloudformation/workers.yml)
set_tests_properties(cfn_validate_workers_template PROPERTIES
  LABELS serve TIMEOUT ${CFDB_CASE_TIMEOUT})

add_executable(cloudformation_test serve/cloudformation_test.cc)
target_include_directories(cloudformation_test PRIVATE
  ${PROJECT_SOURCE_DIR}/tools)
target_compile_options(cloudformation_test PRIVATE ${CFDB_TEST_OPTIONS})
target_compile_definitions(cloudformation_test PRIVATE
  CFDB_WORKERS_TEMPLATE="${PROJECT_SOURCE_DIR}/cloudformation/workers.yml"
  CFDB_DEPLOY_DOC="${PROJECT_SOURCE_DIR}/docs/DEPLOY.md"
  CFDB_CFNSPEC_JSON="${CFDB_CFNSPEC_JSON}")
target_link_libraries(cloudformation_test PRIVATE
  cfdb_worker_serve GTest::gmock_main yaml-cpp nlohmann_json::nlohmann_json)
cfdb_reuse_pch(cloudformation_test cfdb_test_pch)
gtest_discover_tests(cloudformation_test DISCOVERY_TIMEOUT 30
  PROPERTIES TIMEOUT ${CFDB_CASE_TIMEOUT})
