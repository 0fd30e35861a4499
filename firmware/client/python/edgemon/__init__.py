"""edgemon: tell edgemon-agent how long each stage of each frame took.

Standard library only, Python 3.8+. Each span is one 64-byte unix datagram (span datagram v1,
proto/WIRE.md) sent without blocking to the agent's socket; an absent, restarting or slow
agent costs a counted drop, never an exception and never a wait.

    import edgemon

    for n, image in enumerate(camera):
        edgemon.set_frame(n)
        with edgemon.span("preprocess"):
            x = preprocess(image)
        with edgemon.span("infer", sync=torch.cuda.synchronize):
            y = model(x)
        with edgemon.span("postprocess"):
            publish(postprocess(y))

    with edgemon.span("infer", gpu=True):   # also "infer.gpu": the GPU time, never waited for
        y = model(x)

    @edgemon.span("plan")           # the decorator form: one span per call
    def plan(detections): ...

    edgemon.record("camera.rx", start_ns, duration_ns)   # timed by the caller (monotonic ns)
    edgemon.heartbeat("watchdog")                         # alive, nothing to time
    edgemon.set_model("mobilenet_v3_small", "1.4", variant="full")  # the model identity
    edgemon.stats()   # {'sent': .., 'dropped': {'no_agent': .., 'queue_full': ..,
                      #  'invalid_stage': .., 'other': ..}, 'socket_path': .., 'connected': ..}

    if edgemon.level() == "DEGRADED": ...   # the agent's level, from the mapped state page
    edgemon.state()                          # every field of it (edgemon.State), or None
    edgemon.subscribe()                      # then edgemon.wait_change(timeout) -> State/None

With an agent that writes a deadline page (span ring v2), each thread's spans go to its own
shared-memory ring instead, without a system call; the API is the same (see README.md).

The module-level functions use one default Client, created on first use, whose socket path is
resolved from the environment ($EDGEMON_SOCKET, $EDGEMON_RUNTIME_DIR, then the agent's own
defaults; see README.md). edgemon.Client(socket_path, sync) makes an independent one.
"""

from ._client import DROP_REASONS, RECONNECT_INTERVAL_NS, Client, configure, default_client
from ._client import dropped, heartbeat, level, record, set_frame, set_model, span, state, stats
from ._client import poll_gpu
from ._client import resolve_deadline_path, subscribe, unsubscribe, wait_change
from ._paths import resolve_socket_path
from ._state import LEVEL_NAMES, State, StatePage, Subscriber, decode_push, resolve_state_path

__version__ = "0.1.0"

__all__ = [
    "Client",
    "DROP_REASONS",
    "RECONNECT_INTERVAL_NS",
    "configure",
    "default_client",
    "LEVEL_NAMES",
    "State",
    "StatePage",
    "Subscriber",
    "decode_push",
    "dropped",
    "heartbeat",
    "level",
    "poll_gpu",
    "record",
    "resolve_deadline_path",
    "resolve_socket_path",
    "resolve_state_path",
    "set_frame",
    "set_model",
    "span",
    "state",
    "stats",
    "subscribe",
    "unsubscribe",
    "wait_change",
]
