# Wraps CMake. `make run` and `make test` install what is missing first.
BUILD ?= build
BUILD_TYPE ?= RelWithDebInfo
WERROR ?= OFF
JOBS ?= 2
ARGS ?=
CMAKE_FLAGS ?=
# The template tests need AWS's CloudFormation spec, fetched with npm; a build
# without tests needs neither.
TESTS := $(if $(findstring CFDB_BUILD_TESTS=OFF,$(CMAKE_FLAGS)),OFF,ON)

.PHONY: all deps configure build run test clean

include cmake/checks.mk

all: build

deps:
	@CFDB_NPM=$(TESTS) scripts/install-deps.sh
	@[ "$(TESTS)" = OFF ] || CFNSPEC_PREFIX=$(BUILD)/cfnspec scripts/fetch-cfnspec.sh

$(BUILD)/build.ninja: CMakeLists.txt tests/CMakeLists.txt | deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	  -DCFDB_WERROR=$(WERROR) $(CMAKE_FLAGS)

configure: $(BUILD)/build.ninja

build: deps configure
	cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/cfdb-worker serve $(ARGS)

test: build
	ctest --test-dir $(BUILD) -j $(JOBS) --output-on-failure

clean:
	rm -rf $(BUILD)
