# Wraps CMake. `make run` and `make test` install what is missing first.
BUILD ?= build
BUILD_TYPE ?= RelWithDebInfo
WERROR ?= OFF
JOBS ?= 2
# ctest runs three tests per build job: most of them wait on timers and
# real workers, so at one per job the CPU stood idle 80% of the time
# (docs/RELIABILITY.md, "CI time").
TEST_JOBS ?= $(shell echo $$(( $(JOBS) * 3 )))
ARGS ?=
CMAKE_FLAGS ?=
# The template tests need AWS's CloudFormation spec, fetched with npm; a build
# without tests needs neither.
TESTS := $(if $(findstring CFDB_BUILD_TESTS=OFF,$(CMAKE_FLAGS)),OFF,ON)

.PHONY: all deps configure build run test bench clean generate

# A ccache launcher (CMAKE_FLAGS=-DCMAKE_CXX_COMPILER_LAUNCHER=ccache) caches
# the files that use the precompiled headers (cmake/pch.cmake) only with
# these.
export CCACHE_SLOPPINESS ?= pch_defines,time_macros

include cmake/checks.mk
include cmake/image.mk

all: build

deps:
	@CFDB_NPM=$(TESTS) CFDB_DEPS=$(if $(filter OFF,$(TESTS)),build,all) \
	  scripts/install-deps.sh
	@[ "$(TESTS)" = OFF ] || scripts/fetch-npm.sh $(BUILD)/cfnspec @aws-cdk/cfnspec@2.72.1
	@[ "$(TESTS)" = OFF ] || scripts/fetch-npm.sh $(BUILD)/node @grpc/grpc-js@1.14.7 @grpc/proto-loader@0.8.1
	@[ "$(TESTS)" = OFF ] || scripts/fetch-npm.sh $(BUILD)/k8s-schemas kubernetes-models@5.1.0 @kubernetes-models/keda@2.0.0

$(BUILD)/build.ninja: CMakeLists.txt tests/CMakeLists.txt | deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DCFDB_WERROR=$(WERROR) $(CMAKE_FLAGS)

configure: $(BUILD)/build.ninja
	@[ "$(TESTS)" = OFF ] || ! grep -qs '^CFDB_BUILD_TESTS:BOOL=OFF' \
	  $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) -DCFDB_BUILD_TESTS=ON \
	  -DCFDB_BUILD_BENCH=ON -DCFDB_BUILD_EXAMPLES=ON

build: deps configure
	cmake --build $(BUILD) -j $(JOBS)

# The binary only: no tests, benchmarks or their packages. A build directory
# it configures has no tests; `make test` turns them on there (configure).
run:
	@CFDB_NPM=OFF CFDB_DEPS=build scripts/install-deps.sh
	@[ -f $(BUILD)/build.ninja ] || cmake -S . -B $(BUILD) -G Ninja \
	  -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DCFDB_WERROR=$(WERROR) \
	  -DCFDB_BUILD_TESTS=OFF $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS) --target cfdb-worker
	$(BUILD)/cfdb-worker serve $(ARGS)

# Every table the docs show that the code holds (knobs, RPCs, commands,
# exit codes, the Python client's registry), written from the code; the
# test generated_docs fails when one differs.
generate: build
	$(BUILD)/cfdb-docgen write .

test: build
	ctest --test-dir $(BUILD) -j $(TEST_JOBS) --output-on-failure

# Benchmarks: a Release build of their own (no tests), then every figure with
# its floor; writes docs/PERFORMANCE.md. Takes a few minutes.
BENCH_BUILD ?= build-bench
bench:
	@CFDB_NPM=OFF scripts/install-deps.sh
	cmake -S . -B $(BENCH_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DCFDB_BUILD_TESTS=OFF -DCFDB_BUILD_BENCH=ON $(CMAKE_FLAGS)
	cmake --build $(BENCH_BUILD) -j $(JOBS) \
	  --target cfdb-worker worker-bench process-bench bare-server fleet-stub
	python3 bench/run.py --build $(BENCH_BUILD) --out docs/PERFORMANCE.md

clean:
	rm -rf $(BUILD) $(BENCH_BUILD)
