/*
 * models.h - the store's `models` table (SCHEMA.md, "Models"): one row per model identity
 * (identity.h) some row of the store names, its bounds, and the sweep that deletes the rows
 * nothing names any more.
 *
 * What keeps the sweep cheap. `data` and `stage_windows` have no index on `model` (each index
 * costs every message a write), so "does any row still name model X" would be a scan of the
 * largest tables. Instead each models row carries `last_ns`, the latest `time_ns` of a data or
 * stage_windows row written with it:
 *
 *   Invariant: a committed data or stage_windows row naming X has time_ns <= X.last_ns
 *   (NULL last_ns: no such row was ever written).
 *
 * The store keeps it by calling em_models_touch() in the batch that writes the rows (a failed
 * touch fails the batch). Retention deletes every row older than its cut, so after it a models
 * row whose last_ns is NULL or below the cut is named by no data or stage_windows row; the
 * sweep then only checks `devices.model` (one row per device) before deleting it. A row whose
 * last use was downsampled away (a step of mixed models keeps none) goes once the cut passes its
 * last_ns: the bound is conservative, never early.
 *
 * Bounds between sweeps: at most max_rows rows in all, and at most per_device_max first named
 * by one device (`models.device`, indexed). An identity without a row past either bound gets
 * none: em_models_find() answers id 0 and refused, and the store keeps the message's rows
 * without a model. Rows inserted before version 9 name no device and count only in all.
 *
 * Owns its prepared statements. Runs on the store's connection inside the batch the store opens
 * and commits (store.c), which counts its failures and keeps the id cache. Not thread-safe.
 */
#ifndef EM_AGG_MODELS_H
#define EM_AGG_MODELS_H

#include <sqlite3.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Rows the table holds at most when the store's options name no bound. */
#define EM_MODELS_DEFAULT_MAX 65536u
/* Rows one device may have been first to name, when the options name no bound. */
#define EM_MODELS_DEFAULT_PER_DEVICE_MAX 256u

typedef struct em_models em_models_t;

/* What one sweep deleted. */
typedef struct {
  uint64_t deleted; /* Rows deleted. */
  int64_t *ids;     /* Their ids, `deleted` of them in no order (malloc'd: the caller frees);
                     * NULL when none, or when out of memory (then forget every cached id). */
} em_models_swept_t;

/* Prepares the statements on db (the schema must exist). max_rows, per_device_max: the bounds
 * above, 0 for the defaults. Returns an SQLite result code. */
int em_models_new(em_models_t **out, sqlite3 *db, uint32_t max_rows, uint32_t per_device_max);
void em_models_free(em_models_t *m); /* NULL is a no-op. */

/*
 * The id of the identity (name, version, labels: its canonical JSON, labels_len bytes; all
 * borrowed for the call) into *id: its row's, or a new row's, first named by device dev_id.
 * When it has no row and a bound forbids one, *id is 0 and *refused true. Returns SQLITE_OK,
 * or the failed statement's result code (*id 0).
 */
int em_models_find(em_models_t *m, const char *name, const char *version, const char *labels,
                   size_t labels_len, int64_t dev_id, int64_t *id, bool *refused);

/* Raises id's last_ns to at least time_ns: rows naming it at that time were written in the
 * open batch. Returns SQLITE_OK or the statement's result code. */
int em_models_touch(em_models_t *m, int64_t id, int64_t time_ns);

/*
 * Deletes the rows that no devices row names and whose last_ns is NULL or below cut_ns (the
 * retention cut, once retention has deleted the rows older than it; INT64_MIN without
 * retention: only rows no data was ever written with). *out says which. Returns SQLITE_OK or
 * the statement's result code (*out then empty).
 */
int em_models_sweep(em_models_t *m, int64_t cut_ns, em_models_swept_t *out);

/* Forgets the row count after a rollback (it counts again when next needed). */
void em_models_forget(em_models_t *m);

#endif /* EM_AGG_MODELS_H */
