# The two commands of the README's quick start. Both set up what is missing first.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: setup configure demo test bench clean

setup:
	@bash scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release > $(BUILD).configure.log 2>&1 || { cat $(BUILD).configure.log; exit 1; }

# Trains a small CNN on Fashion-MNIST to >= 90% test accuracy.
demo: configure
	@cmake --build $(BUILD) --target fashion_mnist -j $(JOBS)
	@$(BUILD)/examples/fashion_mnist --epochs 3 --min-accuracy 0.90

# Builds everything and runs the whole suite (unit, compile-fail, example and package tests).
test: configure
	@cmake --build $(BUILD) -j $(JOBS)
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

bench: configure
	@cmake --build $(BUILD) --target benches -j $(JOBS)
	@for b in $(BUILD)/bench/bench_*; do $$b; done

clean:
	rm -rf $(BUILD) $(BUILD).configure.log
