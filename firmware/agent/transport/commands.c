/*
 * commands.c - see commands.h.
 */
#define _POSIX_C_SOURCE 200809L

#include "commands.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "edgemon/proto.h"
#include "log.h"

#define REBIRTH_MIN_MS 1000u /* At most one birth per second on cmd/rebirth. */

struct em_commands {
  em_commands_opts_t o;
  uv_timer_t rebirth;       /* A birth deferred by the rate limit. */
  bool pending;             /* The rebirth timer runs. */
  uint64_t last_birth_ns;   /* uv_hrtime() of the last birth sent, 0: none yet. */
  uint64_t suppressed;      /* Requests folded into another's birth. */
  em_log_limit_t malformed; /* Commands that do not decode. */
  em_log_limit_t unknown;   /* Commands the agent does not know. */
  void (*closed)(void *);
  void *closed_ctx;
};

int em_commands_new(em_commands_t **out, const em_commands_opts_t *opts) {
  if (!out || !opts || !opts->loop || !opts->birth || !opts->flight || !opts->profile) {
    return -EINVAL;
  }
  em_commands_t *c = calloc(1, sizeof(*c));
  if (!c) {
    return -ENOMEM;
  }
  c->o = *opts;
  uv_timer_init(opts->loop, &c->rebirth);
  c->rebirth.data = c;
  *out = c;
  return 0;
}

void em_commands_free(em_commands_t *c) {
  free(c);
}

static void on_closed(uv_handle_t *h) {
  em_commands_t *c = h->data;
  c->closed(c->closed_ctx);
}

void em_commands_close(em_commands_t *c, void (*done)(void *), void *ctx) {
  c->closed = done;
  c->closed_ctx = ctx;
  uv_close((uv_handle_t *)&c->rebirth, on_closed);
}

static void on_rebirth_due(uv_timer_t *t) {
  em_commands_t *c = t->data;
  c->pending = false;
  c->o.birth(c->o.ctx);
}

/* cmd/rebirth, rate-limited (commands.h). */
static void request_rebirth(em_commands_t *c) {
  if (c->pending) {
    c->suppressed++;
    return;
  }
  uint64_t now = uv_hrtime();
  uint64_t min_ns = (uint64_t)REBIRTH_MIN_MS * 1000000u;
  if (c->last_birth_ns == 0 || now - c->last_birth_ns >= min_ns) {
    EM_INFO("mqtt: rebirth requested");
    c->o.birth(c->o.ctx);
    return;
  }
  uint64_t wait_ms = (c->last_birth_ns + min_ns - now + 999999u) / 1000000u;
  EM_INFO("mqtt: rebirth requested; the birth follows in %llu ms (one per %u ms at most)",
          (unsigned long long)wait_ms, REBIRTH_MIN_MS);
  c->pending = uv_timer_start(&c->rebirth, on_rebirth_due, wait_ms, 0) == 0;
}

void em_commands_on(em_commands_t *c, const char *name, const uint8_t *payload, size_t len) {
  uint8_t scratch[512];
  em_msg_t msg;
  size_t off = 0;
  int rc = em_proto_decode(payload, len, &msg, scratch, sizeof(scratch), &off);
  if (rc || msg.kind != EM_MSG_CMD) {
    if (em_log_limit_pass(&c->malformed, uv_hrtime(), EM_LOG_LIMIT_NS)) {
      EM_WARN("mqtt: ignoring a malformed command on cmd/%s: %s at byte %zu" EM_LOG_HELD_BACK, name,
              rc ? em_proto_strerror(rc) : "not a cmd message", off);
    }
    return;
  }
  if (strcmp(name, "rebirth") == 0 && msg.u.cmd.command == EM_CMD_REBIRTH) {
    request_rebirth(c);
  } else if (strcmp(name, "flight") == 0 && msg.u.cmd.command == EM_CMD_FLIGHT) {
    c->o.flight(c->o.ctx);
  } else if (strcmp(name, "profile") == 0 && msg.u.cmd.command == EM_CMD_PROFILE) {
    c->o.profile(c->o.ctx, msg.u.cmd.seconds);
  } else if (em_log_limit_pass(&c->unknown, uv_hrtime(), EM_LOG_LIMIT_NS)) {
    EM_WARN("mqtt: ignoring unknown command cmd/%s" EM_LOG_HELD_BACK, name);
  }
}

void em_commands_birth_sent(em_commands_t *c) {
  c->last_birth_ns = uv_hrtime();
  if (c->pending) { /* This birth answers the deferred request too. */
    uv_timer_stop(&c->rebirth);
    c->pending = false;
  }
}

uint64_t em_commands_rebirths_suppressed(const em_commands_t *c) {
  return c->suppressed;
}

void em_commands_flush_log(em_commands_t *c, uint64_t now_ns) {
  em_log_limit_report(&c->malformed, now_ns, "mqtt", "malformed commands ignored", "");
  em_log_limit_report(&c->unknown, now_ns, "mqtt", "unknown commands ignored", "");
}
