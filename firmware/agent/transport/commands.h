/*
 * commands.h - the commands the agent takes on edgemon/v1/<device>/cmd/<name> (WIRE.md
 * "Commands"): each payload decoded as a cmd message and handed to the loop's callback for
 * its name (rebirth, flight, profile); a malformed or unknown one is ignored with one log line
 * per EM_LOG_LIMIT_S (the others counted and said once). cmd/rebirth is rate-limited: at most
 * one birth per second; a request within a second of the last birth is answered by one birth
 * at the second's end, and requests that arrive while that one waits share it (counted).
 *
 *   rebirth asked   last birth >= 1 s ago      birth() now
 *                   else, none waiting         the timer: birth() when the second is over
 *                   else (one waiting)         counted (agent.rebirths_suppressed)
 *   any birth sent  em_commands_birth_sent     the waiting one is answered: timer stopped
 *
 * Owns: the rebirth timer (closed by em_commands_close), the log limits. Single-threaded (the
 * loop's thread).
 */
#ifndef EDGEMON_AGENT_COMMANDS_H
#define EDGEMON_AGENT_COMMANDS_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

typedef struct {
  uv_loop_t *loop;
  void (*birth)(void *ctx);                     /* Publish a birth now. */
  void (*flight)(void *ctx);                    /* cmd/flight. */
  void (*profile)(void *ctx, uint32_t seconds); /* cmd/profile (0: the configured length). */
  void *ctx;
} em_commands_opts_t;

typedef struct em_commands em_commands_t;

/* Returns 0 and *out, -EINVAL or -ENOMEM. */
int em_commands_new(em_commands_t **out, const em_commands_opts_t *opts);

/* Frees after em_commands_close's callback. NULL is a no-op. */
void em_commands_free(em_commands_t *c);

/* Closes the timer; done(ctx) from the loop once closed. */
void em_commands_close(em_commands_t *c, void (*done)(void *), void *ctx);

/* The publisher's on_command: `name` after cmd/, the payload (both borrowed for the call). */
void em_commands_on(em_commands_t *c, const char *name, const uint8_t *payload, size_t len);

/* A birth went out (for any reason): a waiting rebirth is answered by it. */
void em_commands_birth_sent(em_commands_t *c);

/* cmd/rebirth requests folded into another's birth, since start. */
uint64_t em_commands_rebirths_suppressed(const em_commands_t *c);

/* Once per tick: the counts of lines held back, when their interval is over. */
void em_commands_flush_log(em_commands_t *c, uint64_t now_ns);

#endif /* EDGEMON_AGENT_COMMANDS_H */
