# Reliability checks, included by the Makefile: sanitizer builds (each in a
# build directory of its own) and fuzzing. See docs/RELIABILITY.md.
.PHONY: test-asan test-tsan

ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
# Leaks and undefined behaviour fail the test that hit them.
ASAN_ENV := ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1 \
  LSAN_OPTIONS=suppressions=$(CURDIR)/cmake/lsan.supp \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
TSAN_ENV := TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$(CURDIR)/cmake/tsan.supp

# The whole suite under ASan + UBSan (the template tests get their spec
# under $(ASAN_BUILD)/cfnspec through deps).
test-asan:
	$(MAKE) build BUILD=$(ASAN_BUILD) BUILD_TYPE=RelWithDebInfo \
	  CMAKE_FLAGS="-DCFDB_SANITIZE=address,undefined $(CMAKE_FLAGS)"
	$(ASAN_ENV) ctest --test-dir $(ASAN_BUILD) -j $(TEST_JOBS) --output-on-failure

# The core and exec layers' tests under TSan, and the canary that must be
# reported.
test-tsan:
	$(MAKE) configure BUILD=$(TSAN_BUILD) BUILD_TYPE=RelWithDebInfo \
	  CMAKE_FLAGS="-DCFDB_SANITIZE=thread $(CMAKE_FLAGS)"
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target core_test exec_test tsan_canary
	$(TSAN_ENV) ctest --test-dir $(TSAN_BUILD) -j $(TEST_JOBS) --output-on-failure \
	  -L '^(core|exec|canary)$$'

# libFuzzer (clang): `make fuzz` runs each target for FUZZ_SECONDS, growing
# a scratch corpus in $(FUZZ_BUILD)/corpus from the committed seeds;
# `make fuzz-smoke` (CI) runs each for a fixed number of inputs. A crash
# leaves its input in $(FUZZ_BUILD)/ and fails the target.
.PHONY: fuzz-build fuzz fuzz-smoke
FUZZ_BUILD ?= build-fuzz
FUZZ_TARGETS := config_fuzz dispatch_request_fuzz
FUZZ_SECONDS ?= 60
FUZZ_RUNS ?= 2000

fuzz-build:
	$(MAKE) configure BUILD=$(FUZZ_BUILD) BUILD_TYPE=RelWithDebInfo \
	  CMAKE_FLAGS="-DCMAKE_CXX_COMPILER=clang++ -DCFDB_FUZZ=ON -DCFDB_BUILD_TESTS=OFF $(CMAKE_FLAGS)"
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target $(FUZZ_TARGETS)

define run_fuzzers
	@set -e; for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$t; \
	  echo "== $$t $(1)"; \
	  $(FUZZ_BUILD)/fuzz/$$t $(1) -artifact_prefix=$(FUZZ_BUILD)/$$t- \
	    -print_final_stats=1 $(FUZZ_BUILD)/corpus/$$t fuzz/corpus/$$t; \
	done
endef

fuzz: fuzz-build
	$(call run_fuzzers,-max_total_time=$(FUZZ_SECONDS))

fuzz-smoke: fuzz-build
	$(call run_fuzzers,-runs=$(FUZZ_RUNS))

# A long soak (tests/rpc/soak_test.cc) in the normal build; ctest runs a short one.
.PHONY: soak
SOAK_JOBS ?= 2000
SOAK_CLIENTS ?= 8
soak: configure
	cmake --build $(BUILD) -j $(JOBS) --target soak_test
	CFDB_SOAK_JOBS=$(SOAK_JOBS) CFDB_SOAK_CLIENTS=$(SOAK_CLIENTS) \
	  $(BUILD)/tests/soak_test

# Habits that keep the shape (docs/DESIGN.md), run by CI:
# format-check (clang-format, Google style, on every C++ file git tracks),
# tidy (clang-tidy over src/, .clang-tidy, on the main build's compile
# commands without its precompiled headers; it checks the locking
# annotations too, as every clang build does) and check-layers (no include
# cycle; includes point down the layers, in src/, include/ and tests/; core
# and exec include no gRPC).
.PHONY: format format-check tidy check-layers
CXX_FILES = $(shell git ls-files '*.cc' '*.h')

format:
	clang-format -i $(CXX_FILES)

format-check:
	@clang-format --dry-run -Werror $(CXX_FILES) && echo "format-check: $(words $(CXX_FILES)) files in Google style"

# clang-tidy 22 (Debian's clang-tidy-22) skips the code of system headers,
# where 14 spent three quarters of its time: 390 -> 142 s. The compile
# commands carry CI's -Werror, which would make clang 22's deprecation
# warning inside libstdc++ 12's own std::stable_sort an error; deprecations
# are the GCC build's to report.
tidy: configure
	python3 scripts/tidy-commands.py $(BUILD)
	run-clang-tidy-22 -p $(BUILD)/tidy -j $(JOBS) -quiet \
	  -extra-arg=-Wno-unknown-warning-option -extra-arg=-Wthread-safety \
	  -extra-arg=-Wno-deprecated-declarations '$(CURDIR)/src/'

check-layers:
	python3 scripts/check-layers.py
