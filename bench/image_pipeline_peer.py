#!/usr/bin/env python3
"""image_pipeline_peer.py ROOT WORKERS SECONDS SIZE: torchvision's side of image_pipeline.sh.

ImageFolder(ROOT) with RandomResizedCrop(SIZE) (PIL's bilinear, antialiased), RandomHorizontalFlip,
ToTensor and Normalize, through DataLoader(batch_size=64, shuffle=True, num_workers=WORKERS):
what a PyTorch user writes. Prints "images_per_s X". As in bench_image_pipeline, the clock starts
after the first batch (worker start-up is not counted) and stops at the first batch after SECONDS.
"""
import sys
import time

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms


def main():
    root, workers, seconds, size = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(1)
    augment = transforms.Compose([
        transforms.RandomResizedCrop(size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ])
    loader = DataLoader(datasets.ImageFolder(root, transform=augment), batch_size=64, shuffle=True,
                        num_workers=workers, persistent_workers=True)
    images, start = 0, None
    while True:
        for data, _ in loader:
            if start is None:
                start = time.perf_counter()
                continue
            images += data.shape[0]
            if time.perf_counter() - start >= seconds:
                print(f"images_per_s {images / (time.perf_counter() - start):.1f}")
                return


if __name__ == "__main__":
    main()
