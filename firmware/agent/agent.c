/*
 * agent.c - see agent.h. The loop: it builds one object per room (collect/, spans/,
 * supervise/, transport/, record/, profile/: each folder's README says what it owns), ties
 * their callbacks together, runs the tick in the order below, and stops them all. What a room
 * does lives in the room; this file says when.
 *
 * One tick (on_tick; arm_tick keeps ticks on start + k * period, so lateness never adds up):
 *   1. the watchdog and lateness (service.h);
 *   2. the target: PMU and statm (collect/sampling.h), a detach when it exited, a wrapper's
 *      child on the system cadence (collect/attach.h), its figures absent while detached;
 *   3. MemAvailable and PSI, the agent's own figures, the sensors' worker job;
 *   4. the span rings drained (spans/rings.h), then the spans', pushes', spool and anomaly
 *      figures and the rate-limited log summaries;
 *   5. the flight and profile figures, the open profile window's share (profile/profiling.h);
 *   6. the budgets judged (supervise/judge.h): a change of level goes out on every path
 *      (apply_change) before the data message, which carries the level;
 *   7. the flight recorder's tick (record/feed.h), while the slower groups read are known;
 *   8. one data message (samples, stage windows made coarser until it fits) to the forwarder
 *      (live, else the spool), an ended flight recording, a few spooled messages replayed,
 *      and the spool's sync asked of its own thread (transport/);
 *   9. READY=1 to systemd after the first.
 * Between ticks: spans, hard misses, model datagrams and Python stacks on the span socket
 * (on_span, on_hard_miss, on_model, on_pystacks), commands on MQTT (transport/commands.h), a
 * birth on every connect and attach (what is absent may have changed).
 *
 * Stop (em_agent_stop): every handle, module and worker job it closes is counted in `pending`
 * (close_handle, on_part_closed); the last to finish calls the caller's done.
 */
#define _POSIX_C_SOURCE 200809L

#include "agent.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "budget.h"
#include "commands.h"
#include "judge.h"
#include "levels.h"
#include "edgemon/proto.h"
#include "figures.h"
#include "feed.h"
#include "flight.h"
#include "forward.h"
#include "log.h"
#include "profiling.h"
#include "procfs.h"
#include "publisher.h"
#include "service.h"
#include "rings.h"
#include "identity.h"
#include "report.h"
#include "spans.h"
#include "syncer.h"
#include "attach.h"
#include "sampling.h"

#define STOP_TIMEOUT_MS 2000u

_Static_assert(EM_FEED_SMAPS == EM_SAMPLING_SMAPS && EM_FEED_SYSTEM == EM_SAMPLING_SYSTEM &&
                   EM_FEED_SENSORS == EM_SAMPLING_SENSORS,
               "the flight feed reads the sampling's fresh groups as they are");
_Static_assert(EM_CONFIG_MAX_EVENTS <= EM_SAMPLING_MAX_EVENTS, "sampling holds every event");
_Static_assert(EM_CONFIG_MAX_RULES <= EM_JUDGE_MAX_BUDGETS, "the birth lists every rule");
_Static_assert(EM_CONFIG_FLIGHT_TICK_SLACK == EM_FLIGHT_REC_TICK_SLACK,
               "config.c checks the flight recorder's tick ring as record/flight.c sizes it");

struct em_agent {
  uv_loop_t *loop;
  em_config_t cfg;
  char version[64];
  char prefix[128]; /* edgemon/v1/<device> */
  uint32_t session;
  uint32_t seq;

  uv_timer_t tick;
  em_commands_t *cmds;   /* cmd/<name> and the rebirth rate limit (transport/commands.h). */
  uint64_t next_tick_ns; /* uv_hrtime() the next tick is due: start + k * period. */
  uint64_t last_tick_ns; /* uv_hrtime() the last tick started: its window's start. */
  uint64_t late_ticks;   /* Ticks that started over half a period late, or were skipped. */

  em_publisher_t *pub;
  em_spans_t *spans;
  em_rings_t *rings;         /* Span rings v2, drained on every tick. */
  em_deadlines_t deadlines;  /* <runtime_dir>/deadlines: the hard deadlines for clients. */
  em_judge_t *judge;         /* The budget window and the engine (supervise/judge.h). */
  em_levels_t *levels;       /* The level record, state page, pushes, hook (supervise/levels.h). */
  em_identity_t model;       /* The target's model identity (spans/identity.h). */
  em_spans_report_t *report; /* The spans' figures and stage windows (spans/report.h). */
  em_sampling_t *sampling;   /* What the tick reads, and its worker jobs (collect/sampling.h). */
  em_attach_t *attach;       /* The target's lifecycle and the lookup timer (collect/attach.h). */

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

  em_profiling_t *prof; /* The profiler (profile/profiling.h): triggers, windows, the worker. */

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

/* Fixed figure f's value (absent unless `have`). */
static void put(em_agent_t *a, em_figure_t f, bool have, uint64_t v) {
  em_figures_set_u_if(a->samples, em_figures_alias(a->figs, f), have, v);
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
  size_t n_budgets = 0;
  em_msg_t msg = {.kind = EM_MSG_BIRTH,
                  .u.birth = {.head = {.time_ns = wall_ns(), .session = a->session},
                              .device = a->cfg.device_id,
                              .agent_version = a->version,
                              .board = a->cfg.board,
                              .period_ns = a->cfg.sample_period_ns,
                              .metrics = em_figures_defs(a->figs),
                              .n_metrics = a->n_metrics,
                              .budgets = em_judge_budgets(a->judge, &n_budgets),
                              .n_budgets = n_budgets,
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
    em_commands_birth_sent(a->cmds); /* A waiting cmd/rebirth is answered by it. */
  }
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

/* --- commands (transport/commands.h) ------------------------------------------------- */

static void on_command(void *ctx, const char *name, const uint8_t *payload, size_t len) {
  em_commands_on(((em_agent_t *)ctx)->cmds, name, payload, len);
}

/* A birth asked for: cmd/rebirth (transport/commands.h), or an attach (collect/attach.h: what
 * is absent may have changed). */
static void on_birth_due(void *ctx) {
  publish_birth(ctx);
}

static void on_cmd_flight(void *ctx) {
  em_agent_t *a = ctx;
  em_flight_trigger_t t = {.cause = EM_FLIGHT_COMMAND,
                           .level = em_levels_state(a->levels)->level,
                           .prev_level = EM_LEVEL_NONE,
                           .reason = "cmd/flight"};
  em_feed_trigger(a->feed, &t, uv_hrtime());
}

static void on_cmd_profile(void *ctx, uint32_t seconds) {
  em_agent_t *a = ctx;
  em_profile_trigger_t t = {.cause = EM_PROFILE_COMMAND,
                            .level = em_levels_state(a->levels)->level,
                            .prev_level = EM_LEVEL_NONE,
                            .reason = "cmd/profile"};
  em_profiling_trigger(a->prof, &t, attached_pid(a), seconds, uv_hrtime());
}

/* --- level changes -------------------------------------------------------------------- */

/* The retained MQTT state message of the current level. */
static void publish_state(em_agent_t *a) {
  const em_state_record_t *r = em_levels_state(a->levels);
  em_msg_t msg = {.kind = EM_MSG_STATE,
                  .u.state = {.head = {.time_ns = r->since_wall_ns ? r->since_wall_ns : wall_ns(),
                                       .session = a->session},
                              .level = r->level,
                              .prev_level = r->prev_level,
                              .mono_ns = r->since_mono_ns,
                              .rule = r->rule[0] ? r->rule : NULL,
                              .stage = r->stage[0] ? r->stage : NULL,
                              .reason = r->reason[0] ? r->reason : NULL,
                              .model = a->model.view,
                              .verdict = em_feed_verdict(a->feed)}};
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
  const em_state_record_t *r = em_levels_apply(a->levels, c, wall_ns());
  em_feed_diagnose(a->feed, c->level, c->stage, c->statistic, c->window_ns, &c->bound, c->mono_ns,
                   em_sampling_others(a->sampling));
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
  em_service_notifyf("STATUS=level %s since %s", em_level_name(r->level), r->reason);
  em_levels_announce(a->levels); /* The hook and the log line. */
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
  bool changed =
      span->kind == EM_DGRAM_SPAN
          ? em_budget_on_span(em_judge_engine(a->judge), stage->name, span->frame_id,
                              span->duration_ns, stage->last_seen_ns, &c)
          : em_budget_on_heartbeat(em_judge_engine(a->judge), stage->name, stage->last_seen_ns, &c);
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
  if (span->kind == EM_DGRAM_SPAN && em_budget_on_hard_miss(em_judge_engine(a->judge), stage->name,
                                                            span->duration_ns, uv_hrtime(), &c)) {
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
  em_level_t level = em_levels_state(a->levels)->level;
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
  (void)em_rings_register(a->rings, reg, fd, allowed, sender, from, from_len); /* It logs. */
}

/* A subscribe or unsubscribe datagram. Refusals are counted (push.subscribe_refused); their
 * log line is rate-limited: the first of a burst, then one count per EM_LOG_LIMIT_NS. */
static void on_subscribe(void *ctx, bool subscribe, const struct sockaddr_un *addr, socklen_t len,
                         const struct ucred *sender) {
  em_agent_t *a = ctx;
  (void)em_signals_subscribe(em_levels_signals(a->levels), subscribe, addr, len,
                             em_spans_sender_pid(sender));
}

/* A stage leaves the span table for another name: its budget window goes with it. */
static void on_stage_evicted(void *ctx, size_t index, const char *evicted, const char *arriving) {
  (void)evicted;
  (void)arriving;
  em_agent_t *a = ctx;
  em_judge_evict(a->judge, index);
}

/*
 * Reserves the span table's slots for every stage cfg's budget rules name (a stage rule's
 * stage, a flow's stages), so spans of other names cannot push them out, and sets the idle
 * time after which other stages may be evicted.
 */
static void reserve_stages(em_agent_t *a, const em_config_t *cfg) {
  const char *names[EM_CONFIG_MAX_RULES * (1 + EM_BUDGET_FLOW_MAX_STAGES)];
  size_t n = em_judge_stage_names(cfg->rules, cfg->n_rules, names, sizeof(names) / sizeof(*names));
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

/* The judge's options from a config (its rules borrowed for the call). */
static em_judge_opts_t judge_opts(const em_config_t *cfg) {
  return (em_judge_opts_t){.rules = cfg->rules,
                           .n_rules = cfg->n_rules,
                           .enter_windows = cfg->enter_windows,
                           .leave_windows = cfg->leave_windows,
                           .window_ns = cfg->window_ns,
                           .max_stages = cfg->max_stages};
}

/*
 * The budgets' share of the tick: this tick's stage windows, and the figures rules may name
 * (PSI, the GPU memory, the hottest zone, throttling, RSS). ALIVE rules are judged every tick.
 */
static void judge_tick(em_agent_t *a, uint64_t now) {
  const char *names[EM_PROTO_MAX_STAGES];
  const em_hist_t *windows[EM_PROTO_MAX_STAGES];
  size_t n = em_spans_stage_count(a->spans);
  n = n < EM_PROTO_MAX_STAGES ? n : EM_PROTO_MAX_STAGES;
  for (size_t i = 0; i < n; i++) {
    const em_stage_stats_t *st = em_spans_stage(a->spans, i);
    names[i] = st->name;
    windows[i] = &st->window;
  }
  em_budget_figure_t figs[2 * EM_PSI_COUNT + 3];
  for (size_t k = 0; k <= 2 * EM_PSI_COUNT; k++) {
    em_figure_t f =
        k < 2 * EM_PSI_COUNT ? (em_figure_t)(EM_FIG_PSI_CPU_SOME + k) : EM_FIG_GPU_MEM_PROCESS;
    figs[k] = (em_budget_figure_t){.name = em_figures_info(f)->name,
                                   .value = a->samples[em_figures_alias(a->figs, f)].value};
  }
  em_budget_figure_t *temp = &figs[2 * EM_PSI_COUNT + 1], *throttled = temp + 1;
  *temp = (em_budget_figure_t){.name = EM_CONFIG_FIGURE_TEMP};
  *throttled = (em_budget_figure_t){.name = EM_CONFIG_FIGURE_THROTTLED};
  em_sampling_thermal(a->sampling, &temp->value, &throttled->value, &throttled->why);
  em_judge_tick_t in = {.n_stages = n,
                        .names = names,
                        .windows = windows,
                        .rss_bytes = a->samples[em_figures_alias(a->figs, EM_FIG_RSS)].value,
                        .figures = figs,
                        .n_figures = sizeof(figs) / sizeof(figs[0])};
  em_budget_change_t c[2];
  size_t changes = em_judge_tick(a->judge, now, &in, c);
  for (size_t i = 0; i < changes; i++) {
    apply_change(a, &c[i]);
  }
}

/* --- one tick ------------------------------------------------------------------------ */

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
  put(a, EM_FIG_AGENT_NOT_SENT, true, em_publisher_stats(a->pub)->not_sent);
  put(a, EM_FIG_AGENT_OVERSIZE, true, em_publisher_stats(a->pub)->oversize);
  put(a, EM_FIG_AGENT_LATE_TICKS, true, a->late_ticks);
  put(a, EM_FIG_TARGET_PID, pid > 0, (uint64_t)pid);
  put(a, EM_FIG_TARGET_UP, true, pid != 0);
  put(a, EM_FIG_TARGET_ATTACHES, true, em_attach_count(a->attach));
  uint64_t threads = 0;
  put(a, EM_FIG_TARGET_THREADS, em_sampling_threads(a->sampling, &threads) && pid > 0, threads);

  em_rings_drain(a->rings, now); /* Before the windows are published and budgets judged. */
  em_spans_report_figures(a->report, a->samples);
  em_levels_figures(a->levels, a->figs, a->samples);
  put(a, EM_FIG_AGENT_REBIRTHS_SUPPRESSED, true, em_commands_rebirths_suppressed(a->cmds));
  put(a, EM_FIG_MODEL_CHANGES, true, a->model.changes);
  em_signals_flush_log(em_levels_signals(a->levels), now);
  em_feed_flush_log(a->feed, now);
  em_commands_flush_log(a->cmds, now);
  em_profiling_flush_log(a->prof, now);
  em_forward_figures(a->fwd, a->figs, a->samples);
  em_judge_figures(a->judge, a->figs, a->samples); /* The anomaly scores. */

  em_feed_figures(a->feed, a->samples);
  em_profiling_tick(a->prof, now, pid);
  em_profiling_figures(a->prof, a->samples);

  /* Before the data message: it carries the level, and a change publishes its state
   * message through the same encode buffer. */
  judge_tick(a, now);
  /* While the slower groups read this window are known. */
  em_feed_tick(a->feed, now, a->samples, em_sampling_fresh(a->sampling));

  em_sample_t *view = a->samples + a->n_metrics; /* Second half of the samples buffer. */
  unsigned fresh = em_sampling_fresh(a->sampling);
  em_msg_t msg = {
      .kind = EM_MSG_DATA,
      .u.data = {.head = {.time_ns = wall_ns(), .session = a->session},
                 .seq = a->seq++,
                 .window_ns = window_ns,
                 .level = em_budget_level(em_judge_engine(a->judge)),
                 .samples = view,
                 .n_samples = em_figures_window(a->figs, a->samples, fresh & EM_SAMPLING_SMAPS,
                                                fresh & EM_SAMPLING_SYSTEM, view),
                 .model = a->model.view}};
  size_t len = 0;
  int rc = EM_PROTO_ETOOBIG;
  /* Stage windows share the message: fewer buckets per stage (a coarser scale) if needed. */
  for (size_t cap = em_spans_report_cap(a->report); rc == EM_PROTO_ETOOBIG && cap > 0; cap /= 2) {
    msg.u.data.stages = em_spans_report_stages(a->report, cap, &msg.u.data.n_stages);
    rc = em_proto_encode(&msg, a->out, EM_PROTO_MAX_MESSAGE_BYTES, &len);
  }
  em_spans_window_reset(a->spans);
  em_sampling_sent(a->sampling); /* The next smaps reading comes from its worker job. */
  if (rc) {
    EM_ERROR("data: cannot encode: %s", em_proto_strerror(rc));
    return;
  }
  /* Live when the broker takes it, else into the spool; then a few spooled ones. */
  (void)em_forward_publish(a->fwd, &msg, a->out, EM_PROTO_MAX_MESSAGE_BYTES, len, true);
  em_feed_publish(a->feed, now, !a->closing);
  em_forward_replay(a->fwd);
  em_forward_maybe_sync(a->fwd, now);
  em_service_sampling(&a->svc, a->cfg.device_id, a->cfg.sample_period_ns); /* READY=1, once. */
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
  if (!a->samples || !a->out) {
    return -ENOMEM;
  }
  for (size_t m = 0; m < a->n_metrics; m++) {
    a->samples[m].alias = (uint32_t)m;
  }
  em_sampling_bind(a->sampling, a->figs, a->samples);
  return 0;
}

static void free_discarded(void *a) {
  em_agent_free(a);
}

/* Undoes a failed em_agent_new(): the modules made so far have handles on the loop, so they
 * are closed as by a stop, and the agent is freed from the last close callback, when the caller
 * next runs the loop (agent.h). */
static void discard(em_agent_t *a) {
  em_agent_stop(a, free_discarded, a);
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
  uv_timer_init(loop, &a->tick); /* First: a failed new closes it (discard()). */
  a->tick.data = a;
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
                              .feed = a->feed,
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
  if (!rc) {
    rc = em_spans_report_new(&a->report, a->spans, a->rings, a->figs, cfg->max_stages);
  }
  uint64_t now = uv_hrtime();
  if (!rc) {
    em_judge_opts_t jo = judge_opts(cfg);
    rc = em_judge_new(&a->judge, &jo, now);
  }
  if (!rc) {
    reserve_stages(a, cfg);
  }
  em_levels_opts_t lo = {.loop = loop,
                         .runtime_dir = cfg->runtime_dir,
                         .hook = cfg->hook,
                         .hook_timeout_ns = cfg->hook_timeout_ns,
                         .send = send_push,
                         .send_ctx = a};
  if (!rc) {
    rc = em_levels_new(&a->levels, &lo, now, wall_ns());
  }
  if (!rc) {
    char page[EM_CONFIG_MAX_PATH + 16];
    snprintf(page, sizeof(page), "%s/deadlines", cfg->runtime_dir);
    em_deadline_t entries[EM_DEADLINE_MAX_ENTRIES];
    size_t n = em_judge_deadlines(cfg->rules, cfg->n_rules, entries);
    rc = em_deadlines_open(&a->deadlines, page, (uint32_t)getpid(), cfg->ring_slots, entries, n);
    if (rc) {
      EM_ERROR("deadline page %s: %s", page, strerror(-rc));
    }
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
    discard(a);
    return rc == -ENOENT ? -ENOENT : rc;
  }
  em_attach_opts_t ao = {.loop = loop,
                         .sampling = a->sampling,
                         .spec = &cfg->target,
                         .proc_root = a->cfg.proc_root,
                         .on_attached = on_birth_due,
                         .ctx = a};
  em_commands_opts_t co = {.loop = loop,
                           .birth = on_birth_due,
                           .flight = on_cmd_flight,
                           .profile = on_cmd_profile,
                           .ctx = a};
  rc = em_attach_new(&a->attach, &ao); /* The last two: their timers need no undoing after. */
  if (!rc) {
    rc = em_commands_new(&a->cmds, &co);
  }
  if (rc) {
    discard(a);
    return rc;
  }
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

  em_judge_opts_t jo = judge_opts(next);
  size_t kept = 0;
  int rc = em_judge_reload(a->judge, &jo, now, &kept);
  if (rc) {
    em_service_reloaded(&a->svc, "reload refused: budget rules");
    return rc;
  }
  /* Every key a reload applies is copied by the config's schema; each apply step its changed
   * keys name runs below. The engine is rebuilt on every reload (made above by the judge, where
   * it may refuse the rules), the rules' state carried over by id. */
  unsigned due = em_config_adopt(&a->cfg, next);
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
                             em_judge_deadlines(a->cfg.rules, a->cfg.n_rules, entries));
    if (rc) {
      EM_ERROR("deadline page: %s", strerror(-rc));
    }
  }
  EM_INFO("reload: %zu budget rules (%zu kept their state), level %s", a->cfg.n_rules, kept,
          em_level_name(em_budget_level(em_judge_engine(a->judge))));

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

/* One more module closing: counted here, and the callback that takes its step. */
static void (*counted(em_agent_t *a))(void *) {
  a->pending++;
  return on_part_closed;
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
  if (a->rings) { /* Each module a failed new made (discard()). */
    em_rings_close(a->rings, counted(a), a);
  }
  if (a->spans) {
    em_spans_close(a->spans, counted(a), a);
  }
  if (em_levels_close(a->levels, on_part_closed, a)) {
    a->pending++; /* The hook. */
  }
  if (a->sampling) {
    a->pending += em_sampling_cancel(a->sampling, on_part_closed, a); /* smaps, sensors */
  }
  if (em_profiling_cancel(a->prof, on_part_closed, a)) {
    a->pending++; /* A resolved window is still published first. */
  }
  close_handle(a, (uv_handle_t *)&a->tick);
  if (a->attach) {
    em_attach_close(a->attach, counted(a), a);
  }
  if (a->syncer) {
    em_syncer_close(a->syncer, counted(a), a); /* After the sync in hand. */
  }
  if (a->cmds) {
    em_commands_close(a->cmds, counted(a), a);
  }
  if (a->pub) {
    uint8_t last[64];
    size_t len = encode_status(a, false, last, sizeof(last));
    em_publisher_stop(a->pub, len ? last : NULL, len, STOP_TIMEOUT_MS, counted(a), a);
  }
  stop_step(a); /* The hold taken above. */
}

void em_agent_free(em_agent_t *a) {
  if (!a) {
    return;
  }
  em_publisher_free(a->pub);
  em_attach_free(a->attach);
  em_commands_free(a->cmds);
  em_sampling_free(a->sampling);
  em_figures_free(a->figs);
  free(a->samples);
  free(a->out);
  em_forward_free(a->fwd); /* Syncs the spool: the last records reach the disk. */
  em_syncer_free(a->syncer);
  em_spans_report_free(a->report);
  em_rings_free(a->rings);
  em_spans_free(a->spans);
  em_deadlines_close(&a->deadlines, true);
  em_levels_free(a->levels);
  em_judge_free(a->judge);
  em_feed_free(a->feed);
  em_profiling_free(a->prof);
  free(a);
}
