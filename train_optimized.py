#!/usr/bin/env python
"""The seed project's entry point: ``python train_optimized.py --config msa_optimized_gpu.yaml [--no-amp] ...``.

A thin wrapper over ``adaptive-ir train``; every flag of that command works here.
"""

import sys

from adaptive_ir.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
