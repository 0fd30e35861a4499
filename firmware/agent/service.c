/*
 * service.c - sd_notify(3) messages for systemd (see service.h). libsystemd does the socket
 * work: sd_notify() returns 0 at once when NOTIFY_SOCKET is not set.
 */
#define _POSIX_C_SOURCE 200809L
#include "service.h"

#include <stdio.h>

#include <systemd/sd-daemon.h>

void em_service_init(em_service_t *s) {
  *s = (em_service_t){0};
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) > 0) {
    s->watchdog_ns = usec * 1000u;
  }
}

void em_service_ready(em_service_t *s, const char *status) {
  if (s->ready) {
    return;
  }
  s->ready = true;
  sd_notifyf(0, "READY=1\nSTATUS=%s", status ? status : "running");
}

void em_service_sampling(em_service_t *s, const char *device, uint64_t period_ns) {
  if (s->ready) {
    return;
  }
  char status[128];
  snprintf(status, sizeof(status), "device %s: sampling every %llu ms", device,
           (unsigned long long)(period_ns / 1000000u));
  em_service_ready(s, status);
}

void em_service_tick(em_service_t *s, uint64_t now_ns, bool on_time) {
  if (s->watchdog_ns == 0) {
    return;
  }
  if (!on_time) {
    s->withheld++;
    return;
  }
  if (s->last_ping_ns != 0 && now_ns - s->last_ping_ns < s->watchdog_ns / 4) {
    return;
  }
  s->last_ping_ns = now_ns;
  s->pings++;
  sd_notify(0, "WATCHDOG=1");
}

void em_service_reloading(em_service_t *s, uint64_t now_ns) {
  (void)s;
  sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%llu", (unsigned long long)(now_ns / 1000u));
}

void em_service_reloaded(em_service_t *s, const char *status) {
  (void)s;
  sd_notifyf(0, "READY=1\nSTATUS=%s", status ? status : "running");
}

void em_service_stopping(em_service_t *s) {
  (void)s;
  sd_notify(0, "STOPPING=1\nSTATUS=stopping");
}
