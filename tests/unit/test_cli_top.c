/*
 * test_cli_top.c - the pieces of edgemon-cli top that need no terminal (host/cli/top/): what
 * the model keeps of a device's messages (a counter's growth as CPU %, the RSS slope, absent
 * figures as NAN, a stage's p99 per second), the frames (every size from 1x1 up: exactly the
 * screen's rows, no line wider than the screen, no byte a device sent reaching the terminal
 * as anything but printable ASCII), and the keys read from raw input (arrows, Escape).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "top_draw.h"
#include "top_model.h"
#include "top_term.h"
#include "view.h"

#define T0_NS   1795262400000000000ull
#define S_NS    1000000000ull
#define MIB     (1024.0 * 1024.0)
#define SESSION 7u

/* A device id, a reason, a stage name and a verdict full of what a terminal must not see. */
#define HOSTILE_ID "evil\x1b]0;owned\x07\xe2\x80\xae\xe5\x85\xa8"
#define HOSTILE_REASON                                                                             \
  "slow\x1b[2J\x9b"                                                                                \
  "31m\r\n\tnow"
#define HOSTILE_STAGE "in\x1b[5mfer"
#define HOSTILE_VERDICT                                                                            \
  "infer p99 61.2 ms\x1b[?1049l against 26.0 ms:\n  1. cpu contention 81%\x07\n"

enum { A_IPC, A_RSS, A_CPU, A_AGENT_CPU, A_AGENT_RSS, A_PSI_CPU, A_TEMP, N_METRICS };

static const em_metric_def_t METRICS[N_METRICS] = {
    [A_IPC] = {A_IPC, "pmu.ipc", "1", EM_METRIC_GAUGE, NULL},
    [A_RSS] = {A_RSS, "mem.rss", "By", EM_METRIC_GAUGE, NULL},
    [A_CPU] = {A_CPU, "proc.cpu", "ns", EM_METRIC_COUNTER, NULL},
    [A_AGENT_CPU] = {A_AGENT_CPU, "agent.cpu", "ns", EM_METRIC_COUNTER, NULL},
    [A_AGENT_RSS] = {A_AGENT_RSS, "agent.rss", "By", EM_METRIC_GAUGE, NULL},
    [A_PSI_CPU] = {A_PSI_CPU, "psi.cpu.some.avg10", "%", EM_METRIC_GAUGE, NULL},
    [A_TEMP] = {A_TEMP, "thermal.cpu-thermal.temp", "Cel", EM_METRIC_GAUGE, NULL},
};

typedef struct {
  em_dict_t *dict;
  em_top_model_t *model;
  em_device_t *names; /* The birth of "orin-1" (and of the hostile device). */
  em_device_t *evil_names;
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof(*f));
  assert_non_null(f);
  assert_int_equal(em_dict_new(&f->dict), 0);
  assert_int_equal(em_top_model_new(&f->model), 0);
  em_budget_t budget = {.id = "infer.p99",
                        .rule = "percentile",
                        .level = EM_LEVEL_DEGRADED,
                        .bound = {.type = EM_VALUE_UINT, .as.u = 40000000},
                        .stage = "infer",
                        .window_ns = S_NS};
  em_birth_t b = {.head = {.time_ns = T0_NS, .session = SESSION},
                  .device = "orin-1",
                  .agent_version = "1.2.3",
                  .board = "jetson-orin",
                  .period_ns = S_NS,
                  .metrics = METRICS,
                  .n_metrics = N_METRICS,
                  .budgets = &budget,
                  .n_budgets = 1};
  f->names = em_dict_device(f->dict, "orin-1", true);
  f->evil_names = em_dict_device(f->dict, HOSTILE_ID, true);
  assert_non_null(f->names);
  assert_non_null(f->evil_names);
  assert_int_equal(em_dict_set_birth(f->names, &b), 0);
  b.board = "board\x1b[31m";
  assert_int_equal(em_dict_set_birth(f->evil_names, &b), 0);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  em_top_model_free(f->model);
  em_dict_free(f->dict);
  free(f);
  return 0;
}

/* A data message at T0 + s seconds with the given figures (NAN: not in the message) and two
 * stages: `stage` whose p99 is p99_ms, and "pre" at 2 ms. */
static void feed(em_top_dev_t *dev, const em_device_t *names, uint64_t s, double cpu_ns,
                 double rss_bytes, double ipc, double p99_ms, const char *stage) {
  em_sample_t samples[N_METRICS];
  size_t n = 0;
  const double v[N_METRICS] = {
      [A_IPC] = ipc,       [A_RSS] = rss_bytes, [A_CPU] = cpu_ns, [A_AGENT_CPU] = (double)s * 1e7,
      [A_AGENT_RSS] = 3e6, [A_PSI_CPU] = 2.5,   [A_TEMP] = 51.5};
  for (uint32_t a = 0; a < N_METRICS; a++) {
    samples[n++] =
        (em_sample_t){a, isnan(v[a]) ? (em_value_t){.type = EM_VALUE_ABSENT}
                                     : (em_value_t){.type = EM_VALUE_FLOAT, .as.f = v[a]}};
  }
  em_stage_t st[2];
  for (size_t i = 0; i < 2; i++) {
    uint64_t p99 = (uint64_t)((i == 0 ? p99_ms : 2.0) * 1e6);
    st[i] = (em_stage_t){.name = i == 0 ? stage : "pre",
                         .count = 30,
                         .min_ns = 100000,
                         .max_ns = p99 + 1000000,
                         .p50_ns = p99 / 2,
                         .p90_ns = p99 - 1,
                         .p99_ns = p99,
                         .p999_ns = p99};
  }
  em_data_t d = {.head = {.time_ns = T0_NS + s * S_NS, .session = SESSION},
                 .seq = (uint32_t)s,
                 .window_ns = S_NS,
                 .level = EM_LEVEL_NOMINAL,
                 .samples = samples,
                 .n_samples = n,
                 .stages = st,
                 .n_stages = 2};
  em_top_model_data(dev, names, &d);
}

static void model_turns_counters_into_cpu_share_and_rss_into_a_slope(void **state) {
  fixture_t *f = *state;
  em_top_dev_t *dev = em_top_model_device(f->model, "orin-1", true);
  assert_non_null(dev);
  feed(dev, f->names, 0, 1e9, 100 * MIB, 1.5, 20, "infer");
  assert_true(isnan(dev->cpu_pct)); /* One reading: no growth yet. */
  assert_true(isnan(dev->rss_slope_bytes_per_min));
  assert_true(dev->named);
  feed(dev, f->names, 1, 1.5e9, 100 * MIB, 1.5, 20, "infer");
  assert_float_equal(dev->cpu_pct, 50.0, 1e-9);      /* 0.5 s of CPU in 1 s. */
  assert_float_equal(dev->agent_cpu_pct, 1.0, 1e-9); /* 10 ms in 1 s. */
  assert_true(isnan(dev->rss_slope_bytes_per_min));  /* Readings 1 s apart: too close. */
  for (uint64_t s = 2; s <= 10; s++) {
    feed(dev, f->names, s, 1.5e9 + (double)(s - 1) * 2.5e8, (100 + (double)s / 10) * MIB, NAN, 20,
         "infer");
  }
  /* 1 MiB over the 10 s since the first reading: 6 MiB/min. */
  assert_float_equal(dev->rss_slope_bytes_per_min / MIB, 6.0, 1e-6);
  assert_float_equal(dev->cpu_pct, 25.0, 1e-9);
  assert_true(isnan(dev->ipc)); /* Absent in the last message: '-', never 0. */
  assert_float_equal(dev->psi_cpu, 2.5, 1e-12);
  assert_int_equal(dev->n_temps, 1);
  assert_string_equal(dev->temps[0].name, "cpu-thermal");
  assert_float_equal(dev->temps[0].celsius, 51.5, 1e-12);
  /* A counter that goes back (the agent restarted its count) gives no share. */
  feed(dev, f->names, 11, 1e9, 101 * MIB, 1.5, 20, "infer");
  assert_true(isnan(dev->cpu_pct));
}

static void model_keeps_a_minute_of_p99_one_slot_per_second(void **state) {
  fixture_t *f = *state;
  em_top_dev_t *dev = em_top_model_device(f->model, "orin-1", true);
  for (uint64_t s = 0; s < 90; s++) {
    feed(dev, f->names, s, NAN, NAN, NAN, (double)s + 1, "infer");
  }
  assert_int_equal(dev->n_stages, 2);
  const em_top_stage_t *st = &dev->stages[0];
  assert_string_equal(st->name, "infer");
  uint64_t last = (T0_NS + 89 * S_NS) / S_NS;
  for (uint64_t back = 0; back < EM_TOP_HISTORY_S; back++) {
    size_t slot = (size_t)((last - back) % EM_TOP_HISTORY_S);
    assert_int_equal(st->hist_s[slot], last - back);
    assert_int_equal(st->hist_p99_ns[slot], (uint64_t)((90.0 - (double)back) * 1e6));
  }
  /* Two windows in one second: the slot keeps the larger p99. */
  feed(dev, f->names, 89, NAN, NAN, NAN, 500, "infer");
  feed(dev, f->names, 89, NAN, NAN, NAN, 3, "infer");
  assert_int_equal(st->hist_p99_ns[last % EM_TOP_HISTORY_S], 500000000u);
}

/* Checks one frame: rows lines (\r\n between them, none after the last), each at most cols
 * columns (a UTF-8 sequence is one), and no escape but the frame's own (CSI H, K, 2J, m) nor
 * any control byte but CR LF. */
static void check_frame(const em_top_frame_t *fr, int rows, int cols) {
  int lines = 1, width = 0;
  for (size_t i = 0; i < fr->len; i++) {
    unsigned char c = (unsigned char)fr->buf[i];
    if (c == 0x1b) {
      assert_true(i + 1 < fr->len && fr->buf[i + 1] == '[');
      size_t j = i + 2;
      while (j < fr->len && ((fr->buf[j] >= '0' && fr->buf[j] <= '9') || fr->buf[j] == ';')) {
        j++;
      }
      assert_true(j < fr->len);
      assert_non_null(strchr("HKJm", fr->buf[j]));
      i = j;
    } else if (c == '\r') {
      assert_true(i + 1 < fr->len && fr->buf[i + 1] == '\n');
      i++;
      lines++;
      width = 0;
    } else {
      assert_true(c >= 0x20 && c != 0x7f);
      width += (c & 0xC0) != 0x80; /* A UTF-8 continuation byte adds no column. */
      if (width > cols) {
        fprintf(stderr, "line %d wider than %d in a %dx%d frame\n", lines, cols, rows, cols);
      }
      assert_true(width <= cols);
    }
  }
  assert_int_equal(lines, rows);
}

static void frames_fit_every_size_and_escape_what_devices_send(void **state) {
  fixture_t *f = *state;
  em_top_dev_t *good = em_top_model_device(f->model, "orin-1", true);
  em_top_dev_t *evil = em_top_model_device(f->model, HOSTILE_ID, true);
  for (uint64_t s = 0; s < 70; s++) {
    feed(good, f->names, s, 1e9 + (double)s * 1e8, 100 * MIB, 1.25, (double)(s % 50) + 1, "infer");
    feed(evil, f->evil_names, s, NAN, NAN, NAN, 30, HOSTILE_STAGE);
  }
  em_state_t st = {.head = {.time_ns = T0_NS, .session = SESSION},
                   .level = EM_LEVEL_DEGRADED,
                   .prev_level = EM_LEVEL_NOMINAL,
                   .rule = "infer.p99",
                   .stage = HOSTILE_STAGE,
                   .value = {.type = EM_VALUE_UINT, .as.u = 61200000},
                   .bound = {.type = EM_VALUE_UINT, .as.u = 40000000},
                   .reason = HOSTILE_REASON};
  assert_int_equal(em_top_model_state(evil, &st, HOSTILE_VERDICT), 0);
  evil->malformed = 3;
  em_top_frame_t fr = {0};
  static const em_top_view_t views[] = {EM_TOP_VIEW_DEVICE, EM_TOP_VIEW_LIST, EM_TOP_VIEW_HELP};
  for (int utf8 = 0; utf8 < 2; utf8++) {
    for (int rows = 1; rows <= 44; rows += 3) {
      for (int cols = 1; cols <= 200; cols += (cols < 90 ? 1 : 7)) {
        for (size_t v = 0; v < 3; v++) {
          for (size_t sel = 0; sel < 2; sel++) {
            em_top_screen_t s = {.rows = rows,
                                 .cols = cols,
                                 .utf8 = utf8,
                                 .color = (rows + cols) % 2 == 0,
                                 .paused = cols % 3 == 0,
                                 .sort = (em_top_sort_t)(cols % EM_TOP_SORT_COUNT_),
                                 .view = views[v],
                                 .selected = sel,
                                 .cursor = sel,
                                 .where = "mqtt://127.0.0.1:1883",
                                 .now_ns = T0_NS + 70 * S_NS,
                                 .malformed = 3};
            assert_int_equal(em_top_draw(&s, f->model, f->dict, &fr), 0);
            check_frame(&fr, rows, cols);
          }
        }
      }
    }
  }
  /* Each device at a comfortable size: what its frame must hold. The hostile one's text is
   * there, escaped; the good one's figures are those it sent, with its budget and share. */
  static const struct {
    const char *device;
    const char *want;
  } rows[] = {
      {HOSTILE_ID, "evil\\x1b]0;owned\\x07\\xe2\\x80\\xae\\xe5\\x85\\xa8"},
      {HOSTILE_ID, "CAUSE slow\\x1b[2J\\x9b31m\\x0d\\x0a\\x09now"},
      {HOSTILE_ID, "in\\x1b[5mfer"},
      {HOSTILE_ID, "board\\x1b[31m"},
      {HOSTILE_ID, "! 3 message(s) from this device did not decode"},
      {HOSTILE_ID, "infer p99 61.2 ms\\x1b[?1049l against 26.0 ms:"},
      {"orin-1", "CPU 10.0%  IPC 1.25  RSS 100.0 MiB (+0.0 MiB/min)"},
      {"orin-1", "TEMP cpu-thermal 51.5C  AGENT cpu 1.00% rss 2.9 MiB"},
      {"orin-1", "p99<=40.0"},
      {"orin-1", " 50%"}, /* p99 20 ms of 40 ms at second 69. */
  };
  em_top_screen_t s = {.rows = 40, .cols = 200, .utf8 = true, .where = "x", .now_ns = T0_NS};
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    s.selected = (size_t)em_top_model_index(f->model, rows[i].device);
    assert_int_equal(em_top_draw(&s, f->model, f->dict, &fr), 0);
    if (!strstr(fr.buf, rows[i].want)) {
      fail_msg("%s: no '%s' in the frame", rows[i].device, rows[i].want);
    }
  }
  em_top_frame_free(&fr);
}

static void keys_read_arrows_escape_and_bytes(void **state) {
  (void)state;
  int p[2];
  assert_int_equal(pipe(p), 0);
  assert_int_equal(fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
  em_top_term_t t = {.in_fd = p[0], .out_fd = -1};
  assert_int_equal(em_top_term_key(&t), EM_TOP_KEY_NONE);
  static const char typed[] = "\x1b[A\x1b[B\x1bOC\x1b[D\x1b[Zq\x03\x1b[15~n\x1b";
  assert_int_equal(write(p[1], typed, sizeof(typed) - 1), (ssize_t)(sizeof(typed) - 1));
  static const int want[] = {EM_TOP_KEY_UP,
                             EM_TOP_KEY_DOWN,
                             EM_TOP_KEY_RIGHT,
                             EM_TOP_KEY_LEFT,
                             EM_TOP_KEY_BACKTAB,
                             'q',
                             3,
                             EM_TOP_KEY_ESC,
                             'n',
                             EM_TOP_KEY_ESC,
                             EM_TOP_KEY_NONE};
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
    assert_int_equal(em_top_term_key(&t), want[i]);
  }
  close(p[0]);
  close(p[1]);
  /* Leaving a terminal never entered does nothing (no write to fd -1, no crash). */
  em_top_term_leave(&t);
}

/* A level change's value and bound in its rule's unit, as tail and top print them. */
static void rule_figures_come_in_their_rules_units(void **state) {
  (void)state;
  char buf[32];
  em_view_rule_figure("percentile", 12400000.0, buf, sizeof(buf));
  assert_string_equal(buf, "12.4 ms");
  em_view_rule_figure("flow", 152000000.0, buf, sizeof(buf));
  assert_string_equal(buf, "152 ms");
  em_view_rule_figure("rss_cap", 1536.0 * 1024 * 1024, buf, sizeof(buf));
  assert_string_equal(buf, "1536.0 MiB");
  em_view_rule_figure("gpu_mem_cap", 512.0 * 1024 * 1024, buf, sizeof(buf));
  assert_string_equal(buf, "512.0 MiB");
  em_view_rule_figure("psi", 42.5, buf, sizeof(buf));
  assert_string_equal(buf, "42.5");
  em_view_rule_figure(NULL, 3.0, buf, sizeof(buf));
  assert_string_equal(buf, "3");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(model_turns_counters_into_cpu_share_and_rss_into_a_slope,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(model_keeps_a_minute_of_p99_one_slot_per_second, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(frames_fit_every_size_and_escape_what_devices_send, setup,
                                      teardown),
      cmocka_unit_test(keys_read_arrows_escape_and_bytes),
      cmocka_unit_test(rule_figures_come_in_their_rules_units),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
