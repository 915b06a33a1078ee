# The two commands of the README's quick start. Both set up what is missing first.
BUILD ?= build
JOBS ?= $(shell nproc)
CTEST_ARGS ?=
CMAKE_ARGS ?=

.PHONY: setup configure demo test suite compile-checks test-debian13 bench sanitize fuzz fuzz-here docs clean

setup:
	@bash scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS) > $(BUILD).configure.log 2>&1 || { cat $(BUILD).configure.log; exit 1; }

# Trains a small CNN on Fashion-MNIST to >= 90% test accuracy.
demo: configure
	@cmake --build $(BUILD) --target fashion_mnist -j $(JOBS)
	@$(BUILD)/examples/fashion_mnist --epochs 3 --min-accuracy 0.90

# Builds everything (under CI without a warning: scripts/build_quiet.sh) and runs the whole
# suite (unit, compile-fail, example and package tests),
# then the numerics-sensitive tests again under other BLAS kernels and thread counts.
test: suite
	@bash scripts/timed.sh "kernel matrix ($(BUILD))" env JOBS=$(JOBS) bash scripts/kernel_matrix.sh $(BUILD)

# The whole suite once, with the compiler in CXX (g++ unless set; the first configure of a
# build folder fixes it). Tests run side by side, each with tp's default intra-op threads (the
# physical cores): OpenMP's threads wait passively, so that busy-waiting ones do not starve
# the other tests' (it changes when threads sleep, not what they compute).
suite: configure
	@bash scripts/timed.sh "build ($(BUILD))" bash scripts/build_quiet.sh $(BUILD) $(JOBS)
	@bash scripts/timed.sh "tests ($(BUILD))" env OMP_WAIT_POLICY=passive bash scripts/ctest_timed.sh $(notdir $(BUILD)) $(BUILD) --output-on-failure -j $(JOBS) $(CTEST_ARGS)

# What a second compiler checks: everything builds (the benchmarks too), and the compile-time
# rules' diagnostics hold (the compile-fail cases and the concept tests). Unoptimized, since
# nothing built here runs longer than a test of the rules; the suite itself runs with g++.
compile-checks: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0 -DTP_TEST_OPTIMIZATION= -DTP_BENCH_IN_ALL=ON > $(BUILD).configure.log 2>&1 || { cat $(BUILD).configure.log; exit 1; }
	@bash scripts/timed.sh "build ($(BUILD), -O0)" bash scripts/build_quiet.sh $(BUILD) $(JOBS)
	@bash scripts/timed.sh "compile-time rules ($(BUILD))" bash scripts/ctest_timed.sh $(notdir $(BUILD)).compile_time $(BUILD) --output-on-failure -j $(JOBS) -L compile_time

# Debian 13 (LibTorch 2.6, CMake 3.31) in a debootstrap root kept in ~/.cache/tp: the suite with
# g++ 14, then with clang 19 (needs root; see scripts/debian13.sh).
test-debian13:
	@JOBS=$(JOBS) bash scripts/debian13.sh

bench: configure
	@cmake --build $(BUILD) --target benches -j $(JOBS)
	@for b in $(BUILD)/bench/bench_*; do $$b; done

# The unit and multi-process tests under ThreadSanitizer and AddressSanitizer (our code
# instrumented, LibTorch not; the multi-process tests run instrumented ranks). ThreadSanitizer
# runs LibTorch's kernels on one OpenMP thread: libgomp is not instrumented, so TSan cannot see
# its barriers and reports races inside LibTorch's own parallel kernels (oneDNN's convolutions);
# tp's threads (input workers, parallel_map, towers, reducers) are all still checked.
sanitize: setup
	@for s in thread address; do \
	  cmake -S . -B $(BUILD)-$$s -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTP_SANITIZE=$$s -DTP_BUILD_EXAMPLES=OFF -DTP_BUILD_BENCH=OFF > /dev/null && \
	  cmake --build $(BUILD)-$$s --target tp_tests tp_process_tests -j $(JOBS) && \
	  echo "== $$s sanitizer" && \
	  export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ASAN_OPTIONS="detect_leaks=0" && \
	  run=env && if [ $$s = thread ]; then run="env OMP_NUM_THREADS=1"; fi && \
	  $$run $(BUILD)-$$s/tests/tp_tests --gtest_brief=1 && \
	  TSAN_OPTIONS="$$TSAN_OPTIONS suppressions=$(CURDIR)/tests/tsan_processes.supp" \
	    $$run $(BUILD)-$$s/tests/tp_process_tests --gtest_brief=1 || exit 1; \
	done

# The libFuzzer targets of fuzz/ (the torch.save reader, checkpoint manifests, tar shards, JPEG,
# PNG), built with clang, each run for FUZZ_RUNS inputs from its seed corpus (scripts/fuzz.sh).
# Debian 12's clang 14 cannot compile LibTorch's headers as C++20: there, the targets build and
# run in the Debian 13 root of make test-debian13 (clang 19; needs root).
FUZZ_RUNS ?= 20000
CLANG_MAJOR := $(shell clang++ -dumpversion 2>/dev/null | cut -d. -f1)
fuzz: setup
	@if [ -z "$(CLANG_MAJOR)" ] || [ "$(CLANG_MAJOR)" -lt 15 ]; then \
	  echo "make fuzz: clang $(CLANG_MAJOR) here cannot compile LibTorch's headers as C++20; the fuzz targets run in the Debian 13 root"; \
	  FUZZ_RUNS=$(FUZZ_RUNS) TP_DEBIAN13_STAGES=fuzz bash scripts/debian13.sh; \
	else $(MAKE) --no-print-directory fuzz-here; fi

fuzz-here:
	@CXX=clang++ cmake -S . -B $(BUILD)-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O1 -DTP_FUZZ=ON -DTP_BUILD_TESTS=OFF -DTP_BUILD_EXAMPLES=OFF -DTP_BUILD_BENCH=OFF > $(BUILD)-fuzz.configure.log 2>&1 || { cat $(BUILD)-fuzz.configure.log; exit 1; }
	@bash scripts/timed.sh "fuzz build" cmake --build $(BUILD)-fuzz --target fuzzers -j $(JOBS)
	@bash scripts/timed.sh "fuzz ($(FUZZ_RUNS) inputs each)" bash scripts/fuzz.sh $(BUILD)-fuzz $(FUZZ_RUNS)

# The API reference: Doxygen's HTML of the headers and the guide (docs/Doxyfile), in
# $(BUILD)-docs/html/index.html, checked: it fails on a public name without documentation or a
# broken link, and says where and what to do (tools/check_reference.py; CTest runs it too).
docs: setup
	@bash scripts/timed.sh "reference ($(BUILD)-docs)" python3 tools/check_reference.py $(BUILD)-docs

clean:
	rm -rf $(BUILD) $(BUILD)-thread $(BUILD)-address $(BUILD)-fuzz $(BUILD)-docs $(BUILD).configure.log build-debian13* 
