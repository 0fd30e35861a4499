/*
 * top_model.h - what `edgemon-cli top` keeps of each device it hears: the level and its last
 * cause, the latest window's figures (process CPU, IPC, RSS and its slope, pressure,
 * temperatures, the agent's own CPU and RSS), and per stage its latest latencies with a minute
 * of p99 history, one slot per second of the device's clock, for the sparkline.
 *
 * Fed with decoded messages and the device's dict.h record (which names the aliases); knows
 * nothing of the terminal. Strings kept here are copied as the device sent them: whoever shows
 * them escapes them.
 *
 * Owns every device record and their strings. Devices are kept sorted by id, at most
 * EM_TOP_MAX_DEVICES. Not thread-safe.
 */
#ifndef EM_CLI_TOP_MODEL_H
#define EM_CLI_TOP_MODEL_H

#include <dict.h>
#include <edgemon/proto.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EM_TOP_MAX_DEVICES 4096u /* The usage text of top.c says this number. */
#define EM_TOP_MAX_STAGES  32u   /* Stages kept per device; later ones are counted, not shown. */
#define EM_TOP_HISTORY_S   60u   /* Seconds of p99 history per stage. */
#define EM_TOP_MAX_TEMPS   8u    /* Temperatures kept per device. */
#define EM_TOP_RSS_POINTS  64u   /* RSS readings kept for its slope. */

typedef struct {
  char name[EM_PROTO_MAX_STAGE_BYTES + 1];
  uint64_t count; /* Spans in the latest window; the figures below hold when > 0. */
  uint64_t p50_ns;
  uint64_t p90_ns;
  uint64_t p99_ns;
  uint64_t p999_ns;
  uint64_t max_ns;
  uint64_t order;                         /* When it was first seen (for the arrival sort). */
  uint64_t hist_s[EM_TOP_HISTORY_S];      /* The device second each slot holds (0: none). */
  uint64_t hist_p99_ns[EM_TOP_HISTORY_S]; /* The largest p99 reported in that second. */
} em_top_stage_t;

typedef struct {
  char name[EM_PROTO_MAX_NAME_BYTES + 1]; /* The zone, from "thermal.<zone>.temp". */
  double celsius;
} em_top_temp_t;

typedef struct {
  uint64_t time_ns;
  double bytes;
} em_top_point_t;

typedef struct {
  char id[EM_PROTO_MAX_NAME_BYTES + 1]; /* As the topic names it; escape before showing. */
  em_level_t level;                     /* Latest from a state or data message, or NONE. */

  /* The last level change (state message), when have_state. */
  bool have_state;
  em_level_t state_level; /* The level it changed to (data may have stated another since). */
  em_level_t prev_level;
  uint64_t state_time_ns;
  char rule[EM_PROTO_MAX_NAME_BYTES + 1];   /* "" when none. */
  char stage[EM_PROTO_MAX_STAGE_BYTES + 1]; /* "" when none. */
  double value;                             /* The measured value, NAN when absent. */
  double bound;                             /* The rule's bound, NAN when absent. */
  char reason[EM_PROTO_MAX_TEXT_BYTES + 1]; /* "" when none. */
  char *verdict;                            /* The verdict as text (lines), or NULL. Owned. */

  /* The latest data message. Figures the device did not send are NAN ("-" on screen). */
  bool have_data;
  bool named;       /* Its session's birth is known: the figures below could be read. */
  uint64_t time_ns; /* Its window's end (the device's clock). */
  double cpu_pct;   /* proc.cpu's growth over the time between two data messages, %. */
  double ipc;
  double rss_bytes;
  double rss_slope_bytes_per_min; /* Over up to the last minute of readings. */
  double psi_cpu;                 /* psi.*.some.avg10, %. */
  double psi_mem;
  double psi_io;
  double agent_cpu_pct;
  double agent_rss_bytes;
  em_top_temp_t temps[EM_TOP_MAX_TEMPS];
  size_t n_temps;
  em_top_stage_t stages[EM_TOP_MAX_STAGES];
  size_t n_stages;
  size_t stages_dropped; /* Stages past EM_TOP_MAX_STAGES. */

  bool have_status;
  bool online;
  uint64_t messages;  /* Messages that decoded. */
  uint64_t malformed; /* Messages that did not. */

  /* Counters and readings kept between data messages. */
  uint32_t prev_session;
  uint64_t prev_time_ns; /* 0: no previous data message. */
  double prev_proc_cpu_ns;
  double prev_agent_cpu_ns;
  em_top_point_t rss[EM_TOP_RSS_POINTS]; /* Ring of RSS readings. */
  size_t n_rss;
  size_t rss_next;
  uint64_t next_order;
} em_top_dev_t;

typedef struct em_top_model em_top_model_t;

int em_top_model_new(em_top_model_t **out); /* 0 or -ENOMEM. */
void em_top_model_free(em_top_model_t *m);  /* NULL is a no-op. */

/* The device with this id, created when `create` (NULL on -ENOMEM or past
 * EM_TOP_MAX_DEVICES). The pointer stays valid until em_top_model_free(). */
em_top_dev_t *em_top_model_device(em_top_model_t *m, const char *id, bool create);

size_t em_top_model_count(const em_top_model_t *m);
em_top_dev_t *em_top_model_at(const em_top_model_t *m, size_t i); /* In id order. */
/* The index of the device with this id, or -1. */
long em_top_model_index(const em_top_model_t *m, const char *id);

/* Takes a decoded data message of dev; names from names (the dict record; its aliases are
 * used only when it knows the message's session). */
void em_top_model_data(em_top_dev_t *dev, const em_device_t *names, const em_data_t *d);

/* Takes a decoded state message; verdict_text (borrowed, copied) is the verdict written for
 * people, or NULL. Returns 0 or -ENOMEM (the state kept without its verdict). */
int em_top_model_state(em_top_dev_t *dev, const em_state_t *s, const char *verdict_text);

/* Takes a decoded status message. */
void em_top_model_status(em_top_dev_t *dev, const em_status_t *s);

#endif /* EM_CLI_TOP_MODEL_H */
