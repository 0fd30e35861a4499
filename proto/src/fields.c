/*
 * fields.c - the table-driven map walker (fields.h): one loop reads every map of the schema by
 * its rows, so each decoder states what its maps hold instead of how to walk them. Also the
 * tables the decoders share: the trigger of a flight recording and of a profile. Owns nothing;
 * reads only its input, writes only the caller's struct and scratch; reentrant.
 */
#include <string.h>

#include "fields.h"
#include "model.h"

uint64_t em__fields_required(const em__fields_t *t) {
  uint64_t required = 0;
  for (size_t i = 0; i < t->n; i++) {
    required |= t->rows[i].required ? BIT(t->rows[i].key) : 0;
  }
  return required;
}

/* Stores the low `size` bytes' worth of v as an unsigned integer of that width. */
static void put_uint(void *dst, size_t size, uint64_t v) {
  uint8_t u8 = (uint8_t)v;
  uint16_t u16 = (uint16_t)v;
  uint32_t u32 = (uint32_t)v;
  const void *src = size == 1   ? (const void *)&u8
                    : size == 2 ? (const void *)&u16
                    : size == 4 ? (const void *)&u32
                                : (const void *)&v;
  memcpy(dst, src, size);
}

static int read_row(em__dec_t *d, const em__field_t *f, void *base) {
  void *at = (unsigned char *)base + f->offset;
  uint64_t u = 0;
  int64_t i = 0;
  int rc;
  switch ((em__field_type_t)f->type) {
  case EM__F_UINT:
    rc = em__read_uint(d, f->hi, &u);
    if (!rc && u < (uint64_t)f->lo) {
      rc = EM_PROTO_ERANGE;
    }
    put_uint(at, f->size, u);
    return rc;
  case EM__F_INT:
    rc = em__read_int(d, f->lo, (int64_t)f->hi, &i);
    if (f->size == sizeof(int32_t)) {
      int32_t i32 = (int32_t)i;
      memcpy(at, &i32, sizeof(i32));
    } else {
      memcpy(at, &i, sizeof(i));
    }
    return rc;
  case EM__F_BOOL:
    return em__read_bool(d, at);
  case EM__F_STR:
    return em__read_str(d, (em_str_class_t)f->cls, (size_t)f->hi, at);
  case EM__F_VALUE:
    return em__read_value(d, false, at);
  case EM__F_MAP:
    return em__read_map(d, f->sub, at, NULL);
  case EM__F_LATER: {
    em__later_t *later = at;
    later->at = d->pos;
    rc = em__skip(d);
    later->end = d->pos;
    return rc;
  }
  case EM__F_LIST: {
    void *list = NULL;
    size_t *count = (size_t *)((unsigned char *)base + f->count_offset);
    rc = em__read_array(d, f->hi, f->elem_size, f->elem, &list, count);
    memcpy(at, &list, sizeof(list));
    return rc;
  }
  case EM__F_STAGES: {
    const char *const *names = NULL;
    size_t *count = (size_t *)((unsigned char *)base + f->count_offset);
    rc = em__read_stage_table(d, (size_t)f->hi, &names, count);
    memcpy(at, &names, sizeof(names));
    return rc;
  }
  case EM__F_FN:
    return f->fn(d, f, base);
  }
  return em__skip(d);
}

int em__read_field(em__dec_t *d, const em__fields_t *t, uint64_t key, void *base) {
  for (size_t i = 0; i < t->n; i++) {
    if (t->rows[i].key == key) {
      return read_row(d, &t->rows[i], base);
    }
  }
  return em__skip(d);
}

int em__check_strs(const em__fields_t *t, const void *base) {
  for (size_t i = 0; i < t->n; i++) {
    const em__field_t *f = &t->rows[i];
    const char *s = NULL;
    if (f->type != EM__F_STR) {
      continue;
    }
    memcpy(&s, (const unsigned char *)base + f->offset, sizeof(s));
    int rc = s || f->required ? em__check_cstr(s, (em_str_class_t)f->cls, (size_t)f->hi) : 0;
    if (rc) {
      return rc;
    }
  }
  return 0;
}

int em__read_map(em__dec_t *d, const em__fields_t *t, void *base, uint64_t *seen) {
  size_t at = d->pos;
  uint64_t n = 0, got = 0, key = 0;
  int rc = em__open_container(d, T_MAP, 64, &n);
  for (uint64_t i = 0; i < n && !rc; i++) {
    rc = em__read_key(d, &got, &key);
    if (!rc) {
      rc = em__read_field(d, t, key, base);
    }
  }
  if (rc) {
    return rc;
  }
  em__leave(d);
  if (seen) {
    *seen = got;
  }
  return em__require(d, at, got, em__fields_required(t));
}

int em__read_rest(em__dec_t *d, uint64_t n, uint64_t seen, em_msg_kind_t kind, em_msg_head_t *head,
                  const em__fields_t *t, void *base) {
  uint64_t key = 0, v = 0;
  int rc = 0;
  for (uint64_t i = 2; i < n && !rc; i++) {
    rc = em__read_key(d, &seen, &key);
    if (rc) {
      break;
    }
    const em_head_field_t *f = em__head_field(kind, key);
    if (f) {
      rc = em__read_uint(d, f->max, &v);
      em__head_set(head, f, v);
    } else {
      rc = em__read_field(d, t, key, base);
    }
  }
  if (rc) {
    return rc;
  }
  em__leave(d);
  return em__require(d, 0, seen, em__head_keys(kind) | em__fields_required(t));
}

int em__read_top(em__dec_t *d, em_msg_kind_t kind, em_msg_head_t *head, const em__fields_t *t,
                 void *base) {
  uint64_t n = 0, seen = 0, v = 0;
  int rc = em__read_start(d, &n, &seen, &v);
  if (!rc && v != (uint64_t)kind) {
    rc = EM_PROTO_EKIND;
  }
  return rc ? rc : em__read_rest(d, n, seen, kind, head, t, base);
}

int em__field_model(em__dec_t *d, const em__field_t *f, void *base) {
  return em__read_model(d, (em_model_t *)((unsigned char *)base + f->offset));
}

/* --- trigger (flight key 5, profile key 5) --------------------------------------------- */

#define TRIGGER_HEAD_ROWS                                                                          \
  EM__UINT(KG_CAUSE, em_trigger_t, cause, 0, 1, REQ),                                              \
      EM__UINT(KG_LEVEL, em_trigger_t, level, 0, EM_LEVEL_CRITICAL, REQ),                          \
      EM__UINT(KG_PREV, em_trigger_t, prev_level, 0, EM_LEVEL_CRITICAL, OPT)

static const em__field_t trigger_rows[] = {TRIGGER_HEAD_ROWS,
                                           EM__CAUSE_ROWS(KG_RULE, em_trigger_t)};
static const em__fields_t trigger_fields = EM__TABLE(trigger_rows);

/* A profile's trigger: no measured value nor bound (keys 5 and 6 skipped like unknown ones). */
static const em__field_t trigger_plain_rows[] = {
    TRIGGER_HEAD_ROWS, EM__STR(KG_RULE, em_trigger_t, rule, STR_NAME, EM_PROTO_MAX_NAME_BYTES, OPT),
    EM__STR(KG_STAGE, em_trigger_t, stage, STR_IDENT, EM_PROTO_MAX_STAGE_BYTES, OPT),
    EM__STR(KG_REASON, em_trigger_t, reason, STR_TEXT, EM_PROTO_MAX_TEXT_BYTES, OPT)};
static const em__fields_t trigger_plain_fields = EM__TABLE(trigger_plain_rows);

int em__read_trigger(em__dec_t *d, bool numbers, em_trigger_t *t) {
  t->prev_level = EM_LEVEL_NONE;
  return em__read_map(d, numbers ? &trigger_fields : &trigger_plain_fields, t, NULL);
}
