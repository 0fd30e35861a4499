#!/usr/bin/env python3
"""A stand-in for an inference loop, standard library only.

Each frame runs three stages the way a vision pipeline does: preprocess (touches a frame
buffer), infer (a burst of arithmetic), postprocess (a small reduction), at a fixed frame
rate. It holds a few tens of MiB, so the memory figures have something to show.

    sample_inference.py [--fps N] [--seconds S]
"""

import argparse
import math
import time


def preprocess(frame, n):
    for i in range(0, len(frame), 4096):
        frame[i] = (frame[i] + n) & 0xFF
    return frame


def infer(weights, n):
    acc = 0.0
    for w in weights:
        acc += math.tanh(w * (n % 7 + 1))
    return acc


def postprocess(score):
    return [round(score * k, 3) for k in range(16)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fps", type=float, default=20.0, help="frames per second (default 20)")
    ap.add_argument("--seconds", type=float, default=0, help="stop after S seconds (0: never)")
    args = ap.parse_args()
    frame = bytearray(32 * 1024 * 1024)
    weights = [math.sin(i) for i in range(20000)]
    period = 1.0 / args.fps
    start = time.monotonic()
    n = 0
    while not args.seconds or time.monotonic() - start < args.seconds:
        t0 = time.monotonic()
        preprocess(frame, n)
        postprocess(infer(weights, n))
        n += 1
        time.sleep(max(0.0, period - (time.monotonic() - t0)))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
