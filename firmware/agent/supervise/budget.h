/*
 * budget.h - the degradation engine: latency budgets, supervision and the degradation level,
 * as a pure module. It evaluates rules (per stage: percentile, hard deadline, miss ratio,
 * alive, rate; per frame: flow; per process: RSS and GPU memory caps and growth slopes, PSI, any
 * gauge) against the
 * spans and windows it is fed, keeps each rule's state and the level, and reports each change of
 * level as an em_budget_change_t that the caller publishes (state page, push, MQTT, hook, log).
 *
 * No I/O, no libuv, no clock reads: every entry point takes now_ns (CLOCK_MONOTONIC), so tests
 * inject time. Config parsing lives elsewhere: config.c fills these rules from the file.
 *
 * Owns: one allocation made by em_budget_new (rule states, each with a copy of its rule, the
 * RSS sample rings, the per-stage anomaly state); nothing is allocated afterwards.
 * Single-threaded: one engine per loop, no locking.
 *
 * Levels: NOMINAL < WARN < DEGRADED < CRITICAL. Each rule names the level it raises.
 *
 * Rule state (one per rule). enter = enter_windows, leave = leave_windows (both >= 1);
 * "bad"/"clean" count consecutive violating/clean windows of that rule; a window whose figure
 * is absent (stage missing or idle, RSS or gauge absent, slope not yet computable) is neither
 * violating nor clean and leaves both counters as they are.
 *
 *                     violating window (bad < enter)
 *              +---------------------------------------+
 *              |                                       v
 *        +-----------+   clean window           +-----------+
 *        |   CLEAR   |<-------------------------|  PENDING  |
 *        +-----------+                          +-----------+
 *          ^   |   |                                   | violating window (bad == enter)
 *          |   |   | DEADLINE miss / ALIVE silence     v
 *          |   |   +------------------------->  +-----------+  clean window   +------------+
 *          |   |                                |  ACTIVE   |---------------->| RECOVERING |
 *          |   |   ALIVE: span or heartbeat     +-----------+<----------------+------------+
 *          |   +<-------------------------------------|        violating window     |
 *          |                                                                        |
 *          +------------------- clean window (clean == leave) ----------------------+
 *
 *   edge                                       function                 rules
 *   CLEAR -> PENDING       violating window    em_budget_on_window      window rules
 *   PENDING -> CLEAR       clean window        em_budget_on_window      window rules
 *   PENDING -> ACTIVE      enter-th violating  em_budget_on_window      window rules
 *   CLEAR/PENDING -> ACTIVE  span > bound_ns   em_budget_on_span        DEADLINE
 *   CLEAR -> ACTIVE        silence > silence_ns em_budget_on_timer      ALIVE
 *   CLEAR/PENDING -> ACTIVE  stage out of order  em_budget_on_span        FLOW
 *                          or late completion
 *   CLEAR/PENDING -> ACTIVE  frame past deadline em_budget_on_timer      FLOW
 *   ACTIVE -> CLEAR        span or heartbeat   em_budget_on_span,       ALIVE
 *                                              em_budget_on_heartbeat
 *   ACTIVE -> RECOVERING   clean window        em_budget_on_window      window rules, DEADLINE,
 *                                                                       FLOW
 *   RECOVERING -> ACTIVE   violating window    em_budget_on_window      window rules, DEADLINE,
 *                                                                       FLOW
 *   RECOVERING -> CLEAR    leave-th clean      em_budget_on_window      window rules, DEADLINE,
 *                                                                       FLOW
 *
 * Window rules: PERCENTILE, MISS_RATIO, RATE, RSS_CAP, RSS_SLOPE, GPU_MEM_CAP, GPU_MEM_SLOPE,
 * PSI, GAUGE_MAX. A DEADLINE
 * rule enters on the span that misses; at window end its window is violating when a span of
 * its stage missed in it, clean when spans came and none missed, absent when none came.
 * ALIVE is judged on the timer and on spans only, never at window end, and only once its stage
 * has reported (a first span or heartbeat): a target started after the agent, or one that never
 * reports, is not stalled; its silence counts from its first report.
 *
 * FLOW (logical supervision): a sequence of 2..EM_BUDGET_FLOW_MAX_STAGES distinct stages that
 * every frame id must pass in order, and a deadline from the start of the frame's first-stage
 * span (now_ns - duration_ns) to the end of its last-stage span. Per FLOW rule the engine keeps
 * EM_BUDGET_FLOW_FRAMES frames in flight; a frame starts with a span of the first stage whose
 * frame id is not in flight (when the table is full the oldest frame is evicted, unjudged, and
 * counted: em_budget_flow_evicted). A span of a flow stage for a frame in flight is either the
 * expected next stage (the frame advances) or out of order (a stage skipped, repeated or
 * reordered): a violation at once, and the frame is dropped. The last stage completes the
 * frame: a completion later than the deadline is a violation at once, otherwise the frame is
 * counted clean. em_budget_on_timer judges frames in flight past their deadline: a violation
 * at once, and the frame is dropped. Spans with frame id 0, of stages not in the flow, and of
 * frames not in flight at a non-first stage (never started while the engine ran, already
 * judged, or evicted) are ignored. A violation enters like a DEADLINE miss; its value is the
 * frame's elapsed ns (start to the violating span or timer), its bound the deadline. At window
 * end a FLOW window is violating when a frame violated in it, clean when frames completed and
 * none violated, absent otherwise.
 *
 * Level. target = the highest level among ACTIVE/RECOVERING rules (NOMINAL when none). A
 * window is "clean" for the level when no rule violated in it.
 *
 *        +---------+  up   +------+  up   +----------+  up   +----------+
 *        | NOMINAL |------>| WARN |------>| DEGRADED |------>| CRITICAL |
 *        |         |<------|      |<------|          |<------|          |
 *        +---------+ down  +------+ down  +----------+ down  +----------+
 *          (up may skip levels: straight to target; down is always one level)
 *
 *   edge        when                                              function
 *   up          target > level: level = target, at once           any entry point
 *   down (a)    a rule leaves (RECOVERING -> CLEAR, or ALIVE      em_budget_on_window,
 *               clears) and target < level: level -= 1 (never     em_budget_on_span,
 *               below target); the rule's clean windows (or the   em_budget_on_heartbeat
 *               span) paid for this step
 *   down (b)    target < level and no rule left: each window      em_budget_on_window
 *               that is clean counts; after leave such windows
 *               in a row, level -= 1; a window that is not clean,
 *               or target >= level, restarts the count
 *
 * So a rule raising DEGRADED that stops violating brings the level to WARN after `leave`
 * clean windows and to NOMINAL after `leave` more. Each entry point reports at most one change
 * (the net change of that call).
 *
 * Anomaly score: per stage named by a rule, an EWMA of the window p99 and of its variance;
 * the score of a window is (p99 - mean) / stddev before the window is folded in (0 until the
 * variance is non-zero). Informational: never changes the level.
 */
#ifndef EDGEMON_AGENT_BUDGET_H
#define EDGEMON_AGENT_BUDGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "edgemon/proto.h"
#include "hist.h"

#define EM_BUDGET_MAX_RULES       EM_PROTO_MAX_BUDGETS
#define EM_BUDGET_ID_BYTES        (EM_PROTO_MAX_NAME_BYTES + 1)  /* Rule id, with its NUL. */
#define EM_BUDGET_STAGE_BYTES     (EM_PROTO_MAX_STAGE_BYTES + 1) /* Stage name, with its NUL. */
#define EM_BUDGET_FIGURE_BYTES    (EM_PROTO_MAX_NAME_BYTES + 1)  /* Figure name, with its NUL. */
#define EM_BUDGET_SLOPE_SAMPLES   64  /* (t, rss) samples kept per RSS_SLOPE rule. */
#define EM_BUDGET_SLOPE_MIN       4   /* Samples needed before a slope is judged. */
#define EM_BUDGET_EWMA_ALPHA      0.1 /* Default weight of a new window in the anomaly EWMA. */
#define EM_BUDGET_FLOW_MAX_STAGES 8   /* Stages of one FLOW rule. */
#define EM_BUDGET_FLOW_FRAMES     64  /* Frames in flight kept per FLOW rule. */
/* The figure of em_budget_window_t.figures the GPU_MEM rules judge (bytes, a uint): the
 * target's own GPU memory, as the agent's dictionary names it. */
#define EM_BUDGET_FIGURE_GPU_MEM "gpu.mem.process"

typedef enum {
  EM_BUDGET_RULE_PERCENTILE = 0, /* Stage: window quantile q above bound_ns. */
  EM_BUDGET_RULE_DEADLINE,       /* Stage: one span above bound_ns escalates at once. */
  EM_BUDGET_RULE_MISS_RATIO,     /* Stage: fraction of the window's spans above bound_ns. */
  EM_BUDGET_RULE_ALIVE,          /* Stage: no span or heartbeat for silence_ns: stalled. */
  EM_BUDGET_RULE_RATE,           /* Stage: fewer than min_fps spans per second in the window. */
  EM_BUDGET_RULE_RSS_CAP,        /* Process: RSS above cap_bytes. */
  EM_BUDGET_RULE_RSS_SLOPE,      /* Process: least-squares RSS growth above MiB/h. */
  EM_BUDGET_RULE_PSI,            /* Process: a pressure figure (e.g. "psi.memory.some.avg10"). */
  EM_BUDGET_RULE_GAUGE_MAX,      /* Any named figure above a bound: board temperature, etc. */
  EM_BUDGET_RULE_FLOW,           /* Frames: stages passed in order within a deadline. */
  EM_BUDGET_RULE_GPU_MEM_CAP,    /* Process: its GPU memory above cap_bytes (u.rss_cap). */
  EM_BUDGET_RULE_GPU_MEM_SLOPE,  /* Process: least-squares GPU memory growth above MiB/h
                                    (u.rss_slope). */
  EM_BUDGET_RULE_KINDS
} em_budget_rule_kind_t;

/*
 * One rule: a plain value with fixed-size strings (no pointers), so the config can hold its
 * rules as they are (config.h) and copy and compare them. The engine copies the rules it is
 * given. Every string must end within its array. Fields of the union other than the kind's are
 * ignored, and so is `stage` for rules that are not stage rules.
 */
typedef struct {
  char id[EM_BUDGET_ID_BYTES]; /* Unique, 1..63 printable bytes, e.g. "infer.p99". */
  em_budget_rule_kind_t kind;
  em_level_t level;                  /* Raised while active: WARN, DEGRADED or CRITICAL. */
  char stage[EM_BUDGET_STAGE_BYTES]; /* Stage rules: 1..31 bytes of [A-Za-z0-9_.:-]; "" for
                                        process rules; ignored for FLOW (the engine reports
                                        its first stage). */
  union {
    struct {
      double q;          /* 0 < q <= 1, e.g. 0.99. */
      uint64_t bound_ns; /* Violating when the window quantile > bound_ns. */
    } percentile;
    struct {
      uint64_t bound_ns; /* A span > bound_ns is a miss. */
    } deadline;
    struct {
      uint64_t bound_ns; /* A span > bound_ns is a miss. */
      double max_ratio;  /* 0 <= max_ratio < 1; violating when misses / spans > max_ratio. */
    } miss_ratio;
    struct {
      uint64_t silence_ns; /* Stalled when now - last span/heartbeat > silence_ns (judged
                              from the stage's first span or heartbeat on). */
    } alive;
    struct {
      double min_fps; /* > 0; violating when count / window length < min_fps. */
    } rate;
    struct {
      uint64_t cap_bytes; /* Violating when RSS (GPU_MEM_CAP: GPU memory) > cap_bytes. */
    } rss_cap;            /* RSS_CAP and GPU_MEM_CAP. */
    struct {
      double max_mib_per_h; /* Violating when the slope > max_mib_per_h. */
      uint64_t horizon_ns;  /* Samples older than this are dropped; judged once they span
                               at least half of it. */
    } rss_slope;            /* RSS_SLOPE and GPU_MEM_SLOPE (the figure EM_BUDGET_FIGURE_GPU_MEM). */
    struct {
      char figure[EM_BUDGET_FIGURE_BYTES]; /* A figure of em_budget_window_t.figures, 1..63
                                              bytes. */
      double max;                          /* Violating when the figure > max. Finite. */
    } gauge;                               /* PSI and GAUGE_MAX. */
    struct {
      char stages[EM_BUDGET_FLOW_MAX_STAGES][EM_BUDGET_STAGE_BYTES]; /* In order; each a
                                                                        valid stage name, all
                                                                        distinct. */
      size_t n_stages;      /* 2..EM_BUDGET_FLOW_MAX_STAGES */
      uint64_t deadline_ns; /* > 0: first stage's start to last stage's end. */
    } flow;
  } u;
} em_budget_rule_t;

typedef struct {
  const em_budget_rule_t *rules; /* Borrowed for the call; copied. */
  size_t n_rules;                /* 0..EM_BUDGET_MAX_RULES */
  uint32_t enter_windows;        /* >= 1: violating windows in a row before a rule enters. */
  uint32_t leave_windows;        /* >= 1: clean windows in a row per rule leave / level step. */
  uint64_t window_ns;            /* Window length, announced in the birth (0: not stated). */
  double ewma_alpha;             /* 0 < alpha <= 1; 0 picks EM_BUDGET_EWMA_ALPHA. */
} em_budget_opts_t;

/* One stage's window: the spans since the previous window end. */
typedef struct {
  const char *name;      /* Borrowed for the call. */
  const em_hist_t *hist; /* Borrowed for the call; count 0 = idle. */
} em_budget_stage_window_t;

/* A named process or board figure: PSI, temperature, throttling... */
typedef struct {
  const char *name; /* Borrowed for the call. */
  em_value_t value; /* EM_VALUE_ABSENT when the device cannot read it now. */
  const char *why;  /* Optional: why the figure reads so ("thermal trip CPU-therm ..."); a
                       PSI or gauge rule entering on it takes it as the change's reason. The
                       change's reason points at it: valid as long as the caller keeps it. */
} em_budget_figure_t;

typedef struct {
  uint64_t window_ns; /* Length of the window that ends now (> 0 for RATE to be judged). */
  const em_budget_stage_window_t *stages; /* A stage not listed is absent. */
  size_t n_stages;
  em_value_t rss_bytes;              /* EM_VALUE_ABSENT when unknown. */
  const em_budget_figure_t *figures; /* A figure not listed is absent. */
  size_t n_figures;
} em_budget_window_t;

/*
 * A change of level. Strings point into the engine (valid until em_budget_free) or are
 * static. For an up step, `rule` is the rule that entered at the new level, or, when none
 * entered in that call (a reload raised the level of a rule that was already active), the
 * active rule that holds the new level, with its last measured value and the reason it
 * entered with; for a down step
 * caused by a rule leaving, that rule (value: its last measured value); for a down step by
 * clean windows alone, rule and stage are NULL and value and bound absent.
 */
typedef struct {
  em_level_t level;
  em_level_t prev_level;
  const char *rule;      /* Rule id, or NULL. */
  const char *stage;     /* Stage of the rule, or NULL (process rule, or no rule). */
  em_value_t value;      /* Measured value, in the rule's unit (see em_budget_describe). */
  em_value_t bound;      /* The rule's bound, same unit. */
  uint64_t mono_ns;      /* CLOCK_MONOTONIC of the change (the now_ns of the call). */
  const char *reason;    /* Static text: "violated", "deadline miss", "stalled", "cleared",
                            "alive", "clean windows", "flow order", "flow deadline". */
  const char *statistic; /* Static text: the stage latency statistic the rule judges ("p50",
                            "p90", "p99", "p999", "max", "mean"), or NULL when it judges none
                            (ALIVE, process rules, no rule): what a verdict compares. */
  uint64_t window_ns;    /* The engine's window (em_budget_opts_t.window_ns; 0: not stated). */
} em_budget_change_t;

typedef struct em_budget_engine em_budget_engine_t;

/*
 * Validates the rules, copies them and allocates the engine, level NOMINAL. An ALIVE rule's
 * silence clock starts at its stage's first span or heartbeat, not at now_ns. Returns 0 and
 * *out, -EINVAL for a bad option or rule (see
 * the field comments; duplicate ids included), -ENOMEM.
 */
int em_budget_new(em_budget_engine_t **out, const em_budget_opts_t *opts, uint64_t now_ns);

/* Frees b; NULL is a no-op. */
void em_budget_free(em_budget_engine_t *b);

/*
 * Carries the state of `src` into the freshly made `dst` (a config reload): every rule of dst
 * whose id and kind match a rule of src takes its state (active, pending and recovering
 * counts, last value and the reason it entered with, ALIVE clock, RSS samples; a FLOW rule its
 * frames in flight when its stages are unchanged), each stage its anomaly state, and dst takes
 * src's level, which then moves by the usual rules: a level whose rules were removed steps down
 * after leave_windows clean windows, never at once. Returns the number of rules that kept their
 * state.
 */
size_t em_budget_adopt(em_budget_engine_t *dst, const em_budget_engine_t *src);

/* The current level. */
em_level_t em_budget_level(const em_budget_engine_t *b);

/*
 * One span of `stage` (borrowed) lasting duration_ns, seen at now_ns. Judges DEADLINE rules
 * (a miss enters at once), counts spans for MISS_RATIO, clears ALIVE, and advances, completes
 * or judges `frame` (the client's frame id; 0: none) in every FLOW rule naming the stage.
 * Returns true and fills *change (may be NULL) when the level changed.
 */
bool em_budget_on_span(em_budget_engine_t *b, const char *stage, uint64_t frame,
                       uint64_t duration_ns, uint64_t now_ns, em_budget_change_t *change);

/*
 * A span of `stage` already written to a span ring, reported at once because it is over its
 * hard deadline (ring datagram kind 6). Judges DEADLINE rules only (a miss enters at once) and
 * counts nothing in the window: the ring's drain feeds the same span to em_budget_on_span.
 * Returns as em_budget_on_span.
 */
bool em_budget_on_hard_miss(em_budget_engine_t *b, const char *stage, uint64_t duration_ns,
                            uint64_t now_ns, em_budget_change_t *change);

/* A heartbeat of `stage`: clears ALIVE like a span, judges nothing else. */
bool em_budget_on_heartbeat(em_budget_engine_t *b, const char *stage, uint64_t now_ns,
                            em_budget_change_t *change);

/*
 * The end of a window (w borrowed for the call). Judges every window rule and DEADLINE's
 * window, updates streaks, the anomaly scores and the level, and starts the next window of
 * span counters. Returns true and fills *change when the level changed.
 */
bool em_budget_on_window(em_budget_engine_t *b, const em_budget_window_t *w, uint64_t now_ns,
                         em_budget_change_t *change);

/*
 * Judges ALIVE rules and FLOW frames past their deadline: call at least every silence_ns / 2
 * (and often against flow deadlines). Returns as em_budget_on_window.
 */
bool em_budget_on_timer(em_budget_engine_t *b, uint64_t now_ns, em_budget_change_t *change);

/*
 * The anomaly score of `stage` at the last window end: 0 and *z, or -ENOENT when no rule
 * names the stage (the stages of a FLOW rule do not count).
 */
int em_budget_anomaly(const em_budget_engine_t *b, const char *stage, double *z);

/*
 * Whether `stage` has reported: 1 once a span or heartbeat of it came (carried across a reload
 * with the stage's anomaly state), 0 before; -ENOENT when no rule names the stage (the stages
 * of a FLOW rule do not count), -EINVAL for NULL arguments.
 */
int em_budget_reported(const em_budget_engine_t *b, const char *stage);

/*
 * Frames the FLOW rule `id` evicted unjudged because its table of frames in flight was full:
 * 0 and *evicted, -ENOENT when there is no FLOW rule of that id, -EINVAL for NULL arguments.
 */
int em_budget_flow_evicted(const em_budget_engine_t *b, const char *id, uint64_t *evicted);

/*
 * Describes the rules as birth entries into out[0..cap), in rule order; the strings point
 * into b. Units of bound: PERCENTILE, DEADLINE, ALIVE (silence): ns (uint); MISS_RATIO: the
 * ratio (float); RATE: frames/s (float); RSS_CAP, GPU_MEM_CAP: bytes (uint); RSS_SLOPE,
 * GPU_MEM_SLOPE: MiB/h (float), window_ns = horizon; PSI, GAUGE_MAX: the figure's unit (float);
 * FLOW: the deadline in ns (uint), stage = the flow's first stage. Returns the number of rules, or
 * -ENOSPC when cap is smaller (nothing written).
 */
int em_budget_describe(const em_budget_engine_t *b, em_budget_t *out, size_t cap);

/* "percentile", "deadline", "miss_ratio", "alive", "rate", "rss_cap", "rss_slope", "psi",
 * "gauge_max", "flow", "gpu_mem_cap", "gpu_mem_slope", or "unknown". */
const char *em_budget_rule_name(em_budget_rule_kind_t kind);

#endif /* EDGEMON_AGENT_BUDGET_H */
