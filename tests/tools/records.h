/*
 * records.h - the text records of the Prometheus test tools (em-prom-expo-tool,
 * em-prom-rw-tool): histograms, counters and gauges built from lines on stdin the way the
 * aggregator builds them (stage windows merged with em_histo_add_stage).
 *
 * Input, one record per line (fields separated by blanks; labels "k=v,k=v" or "-"):
 *
 *   window NAME LABELS SCALE ZERO_COUNT SUM_NS MIN_NS MAX_NS [INDEX:COUNT ...]
 *   counter NAME LABELS VALUE
 *   gauge NAME LABELS VALUE
 *
 * A window is one stage window (OpenTelemetry bucket indexes at SCALE, ascending); windows of
 * one NAME and LABELS merge into one series. Series are kept in the order they first appear.
 *
 * Owns the series table (static) and each series' histogram; records_free releases them.
 */
#ifndef EM_TEST_RECORDS_H
#define EM_TEST_RECORDS_H

#include <stddef.h>
#include <stdio.h>

#include "histo.h"
#include "prom_expo.h"

#define MAX_SERIES     64
#define MAX_NAME_BYTES 128

typedef struct {
  char kind[8];
  char name[MAX_NAME_BYTES];
  char labels_text[512]; /* As given, the series key beside name. */
  char label_store[512]; /* labels_text split in place into names and values. */
  em_prom_label_t labels[EM_PROM_EXPO_MAX_LABELS];
  size_t n_labels;
  em_histo_t *histo; /* window */
  double value;      /* counter, gauge */
} series_t;

extern series_t series[MAX_SERIES];
extern size_t n_series;

/* Reads every record of in into the series table. Returns 0, or 1 after naming the bad or
 * too long line (with prog) on stderr. */
int records_read(FILE *in, const char *prog);

/* Frees every series' histogram and empties the table. */
void records_free(void);

#endif /* EM_TEST_RECORDS_H */
