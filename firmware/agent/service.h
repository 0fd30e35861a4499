/*
 * service.h - the agent's side of systemd's service protocol (sd_notify(3)): READY=1 once the
 * first sample is taken, WATCHDOG=1 while the loop keeps its ticks on time, RELOADING=1 and
 * READY=1 around a SIGHUP reload, STOPPING=1 at SIGTERM, and a one-line STATUS=.
 *
 * Watchdog policy: systemd kills and restarts a service whose pings stop for WatchdogSec. The
 * agent pings from its tick, and only from a tick that ran on time (within half a period of
 * its slot), at most every quarter of the watchdog interval. A loop that is stuck or starved
 * (ticks late) therefore stops pinging and is restarted; one late tick among on-time ones is
 * not enough, because pings before and after it keep the interval.
 *
 * Without NOTIFY_SOCKET (not started by systemd, or Type= is not notify) every call is a
 * cheap no-op. service.c speaks the protocol itself: no libsystemd. Owns nothing but a few
 * counters; single-threaded (the loop's thread).
 */
#ifndef EDGEMON_AGENT_SERVICE_H
#define EDGEMON_AGENT_SERVICE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
  uint64_t watchdog_ns;  /* WatchdogSec as systemd passed it (WATCHDOG_USEC), 0 when off. */
  uint64_t last_ping_ns; /* CLOCK_MONOTONIC of the last WATCHDOG=1, 0 before the first. */
  uint64_t pings;        /* WATCHDOG=1 sent. */
  uint64_t withheld;     /* Ticks that were late and so did not ping. */
  bool ready;            /* READY=1 sent. */
} em_service_t;

/* The longest message em_service_notifyf() formats, its NUL included. */
#define EM_SERVICE_MESSAGE_BYTES 1024

/*
 * The sending half of sd_notify(3): STATE (KEY=VALUE lines joined by '\n', borrowed for the
 * call) as one datagram to $NOTIFY_SOCKET, an absolute path or an abstract name written with a
 * leading '@'. Never blocks. Returns 1 when sent; 0 when NOTIFY_SOCKET is not set (nothing
 * done); -EINVAL for a NULL state or a NOTIFY_SOCKET that is neither form or does not fit a
 * sockaddr_un; -EAGAIN when the receiver's queue is full; socket(2) and sendto(2) errors as
 * negative errno values (-ECONNREFUSED, -ENOENT: nobody listens there).
 */
int em_service_notify(const char *state);

/* em_service_notify() of a printf-style message; -EMSGSIZE (nothing sent) when it needs more
 * than EM_SERVICE_MESSAGE_BYTES. */
int em_service_notifyf(const char *format, ...) __attribute__((format(printf, 1, 2)));

/*
 * sd_watchdog_enabled(3) from the environment: returns 1 and sets *usec (when not NULL) to
 * WATCHDOG_USEC when the watchdog is on for this process; 0 when WATCHDOG_USEC is not set or
 * WATCHDOG_PID names another process; -EINVAL when either is not a plain decimal, the interval
 * is 0 or infinity (UINT64_MAX), or the pid is 0 or out of range. *usec is left alone unless 1.
 */
int em_service_watchdog_usec(uint64_t *usec);

/* The calls below return what em_service_notify() returned, or 0 when they send nothing. */

/* Reads the watchdog interval from the environment (em_service_watchdog_usec): on only when it
 * returns 1. */
void em_service_init(em_service_t *s);

/* READY=1 with a STATUS= line, once; later calls do nothing. */
int em_service_ready(em_service_t *s, const char *status);

/* After the first sample, as the unit promises: READY=1 with "device D: sampling every N ms",
 * once; later calls do nothing. */
int em_service_sampling(em_service_t *s, const char *device, uint64_t period_ns);

/* From the tick: pings the watchdog when on_time and a quarter interval has passed since the
 * last ping; counts a withheld ping otherwise. now_ns is CLOCK_MONOTONIC. */
int em_service_tick(em_service_t *s, uint64_t now_ns, bool on_time);

/* RELOADING=1 (with the CLOCK_MONOTONIC timestamp systemd 253+ wants); then READY=1 when done. */
int em_service_reloading(em_service_t *s, uint64_t now_ns);
int em_service_reloaded(em_service_t *s, const char *status);

/* STOPPING=1. */
int em_service_stopping(em_service_t *s);

#endif /* EDGEMON_AGENT_SERVICE_H */
