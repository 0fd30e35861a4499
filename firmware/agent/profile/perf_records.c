/*
 * perf_records.c - see perf_records.h. Layouts (linux/perf_event.h, sample_id_all set,
 * sample_type TID | TIME | CALLCHAIN):
 *   SAMPLE: header, u32 pid, u32 tid, u64 time, u64 nr, u64 ips[nr]
 *           with REGS_USER | STACK_USER then: u64 abi, u64 regs[n] (only when abi != 0),
 *           u64 size, u8 data[size], u64 dyn_size (the last two only when size != 0)
 *   LOST:   header, u64 id, u64 lost, u32 pid, u32 tid, u64 time
 *   SWITCH: header (misc bit PERF_RECORD_MISC_SWITCH_OUT: out), u32 pid, u32 tid, u64 time
 */
#include "perf_records.h"

#include <errno.h>
#include <linux/perf_event.h>
#include <string.h>

static uint64_t rd64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, sizeof(v));
  return v;
}

static uint32_t rd32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, sizeof(v));
  return v;
}

static uint16_t rd16(const uint8_t *p) {
  uint16_t v;
  memcpy(&v, p, sizeof(v));
  return v;
}

size_t em_perf_rec_size(const uint8_t *buf, size_t len) {
  if (!buf || len < EM_PERF_HEADER_BYTES) {
    return 0;
  }
  size_t size = rd16(buf + 6);
  return size < EM_PERF_HEADER_BYTES ? 0 : size;
}

/* pid, tid, time at p: 16 bytes. */
static void read_id(const uint8_t *p, em_perf_rec_t *out) {
  out->pid = rd32(p);
  out->tid = rd32(p + 4);
  out->time_ns = rd64(p + 8);
}

/* The user registers and stack copy of a sample: p[0..n) follows its call chain. */
static int read_user(const uint8_t *p, size_t n, const em_perf_layout_t *layout,
                     em_perf_rec_t *out) {
  size_t at = 0;
  if (layout->n_regs) {
    if (n - at < 8) {
      return -EBADMSG;
    }
    uint64_t abi = rd64(p + at);
    at += 8;
    if (abi != PERF_SAMPLE_REGS_ABI_NONE) {
      if ((n - at) / 8 < layout->n_regs) {
        return -EBADMSG;
      }
      out->regs = p + at;
      out->n_regs = layout->n_regs;
      at += 8u * layout->n_regs;
    }
  }
  if (layout->stack) {
    if (n - at < 8) {
      return -EBADMSG;
    }
    uint64_t size = rd64(p + at);
    at += 8;
    if (size != 0) {
      if (size > n - at || n - at - size < 8) {
        return -EBADMSG;
      }
      uint64_t dyn = rd64(p + at + size);
      if (dyn > size) {
        return -EBADMSG;
      }
      out->stack = p + at;
      out->stack_len = dyn;
    }
  }
  return 0;
}

int em_perf_rec_parse(const uint8_t *buf, size_t len, const em_perf_layout_t *layout,
                      em_perf_rec_t *out) {
  if (!buf || !out || len < EM_PERF_HEADER_BYTES || em_perf_rec_size(buf, len) != len ||
      (layout && layout->n_regs > 64)) {
    return -EINVAL;
  }
  memset(out, 0, sizeof(*out));
  uint32_t type = rd32(buf);
  uint16_t misc = rd16(buf + 4);
  const uint8_t *p = buf + EM_PERF_HEADER_BYTES;
  size_t body = len - EM_PERF_HEADER_BYTES;
  switch (type) {
  case PERF_RECORD_SAMPLE: {
    if (body < 24) {
      return -EBADMSG;
    }
    out->kind = EM_PERF_REC_SAMPLE;
    read_id(p, out);
    uint64_t nr = rd64(p + 16);
    if (nr > (body - 24) / 8) {
      return -EBADMSG;
    }
    out->chain = p + 24;
    out->n_chain = nr;
    if (!layout || (!layout->n_regs && !layout->stack)) {
      return 0;
    }
    size_t used = 24 + 8 * (size_t)nr;
    return read_user(p + used, body - used, layout, out);
  }
  case PERF_RECORD_LOST:
    if (body < 16) {
      return -EBADMSG;
    }
    out->kind = EM_PERF_REC_LOST;
    out->lost = rd64(p + 8);
    if (body >= 32) {
      read_id(p + 16, out);
    }
    return 0;
  case PERF_RECORD_SWITCH:
    if (body < 16) {
      return -EBADMSG;
    }
    out->kind = EM_PERF_REC_SWITCH;
    out->switch_out = (misc & PERF_RECORD_MISC_SWITCH_OUT) != 0;
    read_id(p, out);
    return 0;
  default:
    out->kind = EM_PERF_REC_OTHER;
    return 0;
  }
}

uint64_t em_perf_rec_ip(const em_perf_rec_t *r, size_t i) {
  return i < r->n_chain ? rd64(r->chain + 8 * i) : 0;
}

uint64_t em_perf_rec_reg(const em_perf_rec_t *r, size_t i) {
  return i < r->n_regs ? rd64(r->regs + 8 * i) : 0;
}
