/*
 * profiling.c - see profiling.h. The request page is written whole to profile.tmp and renamed
 * over <runtime_dir>/profile, so a client reads the old page or the new one; 64 bytes on the
 * runtime directory's tmpfs, once per window.
 */
#define _POSIX_C_SOURCE 200809L

#include "profiling.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "edgemon/common/file.h"
#include "growth.h"
#include "log.h"
#include "pmu.h"
#include "window.h"

#define NS_PER_SEC UINT64_C(1000000000)
#define HIST_ROOM  16u  /* Bytes a profile leaves under its cap for its historical form. */
#define PATH_BYTES 4112 /* A runtime directory and "/profile.tmp". */

struct em_profiling {
  em_profiling_opts_t o;
  char page[PATH_BYTES];     /* <runtime_dir>/profile */
  char page_tmp[PATH_BYTES]; /* <runtime_dir>/profile.tmp */
  em_window_t *window;       /* NULL with [profile] enabled false. */
  pid_t pid;                 /* The process the open window samples. */
  uv_work_t work;            /* Symbols and assembly of a closed window, on libuv's worker. */
  bool busy;                 /* work is queued or running: the window is the worker's. */
  void (*done)(void *);
  void *done_ctx;
  em_log_limit_t refused;    /* Triggers not sampled. */
  em_log_limit_t py_refused; /* Python stacks datagrams refused. */

  /* Baselines (profiling.h): the loop's fields, then the worker's while `busy`. */
  pid_t seen_pid;         /* The attached target of the last tick (0: none)... */
  uint64_t attached_ns;   /* ...since. */
  bool base_window;       /* The window open or resolving is a baseline (the loop's copy). */
  bool base_tried;        /* A baseline was opened for seen_pid... */
  uint64_t base_start_ns; /* ...at. */
  uint64_t base_cpu_ns;   /* The agent's CPU time when it opened. */
  bool have_base;         /* `base` holds stages of seen_pid's. */
  em_growth_t *growth;    /* The growth scratch (worker). */
  em_growth_base_t *base; /* The last baseline's shares (written by the worker). */
  bool want_growth;       /* The open escalation window's recording waits for functions. */
  char growth_stage[EM_STAGE_FIELD_BYTES];
  em_growth_fn_t grown[EM_PROTO_VERDICT_MAX_FUNCTIONS]; /* Worker: the functions that grew... */
  int n_grown;                                          /* ...how many. */
  int base_stages;                                      /* Worker: stages the baseline kept. */
  uint64_t resolve_cpu_ns;                              /* Worker: CPU time of the resolution. */
  /* A trigger that came while a baseline resolved: opened when it is done. */
  bool deferred;
  em_profile_trigger_t dt;
  char dt_rule[64], dt_stage[EM_STAGE_FIELD_BYTES], dt_reason[160];
  pid_t dt_pid;
  uint32_t dt_seconds;
};

static uint64_t cpu_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (uint64_t)ts.tv_sec * NS_PER_SEC + (uint64_t)ts.tv_nsec;
}

static uint64_t wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * NS_PER_SEC + (uint64_t)ts.tv_nsec;
}

/*
 * The request page of the window just opened. Whatever stands at profile.tmp is removed first
 * and the file made anew (O_EXCL, O_NOFOLLOW): a FIFO there cannot block the loop, a link
 * cannot redirect the write.
 */
static void write_page(em_profiling_t *p) {
  em_profile_page_t pg;
  uint8_t buf[EM_PROFILE_PAGE_BYTES];
  if (em_window_request(p->window, &pg) != 0 || em_profile_page_pack(&pg, buf) != 0) {
    return;
  }
  int fd = em_file_begin(p->page, 0, p->page_tmp, sizeof(p->page_tmp));
  int rc = fd < 0 ? fd : 0;
  if (fd >= 0) {
    ssize_t n = write(fd, buf, sizeof(buf));
    rc = n == (ssize_t)sizeof(buf) ? 0 : n < 0 ? -errno : -EIO;
    close(fd);
  }
  rc = fd < 0 ? rc : em_file_finish(p->page_tmp, p->page, rc);
  if (rc) {
    EM_WARN("profile: cannot write the request page %s: %s (no Python frames this window)", p->page,
            strerror(-rc));
  }
}

int em_profiling_new(em_profiling_t **out, const em_profiling_opts_t *opts) {
  if (!out || !opts || !opts->loop || !opts->figs || !opts->publish || !opts->runtime_dir ||
      !opts->proc_root) {
    return -EINVAL;
  }
  em_profiling_t *p = calloc(1, sizeof(*p));
  if (!p) {
    return -ENOMEM;
  }
  p->o = *opts;
  snprintf(p->page, sizeof(p->page), "%s/profile", opts->runtime_dir);
  p->o.runtime_dir = NULL; /* Not kept: the paths above are. */
  p->o.proc_root = NULL;   /* The window keeps its copy. */
  p->work.data = p;
  *out = p;
  if (!opts->enabled) {
    return 0;
  }
  em_window_opts_t wo = {.hz = opts->hz,
                         .clock = opts->task_clock ? EM_SAMPLER_TASK_CLOCK : EM_SAMPLER_CPU_CLOCK,
                         .seconds_ns = opts->seconds_ns,
                         .max_seconds_ns = opts->max_seconds_ns,
                         .min_gap_ns = opts->min_gap_ns,
                         .max_bytes = opts->max_bytes,
                         .max_stacks = EM_PROFILE_MAX_STACKS,
                         .dwarf = opts->dwarf,
                         .span_settle_ns = 2 * opts->period_ns + opts->period_ns / 2,
                         .proc_root = opts->proc_root};
  (void)unlink(p->page); /* A previous agent's page names windows this one never opened. */
  int rc = em_window_new(&p->window, &wo);
  if (!rc && opts->feed) {
    rc = em_growth_new(&p->growth);
    p->base = rc ? NULL : calloc(1, sizeof(*p->base));
    rc = rc ? rc : p->base ? 0 : -ENOMEM;
  }
  if (rc) {
    EM_ERROR("profile: cannot start the profiler: %s", strerror(-rc));
    em_profiling_free(p);
    *out = NULL;
    return rc;
  }
  EM_INFO("profile: profiler on: %u Hz, %llu ms windows, %llu bytes", opts->hz,
          (unsigned long long)(opts->seconds_ns / 1000000u),
          (unsigned long long)em_window_bytes(p->window));
  return 0;
}

void em_profiling_free(em_profiling_t *p) {
  if (!p) {
    return;
  }
  em_window_free(p->window);
  em_growth_free(p->growth);
  free(p->base);
  free(p);
}

em_profiler_t em_profiling_describe(const em_profiling_t *p) {
  if (!p || !p->window) {
    return (em_profiler_t){.on = false};
  }
  return (em_profiler_t){.on = true,
                         .hz = p->o.hz,
                         .seconds = p->o.seconds_ns / NS_PER_SEC,
                         .max_seconds = p->o.max_seconds_ns / NS_PER_SEC,
                         .min_gap_seconds = p->o.min_gap_ns / NS_PER_SEC};
}

void em_profiling_set_min_gap(em_profiling_t *p, uint64_t min_gap_ns) {
  p->o.min_gap_ns = min_gap_ns;
  em_window_set_min_gap(p->window, min_gap_ns);
}

/* Keeps a trigger (its strings copied) until the baseline being resolved is done. */
static void defer(em_profiling_t *p, const em_profile_trigger_t *t, pid_t pid, uint32_t seconds) {
  p->deferred = true;
  p->dt = *t;
  snprintf(p->dt_rule, sizeof(p->dt_rule), "%s", t->rule ? t->rule : "");
  snprintf(p->dt_stage, sizeof(p->dt_stage), "%s", t->stage ? t->stage : "");
  snprintf(p->dt_reason, sizeof(p->dt_reason), "%s", t->reason ? t->reason : "");
  p->dt.rule = t->rule ? p->dt_rule : NULL;
  p->dt.stage = t->stage ? p->dt_stage : NULL;
  p->dt.reason = t->reason ? p->dt_reason : NULL;
  p->dt_pid = pid;
  p->dt_seconds = seconds;
}

void em_profiling_trigger(em_profiling_t *p, const em_profile_trigger_t *t, pid_t pid,
                          uint32_t seconds, uint64_t mono_ns) {
  const char *what = t->cause == EM_PROFILE_COMMAND ? "cmd/profile" : "escalation";
  if (!p->window) {
    if (t->cause == EM_PROFILE_COMMAND &&
        em_log_limit_pass(&p->refused, mono_ns, EM_LOG_LIMIT_NS)) {
      EM_WARN(
          "profile: cmd/profile ignored: the profiler is off ([profile] enabled)" EM_LOG_HELD_BACK);
    }
    return;
  }
  if (p->base_window && !p->busy && em_window_abort(p->window)) {
    p->base_window = false;
    EM_INFO("profile: baseline window dropped: the %s's window comes first", what);
  }
  if (p->base_window && p->busy && !p->deferred) {
    defer(p, t, pid, seconds);
    EM_INFO("profile: %s to %s: sampling once the baseline window is resolved", what,
            em_level_name(t->level));
    return;
  }
  int rc = em_window_trigger(p->window, t, pid, seconds, mono_ns, wall_ns());
  if (rc == 0) {
    p->pid = pid;
    write_page(p);
    uint64_t s = seconds ? (uint64_t)seconds * NS_PER_SEC : p->o.seconds_ns;
    s = s < p->o.max_seconds_ns ? s : p->o.max_seconds_ns;
    /* Its end, the wait for the Python stacks, the spans' settling, and the resolution. */
    uint64_t until = mono_ns + s + EM_WINDOW_PY_WAIT_NS + 3 * p->o.period_ns + 5 * NS_PER_SEC;
    p->want_growth = t->cause == EM_PROFILE_ESCALATION && t->stage && p->have_base &&
                     pid == p->seen_pid && em_feed_await_functions(p->o.feed, t->stage, until);
    if (p->want_growth) {
      snprintf(p->growth_stage, sizeof(p->growth_stage), "%s", t->stage);
    }
    EM_INFO("profile: %s to %s: sampling pid %d for %llu ms at %u Hz", what,
            em_level_name(t->level), (int)pid, (unsigned long long)(s / 1000000u), p->o.hz);
    return;
  }
  if (!em_log_limit_pass(&p->refused, mono_ns, EM_LOG_LIMIT_NS)) {
    return;
  }
  if (rc == -EBUSY || rc == -EAGAIN) {
    EM_INFO("profile: %s to %s not sampled: %s (counted in profile.suppressed" EM_LOG_HELD_BACK ")",
            what, em_level_name(t->level),
            rc == -EBUSY ? "a window is open or being published"
                         : "within [profile] min_gap_seconds of the last");
    return;
  }
  char why[EM_PMU_REASON_BYTES];
  if (rc == -EACCES || rc == -EPERM) {
    em_pmu_refusal(-rc, why, sizeof(why)); /* What is really missing, not just EACCES. */
  } else {
    snprintf(why, sizeof(why), "%s", rc == -ESRCH ? "no target attached" : strerror(-rc));
  }
  EM_WARN("profile: %s: no window: %s" EM_LOG_HELD_BACK, what, why);
}

void em_profiling_span(void *ctx, uint32_t pid, uint32_t tid, const em_span_t *span) {
  em_profiling_t *p = ctx;
  if (p->window && !p->busy) {
    em_window_span(p->window, pid, tid, span->stage, span->start_ns, span->duration_ns);
  }
}

void em_profiling_pystacks(em_profiling_t *p, const uint8_t *buf, size_t len, pid_t sender) {
  if (!p->window || p->busy) {
    return;
  }
  int rc = em_window_pystacks(p->window, buf, len, sender);
  if (rc && em_log_limit_pass(&p->py_refused, uv_hrtime(), EM_LOG_LIMIT_NS)) {
    EM_INFO("profile: Python stacks from pid %d refused: %s" EM_LOG_HELD_BACK, (int)sender,
            rc == -ENOENT     ? "no window open"
            : rc == -EPERM    ? "not the profiled process"
            : rc == -ESTALE   ? "another window"
            : rc == -EALREADY ? "one already held"
                              : em_proto_strerror(rc)); /* proto's codes and errno alike */
  }
}

/* The worker's share: symbols and assembly, then a baseline's shares, or an escalation's
 * functions that grew against the baseline. */
static void resolve_work(uv_work_t *w) {
  em_profiling_t *p = w->data;
  uint64_t cpu0 = cpu_ns(CLOCK_THREAD_CPUTIME_ID);
  em_window_resolve(p->window);
  em_profile_t *pr = em_window_take(p->window);
  p->n_grown = 0;
  if (pr && em_window_is_baseline(p->window)) {
    p->base_stages = em_growth_baseline(p->growth, pr, p->base);
  } else if (pr && p->want_growth) {
    p->n_grown = em_growth_grown(p->growth, pr, p->growth_stage, p->base, p->grown,
                                 EM_PROTO_VERDICT_MAX_FUNCTIONS);
    p->n_grown = p->n_grown > 0 ? p->n_grown : 0;
  }
  p->resolve_cpu_ns = cpu_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
}

/* A resolved baseline: its shares kept, nothing published. */
static void baseline_done(em_profiling_t *p, const em_profile_t *pr) {
  p->have_base = p->base_stages > 0 && p->pid == p->seen_pid;
  const em_growth_stage_t *top = p->have_base ? &p->base->stages[0] : NULL;
  EM_INFO("profile: baseline: %llu samples in %llu ms, %d stage(s) kept%s%s%s%llu%s; the "
          "agent's CPU %llu ms from the window's start, %llu ms of it resolving",
          (unsigned long long)pr->samples, (unsigned long long)(pr->duration_ns / 1000000u),
          p->base_stages, top ? ", the busiest " : "", top ? top->stage : "", top ? " (" : "",
          (unsigned long long)(top ? top->samples : 0), top ? " samples)" : "",
          (unsigned long long)((cpu_ns(CLOCK_PROCESS_CPUTIME_ID) - p->base_cpu_ns) / 1000000u),
          (unsigned long long)(p->resolve_cpu_ns / 1000000u));
}

/* The escalation's recording waits for them: the functions that grew, or none. */
static void hand_functions(em_profiling_t *p) {
  if (!p->want_growth) {
    return;
  }
  p->want_growth = false;
  em_proto_verdict_function_t fns[EM_PROTO_VERDICT_MAX_FUNCTIONS];
  size_t n = 0;
  for (int i = 0; i < p->n_grown && n < EM_PROTO_VERDICT_MAX_FUNCTIONS; i++) {
    fns[n++] = (em_proto_verdict_function_t){.name = p->grown[i].name, .growth = p->grown[i].value};
  }
  em_feed_functions(p->o.feed, fns, n);
}

/* The window is resolved: encoded under max_bytes (the stacks with the fewest samples go
 * first) and handed on, live or into the spool; a baseline is kept, not published. */
static void resolve_done(uv_work_t *w, int status) {
  em_profiling_t *p = w->data;
  p->busy = false;
  p->base_window = false;
  em_profile_t *pr = status == 0 ? em_window_take(p->window) : NULL;
  if (pr && em_window_is_baseline(p->window)) {
    baseline_done(p, pr);
    pr = NULL;
  }
  if (pr) {
    pr->head.session = p->o.session;
    size_t cap = 0;
    uint8_t *buf = em_window_buffer(p->window, &cap);
    size_t len = 0;
    int rc = em_profile_encode_fit(pr, buf, cap - HIST_ROOM, &len);
    if (rc) {
      EM_ERROR("profile: window %u cannot be encoded: %s", pr->number, em_proto_strerror(rc));
    } else {
      rc = p->o.publish(p->o.ctx, buf, len);
      EM_INFO("profile: window %u: %llu samples in %llu ms, %zu stacks, %zu frames, %zu bytes "
              "(%llu stacks left out for max_bytes, %llu lost)%s",
              pr->number, (unsigned long long)pr->samples,
              (unsigned long long)(pr->duration_ns / 1000000u), pr->n_stacks, pr->n_frames, len,
              (unsigned long long)pr->truncated.stacks_cut, (unsigned long long)pr->lost,
              rc == 0 ? "" : ": lost (spool.lost)");
    }
  }
  hand_functions(p);
  em_window_done(p->window); /* Cancelled before it ran: the closed window is dropped. */
  if (p->deferred) {
    p->deferred = false;
    if (!p->done) { /* Not while stopping. */
      em_profiling_trigger(p, &p->dt, p->dt_pid, p->dt_seconds, uv_hrtime());
    }
  }
  if (p->done) {
    void (*done)(void *) = p->done;
    p->done = NULL;
    done(p->done_ctx);
  }
}

/* The attached target has been NOMINAL long enough, and its last baseline is old enough: a
 * baseline window opens. */
static void maybe_baseline(em_profiling_t *p, uint64_t now_ns, pid_t pid) {
  uint64_t nominal = em_feed_nominal_since(p->o.feed);
  if (!p->growth || pid <= 0 || nominal == UINT64_MAX ||
      now_ns < p->attached_ns + EM_PROFILING_BASE_SETTLE_NS ||
      now_ns < nominal + EM_PROFILING_BASE_SETTLE_NS ||
      (p->base_tried && now_ns < p->base_start_ns + EM_PROFILING_BASE_EVERY_NS)) {
    return;
  }
  p->base_tried = true;
  p->base_start_ns = now_ns;
  p->base_cpu_ns = cpu_ns(CLOCK_PROCESS_CPUTIME_ID);
  int rc = em_window_baseline(p->window, pid, EM_PROFILING_BASE_NS, now_ns, wall_ns());
  if (rc) {
    EM_INFO("profile: no baseline window: %s (the next in %llu s)", strerror(-rc),
            (unsigned long long)(EM_PROFILING_BASE_EVERY_NS / NS_PER_SEC));
    return;
  }
  p->pid = pid;
  p->base_window = true;
  write_page(p);
  uint64_t since = nominal > p->attached_ns ? nominal : p->attached_ns;
  EM_INFO("profile: baseline window: sampling pid %d for %llu ms, attached and NOMINAL for %llu s",
          (int)pid, (unsigned long long)(EM_PROFILING_BASE_NS / 1000000u),
          (unsigned long long)((now_ns - since) / NS_PER_SEC));
}

void em_profiling_tick(em_profiling_t *p, uint64_t now_ns, pid_t pid) {
  if (!p->window || p->busy) {
    return;
  }
  if (pid != p->seen_pid) {
    p->seen_pid = pid; /* A new target: the old one's baseline says nothing of it. */
    p->attached_ns = now_ns;
    p->base_tried = p->have_base = false;
  }
  if (em_window_tick(p->window, now_ns, pid != p->pid)) {
    p->n_grown = 0;
    p->busy = uv_queue_work(p->o.loop, &p->work, resolve_work, resolve_done) == 0;
    if (!p->busy) {
      p->base_window = false;
      hand_functions(p);
      em_window_done(p->window); /* Not queued: dropped, never left half open. */
    }
  } else if (em_window_state(p->window) == EM_WINDOW_IDLE) {
    maybe_baseline(p, now_ns, pid);
  }
}

void em_profiling_figures(em_profiling_t *p, em_sample_t *samples) {
  const em_window_stats_t *st = p->window ? em_window_stats(p->window) : NULL;
  em_figures_t *d = p->o.figs;
  em_figures_set_u_if(samples, em_figures_alias(d, EM_FIG_PROFILE_TAKEN), st, st ? st->taken : 0);
  em_figures_set_u_if(samples, em_figures_alias(d, EM_FIG_PROFILE_SUPPRESSED), st,
                      st ? st->suppressed : 0);
  em_figures_set_u_if(samples, em_figures_alias(d, EM_FIG_PROFILE_LOST), st, st ? st->lost : 0);
}

void em_profiling_flush_log(em_profiling_t *p, uint64_t now_ns) {
  em_log_limit_report(&p->py_refused, now_ns, "profile", "Python stacks datagrams refused", "");
  em_log_limit_report(&p->refused, now_ns, "profile", "triggers not sampled",
                      " (profile.suppressed)");
}

bool em_profiling_cancel(em_profiling_t *p, void (*done)(void *), void *ctx) {
  if (!p || !p->busy) {
    return false;
  }
  p->done = done;
  p->done_ctx = ctx;
  uv_cancel((uv_req_t *)&p->work);
  return true;
}
