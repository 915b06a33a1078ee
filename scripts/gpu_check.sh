#!/usr/bin/env bash
# gpu_check.sh: tp's GPU checks, run on a lent GPU machine from the repository's root, with the
# folder that scripts/gpu_deps.sh fills here (.deps) carried along:
#
#   device run: bash scripts/gpu_check.sh        (carry: [".deps"])
#
# That machine has LibTorch with CUDA only as its Python torch, and no CMake packages for tp's
# dependencies, so this compiles the few programs it needs directly (g++, 16 cores) against that
# LibTorch: the image and input tests (the CUDA ones run there: pinned decoding, staging,
# resume through StagingInput), the examples fashion_mnist and image_folder (which trains on the
# GPU from JPEG files), bench_image_pipeline, and the sync check (tests/test_cuda_sync.cpp,
# unoptimized and linked with -rdynamic so that its call stacks name tp's functions). Then it
# runs them, each step under a time limit, writing what each printed to $OUT (or ./gpu_out).
# STEPS (default "tests examples bench sync"; "gpt" adds nanoGPT's GPU configuration by tp, its
# Python peer and nanoGPT's train.py, "tensorboard" TensorBoard's own reader on tp's event
# files) picks steps; THREADS, SETS, REPS and SECS go to
# bench/image_pipeline.sh, which the bench step stops after BENCH_TIMEOUT seconds (default 200).
set -uo pipefail
root=$(pwd)
deps=$root/.deps
out=${OUT:-$root/gpu_out}
work=/tmp/tp_gpu
steps=${STEPS:-tests examples bench sync}
mkdir -p "$out" "$work"
[ -f "$deps/include/jpeglib.h" ] || { echo "gpu_check.sh: no $deps (run scripts/gpu_deps.sh here, and carry .deps)" >&2; exit 2; }
log() { echo "== $(date +%T) $*" | tee -a "$out/summary.txt"; }

# Debian 12's libraries; ICU's data unpacked; Fashion-MNIST where tp and the scripts look for it.
[ -f "$deps/lib/libicudata.so.72" ] || python3 -c "import lzma, sys; open(sys.argv[2], 'wb').write(lzma.open(sys.argv[1]).read())" \
  "$deps/lib/libicudata.so.72.xz" "$deps/lib/libicudata.so.72"
mkdir -p /usr/share/datasets && ln -sfn "$deps/fashion-mnist" /usr/share/datasets/fashion-mnist
torch_dir=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')
cuda_dir=/usr/local/cuda  # CUDA's toolkit; else the pip packages' headers and runtime beside torch
[ -f "$cuda_dir/include/cuda_runtime_api.h" ] ||
  cuda_dir=$(dirname "$(find "$torch_dir/.." -path "*nvidia*" -name cuda_runtime_api.h | head -1)")/..
[ -e "$cuda_dir/lib64" ] || ln -sfn lib "$cuda_dir/lib64" 2>/dev/null
ls "$cuda_dir"/lib64/libcudart.so* >/dev/null 2>&1 || { ls "$cuda_dir"/lib64/libcudart.so.* && ln -sf "$(ls "$cuda_dir"/lib64/libcudart.so.* | head -1)" "$cuda_dir/lib64/libcudart.so"; }
echo "CUDA from $cuda_dir" >>"$out/summary.txt"
{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version --format=csv,noheader; lscpu | grep "Model name"; grep -o -w -E "avx2|avx512f|avx512_bf16|amx_tile" /proc/cpuinfo | sort -u | tr "\n" " "; echo; g++ --version | head -1; python3 -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__)'; nproc; } \
  2>&1 | tee -a "$out/summary.txt"

# tp's sources need C++20; pip's LibTorch is built with the new C++ ABI. The system's libstdc++
# goes first: those wheels export older std::filesystem symbols (README, Supported platforms).
flags=(-std=c++20 -O2 -DNDEBUG -D_GLIBCXX_USE_CXX11_ABI=1 -DTP_WITH_CUDA=1 -I"$root/include" -isystem "$deps/include"
       -isystem "$torch_dir/include" -isystem "$torch_dir/include/torch/csrc/api/include" -isystem "$cuda_dir/include"
       -DTP_PYTHON=\"python3\" -DTP_SOURCE_DIR=\""$root"\" -DTP_RESUME_WORKER=\"/bin/false\" -DTP_EXPORT=\"/bin/false\")
libs=(-Wl,--no-as-needed -lstdc++ -L"$torch_dir/lib" -Wl,-rpath,"$torch_dir/lib" -ltorch -ltorch_cuda -ltorch_cpu -lc10_cuda -lc10
      -L"$cuda_dir/lib64" -Wl,-rpath,"$cuda_dir/lib64" -lcudart -Wl,--as-needed
      -L"$deps/lib" -Wl,-rpath,"$deps/lib" -Wl,-rpath-link,"$deps/lib" -ljpeg -lpng16 -larchive -lz -lpthread)
build() {  # NAME SOURCES...: compiles the sources in parallel, then links NAME
  local name=$1 objects=() pids=()
  shift
  for src in "$@"; do
    local o="$work/$(basename "$src" .cpp).o"
    objects+=("$o")
    g++ "${flags[@]}" ${EXTRA_FLAGS:-} -c "$root/$src" -o "$o" >"$work/$(basename "$src").log" 2>&1 & pids+=($!)
  done
  local ok=0
  for p in "${pids[@]}"; do wait "$p" || ok=1; done
  if [ $ok -ne 0 ]; then
    log "build $name: FAILED"
    for src in "$@"; do head -c 3000 "$work/$(basename "$src").log"; done | tee -a "$out/summary.txt"
    return 1
  fi
  local extra=()
  [[ $name == gpu_tests || $name == sync_tests ]] && extra=("$deps/lib/libgtest_main.a" "$deps/lib/libgtest.a")
  if [ "$name" = sync_tests ]; then  # NCCL's library sits beside torch's (pip's nvidia-nccl)
    local nccl
    nccl=$(find "$torch_dir/.." -name "libnccl.so*" 2>/dev/null | head -1)
    extra+=(-rdynamic ${nccl:+"$nccl" -Wl,-rpath,"$(dirname "$nccl")"})
  fi
  g++ "${objects[@]}" "${extra[@]}" "${libs[@]}" -o "$work/$name" >"$work/$name.link.log" 2>&1 ||
    { log "link $name: FAILED"; head -c 3000 "$work/$name.link.log" | tee -a "$out/summary.txt"; return 1; }
  log "built $name"
}

log "building what the steps run"
builds=()
if [[ " $steps " == *" tests "* ]]; then build gpu_tests tests/test_image_sources.cpp tests/test_input.cpp & builds+=($!); fi
if [[ " $steps " == *" examples "* ]]; then
  build image_folder examples/image_folder.cpp & builds+=($!)
  build fashion_mnist examples/fashion_mnist.cpp & builds+=($!)
fi
if [[ " $steps " == *" gpt "* ]]; then build gpt examples/gpt.cpp & builds+=($!); fi
if [[ " $steps " == *" tensorboard "* && " $steps " != *" examples "* ]]; then build fashion_mnist examples/fashion_mnist.cpp & builds+=($!); fi
if [[ " $steps " == *" sync "* ]]; then EXTRA_FLAGS="-O0 -g" build sync_tests tests/test_cuda_sync.cpp & builds+=($!); fi
if [[ " $steps " == *" bench "* ]]; then build bench_image_pipeline bench/bench_image_pipeline.cpp & builds+=($!); fi
for b in "${builds[@]}"; do wait "$b"; done

export OMP_NUM_THREADS=4
if [[ " $steps " == *" tests "* && -x $work/gpu_tests ]]; then
  log "tests (the CUDA ones run here)"
  timeout 150 "$work/gpu_tests" --gtest_brief=1 >"$out/tests.txt" 2>&1
  echo "exit $?" >>"$out/tests.txt"
  grep -E "PASSED|FAILED|SKIPPED|exit" "$out/tests.txt" | head -30 | tee -a "$out/summary.txt"
fi
if [[ " $steps " == *" sync "* && -x $work/sync_tests ]]; then
  log "host syncs per step (tests/test_cuda_sync.cpp)"
  timeout 200 "$work/sync_tests" >"$out/sync.txt" 2>&1
  echo "exit $?" >>"$out/sync.txt"
  grep -E "^\[ *(OK|FAILED|SKIPPED|PASSED) *\]|sync\(s\)|exit" "$out/sync.txt" | head -30 | tee -a "$out/summary.txt"
fi
if [[ " $steps " == *" gpt "* && -x $work/gpt ]]; then
  # nanoGPT's GPU configuration (config/train_shakespeare_char.py) in bf16: tp's whole run, then
  # GPT_PEER_ITERS steps of the Python peer and of nanoGPT's own train.py (its source and
  # prepared data in .deps/nanoGPT, carried, never committed), without and with torch.compile.
  text=$deps/shakespeare/input.txt
  log "gpt: tp, nanoGPT's shakespeare_char configuration, bf16"
  start=$SECONDS
  timeout "${GPT_TIMEOUT:-300}" "$work/gpt" --preset shakespeare-char --data "$text" --out-dir "$work/gpt_bf16" --precision bf16 \
    ${GPT_FLAGS:-} >"$out/gpt_tp.txt" 2>&1
  echo "exit $?, wall $((SECONDS - start)) s" >>"$out/gpt_tp.txt"
  grep -E "^step|best val|wall|rror|it/s" "$out/gpt_tp.txt" | tail -8 | tee -a "$out/summary.txt"
  iters=${GPT_PEER_ITERS:-300}
  config=(--n-layer 6 --n-head 6 --n-embd 384 --block-size 256 --batch-size 64 --dropout 0.2 --lr-decay-iters 5000 --warmup-iters 100 --beta2 0.99)
  log "gpt: the Python peer, $iters steps"
  timeout 90 python3 "$root/bench/gpt_peer.py" train "$work/gpt_bf16/data" --iters "$iters" --device cuda --bf16 "${config[@]}" \
    >"$out/gpt_peer.txt" 2>&1
  tail -1 "$out/gpt_peer.txt" | tee -a "$out/summary.txt"
  if [ -f "$deps/nanoGPT/train.py" ]; then
    for compile in False True; do
      log "gpt: nanoGPT train.py, $iters steps, compile=$compile"
      ( cd "$deps/nanoGPT" && timeout "${NANOGPT_TIMEOUT:-150}" python3 train.py config/train_shakespeare_char.py --compile=$compile \
          --max_iters="$iters" --eval_interval=100000 --eval_iters=1 --out_dir="$work/nanogpt_$compile" ) >"$out/nanogpt_$compile.txt" 2>&1
      # its "iter N: ... time T ms" lines, every 10 steps: the median after the first 50 steps
      grep -o "iter [0-9]*: loss [0-9.]*, time [0-9.]*ms" "$out/nanogpt_$compile.txt" | awk '$2+0 >= 50 { sub("ms", "", $6); print $6 }' |
        sort -n | awk '{ a[NR] = $1 } END { if (NR) printf "nanoGPT: median %.2f ms a step (%d samples)\n", a[int((NR + 1) / 2)], NR; else print "nanoGPT: no timings" }' |
        tee -a "$out/summary.txt"
    done
  fi
fi
if [[ " $steps " == *" tensorboard "* && -x $work/fashion_mnist ]]; then
  # TensorBoard's own reader (its EventAccumulator) on the event files tp writes.
  log "tensorboard reads tp's event files"
  rm -rf "$work/tb"
  ( cd "$work" && timeout 120 ./fashion_mnist --epochs 1 --steps-per-epoch 50 --logdir "$work/tb" ) >"$out/tensorboard_run.txt" 2>&1
  timeout 60 python3 - "$work/tb" <<'PY' 2>&1 | tee -a "$out/summary.txt"
import sys
import tensorboard
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ea = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0, "histograms": 0, "images": 0, "tensors": 0})
ea.Reload()
tags = ea.Tags()
print("tensorboard", tensorboard.__version__, {k: len(v) for k, v in tags.items() if isinstance(v, list)})
for tag in sorted(tags["scalars"])[:6]:
    events = ea.Scalars(tag)
    print(f"  scalar {tag}: {len(events)} values, last {events[-1].value:.4f} at step {events[-1].step}")
print("  images:", tags["images"][:3], " histograms:", tags["histograms"][:3], " tensors (text):", tags["tensors"][:3])
PY
fi
if [[ " $steps " == *" examples "* ]]; then
  log "Fashion-MNIST as JPEG files"
  [ -d "$work/fm/train" ] || python3 "$root/scripts/write_image_folder.py" "$work/fm" --format jpeg 2>&1 | tail -3 | tee -a "$out/summary.txt"
  if [ -x "$work/fashion_mnist" ]; then
    log "fashion_mnist, in memory, on the GPU"
    start=$SECONDS
    ( cd "$work" && timeout 150 ./fashion_mnist --epochs 3 ) >"$out/fashion_mnist.txt" 2>&1
    echo "exit $?, wall $((SECONDS - start)) s" >>"$out/fashion_mnist.txt"
    grep -E "final test accuracy|wall|rror|it/s" "$out/fashion_mnist.txt" | tail -4 | tee -a "$out/summary.txt"
  fi
  if [ -x "$work/image_folder" ]; then
    log "image_folder, from JPEG files, on the GPU (8 decode threads)"
    start=$SECONDS
    ( cd "$work" && timeout 150 ./image_folder fm/train fm/test --epochs 3 --threads 8 ) >"$out/image_folder.txt" 2>&1
    echo "exit $?, wall $((SECONDS - start)) s" >>"$out/image_folder.txt"
    grep -E "final test accuracy|wall|rror|it/s" "$out/image_folder.txt" | tail -4 | tee -a "$out/summary.txt"
  fi
fi
if [[ " $steps " == *" bench "* && -x $work/bench_image_pipeline ]]; then
  log "bench/image_pipeline.sh"
  THREADS=${THREADS:-2 4 8} SETS=${SETS:-fm256} REPS=${REPS:-1} SECS=${SECS:-2} TP_PYTHON=python3 TP_IMAGE_BENCH_DATA=$work/bench \
    timeout "${BENCH_TIMEOUT:-200}" bash "$root/bench/image_pipeline.sh" "$work/bench_image_pipeline" >"$out/bench.txt" 2>&1
  sed -n '/^images /,$p' "$out/bench.txt" | tee -a "$out/summary.txt"  # the medians, then the in-thread measures
fi
log "done"
