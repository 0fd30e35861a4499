#!/usr/bin/python3
"""A real PyTorch inference loop instrumented with edgemon: copy this into your pipeline.

Each frame runs three stages around torchvision's mobilenet_v3_small (random weights: no
download, and they time the same as trained ones) on one CPU thread, at a fixed frame rate:

  preprocess   a synthetic 8-bit RGB camera frame -> normalised float NCHW tensor
  infer        the model, under torch.inference_mode()
  postprocess  softmax and the top 5 classes

Each stage is wrapped in `with edgemon.span(name):` after `edgemon.set_frame(n)`; the spans go
to edgemon-agent through the client's shared-memory ring (no system call per span). Every frame
reads `edgemon.level()` (the agent's state page, no system call): at DEGRADED or CRITICAL the
loop feeds the model a smaller frame (--light-size, 160 px: about half the work), at NOMINAL it
goes back to the full size. Without an agent the loop runs the same and the client counts what
it could not deliver.

Frames are paced by absolute deadlines on time.monotonic (frame n is due at start + n/fps). A
frame is late when its work ends after the next frame's deadline. With --report the loop
prints, on stdout, a line "edgemon-example: window start" when its measured window begins
(after --warmup seconds) and at the end one JSON line with the window's frame times (from
deadline to the end of postprocess, ms: p50, p99, max), late frames and its own CPU per frame;
tests/bench/bench_torch_pipeline.py reads those.

    torch_inference.py [--fps 30] [--seconds S] [--no-spans] [--threads 1] [--report]

Needs Debian 12's python3-torch and python3-torchvision. The client is found the way it always
is: $EDGEMON_SOCKET, $EDGEMON_RUNTIME_DIR/spans.sock, then the agent's defaults.
"""

import argparse
import json
import os
import sys
import time

# Import the client from this checkout (firmware/client/python), so no installation is needed.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
import edgemon  # noqa: E402

STAGES = ("preprocess", "infer", "postprocess")
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def load_model(threads):
    import torch
    import torchvision

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(threads)
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v3_small(weights=None).eval()
    return torch, model


class Pipeline:
    """The three stages; the camera is a fixed random frame nudged each time."""

    def __init__(self, torch, model, size, light_size):
        self.torch = torch
        self.model = model
        self.size = size
        self.light_size = light_size
        self.camera = torch.randint(0, 256, (size, size, 3), dtype=torch.uint8)
        self.mean = torch.tensor(MEAN).view(1, 3, 1, 1)
        self.std = torch.tensor(STD).view(1, 3, 1, 1)

    def preprocess(self, n, light):
        frame = self.camera
        frame[n % self.size, :, :] = n & 0xFF  # a new row each frame, as a camera would
        if light:
            step = self.size / self.light_size
            idx = (self.torch.arange(self.light_size) * step).long()
            frame = frame.index_select(0, idx).index_select(1, idx)
        x = frame.permute(2, 0, 1).unsqueeze(0).float().div_(255.0)
        return (x - self.mean) / self.std

    def infer(self, x):
        with self.torch.inference_mode():
            return self.model(x)

    def postprocess(self, logits):
        probs = logits.softmax(dim=1)
        top = probs.topk(5, dim=1)
        return list(zip(top.indices[0].tolist(), top.values[0].tolist()))


def percentile(sorted_ms, p):
    """Nearest-rank percentile of a sorted list."""
    if not sorted_ms:
        return None
    k = max(0, min(len(sorted_ms) - 1, int(-(-p * len(sorted_ms) // 100)) - 1))
    return sorted_ms[k]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fps", type=float, default=30.0, help="frames per second (default 30)")
    ap.add_argument("--seconds", type=float, default=0,
                    help="stop after S seconds of measured window (0: run until Ctrl-C)")
    ap.add_argument("--warmup", type=float, default=0,
                    help="seconds before the measured window starts (default 0)")
    ap.add_argument("--no-spans", action="store_true",
                    help="run the stages without edgemon.span (the level is still read)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--size", type=int, default=224, help="frame size, pixels (default 224)")
    ap.add_argument("--light-size", type=int, default=160,
                    help="frame size at DEGRADED or CRITICAL (default 160)")
    ap.add_argument("--report", action="store_true",
                    help="print the window markers and a JSON summary on stdout")
    args = ap.parse_args(argv)
    if args.fps <= 0 or args.seconds < 0 or args.warmup < 0:
        ap.error("--fps must be positive, --seconds and --warmup 0 or more")
    if args.threads < 1 or not 32 <= args.light_size <= args.size:
        ap.error("--threads must be 1 or more, and 32 <= --light-size <= --size")

    try:
        torch, model = load_model(args.threads)
    except ImportError as e:
        print(f"torch_inference: {e}: install python3-torch and python3-torchvision",
              file=sys.stderr)
        return 2
    pipe = Pipeline(torch, model, args.size, args.light_size)
    for n in range(5):  # the first calls allocate and pick kernels: not frames
        pipe.postprocess(pipe.infer(pipe.preprocess(n, False)))

    spans = not args.no_spans
    span, set_frame, level = edgemon.span, edgemon.set_frame, edgemon.level
    period = 1.0 / args.fps
    monotonic = time.monotonic
    start = monotonic()
    window_start = start + args.warmup
    window_end = window_start + args.seconds if args.seconds else None
    in_window = False
    frame_ms, late, cpu0, frames0 = [], 0, 0.0, 0
    light = False
    n = 0
    deadline = start
    # The model identity, carried by every data window: the variant says which frame size
    # ("full" or "light") produced it.
    edgemon.set_model("mobilenet_v3_small", "1.0", variant="full")
    print(f"[inference] mobilenet_v3_small, {args.threads} thread(s), {args.fps:g} fps, "
          f"spans {'on' if spans else 'off'}", file=sys.stderr, flush=True)
    while True:
        now = monotonic()
        if not in_window and now >= window_start:
            in_window, cpu0, frames0 = True, time.process_time(), n
            if args.report:
                print("edgemon-example: window start", flush=True)
        if window_end is not None and now >= window_end:
            break
        lvl = level()
        if not light and lvl in ("DEGRADED", "CRITICAL"):
            light = True
            edgemon.set_model("mobilenet_v3_small", "1.0", variant="light")
            print(f"[inference] level {lvl}: frames of {args.light_size} px",
                  file=sys.stderr, flush=True)
        elif light and lvl in ("NOMINAL", None):
            light = False
            edgemon.set_model("mobilenet_v3_small", "1.0", variant="full")
            print(f"[inference] level {lvl or 'unknown'}: frames of {args.size} px",
                  file=sys.stderr, flush=True)
        if spans:
            set_frame(n)
            with span("preprocess"):
                x = pipe.preprocess(n, light)
            with span("infer"):
                logits = pipe.infer(x)
            with span("postprocess"):
                pipe.postprocess(logits)
        else:
            pipe.postprocess(pipe.infer(pipe.preprocess(n, light)))
        end = monotonic()
        n += 1
        if in_window:
            frame_ms.append((end - deadline) * 1000.0)
            late += end > deadline + period
        deadline += period
        if end - deadline > 10 * period:  # far behind: skip the missed frames, do not race
            deadline += int((end - deadline) / period) * period
        wait = deadline - monotonic()
        if wait > 0:
            time.sleep(wait)

    if args.report:
        frames = n - frames0
        cpu = time.process_time() - cpu0
        ms = sorted(frame_ms)
        print(json.dumps({
            "frames": frames, "late": late,
            "frame_ms": {"p50": percentile(ms, 50), "p99": percentile(ms, 99),
                         "max": ms[-1] if ms else None},
            "cpu_ms_per_frame": 1000.0 * cpu / frames if frames else None,
            "spans": spans, "client": edgemon.stats() if spans else None,
        }), flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        pass
