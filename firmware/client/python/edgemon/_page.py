"""Opening the agent's pages without trusting what lies at their paths.

The state page, the deadline page and the profile request page are files in the agent's
runtime directory (proto/WIRE.md), and whoever can write that directory can put anything in a
page's place. A FIFO there would hold a plain open() until some process opened it for writing:
the frame that checked the page would stall for as long. open_page() never blocks and keeps a
descriptor only for a regular file:

- lstat() first: anything but a regular file is refused without being opened at all;
- then open() with O_NONBLOCK (a FIFO swapped in after the lstat() opens at once), O_NOFOLLOW
  (the agent makes its pages by renaming regular files into place, never links), O_NOCTTY and
  O_CLOEXEC, and fstat() of the descriptor: the file that was opened is the one checked.

A refused file is reported once per path and reason with a RuntimeWarning naming the user's
line (never once per frame), its reason is kept for stats (refusal()), and the caller treats
the page as absent. The sizes are the caller's to check (each page has its own).

Standard library only; no state but the path -> reason table (one entry per page path).
"""

import errno
import os
import stat

from ._wire import warn_at_caller

_FLAGS = (os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
          | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_NOFOLLOW", 0))

_KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))

_refused = {}  # path -> the reason its last look refused it (absent once a look succeeds)
_reported = set()  # (path, reason) pairs already warned about


class PageRefused(OSError):
    """Something other than a regular file is at a page's path. An OSError, so a caller that
    does not tell it apart treats the page as absent, as it should."""


def kind_of(mode):
    """What a file of st_mode `mode` is, in words, when it is not a regular file."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def refusal(path):
    """Why the last look at `path` refused it ("a FIFO, not a regular file"), or None."""
    return _refused.get(os.fspath(path))


def _refuse(path, what, mode):
    reason = "%s, not a regular file" % kind_of(mode)
    _refused[path] = reason
    if (path, reason) not in _reported:
        _reported.add((path, reason))
        warn_at_caller("edgemon: ignoring the %s %s: %s (treated as absent until the agent "
                       "writes it again)" % (what, path, reason))
    raise PageRefused(reason)


def open_page(path, what):
    """(fd, os.stat_result) of the regular file at `path`, opened read-only without blocking;
    the caller closes fd. Raises OSError when there is no file (or it cannot be opened), and
    PageRefused (an OSError) when something else is there: a FIFO, a symbolic link, a
    directory, a device or a socket. `what` names the page in the one-time warning."""
    path = os.fspath(path)
    try:
        st = os.lstat(path)
    except OSError:
        _refused.pop(path, None)
        raise
    if not stat.S_ISREG(st.st_mode):
        _refuse(path, what, st.st_mode)
    try:
        fd = os.open(path, _FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW: swapped for a link after the lstat()
            _refuse(path, what, stat.S_IFLNK)
        raise
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        _refuse(path, what, st.st_mode)  # swapped after the lstat(): the opened file counts
    _refused.pop(path, None)
    return fd, st
