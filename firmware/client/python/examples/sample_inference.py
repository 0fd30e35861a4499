#!/usr/bin/env python3
"""A stand-in for an inference loop, standard library only, instrumented with edgemon.

Each frame runs three stages the way a vision pipeline does: preprocess (touches a frame
buffer), infer (a burst of arithmetic), postprocess (a small reduction), at a fixed frame
rate. It holds a few tens of MiB, so the memory figures have something to show. Every stage
is timed with edgemon.span and sent to edgemon-agent (one 64-byte datagram per stage per
frame); without an agent the spans are dropped and counted, and the loop runs the same.

    sample_inference.py [--fps N] [--seconds S] [--slow-every N] [--slow-from S --slow-for S]

--slow-every N makes the infer stage of every Nth frame take 5x longer (heavy_scene() runs
infer five times), and --slow-from/--slow-for make every frame's infer 5x longer for a while (a
heavy scene, a throttled SoC), so budgets and degradation have something to catch in demos, and
the stack profile of the slowdown names heavy_scene. The loop reads
its level from the agent every frame (edgemon.level(): no system call) and switches to a
lighter model (a quarter of the work) at DEGRADED or CRITICAL, and back at NOMINAL, naming the
variant it runs with edgemon.set_model (variant "full" or "light"). The socket is found the way the
client always finds it: $EDGEMON_SOCKET, $EDGEMON_RUNTIME_DIR/spans.sock, then the agent's
defaults (firmware/client/python/README.md).
"""

import argparse
import math
import os
import sys
import time

# Import the client from this checkout (firmware/client/python), so no installation is needed.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
import edgemon  # noqa: E402

SLOW_FACTOR = 5


def preprocess(frame, n):
    for i in range(0, len(frame), 4096):
        frame[i] = (frame[i] + n) & 0xFF
    return frame


def infer(weights, n, light=False):
    acc = 0.0
    for w in (weights[: len(weights) // 4] if light else weights):
        acc += math.tanh(w * (n % 7 + 1))
    return acc


def heavy_scene(weights, n, light=False):
    """The slow phase's infer: the model run SLOW_FACTOR times over (a heavy scene, a throttled
    SoC), a function of its own so a profile of the slowdown names it."""
    score = infer(weights, n, light)
    for _ in range(SLOW_FACTOR - 1):
        score = infer(weights, n, light)
    return score


def postprocess(score):
    return [round(score * k, 3) for k in range(16)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fps", type=float, default=20.0, help="frames per second (default 20)")
    ap.add_argument("--seconds", type=float, default=0, help="stop after S seconds (0: never)")
    ap.add_argument("--slow-every", type=int, default=0, metavar="N",
                    help="every Nth frame, infer takes %dx longer (0: never)" % SLOW_FACTOR)
    ap.add_argument("--slow-from", type=float, default=-1, metavar="S",
                    help="from S seconds after start, every infer takes %dx longer" % SLOW_FACTOR)
    ap.add_argument("--slow-for", type=float, default=0, metavar="S",
                    help="... for S seconds (default 0: no slow phase)")
    args = ap.parse_args()
    if args.fps <= 0:
        ap.error("--fps must be positive")
    if args.slow_every < 0:
        ap.error("--slow-every must be 0 or positive")
    frame = bytearray(32 * 1024 * 1024)
    weights = [math.sin(i) for i in range(20000)]
    period = 1.0 / args.fps
    start = time.monotonic()
    n = 0
    light = False
    # The model identity: the agent puts it in every data window, so the host can tell which
    # variant produced each one. A switch below names the variant again.
    edgemon.set_model("sample_net", "1.0", variant="full")
    while not args.seconds or time.monotonic() - start < args.seconds:
        t0 = time.monotonic()
        edgemon.set_frame(n)
        level = edgemon.level()  # a read of the agent's state page, no system call
        if not light and level in ("DEGRADED", "CRITICAL"):
            light = True
            edgemon.set_model("sample_net", "1.0", variant="light")
            print("[inference] level %s: switching to the light model" % level, flush=True)
        elif light and level in ("NOMINAL", None):
            light = False
            edgemon.set_model("sample_net", "1.0", variant="full")
            print("[inference] level NOMINAL: back to the full model", flush=True)
        since = t0 - start
        slow = (args.slow_every > 0 and n > 0 and n % args.slow_every == 0) or (
            args.slow_from >= 0 and args.slow_from <= since < args.slow_from + args.slow_for)
        with edgemon.span("preprocess"):
            preprocess(frame, n)
        with edgemon.span("infer"):
            score = heavy_scene(weights, n, light) if slow else infer(weights, n, light)
        with edgemon.span("postprocess"):
            postprocess(score)
        n += 1
        time.sleep(max(0.0, period - (time.monotonic() - t0)))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
