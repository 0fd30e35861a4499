/*
 * view.c - figures for people (see view.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "view.h"

#include <edgemon/json_write.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static bool color_on;

bool em_view_set_color(const char *mode) {
  if (strcmp(mode, "always") == 0) {
    color_on = true;
  } else if (strcmp(mode, "never") == 0) {
    color_on = false;
  } else if (strcmp(mode, "auto") == 0) {
    const char *no = getenv("NO_COLOR");
    color_on = isatty(STDOUT_FILENO) && !(no && *no);
  } else {
    return false;
  }
  return true;
}

bool em_view_color(void) {
  return color_on;
}

const char *em_view_level_on(em_level_t level) {
  if (!color_on) {
    return "";
  }
  switch (level) {
  case EM_LEVEL_NOMINAL:
    return "\033[32m";
  case EM_LEVEL_WARN:
    return "\033[33m";
  case EM_LEVEL_DEGRADED:
    return "\033[35m";
  case EM_LEVEL_CRITICAL:
    return "\033[1;31m";
  default:
    return "";
  }
}

const char *em_view_bold(void) {
  return color_on ? "\033[1m" : "";
}

const char *em_view_alert(void) {
  return color_on ? "\033[31m" : "";
}

const char *em_view_off(void) {
  return color_on ? "\033[0m" : "";
}

void em_view_clock(uint64_t real_ns, char *buf, size_t cap) {
  time_t secs = (time_t)(real_ns / 1000000000u);
  struct tm tm;
  if (!localtime_r(&secs, &tm)) {
    snprintf(buf, cap, "--:--:--.---");
    return;
  }
  snprintf(buf, cap, "%02d:%02d:%02d.%03u", tm.tm_hour, tm.tm_min, tm.tm_sec,
           (unsigned)(real_ns % 1000000000u / 1000000u));
}

void em_view_ms(double ns, char *buf, size_t cap) {
  double ms = ns / 1e6;
  if (ms < 1.0) {
    snprintf(buf, cap, "%.3f", ms);
  } else if (ms < 10.0) {
    snprintf(buf, cap, "%.2f", ms);
  } else if (ms < 100.0) {
    snprintf(buf, cap, "%.1f", ms);
  } else {
    snprintf(buf, cap, "%.0f", ms);
  }
}

void em_view_rule_figure(const char *rule_type, double v, char *buf, size_t cap) {
  static const char *const latency[] = {"percentile", "deadline", "alive", "flow"};
  static const char *const bytes[] = {"rss_cap", "gpu_mem_cap"};
  const char *t = rule_type ? rule_type : "";
  for (size_t i = 0; i < sizeof(latency) / sizeof(latency[0]); i++) {
    if (strcmp(t, latency[i]) == 0) {
      char ms[16];
      em_view_ms(v, ms, sizeof(ms));
      snprintf(buf, cap, "%s ms", ms);
      return;
    }
  }
  for (size_t i = 0; i < sizeof(bytes) / sizeof(bytes[0]); i++) {
    if (strcmp(t, bytes[i]) == 0) {
      snprintf(buf, cap, "%.1f MiB", v / (1024.0 * 1024.0));
      return;
    }
  }
  snprintf(buf, cap, "%.4g", v);
}

void em_view_age(uint64_t now_ns, uint64_t then_ns, char *buf, size_t cap) {
  if (then_ns == 0) {
    snprintf(buf, cap, "-");
    return;
  }
  double s = now_ns > then_ns ? (double)(now_ns - then_ns) / 1e9 : 0.0;
  if (s < 10) {
    snprintf(buf, cap, "%.1fs", s);
  } else if (s < 120) {
    snprintf(buf, cap, "%.0fs", s);
  } else if (s < 7200) {
    snprintf(buf, cap, "%.0fm", s / 60);
  } else if (s < 172800) {
    snprintf(buf, cap, "%.0fh", s / 3600);
  } else {
    snprintf(buf, cap, "%.0fd", s / 86400);
  }
}

void em_view_fit(const char *s, size_t width, char *buf, size_t cap) {
  size_t n = strlen(s);
  if (n <= width || width == 0) {
    snprintf(buf, cap, "%s", s);
    return;
  }
  snprintf(buf, cap, "%.*s~", (int)(width - 1), s);
}

void em_view_json_str(FILE *out, const char *s) {
  fputc('"', out);
  em_json_escape(s, strlen(s), EM_JSON_ESC_DEL, em_json_file_sink, out);
  fputc('"', out);
}

void em_view_record_head(FILE *out, const em_view_record_t *r, bool json) {
  if (json) {
    fputs("{\"device\":", out);
    em_view_json_str(out, r->device);
    fprintf(out,
            ",\"%s\":{\"session\":%" PRIu32 ",\"number\":%" PRIu32 ",\"time_ns\":%" PRIu64
            ",\"cause\":\"%s\",\"level\":\"%s\",\"rule\":",
            r->kind, r->session, r->number, r->time_ns, r->cause, r->level);
    if (r->rule) {
      em_view_json_str(out, r->rule);
    } else {
      fputs("null", out);
    }
    return;
  }
  char clock[16];
  em_view_clock(r->time_ns, clock, sizeof(clock));
  fprintf(out, "%-12s %-18s %s%s #%" PRIu32 "%s: %s to %s%s%s, ", clock, r->device, em_view_bold(),
          r->kind, r->number, em_view_off(), r->cause, r->level, r->rule ? ", rule " : "",
          r->rule ? r->rule : "");
}

void em_view_xml(FILE *out, const char *s) {
  for (; s && *s; s++) {
    switch (*s) {
    case '&':
      fputs("&amp;", out);
      break;
    case '<':
      fputs("&lt;", out);
      break;
    case '>':
      fputs("&gt;", out);
      break;
    case '"':
      fputs("&quot;", out);
      break;
    default:
      if ((unsigned char)*s >= 0x20 && *s != 0x7f) {
        fputc(*s, out);
      }
    }
  }
}

void em_view_json_num(FILE *out, double v, int decimals) {
  if (!isfinite(v)) {
    fputs("null", out);
  } else if (decimals < 0) {
    fprintf(out, "%.17g", v);
  } else {
    fprintf(out, "%.*f", decimals, v);
  }
}

void em_view_json_fields(FILE *out, const em_view_json_field_t *fields, size_t n, int decimals) {
  for (size_t i = 0; i < n; i++) {
    fprintf(out, ",\"%s\":", fields[i].name);
    em_view_json_num(out, fields[i].value, decimals);
  }
}

void em_view_table(const char *const *cells, size_t rows, size_t cols, const bool *left) {
  size_t width[64] = {0};
  if (cols > 64) {
    return;
  }
  for (size_t i = 0; i < rows; i++) {
    for (size_t c = 0; c < cols; c++) {
      size_t w = strlen(cells[i * cols + c]);
      width[c] = w > width[c] ? w : width[c];
    }
  }
  for (size_t i = 0; i < rows; i++) {
    for (size_t c = 0; c < cols; c++) {
      const char *sep = c == 0 ? "" : "  ";
      const char *cell = cells[i * cols + c];
      if (c == cols - 1) {
        printf("%s%s", sep, cell);
      } else {
        printf(left[c] ? "%s%-*s" : "%s%*s", sep, (int)width[c], cell);
      }
    }
    putchar('\n');
  }
}

int em_view_grid_init(em_view_grid_t *g, size_t rows, size_t cols, size_t cell_bytes,
                      const char *const *head) {
  *g = (em_view_grid_t){.rows = rows, .cols = cols, .cell_bytes = cell_bytes};
  g->text = calloc(rows * cols, cell_bytes);
  g->cells = calloc(rows * cols, sizeof(*g->cells));
  if (!g->text || !g->cells) {
    em_view_grid_deinit(g);
    return -ENOMEM;
  }
  for (size_t k = 0; k < rows * cols; k++) {
    g->cells[k] = g->text + k * cell_bytes;
  }
  for (size_t c = 0; c < cols && rows > 0; c++) {
    em_view_grid_set(g, 0, c, "%s", head[c] ? head[c] : "");
  }
  return 0;
}

char *em_view_grid_cell(const em_view_grid_t *g, size_t r, size_t c) {
  return g->text + (r * g->cols + c) * g->cell_bytes;
}

void em_view_grid_set(const em_view_grid_t *g, size_t r, size_t c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(em_view_grid_cell(g, r, c), g->cell_bytes, fmt, ap);
  va_end(ap);
}

void em_view_grid_print(const em_view_grid_t *g, const bool *left) {
  em_view_table(g->cells, g->rows, g->cols, left);
}

void em_view_grid_deinit(em_view_grid_t *g) {
  free(g->text);
  free(g->cells);
  g->text = NULL;
  g->cells = NULL;
}
