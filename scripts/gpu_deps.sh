#!/usr/bin/env bash
# gpu_deps.sh [DIR]: gathers what scripts/gpu_check.sh needs on a lent GPU machine into DIR
# (default .deps, which git ignores), for the device tool to carry there. That machine has
# LibTorch with CUDA (its Python torch), g++, CUDA and Python with torchvision, but no network
# and no package manager: tp's header-only dependencies (range-v3, nlohmann-json, CLI11), the
# image libraries (libjpeg-turbo, libpng, libarchive and the libraries it loads), GoogleTest and
# Fashion-MNIST are copied from this Debian 12 machine. Debian 12's libraries run on the newer
# glibc there. ICU's 30 MB data library (libxml2's, which libarchive loads) travels xz-compressed
# (7 MB), so that all of it stays under the 64 MiB a call carries; gpu_check.sh unpacks it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/.deps}
lib=/usr/lib/x86_64-linux-gnu
rm -rf "$out"
mkdir -p "$out/include" "$out/lib" "$out/fashion-mnist"
for d in range meta concepts std gloo nlohmann CLI gtest; do cp -r "/usr/include/$d" "$out/include/"; done
cp /usr/include/{jerror,jmorecfg,jpeglib,png,pngconf,pnglibconf,archive,archive_entry,zlib,zconf}.h /usr/include/x86_64-linux-gnu/jconfig.h "$out/include/"
cp "$lib"/libgtest.a "$lib"/libgtest_main.a "$out/lib/"
for so in libjpeg.so.62 libpng16.so.16 libarchive.so.13 libnettle.so.8 libacl.so.1 liblzma.so.5 libzstd.so.1 liblz4.so.1 libbz2.so.1.0 libz.so.1 libxml2.so.2 libicuuc.so.72; do
  cp -L "$lib/$so" "$out/lib/$so"
done
xz -6 -T2 -c "$lib/libicudata.so.72" >"$out/lib/libicudata.so.72.xz"
for so in jpeg.so.62 png16.so.16 archive.so.13 z.so.1; do ln -s "lib$so" "$out/lib/lib${so%.so.*}.so"; done
cp "${TP_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"/*-ubyte.gz "$out/fashion-mnist/"
du -sh "$out"
