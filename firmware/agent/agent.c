/*
 * agent.c - see agent.h.
 *
 *   target lifecycle             function
 *   DETACHED -> ATTACHED         on_lookup / start: em_target_find found a pid -> attach
 *   ATTACHED -> DETACHED         on_tick: statm says the pid is gone -> detach
 *   DETACHED: the lookup timer runs every LOOKUP_MS; ATTACHED: it is stopped.
 *
 * One tick (arm_tick keeps ticks on start + k * period, so lateness never accumulates):
 * read the PMU groups, statm, and on their own cadences MemAvailable and PSI (system_period)
 * and smaps_rollup (smaps_period, queued to libuv's worker because it walks page tables),
 * take the stage windows the span socket filled, encode one data message, publish it.
 *
 * The metric dictionary (figures.h) is fixed at start-up: the configured PMU events, the
 * fixed figures, the anomaly scores, the sensors. A birth is published on every connect, on a
 * rebirth command, and after every attach (what is absent may have changed).
 *
 * The model identity (WIRE.md "Model identity"): on_model keeps the last identity a client sent
 * in fixed storage (a copy of the datagram's texts, no allocation); the birth, every data
 * message and every state message carry it (keys 11, 10, 13). A different identity publishes at
 * once a retained state message marked model_change (level == prev_level: a change of model, not
 * of level) and
 * is logged; the same identity sent again (a client's re-send, or one after an agent restart)
 * changes nothing.
 *
 * The flight recorder (record/flight.h, [flight]): every tick hands it the figures read on that
 * tick (PMU counters, the target's memory, smaps, MemAvailable and PSI, sensors: its columns,
 * fixed at start from the dictionary), on_span every accepted span, apply_change every rise of
 * the level and on_command every cmd/flight; the tick that ends a trigger's post window
 * encodes the recording and hands it to the forwarder (live on "flight", else the spool).
 *
 * The stack profiler (profile/window.h, [profile]): apply_change opens a window on every rise
 * of the level and on_command on every cmd/profile (its seconds, capped at max_seconds); each
 * tick drains the window's perf rings and ends it when its time is up or the target left; the
 * window's addresses are resolved and its profile assembled on libuv's worker (profile_work),
 * and profile_done encodes it under max_bytes and hands it to the forwarder ("profile").
 */
#define _POSIX_C_SOURCE 200809L

#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/perf_event.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "budget.h"
#include "edgemon/proto.h"
#include "edgemon/flight.h"
#include "figures.h"
#include "feed.h"
#include "flight.h"
#include "forward.h"
#include "hook.h"
#include "log.h"
#include "pmu.h"
#include "pmu_events.h"
#include "edgemon/profile.h"
#include "profiling.h"
#include "procfs.h"
#include "publisher.h"
#include "service.h"
#include "signals.h"
#include "sensors.h"
#include "rings.h"
#include "identity.h"
#include "spans.h"
#include "syncer.h"
#include "target.h"
#include "attach.h"
#include "sampling.h"

#define BUCKETS_PER_STAGE 256u /* Histogram buckets per stage window at most. */
#define STOP_TIMEOUT_MS   2000u
#define NS_PER_SEC        UINT64_C(1000000000)
#define STR_(x)           #x
#define STR(x)            STR_(x)
#define REBIRTH_MIN_MS    1000u /* At most one birth per second on cmd/rebirth. */
/* Said after the first of the lines peer_log_pass() limits. */
#define HELD_BACK        "; more within " STR(EM_LOG_LIMIT_S) " s are counted, not logged one by one"
#define FLIGHT_HIST_ROOM 16u /* Bytes a recording leaves under its cap for its historical form. */

_Static_assert(EM_FEED_SMAPS == EM_SAMPLING_SMAPS && EM_FEED_SYSTEM == EM_SAMPLING_SYSTEM &&
                   EM_FEED_SENSORS == EM_SAMPLING_SENSORS,
               "the flight feed reads the sampling's fresh groups as they are");
_Static_assert(EM_CONFIG_MAX_EVENTS <= EM_SAMPLING_MAX_EVENTS, "sampling holds every event");
_Static_assert(EM_CONFIG_FLIGHT_TICK_SLACK == EM_FLIGHT_REC_TICK_SLACK,
               "config.c checks the flight recorder's tick ring as record/flight.c sizes it");

/* The figures agent.c indexes from their first row follow the orders of procfs.h and spans.h
 * (figures.h). */
_Static_assert(EM_FIG_PSI_CPU_SOME + 2 * EM_PSI_CPU == EM_FIG_PSI_CPU_SOME &&
                   EM_FIG_PSI_CPU_SOME + 2 * EM_PSI_MEMORY == EM_FIG_PSI_MEMORY_SOME &&
                   EM_FIG_PSI_CPU_SOME + 2 * EM_PSI_IO == EM_FIG_PSI_IO_SOME &&
                   EM_FIG_PSI_IO_FULL == EM_FIG_PSI_CPU_SOME + 2 * EM_PSI_COUNT - 1 &&
                   EM_FIG_PSI_CPU_FULL == EM_FIG_PSI_CPU_SOME + 1,
               "PSI rows of EM_FIGURES follow em_psi_res_t, some then full");
_Static_assert(
    EM_FIG_SPANS_DROPPED_MALFORMED + EM_SPANS_DROP_MALFORMED == EM_FIG_SPANS_DROPPED_MALFORMED &&
        EM_FIG_SPANS_DROPPED_MALFORMED + EM_SPANS_DROP_VERSION == EM_FIG_SPANS_DROPPED_VERSION &&
        EM_FIG_SPANS_DROPPED_MALFORMED + EM_SPANS_DROP_SIZE == EM_FIG_SPANS_DROPPED_SIZE &&
        EM_FIG_SPANS_DROPPED_MALFORMED + EM_SPANS_DROP_DISALLOWED ==
            EM_FIG_SPANS_DROPPED_DISALLOWED &&
        EM_FIG_SPANS_DROPPED_MALFORMED + EM_SPANS_DROP_OVERFLOW == EM_FIG_SPANS_DROPPED_OVERFLOW &&
        EM_SPANS_DROP_COUNT == 5,
    "spans.dropped rows of EM_FIGURES follow em_spans_drop_t");

/*
 * The log lines a peer can cause at will (datagrams on the span socket, MQTT commands), one
 * rate limit each (log.h): the first line of a burst is written, the others within
 * EM_LOG_LIMIT_NS are counted and said in one line once the interval is over.
 */
typedef enum {
  PEER_SUBSCRIBE, /* A subscribe or unsubscribe datagram refused. */
  PEER_RING,      /* A ring register refused. */
  PEER_MALFORMED, /* A command that does not decode. */
  PEER_UNKNOWN,   /* A command the agent does not know. */
  PEER_LOG_KINDS
} peer_log_t;

/* The summary of each kind: "<module>: N more <what> in the last 10 s<counted>". */
static const struct {
  const char *module;
  const char *what;
  const char *counted; /* " (figure)" that counts them all, or "". */
} peer_logs[PEER_LOG_KINDS] = {
    [PEER_SUBSCRIBE] = {"spans", "subscribe requests refused", " (push.subscribe_refused)"},
    [PEER_RING] = {"rings", "ring registers refused", " (rings.refused)"},
    [PEER_MALFORMED] = {"mqtt", "malformed commands ignored", ""},
    [PEER_UNKNOWN] = {"mqtt", "unknown commands ignored", ""},
};

struct em_agent {
  uv_loop_t *loop;
  em_config_t cfg;
  char version[64];
  char prefix[128]; /* edgemon/v1/<device> */
  uint32_t session;
  uint32_t seq;

  uv_timer_t tick;
  uv_timer_t rebirth;           /* A birth deferred by the cmd/rebirth rate limit. */
  bool rebirth_pending;         /* The rebirth timer runs. */
  uint64_t last_birth_ns;       /* uv_hrtime() of the last birth published, 0: none yet. */
  uint64_t rebirths_suppressed; /* cmd/rebirth requests folded into another's birth. */
  em_log_limit_t peer_log[PEER_LOG_KINDS]; /* Lines a peer can repeat: peer_log_pass(). */
  uint64_t next_tick_ns; /* uv_hrtime() the next tick is due: start + k * period. */
  uint64_t last_tick_ns; /* uv_hrtime() the last tick started: its window's start. */
  uint64_t late_ticks;

  em_publisher_t *pub;
  em_spans_t *spans;
  em_rings_t *rings;        /* Span rings v2, drained on every tick. */
  em_deadlines_t deadlines; /* <runtime_dir>/deadlines: the hard deadlines for clients. */
  em_budget_engine_t *budget;
  em_signals_t *signals;
  em_hook_t *hook;           /* NULL when [degrade] hook is not set. */
  em_hist_t *budget_windows; /* Per span stage (same index): spans since the budget window
                                began, merged from each publish window. */
  em_budget_stage_window_t *budget_stages;
  em_budget_t *birth_budgets;
  size_t n_birth_budgets;
  uint64_t budget_start_ns; /* uv_hrtime() the budget window began. */
  em_state_record_t state;  /* The last level change, as the page and pushes carry it. */
  em_identity_t model;      /* The target's model identity (spans/identity.h). */
  em_stage_t *stage_out;    /* max_stages windows for the data message. */
  em_bucket_t *bucket_out;  /* max_stages * BUCKETS_PER_STAGE buckets. */
  em_sampling_t *sampling;  /* What the tick reads, and its worker jobs (collect/sampling.h). */
  em_attach_t *attach;      /* The target's lifecycle and the lookup timer (collect/attach.h). */

  em_figures_t *figs;   /* The metric dictionary: aliases, definitions, absent reasons. */
  size_t n_metrics;     /* em_figures_count(figs). */
  em_sample_t *samples; /* 2 * n_metrics: the values by alias, then the data message's view. */
  uint8_t *out;         /* Encode buffer, EM_PROTO_MAX_MESSAGE_BYTES. */

  em_service_t svc; /* systemd notifications: ready, watchdog, reload, stop. */

  /* Store and forward (forward.h): what the broker cannot take now goes to the spool. */
  em_forward_t *fwd;
  em_syncer_t *syncer; /* The spool's fdatasync on its own thread (transport/syncer.h). */

  /* The flight recorder's feed (record/feed.h): the recorder, its columns, its figures. */
  em_feed_t *feed;

  /* The stack profiler's plumbing (profile/profiling.h): triggers, windows, the worker. */
  em_profiling_t *prof;

  bool closing;     /* em_agent_stop ran: nothing new is started, spooling is off. */
  unsigned pending; /* Handles, modules and worker jobs still closing (stop_step). */
  void (*stop_done)(void *);
  void *stop_ctx;
};

/* --- small helpers ------------------------------------------------------------------- */

static uint64_t wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* True when the line of this kind may be written now; false when it is only counted. */
static bool peer_log_pass(em_agent_t *a, peer_log_t kind) {
  return em_log_limit_pass(&a->peer_log[kind], uv_hrtime(), EM_LOG_LIMIT_NS);
}

/* Once per tick: for each kind whose interval is over, the count of lines held back. */
static void flush_peer_logs(em_agent_t *a, uint64_t now) {
  for (size_t k = 0; k < PEER_LOG_KINDS; k++) {
    uint64_t held = 0;
    if (em_log_limit_flush(&a->peer_log[k], now, EM_LOG_LIMIT_NS, &held)) {
      EM_WARN("%s: %llu more %s in the last %u s%s", peer_logs[k].module, (unsigned long long)held,
              peer_logs[k].what, (unsigned)EM_LOG_LIMIT_S, peer_logs[k].counted);
    }
  }
}

static void set_u(em_agent_t *a, size_t m, uint64_t v) {
  a->samples[m].value = (em_value_t){.type = EM_VALUE_UINT, .as.u = v};
}

static void set_f(em_agent_t *a, size_t m, double v) {
  a->samples[m].value = (em_value_t){.type = EM_VALUE_FLOAT, .as.f = v};
}

static void set_absent(em_agent_t *a, size_t m) {
  a->samples[m].value = (em_value_t){.type = EM_VALUE_ABSENT};
}

/* v when `have`, else absent. */
static void set_u_if(em_agent_t *a, size_t m, bool have, uint64_t v) {
  have ? set_u(a, m, v) : set_absent(a, m);
}

static void set_f_if(em_agent_t *a, size_t m, bool have, double v) {
  have ? set_f(a, m, v) : set_absent(a, m);
}

/* Alias of fixed figure `f`. */
static size_t fx(const em_agent_t *a, em_figure_t f) {
  return em_figures_alias(a->figs, f);
}

/* The attached process for a profile window: 0 when detached or a cgroup. */
static pid_t attached_pid(const em_agent_t *a) {
  pid_t pid = em_attach_pid(a->attach);
  return pid > 0 ? pid : 0;
}

/* --- publishing ---------------------------------------------------------------------- */

static void publish_birth(em_agent_t *a) {
  if (!em_publisher_online(a->pub)) {
    return;
  }
  em_msg_t msg = {.kind = EM_MSG_BIRTH,
                  .u.birth = {.head = {.time_ns = wall_ns(), .session = a->session},
                              .device = a->cfg.device_id,
                              .agent_version = a->version,
                              .board = a->cfg.board,
                              .period_ns = a->cfg.sample_period_ns,
                              .metrics = em_figures_defs(a->figs),
                              .n_metrics = a->n_metrics,
                              .budgets = a->birth_budgets,
                              .n_budgets = a->n_birth_budgets,
                              .model = a->model.view}};
  msg.u.birth.flight = em_feed_describe(a->feed);
  msg.u.birth.profiler = em_profiling_describe(a->prof);
  size_t len = 0;
  int rc = em_proto_encode(&msg, a->out, EM_PROTO_MAX_MESSAGE_BYTES, &len);
  if (rc) {
    EM_ERROR("birth: cannot encode: %s", em_proto_strerror(rc));
    return;
  }
  if (em_publisher_send(a->pub, "birth", a->out, len, a->cfg.qos_state, true) == 0) {
    a->last_birth_ns = uv_hrtime();
    if (a->rebirth_pending) { /* This birth answers the deferred request too. */
      uv_timer_stop(&a->rebirth);
      a->rebirth_pending = false;
    }
  }
}

static void on_rebirth_due(uv_timer_t *t) {
  em_agent_t *a = t->data;
  a->rebirth_pending = false;
  publish_birth(a);
}

/*
 * cmd/rebirth, rate-limited: at most one birth per REBIRTH_MIN_MS. A request within that time
 * of the last birth is answered by one birth at its end; requests that arrive while that one
 * waits share it (counted in agent.rebirths_suppressed).
 */
static void request_rebirth(em_agent_t *a) {
  if (a->rebirth_pending) {
    a->rebirths_suppressed++;
    return;
  }
  uint64_t now = uv_hrtime();
  uint64_t min_ns = (uint64_t)REBIRTH_MIN_MS * 1000000u;
  if (a->last_birth_ns == 0 || now - a->last_birth_ns >= min_ns) {
    EM_INFO("mqtt: rebirth requested");
    publish_birth(a);
    return;
  }
  uint64_t wait_ms = (a->last_birth_ns + min_ns - now + 999999u) / 1000000u;
  EM_INFO("mqtt: rebirth requested; the birth follows in %llu ms (one per %u ms at most)",
          (unsigned long long)wait_ms, REBIRTH_MIN_MS);
  a->rebirth_pending = uv_timer_start(&a->rebirth, on_rebirth_due, wait_ms, 0) == 0;
}

/* The status message; online or offline (the Last Will and the clean stop). */
static size_t encode_status(em_agent_t *a, bool online, uint8_t *buf, size_t cap) {
  em_msg_t msg = {
      .kind = EM_MSG_STATUS,
      .u.status = {.head = {.time_ns = wall_ns(), .session = a->session}, .online = online}};
  size_t len = 0;
  return em_proto_encode(&msg, buf, cap, &len) == 0 ? len : 0;
}

static void publish_state(em_agent_t *a);

static void on_online(void *ctx) {
  em_agent_t *a = ctx;
  uint8_t buf[64];
  size_t len = encode_status(a, true, buf, sizeof(buf));
  publish_birth(a);
  em_publisher_send(a->pub, "status", buf, len, a->cfg.qos_state, true);
  publish_state(a);
}

/* The broker acknowledged a QoS 1 publish: with write-ahead its spool record is done. */
static void on_ack(void *ctx, int mid) {
  em_agent_t *a = ctx;
  em_forward_on_ack(a->fwd, mid); /* NULL before the forwarder exists: a no-op. */
}

/* A recording the feed took, live on "flight" or into the spool. */
static int publish_flight(void *ctx, const uint8_t *buf, size_t len, bool may_spool) {
  em_agent_t *a = ctx;
  return em_forward_publish_flight(a->fwd, buf, len, may_spool);
}

/* A profile, live on "profile" or into the spool. */
static int publish_profile(void *ctx, const uint8_t *buf, size_t len) {
  em_agent_t *a = ctx;
  return em_forward_publish_profile(a->fwd, buf, len, true);
}

/* A Python stacks datagram (spans.h): for the profiler's open window. */
static void on_pystacks(void *ctx, const uint8_t *buf, size_t len, pid_t sender) {
  em_agent_t *a = ctx;
  em_profiling_pystacks(a->prof, buf, len, sender);
}

static void on_command(void *ctx, const char *name, const uint8_t *payload, size_t len) {
  em_agent_t *a = ctx;
  uint8_t scratch[512];
  em_msg_t msg;
  size_t off = 0;
  int rc = em_proto_decode(payload, len, &msg, scratch, sizeof(scratch), &off);
  if (rc || msg.kind != EM_MSG_CMD) {
    if (peer_log_pass(a, PEER_MALFORMED)) {
      EM_WARN("mqtt: ignoring a malformed command on cmd/%s: %s at byte %zu" HELD_BACK, name,
              rc ? em_proto_strerror(rc) : "not a cmd message", off);
    }
    return;
  }
  if (strcmp(name, "rebirth") == 0 && msg.u.cmd.command == EM_CMD_REBIRTH) {
    request_rebirth(a);
    return;
  }
  if (strcmp(name, "flight") == 0 && msg.u.cmd.command == EM_CMD_FLIGHT) {
    em_flight_trigger_t t = {.cause = EM_FLIGHT_COMMAND,
                             .level = a->state.level,
                             .prev_level = EM_LEVEL_NONE,
                             .reason = "cmd/flight"};
    em_feed_trigger(a->feed, &t, uv_hrtime());
    return;
  }
  if (strcmp(name, "profile") == 0 && msg.u.cmd.command == EM_CMD_PROFILE) {
    em_profile_trigger_t t = {.cause = EM_PROFILE_COMMAND,
                              .level = a->state.level,
                              .prev_level = EM_LEVEL_NONE,
                              .reason = "cmd/profile"};
    em_profiling_trigger(a->prof, &t, attached_pid(a), msg.u.cmd.seconds, uv_hrtime());
    return;
  }
  if (peer_log_pass(a, PEER_UNKNOWN)) {
    EM_WARN("mqtt: ignoring unknown command cmd/%s" HELD_BACK, name);
  }
}

/* --- level changes -------------------------------------------------------------------- */

static double value_as_double(em_value_t v) {
  switch (v.type) {
  case EM_VALUE_UINT:
    return (double)v.as.u;
  case EM_VALUE_INT:
    return (double)v.as.i;
  case EM_VALUE_FLOAT:
    return v.as.f;
  case EM_VALUE_ABSENT:
    break;
  }
  return NAN;
}

/* --- store and forward --------------------------------------------------------------- */

/* Figures of the spool for the data message: absent without a spool, never 0 for "none". */
static void sample_spool(em_agent_t *a) {
  em_forward_stats_t st;
  em_forward_stats(a->fwd, &st);
  set_u(a, fx(a, EM_FIG_SPOOL_LOST), st.lost);
  if (!st.spooling) {
    for (size_t f = EM_FIG_SPOOL_PENDING; f <= EM_FIG_SPOOL_EVICTED_INFLIGHT; f++) {
      set_absent(a, fx(a, (em_figure_t)f));
    }
    return;
  }
  set_u(a, fx(a, EM_FIG_SPOOL_PENDING), st.spool.pending);
  set_u(a, fx(a, EM_FIG_SPOOL_DROPPED), st.spool.dropped);
  set_u(a, fx(a, EM_FIG_SPOOL_CORRUPT), st.spool.corrupt);
  set_u(a, fx(a, EM_FIG_SPOOL_WRITE_ERRORS), st.spool.write_errors);
  set_u(a, fx(a, EM_FIG_SPOOL_REPLAYED), st.spool.replayed);
  set_u(a, fx(a, EM_FIG_SPOOL_INFLIGHT), st.spool.inflight);
  set_u(a, fx(a, EM_FIG_SPOOL_EVICTED_INFLIGHT), st.spool.evicted_inflight);
}

/* The retained MQTT state message of the current level. */
static void publish_state(em_agent_t *a) {
  const em_state_record_t *r = &a->state;
  em_msg_t msg = {.kind = EM_MSG_STATE,
                  .u.state = {.head = {.time_ns = r->since_wall_ns ? r->since_wall_ns : wall_ns(),
                                       .session = a->session},
                              .level = r->level,
                              .prev_level = r->prev_level,
                              .mono_ns = r->since_mono_ns,
                              .rule = r->rule[0] ? r->rule : NULL,
                              .stage = r->stage[0] ? r->stage : NULL,
                              .reason = r->reason[0] ? r->reason : NULL,
                              .model = a->model.view}};
  if (!isnan(r->value)) {
    msg.u.state.value = (em_value_t){.type = EM_VALUE_FLOAT, .as.f = r->value};
  }
  if (!isnan(r->bound)) {
    msg.u.state.bound = (em_value_t){.type = EM_VALUE_FLOAT, .as.f = r->bound};
  }
  size_t len = 0;
  int rc = em_proto_encode(&msg, a->out, EM_PROTO_MAX_MESSAGE_BYTES, &len);
  if (rc) {
    EM_ERROR("state: cannot encode: %s", em_proto_strerror(rc));
    return;
  }
  /* The broker away, the change goes to the spool (not while stopping). */
  (void)em_forward_publish(a->fwd, &msg, a->out, EM_PROTO_MAX_MESSAGE_BYTES, len, !a->closing);
}

/*
 * A change of level from the budget engine, published on every path at once: the state page
 * (clients see it with no system call), a push to every subscriber, the retained MQTT state,
 * and the log.
 */
static void apply_change(em_agent_t *a, const em_budget_change_t *c) {
  em_state_record_t *r = &a->state;
  *r = (em_state_record_t){.level = c->level,
                           .prev_level = c->prev_level,
                           .changes = r->changes + 1,
                           .since_mono_ns = c->mono_ns,
                           .since_wall_ns = wall_ns(),
                           .value = value_as_double(c->value),
                           .bound = value_as_double(c->bound)};
  snprintf(r->rule, sizeof(r->rule), "%.*s", (int)sizeof(r->rule) - 1, c->rule ? c->rule : "");
  snprintf(r->stage, sizeof(r->stage), "%s", c->stage ? c->stage : "");
  snprintf(r->reason, sizeof(r->reason), "%.60s%s%.70s", c->rule ? c->rule : "",
           c->rule ? ": " : "", c->reason ? c->reason : "");
  int rc = em_signals_publish(a->signals, r);
  if (rc) {
    EM_ERROR("state page: %s", em_proto_strerror(rc));
  }
  publish_state(a);
  if (c->level > c->prev_level) {
    em_flight_trigger_t t = {.cause = EM_FLIGHT_ESCALATION,
                             .level = c->level,
                             .prev_level = c->prev_level,
                             .rule = r->rule[0] ? r->rule : NULL,
                             .stage = r->stage[0] ? r->stage : NULL,
                             .value = c->value,
                             .bound = c->bound,
                             .reason = r->reason[0] ? r->reason : NULL};
    em_feed_trigger(a->feed, &t, c->mono_ns ? c->mono_ns : uv_hrtime());
    em_profile_trigger_t pt = {.cause = EM_PROFILE_ESCALATION,
                               .level = c->level,
                               .prev_level = c->prev_level,
                               .rule = t.rule,
                               .stage = t.stage,
                               .reason = t.reason};
    em_profiling_trigger(a->prof, &pt, attached_pid(a), 0, uv_hrtime());
  }
  if (a->hook) {
    em_hook_run(a->hook, r);
  }
  sd_notifyf(0, "STATUS=level %s since %s", em_level_name(r->level), r->reason);
  em_log(c->level > c->prev_level ? EM_LOG_WARN : EM_LOG_INFO,
         "level %s (was %s): %s, value %g, bound %g", em_level_name(c->level),
         em_level_name(c->prev_level), r->reason, r->value, r->bound);
}

static void on_span(void *ctx, const em_span_t *span, const struct ucred *sender,
                    em_stage_stats_t *stage) {
  (void)sender;
  em_agent_t *a = ctx;
  if (span->kind == EM_DGRAM_SPAN) {
    /* The slot's address is only a hint; the recorder keys spans by the name. */
    size_t hint = (size_t)((uintptr_t)stage / sizeof(*stage));
    em_feed_span(a->feed, hint % 256u, stage->name, span->frame_id, span->start_ns,
                 span->duration_ns);
  }
  em_budget_change_t c;
  bool changed = span->kind == EM_DGRAM_SPAN
                     ? em_budget_on_span(a->budget, stage->name, span->frame_id, span->duration_ns,
                                         stage->last_seen_ns, &c)
                     : em_budget_on_heartbeat(a->budget, stage->name, stage->last_seen_ns, &c);
  if (changed) {
    apply_change(a, &c);
  }
}

/* A ring span over its stage's hard deadline (datagram v2 kind 6): judged at once, not folded
 * into the window (the ring's drain brings the span itself). */
static void on_hard_miss(void *ctx, const em_span_t *span, const struct ucred *sender,
                         em_stage_stats_t *stage) {
  (void)sender;
  em_agent_t *a = ctx;
  em_budget_change_t c;
  if (span->kind == EM_DGRAM_SPAN &&
      em_budget_on_hard_miss(a->budget, stage->name, span->duration_ns, uv_hrtime(), &c)) {
    apply_change(a, &c);
  }
}

/*
 * A valid model datagram from an allowed sender (spans.h). The same identity again changes
 * nothing; another one is published at once as a state message with model_change set and
 * level == prev_level (retained, spooled when the broker is away, as a level change), and
 * logged. The state page, the pushes and the hook are about levels: they are not told.
 */
static void on_model(void *ctx, const em_model_dgram_t *m, const struct ucred *sender) {
  em_agent_t *a = ctx;
  char reason[EM_PROTO_MAX_TEXT_BYTES + 1];
  if (!em_identity_take(&a->model, m, reason, sizeof(reason))) {
    return;
  }
  em_level_t level = a->state.level;
  em_msg_t msg = {.kind = EM_MSG_STATE,
                  .u.state = {.head = {.time_ns = wall_ns(), .session = a->session},
                              .level = level,
                              .prev_level = level,
                              .mono_ns = uv_hrtime(),
                              .reason = reason,
                              .model = a->model.view,
                              .model_change = true}};
  size_t len = 0;
  int rc = em_proto_encode(&msg, a->out, EM_PROTO_MAX_MESSAGE_BYTES, &len);
  if (rc) {
    EM_ERROR("state: cannot encode the model change: %s", em_proto_strerror(rc));
  } else {
    (void)em_forward_publish(a->fwd, &msg, a->out, EM_PROTO_MAX_MESSAGE_BYTES, len, !a->closing);
  }
  EM_INFO("%s, named by pid %lu (level %s unchanged)", reason,
          (unsigned long)em_spans_sender_pid(sender), em_level_name(level));
}

static void on_register(void *ctx, const em_ring_dgram_t *reg, int fd, bool allowed,
                        const struct ucred *sender, const struct sockaddr_un *from,
                        socklen_t from_len) {
  em_agent_t *a = ctx;
  if (!a->rings) {
    if (fd >= 0) {
      close(fd);
    }
    return;
  }
  int rc = em_rings_register(a->rings, reg, fd, allowed, sender, from, from_len);
  if (rc && peer_log_pass(a, PEER_RING)) {
    EM_WARN("rings: register from pid %lu refused: %s (further refusals within %u s are "
            "counted in rings.refused, not logged one by one)",
            (unsigned long)em_spans_sender_pid(sender), strerror(-rc), (unsigned)EM_LOG_LIMIT_S);
  }
}

/* The hard deadlines of cfg's rules, one per stage (the smallest), into out[0..64). */
static size_t deadline_entries(const em_config_t *cfg, em_deadline_t *out) {
  size_t n = 0;
  for (size_t i = 0; i < cfg->n_rules; i++) {
    const em_budget_rule_t *r = &cfg->rules[i];
    if (r->kind != EM_BUDGET_RULE_DEADLINE || !r->stage[0]) {
      continue;
    }
    uint64_t bound_ns = r->u.deadline.bound_ns;
    size_t k = 0;
    while (k < n && strcmp(out[k].stage, r->stage) != 0) {
      k++;
    }
    if (k < n) {
      out[k].deadline_ns = bound_ns < out[k].deadline_ns ? bound_ns : out[k].deadline_ns;
    } else if (n < EM_DEADLINE_MAX_ENTRIES) {
      out[n] = (em_deadline_t){.deadline_ns = bound_ns};
      snprintf(out[n].stage, sizeof(out[n].stage), "%s", r->stage);
      n++;
    }
  }
  return n;
}

/* A subscribe or unsubscribe datagram. Refusals are counted (push.subscribe_refused); their
 * log line is rate-limited: the first of a burst, then one count per EM_LOG_LIMIT_NS. */
static void on_subscribe(void *ctx, bool subscribe, const struct sockaddr_un *addr, socklen_t len,
                         const struct ucred *sender) {
  em_agent_t *a = ctx;
  uint32_t pid = em_spans_sender_pid(sender);
  int rc = em_signals_subscribe(a->signals, subscribe, addr, len, pid);
  if (!rc || !peer_log_pass(a, PEER_SUBSCRIBE)) {
    return;
  }
  const char *why = "the client's socket has no address";
  if (rc == -ENOSPC) {
    why = "all " STR(EM_SIGNALS_MAX_SUBSCRIBERS) " subscribers are alive";
  } else if (rc == -EDQUOT) {
    why = "the process holds " STR(EM_SIGNALS_MAX_PER_PID) " live subscribers already";
  }
  EM_WARN("spans: %s from pid %lu refused: %s (further refusals within %u s are counted in "
          "push.subscribe_refused, not logged one by one)",
          subscribe ? "subscribe" : "unsubscribe", (unsigned long)pid, why,
          (unsigned)EM_LOG_LIMIT_S);
}

/* A stage leaves the span table for another name: its budget window goes with it. */
static void on_stage_evicted(void *ctx, size_t index, const char *evicted, const char *arriving) {
  (void)evicted;
  (void)arriving;
  em_agent_t *a = ctx;
  if (index < a->cfg.max_stages && a->budget_windows) {
    em_hist_reset(&a->budget_windows[index]);
  }
}

/*
 * Reserves the span table's slots for every stage cfg's budget rules name (a stage rule's
 * stage, a flow's stages), so spans of other names cannot push them out, and sets the idle
 * time after which other stages may be evicted.
 */
static void reserve_stages(em_agent_t *a, const em_config_t *cfg) {
  const char *names[EM_CONFIG_MAX_RULES * (1 + EM_BUDGET_FLOW_MAX_STAGES)];
  size_t n = 0;
  for (size_t i = 0; i < cfg->n_rules; i++) {
    const em_budget_rule_t *r = &cfg->rules[i];
    if (r->stage[0]) {
      names[n++] = r->stage;
    }
    size_t n_flow = r->kind == EM_BUDGET_RULE_FLOW ? r->u.flow.n_stages : 0;
    for (size_t k = 0; k < n_flow && k < EM_BUDGET_FLOW_MAX_STAGES; k++) {
      names[n++] = r->u.flow.stages[k];
    }
  }
  size_t want = em_spans_stage_policy(a->spans, names, n, cfg->stage_idle_ns);
  if (want > a->cfg.max_stages) {
    EM_WARN("spans: budgets name %zu stages but [spans] max_stages is %u: only the first %u "
            "have a slot reserved",
            want, a->cfg.max_stages, a->cfg.max_stages);
  }
}

static int send_push(void *ctx, const struct sockaddr_un *addr, socklen_t len, const void *buf,
                     size_t n) {
  return em_spans_send_to(((em_agent_t *)ctx)->spans, addr, len, buf, n);
}

/*
 * The budget window: every tick the publish windows are merged into it; when it has lasted
 * [degrade] window, the engine judges it. ALIVE rules are judged every tick.
 */
static void evaluate_budgets(em_agent_t *a, uint64_t now) {
  em_budget_change_t c;
  size_t n = em_spans_stage_count(a->spans);
  for (size_t i = 0; i < n; i++) {
    em_hist_merge(&a->budget_windows[i], &em_spans_stage(a->spans, i)->window);
  }
  if (now - a->budget_start_ns >= a->cfg.window_ns) {
    for (size_t i = 0; i < n; i++) {
      a->budget_stages[i] = (em_budget_stage_window_t){.name = em_spans_stage(a->spans, i)->name,
                                                       .hist = &a->budget_windows[i]};
    }
    em_budget_figure_t figs[2 * EM_PSI_COUNT + 2];
    for (size_t k = 0; k < 2 * EM_PSI_COUNT; k++) {
      em_figure_t f = (em_figure_t)(EM_FIG_PSI_CPU_SOME + k);
      figs[k] = (em_budget_figure_t){.name = em_figures_info(f)->name,
                                     .value = a->samples[fx(a, f)].value};
    }
    em_budget_figure_t *temp = &figs[2 * EM_PSI_COUNT], *throttled = temp + 1;
    *temp = (em_budget_figure_t){.name = EM_CONFIG_FIGURE_TEMP};
    *throttled = (em_budget_figure_t){.name = EM_CONFIG_FIGURE_THROTTLED};
    em_sampling_thermal(a->sampling, &temp->value, &throttled->value, &throttled->why);
    em_budget_window_t w = {.window_ns = now - a->budget_start_ns,
                            .stages = a->budget_stages,
                            .n_stages = n,
                            .rss_bytes = a->samples[fx(a, EM_FIG_RSS)].value,
                            .figures = figs,
                            .n_figures = 2 * EM_PSI_COUNT + 2};
    if (em_budget_on_window(a->budget, &w, now, &c)) {
      apply_change(a, &c);
    }
    for (size_t i = 0; i < n; i++) {
      em_hist_reset(&a->budget_windows[i]);
    }
    a->budget_start_ns = now;
  }
  if (em_budget_on_timer(a->budget, now, &c)) {
    apply_change(a, &c);
  }
}

/* An engine for cfg's rules. Returns 0 and *out, or -EINVAL / -ENOMEM. */
static int make_engine(const em_config_t *cfg, uint64_t now, em_budget_engine_t **out) {
  em_budget_opts_t o = {.rules = cfg->rules,
                        .n_rules = cfg->n_rules,
                        .enter_windows = cfg->enter_windows,
                        .leave_windows = cfg->leave_windows,
                        .window_ns = cfg->window_ns};
  int rc = em_budget_new(out, &o, now);
  if (rc) {
    EM_ERROR("budgets: the rules were refused: %s", strerror(-rc));
  }
  return rc;
}

static int start_budgets(em_agent_t *a, uint64_t now) {
  int rc = make_engine(&a->cfg, now, &a->budget);
  if (rc) {
    return rc;
  }
  a->birth_budgets = calloc(EM_CONFIG_MAX_RULES, sizeof(*a->birth_budgets));
  a->budget_windows = calloc(a->cfg.max_stages, sizeof(*a->budget_windows));
  a->budget_stages = calloc(a->cfg.max_stages, sizeof(*a->budget_stages));
  if (!a->birth_budgets || !a->budget_windows || !a->budget_stages) {
    return -ENOMEM;
  }
  for (size_t i = 0; i < a->cfg.max_stages; i++) {
    em_hist_init(&a->budget_windows[i]);
  }
  int n = em_budget_describe(a->budget, a->birth_budgets, EM_CONFIG_MAX_RULES);
  a->n_birth_budgets = n > 0 ? (size_t)n : 0;
  a->budget_start_ns = now;
  return 0;
}

/* --- the target ------------------------------------------------------------------- */

/* Attached (attach.h): the birth says what is absent now. */
static void on_attached(void *ctx) {
  publish_birth(ctx);
}

/* --- one tick ------------------------------------------------------------------------ */

/*
 * The samples of this window, in alias order. The groups read on slower cadences (smaps,
 * system) are left out of windows where they were not read: a value missing from a data
 * message means "not sampled this window". Returns the count written to `out`.
 */
static size_t window_samples(em_agent_t *a, em_sample_t *out) {
  unsigned fresh = em_sampling_fresh(a->sampling);
  size_t n = 0;
  for (size_t m = 0; m < a->n_metrics; m++) {
    em_figure_group_t g = em_figures_group(a->figs, m);
    if ((g == EM_FIGURE_SMAPS && !(fresh & EM_SAMPLING_SMAPS)) ||
        (g == EM_FIGURE_SYSTEM && !(fresh & EM_SAMPLING_SYSTEM))) {
      continue;
    }
    out[n++] = a->samples[m];
  }
  em_sampling_sent(a->sampling); /* The next smaps reading comes from its worker job. */
  return n;
}

/* Buckets per stage window so that every stage fits in one message at full size. */
static size_t stage_bucket_cap(const em_agent_t *a) {
  size_t n = em_spans_stage_count(a->spans);
  size_t cap = n ? 48000 / (n * 4) : BUCKETS_PER_STAGE; /* ~4 bytes per bucket encoded */
  return cap < BUCKETS_PER_STAGE ? cap : BUCKETS_PER_STAGE;
}

/* Fills a->stage_out from the stage windows with at most `cap` buckets each; the count. */
static size_t stage_windows(em_agent_t *a, size_t cap) {
  size_t n = em_spans_stage_count(a->spans);
  for (size_t i = 0; i < n; i++) {
    em_stage_stats_t *st = em_spans_stage(a->spans, i);
    int rc = em_hist_to_stage(&st->window, st->name, a->bucket_out + i * BUCKETS_PER_STAGE, cap,
                              &a->stage_out[i]);
    if (rc < 0) {
      /* Only with a cap of 1 bucket: send the stage as idle rather than a bad window. */
      a->stage_out[i] = (em_stage_t){.name = st->name};
    }
  }
  return n;
}

static void on_tick(uv_timer_t *t);

/*
 * Arms the one-shot tick timer for the next slot of the absolute schedule, so lateness does
 * not accumulate (a repeating libuv timer re-arms from the callback's time and drifts). Slots
 * already missed are skipped and counted as late.
 */
static void arm_tick(em_agent_t *a) {
  uv_update_time(a->loop);
  uint64_t now = uv_hrtime();
  while (a->next_tick_ns <= now) {
    a->next_tick_ns += a->cfg.sample_period_ns;
    a->late_ticks++;
  }
  uint64_t delay_ms = (a->next_tick_ns - now + 999999u) / 1000000u;
  uv_timer_start(&a->tick, on_tick, delay_ms, 0);
}

static void on_tick(uv_timer_t *t) {
  em_agent_t *a = t->data;
  uint64_t now = uv_hrtime();
  bool on_time = now <= a->next_tick_ns + a->cfg.sample_period_ns / 2;
  if (!on_time) {
    a->late_ticks++;
  }
  em_service_tick(&a->svc, now, on_time);
  uint64_t window_ns = a->last_tick_ns ? now - a->last_tick_ns : a->cfg.sample_period_ns;
  a->last_tick_ns = now;
  a->next_tick_ns += a->cfg.sample_period_ns;
  arm_tick(a);
  pid_t pid = em_attach_pid(a->attach);
  if (pid != 0 && !em_sampling_target(a->sampling, now)) {
    em_attach_detach(a->attach, "exited");
  }
  if (em_sampling_fresh(a->sampling) & EM_SAMPLING_SYSTEM) {
    em_attach_follow(a->attach); /* On the system cadence: it reads the children's files. */
  }
  pid = em_attach_pid(a->attach);
  if (pid == 0) {
    em_sampling_detached(a->sampling); /* The target's tick figures are absent. */
  }
  em_sampling_system(a->sampling, now);
  em_sampling_self(a->sampling);
  em_sampling_read_sensors(a->sampling, now);
  set_u(a, fx(a, EM_FIG_AGENT_NOT_SENT), em_publisher_stats(a->pub)->not_sent);
  set_u(a, fx(a, EM_FIG_AGENT_OVERSIZE), em_publisher_stats(a->pub)->oversize);
  set_u(a, fx(a, EM_FIG_AGENT_LATE_TICKS), a->late_ticks);
  set_u_if(a, fx(a, EM_FIG_TARGET_PID), pid > 0, (uint64_t)pid);
  set_u(a, fx(a, EM_FIG_TARGET_UP), pid != 0);
  set_u(a, fx(a, EM_FIG_TARGET_ATTACHES), em_attach_count(a->attach));
  uint64_t threads = 0;
  set_u_if(a, fx(a, EM_FIG_TARGET_THREADS), em_sampling_threads(a->sampling, &threads) && pid > 0,
           threads);

  em_rings_drain(a->rings, now); /* Before the windows are published and budgets judged. */
  const em_rings_stats_t *rs = em_rings_stats(a->rings);
  set_u(a, fx(a, EM_FIG_SPANS_RING), rs->spans);
  set_u(a, fx(a, EM_FIG_SPANS_DATAGRAM), em_spans_datagram_spans(a->spans));
  set_u(a, fx(a, EM_FIG_RING_LOST_OVERWRITTEN), rs->overwritten);
  set_u(a, fx(a, EM_FIG_RING_LOST_BAD_SLOT), rs->bad_slot);
  set_u(a, fx(a, EM_FIG_RING_LOST_BAD_HEAD), rs->bad_head);
  set_u(a, fx(a, EM_FIG_RING_LOST_SKIPPED), rs->skipped);
  set_u(a, fx(a, EM_FIG_RINGS_ACTIVE), em_rings_active(a->rings));
  set_u(a, fx(a, EM_FIG_RINGS_REFUSED), rs->refused);
  set_u(a, fx(a, EM_FIG_SPANS_FDS_CLOSED), em_spans_fds_closed(a->spans));
  set_u(a, fx(a, EM_FIG_SPANS_RECEIVED), em_spans_received(a->spans));
  for (int why = 0; why < EM_SPANS_DROP_COUNT; why++) {
    set_u(a, fx(a, (em_figure_t)(EM_FIG_SPANS_DROPPED_MALFORMED + why)),
          em_spans_dropped(a->spans, (em_spans_drop_t)why));
  }
  set_u(a, fx(a, EM_FIG_SPANS_STAGES), em_spans_stage_count(a->spans));
  set_u(a, fx(a, EM_FIG_SPANS_EVICTED), em_spans_evictions(a->spans));
  const em_signals_stats_t *sig = em_signals_stats(a->signals);
  set_u(a, fx(a, EM_FIG_PUSH_SUBSCRIBERS), em_signals_subscribers(a->signals));
  set_u(a, fx(a, EM_FIG_PUSH_REFUSED), sig->refused);
  set_u(a, fx(a, EM_FIG_PUSH_GONE), sig->dropped + sig->reaped);
  set_u(a, fx(a, EM_FIG_AGENT_REBIRTHS_SUPPRESSED), a->rebirths_suppressed);
  set_u(a, fx(a, EM_FIG_MODEL_RECEIVED), em_spans_models_accepted(a->spans));
  set_u(a, fx(a, EM_FIG_MODEL_CHANGES), a->model.changes);
  set_u(a, fx(a, EM_FIG_MODEL_REFUSED), em_spans_models_refused(a->spans));
  flush_peer_logs(a, now);
  em_feed_flush_log(a->feed, now);
  em_profiling_flush_log(a->prof, now);
  sample_spool(a);
  for (size_t k = 0; k < em_figures_anomalies(a->figs); k++) {
    double z = 0;
    bool have =
        em_budget_anomaly(a->budget, em_figures_anomaly_stage(a->figs, k), &z) == 0 && isfinite(z);
    set_f_if(a, em_figures_anomaly_alias(a->figs, k), have, z);
  }

  em_feed_figures(a->feed, a->samples);
  em_profiling_tick(a->prof, now, pid);
  em_profiling_figures(a->prof, a->samples);

  /* Before the data message: it carries the level, and a change publishes its state
   * message through the same encode buffer. */
  evaluate_budgets(a, now);
  /* Before window_samples() forgets which groups were read. */
  em_feed_tick(a->feed, now, a->samples, em_sampling_fresh(a->sampling));

  em_sample_t *view = a->samples + a->n_metrics; /* Second half of the samples buffer. */
  em_msg_t msg = {.kind = EM_MSG_DATA,
                  .u.data = {.head = {.time_ns = wall_ns(), .session = a->session},
                             .seq = a->seq++,
                             .window_ns = window_ns,
                             .level = em_budget_level(a->budget),
                             .samples = view,
                             .n_samples = window_samples(a, view),
                             .model = a->model.view}};
  size_t len = 0;
  int rc = EM_PROTO_ETOOBIG;
  /* Stage windows share the message: fewer buckets per stage (a coarser scale) if needed. */
  for (size_t cap = stage_bucket_cap(a); rc == EM_PROTO_ETOOBIG && cap > 0; cap /= 2) {
    msg.u.data.stages = a->stage_out;
    msg.u.data.n_stages = stage_windows(a, cap);
    rc = em_proto_encode(&msg, a->out, EM_PROTO_MAX_MESSAGE_BYTES, &len);
  }
  em_spans_window_reset(a->spans);
  if (rc) {
    EM_ERROR("data: cannot encode: %s", em_proto_strerror(rc));
    return;
  }
  /* Live when the broker takes it, else into the spool; then a few spooled ones. */
  (void)em_forward_publish(a->fwd, &msg, a->out, EM_PROTO_MAX_MESSAGE_BYTES, len, true);
  em_feed_publish(a->feed, now, !a->closing);
  em_forward_replay(a->fwd);
  em_forward_maybe_sync(a->fwd, now);
  if (!a->svc.ready) {
    char status[EM_CONFIG_MAX_ID + 64];
    snprintf(status, sizeof(status), "device %s: sampling every %llu ms", a->cfg.device_id,
             (unsigned long long)(a->cfg.sample_period_ns / 1000000u));
    em_service_ready(&a->svc, status); /* After the first sample, as the unit promises. */
  }
}

/* --- lifecycle ----------------------------------------------------------------------- */

/* The metric dictionary (figures.h) and the buffers sized from it, once at start-up. */
static int build_dictionary(em_agent_t *a) {
  size_t n_events = 0;
  const em_pmu_event_t *ev = em_sampling_events(a->sampling, &n_events);
  const char *events[EM_CONFIG_MAX_EVENTS];
  for (size_t i = 0; i < n_events; i++) {
    events[i] = ev[i].name;
  }
  const char *stages[EM_CONFIG_MAX_RULES]; /* One anomaly score per stage a rule names. */
  for (size_t i = 0; i < a->cfg.n_rules; i++) {
    stages[i] = a->cfg.rules[i].stage;
  }
  em_figures_opts_t fo = {.events = events,
                          .n_events = n_events,
                          .stages = stages,
                          .n_stages = a->cfg.n_rules,
                          .sensors = em_sampling_sensors(a->sampling),
                          .psi = em_sampling_has_psi(a->sampling),
                          .process_memory = a->cfg.target.kind != EM_TARGET_CGROUP,
                          .smaps = a->cfg.smaps_period_ns != 0,
                          .flight = a->cfg.flight_enabled,
                          .profile = a->cfg.profile_enabled};
  int rc = em_figures_new(&a->figs, &fo);
  if (rc) {
    return rc;
  }
  a->n_metrics = em_figures_count(a->figs);
  a->samples = calloc(2 * a->n_metrics, sizeof(*a->samples));
  a->out = malloc(EM_PROTO_MAX_MESSAGE_BYTES);
  a->stage_out = calloc(a->cfg.max_stages, sizeof(*a->stage_out));
  a->bucket_out = calloc((size_t)a->cfg.max_stages * BUCKETS_PER_STAGE, sizeof(*a->bucket_out));
  if (!a->samples || !a->out || !a->stage_out || !a->bucket_out) {
    return -ENOMEM;
  }
  for (size_t m = 0; m < a->n_metrics; m++) {
    a->samples[m].alias = (uint32_t)m;
  }
  em_sampling_bind(a->sampling, a->figs, a->samples);
  return 0;
}

int em_agent_new(em_agent_t **out, uv_loop_t *loop, const em_config_t *cfg,
                 const em_board_profile_t *board, const char *version) {
  if (!out || !loop || !cfg || cfg->target.kind == EM_TARGET_NONE) {
    return -EINVAL;
  }
  em_agent_t *a = calloc(1, sizeof(*a));
  if (!a) {
    return -ENOMEM;
  }
  a->loop = loop;
  a->cfg = *cfg;
  em_service_init(&a->svc);
  em_identity_init(&a->model);
  snprintf(a->version, sizeof(a->version), "%s", version);
  snprintf(a->prefix, sizeof(a->prefix), "edgemon/v1/%s", cfg->device_id);
  if (getrandom(&a->session, sizeof(a->session), GRND_NONBLOCK) != sizeof(a->session)) {
    a->session = (uint32_t)(wall_ns() ^ ((uint64_t)getpid() << 16));
  }
  const char *events[EM_CONFIG_MAX_EVENTS];
  for (size_t i = 0; i < cfg->n_events; i++) {
    events[i] = cfg->events[i];
  }
  em_sampling_opts_t so = {.loop = loop,
                           .proc_root = cfg->proc_root,
                           .sys_root = cfg->sys_root,
                           .events = events,
                           .n_events = cfg->n_events,
                           .smaps_period_ns = cfg->smaps_period_ns,
                           .system_period_ns = cfg->system_period_ns,
                           .sensors_period_ns = cfg->sensors_period_ns,
                           .board = board};
  int rc = em_sampling_new(&a->sampling, &so);
  if (!rc) {
    rc = build_dictionary(a);
  }
  em_feed_opts_t feed = {.enabled = cfg->flight_enabled,
                         .figs = a->figs,
                         .period_ns = cfg->sample_period_ns,
                         .pre_ns = cfg->flight_pre_ns,
                         .post_ns = cfg->flight_post_ns,
                         .min_gap_ns = cfg->flight_min_gap_ns,
                         .max_spans = cfg->flight_max_spans,
                         .max_bytes = (uint32_t)cfg->flight_max_bytes,
                         .session = a->session,
                         .publish = publish_flight,
                         .ctx = a};
  if (!rc) {
    rc = em_feed_new(&a->feed, &feed);
  }
  em_profiling_opts_t prof = {.enabled = cfg->profile_enabled,
                              .loop = loop,
                              .figs = a->figs,
                              .runtime_dir = cfg->runtime_dir,
                              .proc_root = cfg->proc_root,
                              .hz = cfg->profile_hz,
                              .task_clock = cfg->profile_clock == 1,
                              .seconds_ns = cfg->profile_ns,
                              .max_seconds_ns = cfg->profile_max_ns,
                              .min_gap_ns = cfg->profile_min_gap_ns,
                              .max_bytes = (uint32_t)cfg->profile_max_bytes,
                              .dwarf = cfg->profile_dwarf == 1,
                              .period_ns = cfg->sample_period_ns,
                              .session = a->session,
                              .publish = publish_profile,
                              .ctx = a};
  if (!rc) {
    rc = em_profiling_new(&a->prof, &prof);
  }
  uint8_t will[64];
  size_t will_len = rc ? 0 : encode_status(a, false, will, sizeof(will));
  em_publisher_opts_t po = {.host = cfg->broker_host,
                            .port = cfg->broker_port,
                            .client_id = cfg->client_id,
                            .prefix = a->prefix,
                            .keepalive_s = cfg->keepalive_s,
                            .ack_timeout_ns = cfg->ack_timeout_ns,
                            .limit_packets = true,
                            .backoff_min_ns = cfg->reconnect_min_ns,
                            .backoff_max_ns = cfg->reconnect_max_ns,
                            .will = will,
                            .will_len = will_len,
                            .will_qos = cfg->qos_state,
                            .on_online = on_online,
                            .on_command = on_command,
                            .on_ack = on_ack,
                            .ctx = a,
                            .tls = cfg->tls,
                            .tls_ca_file = cfg->tls_ca_file,
                            .tls_ca_path = cfg->tls_ca_path,
                            .tls_cert_file = cfg->tls_cert_file,
                            .tls_key_file = cfg->tls_key_file,
                            .tls_insecure = cfg->tls_insecure,
                            .username = cfg->username,
                            .password = cfg->password};
  if (!rc) {
    rc = em_publisher_new(&a->pub, loop, &po);
  }
  em_spans_opts_t sp = {.path = cfg->span_socket,
                        .mode = cfg->span_socket_mode,
                        .gid = cfg->span_socket_gid,
                        .allow_uids = cfg->allow_uids,
                        .n_allow_uids = cfg->n_allow_uids,
                        .allow_gids = cfg->allow_gids,
                        .n_allow_gids = cfg->n_allow_gids,
                        .max_stages = cfg->max_stages,
                        .stage_idle_ns = cfg->stage_idle_ns,
                        .on_evict = on_stage_evicted,
                        .on_span = on_span,
                        .on_subscribe = on_subscribe,
                        .on_register = on_register,
                        .on_hard_miss = on_hard_miss,
                        .on_model = on_model,
                        .on_pystacks = on_pystacks,
                        .ctx = a};
  if (!rc) {
    rc = em_spans_new(&a->spans, loop, &sp);
    if (rc) {
      EM_ERROR("spans: cannot listen on %s: %s", cfg->span_socket, strerror(-rc));
    }
  }
  if (!rc) {
    em_rings_opts_t ro = {.max_rings = cfg->rings,
                          .max_per_process = cfg->rings_per_process,
                          .proc_root = cfg->proc_root};
    rc = em_rings_new(&a->rings, loop, a->spans, &ro);
  }
  if (!rc && cfg->profile_enabled) {
    em_rings_observe(a->rings, em_profiling_span, a->prof);
  }
  uint64_t now = uv_hrtime();
  if (!rc) {
    rc = start_budgets(a, now);
  }
  if (!rc) {
    reserve_stages(a, cfg);
  }
  if (!rc) {
    char page[EM_CONFIG_MAX_PATH + 16];
    snprintf(page, sizeof(page), "%s/state", cfg->runtime_dir);
    a->state = (em_state_record_t){
        .since_mono_ns = now, .since_wall_ns = wall_ns(), .value = NAN, .bound = NAN};
    rc = em_signals_new(&a->signals, page, (uint32_t)getpid(), &a->state, send_push, a);
    if (rc) {
      EM_ERROR("state page %s: %s", page, strerror(-rc));
    }
  }
  if (!rc) {
    char page[EM_CONFIG_MAX_PATH + 16];
    snprintf(page, sizeof(page), "%s/deadlines", cfg->runtime_dir);
    em_deadline_t entries[EM_DEADLINE_MAX_ENTRIES];
    size_t n = deadline_entries(cfg, entries);
    rc = em_deadlines_open(&a->deadlines, page, (uint32_t)getpid(), cfg->ring_slots, entries, n);
    if (rc) {
      EM_ERROR("deadline page %s: %s", page, strerror(-rc));
    }
  }
  if (!rc && cfg->hook[0]) {
    rc = em_hook_new(&a->hook, loop, cfg->hook, cfg->hook_timeout_ns);
  }
  em_forward_opts_t fo = {.spool_path = cfg->spool_path,
                          .spool_bytes = cfg->spool_bytes,
                          .sync_interval_ns = cfg->spool_sync_ns,
                          .replay_per_tick = cfg->replay_per_tick,
                          .qos_data = cfg->qos_data,
                          .qos_state = cfg->qos_state,
                          .write_ahead = cfg->spool_write_ahead};
  if (!rc) {
    rc = em_syncer_new(&a->syncer, loop); /* Its thread starts with em_agent_start. */
  }
  if (!rc) {
    fo.syncer = a->syncer;
    rc = em_forward_new(&a->fwd, loop, a->pub, &fo);
  }
  if (rc) {
    em_agent_free(a);
    return rc == -ENOENT ? -ENOENT : rc;
  }
  em_attach_opts_t ao = {.loop = loop,
                         .sampling = a->sampling,
                         .spec = &cfg->target,
                         .proc_root = a->cfg.proc_root,
                         .on_attached = on_attached,
                         .ctx = a};
  rc = em_attach_new(&a->attach, &ao);
  if (rc) {
    em_agent_free(a);
    return rc;
  }
  uv_timer_init(loop, &a->tick);
  uv_timer_init(loop, &a->rebirth);
  a->tick.data = a;
  a->rebirth.data = a;
  *out = a;
  return 0;
}

int em_agent_reload(em_agent_t *a, const em_config_t *next) {
  if (!a || !next || a->closing) {
    return -EINVAL;
  }
  uint64_t now = uv_hrtime();
  em_service_reloading(&a->svc, now);
  char key[96];
  const char *later = em_config_reload_conflict(&a->cfg, next, key, sizeof(key));
  if (later) {
    EM_WARN("reload: %s changed; that takes a restart (the running value stays)", later);
  }

  em_budget_engine_t *engine = NULL;
  int rc = make_engine(next, now, &engine);
  if (rc) {
    em_service_reloaded(&a->svc, "reload refused: budget rules");
    return rc;
  }
  /* Every key a reload applies is copied by the config's schema; each apply step its changed
   * keys name runs below. The engine is rebuilt on every reload (made above, where it may refuse
   * the rules), the rules' state carried over by id. */
  unsigned due = em_config_adopt(&a->cfg, next);
  size_t kept = em_budget_adopt(engine, a->budget);
  em_budget_free(a->budget);
  a->budget = engine;
  if (due & EM_CONFIG_APPLY_FLIGHT_GAP) {
    em_feed_set_min_gap(a->feed, a->cfg.flight_min_gap_ns);
  }
  if (due & EM_CONFIG_APPLY_PROFILE_GAP) {
    em_profiling_set_min_gap(a->prof, a->cfg.profile_min_gap_ns);
  }
  if (due & EM_CONFIG_APPLY_STAGES) {
    reserve_stages(a, &a->cfg);
  }
  if (due & EM_CONFIG_APPLY_DEADLINES) {
    em_deadline_t entries[EM_DEADLINE_MAX_ENTRIES];
    rc = em_deadlines_update(&a->deadlines, a->cfg.ring_slots, entries,
                             deadline_entries(&a->cfg, entries));
    if (rc) {
      EM_ERROR("deadline page: %s", strerror(-rc));
    }
  }
  int n = em_budget_describe(a->budget, a->birth_budgets, EM_CONFIG_MAX_RULES);
  a->n_birth_budgets = n > 0 ? (size_t)n : 0;
  EM_INFO("reload: %zu budget rules (%zu kept their state), level %s", a->cfg.n_rules, kept,
          em_level_name(em_budget_level(a->budget)));

  /* The attach module keeps its own copy of the target, and re-attaches when it differs. */
  bool target_changed =
      (due & EM_CONFIG_APPLY_TARGET) != 0 && em_attach_retarget(a->attach, &a->cfg.target);
  if (!target_changed || em_attach_pid(a->attach) == 0) {
    publish_birth(a); /* The birth lists the budgets. */
  }
  em_service_reloaded(&a->svc, "running (reloaded)");
  return 0;
}

int em_agent_start(em_agent_t *a) {
  uint64_t period_ms = a->cfg.sample_period_ns / 1000000u;
  int rc = em_syncer_start(a->syncer);
  if (rc) {
    EM_ERROR("spool: cannot start the sync thread: %s", uv_strerror(rc));
    return rc;
  }
  em_publisher_start(a->pub);
  em_attach_start(a->attach);
  a->next_tick_ns = uv_hrtime() + a->cfg.sample_period_ns;
  return uv_timer_start(&a->tick, on_tick, period_ms, 0);
}

static void stop_step(em_agent_t *a);

static void on_closed(uv_handle_t *h) {
  stop_step(h->data);
}

/* One more part of the agent is closed; the last one reports the stop as done. */
static void stop_step(em_agent_t *a) {
  if (--a->pending == 0 && a->stop_done) {
    a->stop_done(a->stop_ctx);
  }
}

/* A module's close callback (span socket, rings, hook, publisher): one step each. */
static void on_part_closed(void *ctx) {
  stop_step(ctx);
}

/* Closes one of the agent's handles; its close callback takes the step counted here. */
static void close_handle(em_agent_t *a, uv_handle_t *h) {
  a->pending++;
  uv_close(h, on_closed);
}

void em_agent_stop(em_agent_t *a, void (*done)(void *), void *ctx) {
  if (a->closing) {
    return;
  }
  a->stop_done = done;
  a->stop_ctx = ctx;
  em_service_stopping(&a->svc);
  a->closing = true;
  a->pending = 1; /* Held until every close below is asked for: none completes inline. */
  a->pending++;
  em_rings_close(a->rings, on_part_closed, a);
  a->pending++;
  em_spans_close(a->spans, on_part_closed, a);
  if (a->hook) {
    a->pending++;
    em_hook_close(a->hook, on_part_closed, a);
  }
  a->pending += em_sampling_cancel(a->sampling, on_part_closed, a); /* smaps, sensors */
  if (em_profiling_cancel(a->prof, on_part_closed, a)) {
    a->pending++; /* A resolved window is still published first. */
  }
  close_handle(a, (uv_handle_t *)&a->tick);
  a->pending++;
  em_attach_close(a->attach, on_part_closed, a);
  a->pending++;
  em_syncer_close(a->syncer, on_part_closed, a); /* After the sync in hand. */
  close_handle(a, (uv_handle_t *)&a->rebirth);
  uint8_t last[64];
  size_t len = encode_status(a, false, last, sizeof(last));
  a->pending++;
  em_publisher_stop(a->pub, len ? last : NULL, len, STOP_TIMEOUT_MS, on_part_closed, a);
  stop_step(a); /* The hold taken above. */
}

void em_agent_free(em_agent_t *a) {
  if (!a) {
    return;
  }
  em_publisher_free(a->pub);
  em_attach_free(a->attach);
  em_sampling_free(a->sampling);
  em_figures_free(a->figs);
  free(a->samples);
  free(a->out);
  em_forward_free(a->fwd); /* Syncs the spool: the last records reach the disk. */
  em_syncer_free(a->syncer);
  free(a->stage_out);
  free(a->bucket_out);
  em_rings_free(a->rings);
  em_spans_free(a->spans);
  em_deadlines_close(&a->deadlines, true);
  em_signals_free(a->signals, true);
  em_hook_free(a->hook);
  em_budget_free(a->budget);
  em_feed_free(a->feed);
  em_profiling_free(a->prof);
  free(a->budget_windows);
  free(a->budget_stages);
  free(a->birth_budgets);
  free(a);
}
