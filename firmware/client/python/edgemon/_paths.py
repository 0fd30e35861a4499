"""Where the agent's span socket is: the same defaults edgemon-agent uses.

The first that applies wins:

1. the path given to Client(socket_path=...) / edgemon.configure(socket_path=...);
2. $EDGEMON_SOCKET;
3. $EDGEMON_RUNTIME_DIR/spans.sock;
4. /run/edgemon/spans.sock when the effective uid is 0, or when that socket exists (the agent
   as a system service: /run/edgemon is its RuntimeDirectory, which the edgemon group reaches);
5. $XDG_RUNTIME_DIR/edgemon/spans.sock when XDG_RUNTIME_DIR is set (an absolute path);
6. /tmp/edgemon-<euid>/spans.sock.

Steps 4-6 are the agent's own default runtime_dir (firmware/agent/config.c) followed by
"/spans.sock". Empty environment variables count as unset.
"""

import os

SOCKET_NAME = "spans.sock"
# The system service's runtime directory (RuntimeDirectory=edgemon in its unit).
SERVICE_DIR = "/run/edgemon"


def default_runtime_dir(environ=None):
    """The agent's default runtime directory for this user, as firmware/agent/config.c has it."""
    env = os.environ if environ is None else environ
    euid = os.geteuid()
    if euid == 0 or os.path.exists(SERVICE_DIR + "/" + SOCKET_NAME):
        return SERVICE_DIR
    xdg = env.get("XDG_RUNTIME_DIR", "")
    if xdg.startswith("/"):
        return os.path.join(xdg, "edgemon")
    return "/tmp/edgemon-%d" % euid


def resolve_path(explicit, env_var, name, environ=None):
    """The explicit argument, then $env_var, then $EDGEMON_RUNTIME_DIR/name, then the agent's
    default runtime dir + "/" + name: how every client file of the agent is found."""
    if explicit:
        return os.fspath(explicit)
    env = os.environ if environ is None else environ
    path = env.get(env_var, "")
    if path:
        return path
    runtime_dir = env.get("EDGEMON_RUNTIME_DIR", "")
    if runtime_dir:
        return os.path.join(runtime_dir, name)
    return os.path.join(default_runtime_dir(env), name)


def resolve_socket_path(explicit=None, environ=None):
    """Returns the span socket path to use (a str); see the module docstring for the order."""
    return resolve_path(explicit, "EDGEMON_SOCKET", SOCKET_NAME, environ)
