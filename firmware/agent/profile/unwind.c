/*
 * unwind.c - see unwind.h. The pool is a run of 8-byte aligned entries: a head (log index,
 * tid, register count, stack length), the registers as the kernel wrote them, the stack bytes.
 * Unwinding attaches the symbols' Dwfl session to this module's thread callbacks once
 * (dwfl_attach_state, no ptrace: the "process" is the current sample), then, per sample,
 * points them at its registers and stack copy and walks its frames with
 * dwfl_getthread_frames. A read outside the copy fails, which ends the walk there. libdw's
 * functions come from the symbols' table (em_symbols_dw(): the library is loaded at run time);
 * a session exists only once it is, so em_unwind_run with one can call through it.
 */
#define _GNU_SOURCE

#include "unwind.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__x86_64__) || defined(__aarch64__)
#include <asm/perf_regs.h>
#endif

#include "edgemon/profile.h"
#include "symbols.h"

/* Registers as libdw numbers them (DWARF), from perf's sample (its bit order). */
#if defined(__x86_64__)
#define REGS_MASK                                                                                  \
  ((1ull << PERF_REG_X86_AX) | (1ull << PERF_REG_X86_BX) | (1ull << PERF_REG_X86_CX) |             \
   (1ull << PERF_REG_X86_DX) | (1ull << PERF_REG_X86_SI) | (1ull << PERF_REG_X86_DI) |             \
   (1ull << PERF_REG_X86_BP) | (1ull << PERF_REG_X86_SP) | (1ull << PERF_REG_X86_IP) |             \
   (0xffull << PERF_REG_X86_R8))
#define N_DWARF 17u /* rax rdx rcx rbx rsi rdi rbp rsp r8-r15 rip */
/* Sample positions (ascending bits): ax bx cx dx si di bp sp ip r8..r15. */
enum { S_AX, S_BX, S_CX, S_DX, S_SI, S_DI, S_BP, S_SP, S_IP, S_R8 };
#define SAMPLE_SP S_SP
#define SAMPLE_PC S_IP
static void to_dwarf(const uint64_t *s, Dwarf_Word *d) {
  const int order[8] = {S_AX, S_DX, S_CX, S_BX, S_SI, S_DI, S_BP, S_SP};
  for (int i = 0; i < 8; i++) {
    d[i] = s[order[i]];
  }
  for (int i = 0; i < 8; i++) {
    d[8 + i] = s[S_R8 + i];
  }
  d[16] = s[S_IP];
}
#elif defined(__aarch64__)
#define REGS_MASK ((1ull << (PERF_REG_ARM64_PC + 1)) - 1) /* x0-x30, sp, pc */
#define N_DWARF   32u                                     /* x0-x30, sp */
#define SAMPLE_SP PERF_REG_ARM64_SP
#define SAMPLE_PC PERF_REG_ARM64_PC
static void to_dwarf(const uint64_t *s, Dwarf_Word *d) {
  for (unsigned i = 0; i < N_DWARF; i++) {
    d[i] = s[i];
  }
}
#else
#define REGS_MASK 0ull
#define N_DWARF   1u
#define SAMPLE_SP 0
#define SAMPLE_PC 0
static void to_dwarf(const uint64_t *s, Dwarf_Word *d) {
  d[0] = s[0];
}
#endif

#define MAX_REGS 64u

typedef struct {
  uint32_t log_index;
  uint32_t tid;
  uint32_t n_regs;
  uint32_t stack_len;
} entry_head_t;

struct em_unwind {
  uint8_t *pool;
  size_t cap, used;
  uint32_t n_regs; /* The mask's register count. */
  em_unwind_stats_t st;
  /* The sample being unwound: what the thread callbacks read. */
  pid_t tid;
  Dwarf_Word dwarf[N_DWARF];
  uint64_t pc, sp;
  const uint8_t *stack;
  uint32_t stack_len;
  uint64_t frames[EM_PROFILE_MAX_DEPTH];
  uint32_t n_frames;
};

static uint32_t popcount64(uint64_t v) {
  uint32_t n = 0;
  for (; v; v &= v - 1) {
    n++;
  }
  return n;
}

uint64_t em_unwind_regs_mask(uint32_t *n_regs) {
  if (n_regs) {
    *n_regs = popcount64(REGS_MASK);
  }
  return REGS_MASK;
}

int em_unwind_new(em_unwind_t **out, size_t pool_bytes) {
  if (!out || pool_bytes < 65536u) {
    return -EINVAL;
  }
  if (REGS_MASK == 0) {
    return -ENOTSUP;
  }
  em_unwind_t *u = calloc(1, sizeof(*u));
  if (!u) {
    return -ENOMEM;
  }
  void *p = mmap(NULL, pool_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    free(u);
    return -ENOMEM;
  }
  u->pool = p;
  u->cap = pool_bytes;
  u->n_regs = popcount64(REGS_MASK);
  *out = u;
  return 0;
}

void em_unwind_free(em_unwind_t *u) {
  if (u) {
    munmap(u->pool, u->cap);
    free(u);
  }
}

uint64_t em_unwind_bytes(const em_unwind_t *u) {
  return u ? sizeof(*u) + u->cap : 0;
}

void em_unwind_reset(em_unwind_t *u) {
  if (!u) {
    return;
  }
  if (u->used) {
    (void)madvise(u->pool, u->cap, MADV_DONTNEED);
  }
  u->used = 0;
  u->st = (em_unwind_stats_t){0};
}

int em_unwind_keep(em_unwind_t *u, uint32_t log_index, const em_perf_rec_t *r) {
  if (!u || !r || r->n_regs != u->n_regs || r->stack_len < 8 ||
      r->stack_len > EM_UNWIND_STACK_BYTES) {
    return -ENODATA;
  }
  size_t regs = 8u * r->n_regs;
  size_t need = sizeof(entry_head_t) + regs + ((r->stack_len + 7u) & ~(size_t)7u);
  if (u->cap - u->used < need) {
    u->st.pool_full++;
    return -ENOSPC;
  }
  uint8_t *p = u->pool + u->used;
  entry_head_t h = {.log_index = log_index,
                    .tid = r->tid,
                    .n_regs = r->n_regs,
                    .stack_len = (uint32_t)r->stack_len};
  memcpy(p, &h, sizeof(h));
  memcpy(p + sizeof(h), r->regs, regs);
  memcpy(p + sizeof(h) + regs, r->stack, r->stack_len);
  u->used += need;
  u->st.kept++;
  return 0;
}

/* --- unwinding (worker) ------------------------------------------------------------- */

static pid_t next_thread(Dwfl *dwfl, void *dwfl_arg, void **thread_argp) {
  (void)dwfl;
  em_unwind_t *u = dwfl_arg;
  if (*thread_argp) {
    return 0; /* One thread: the sample's. */
  }
  *thread_argp = u;
  return u->tid;
}

static bool memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *dwfl_arg) {
  (void)dwfl;
  const em_unwind_t *u = dwfl_arg;
  if (addr < u->sp || u->stack_len < sizeof(*result) ||
      addr - u->sp > u->stack_len - sizeof(*result)) {
    return false; /* Outside the copy: the walk ends here. */
  }
  memcpy(result, u->stack + (addr - u->sp), sizeof(*result));
  return true;
}

static bool set_initial_registers(Dwfl_Thread *thread, void *thread_arg) {
  const em_unwind_t *u = thread_arg;
  const em_symbols_dw_t *dw = em_symbols_dw();
  if (!dw->dwfl_thread_state_registers(thread, 0, N_DWARF, u->dwarf)) {
    return false;
  }
  dw->dwfl_thread_state_register_pc(thread, u->pc);
  return true;
}

static const Dwfl_Thread_Callbacks callbacks = {
    .next_thread = next_thread,
    .memory_read = memory_read,
    .set_initial_registers = set_initial_registers,
};

static int on_frame(Dwfl_Frame *state, void *arg) {
  em_unwind_t *u = arg;
  Dwarf_Addr pc = 0;
  bool activation = false;
  if (!em_symbols_dw()->dwfl_frame_pc(state, &pc, &activation) || pc == 0 ||
      u->n_frames >= EM_PROFILE_MAX_DEPTH) {
    return DWARF_CB_ABORT;
  }
  u->frames[u->n_frames++] = activation ? pc : pc - 1;
  return DWARF_CB_OK;
}

void em_unwind_run(em_unwind_t *u, Dwfl *dwfl, pid_t pid, em_unwind_chain_fn fn, void *ctx) {
  if (!u || !fn || u->used == 0) {
    return;
  }
  const em_symbols_dw_t *dw = dwfl ? em_symbols_dw() : NULL;
  bool ok =
      dw && (dw->dwfl_pid(dwfl) == pid || dw->dwfl_attach_state(dwfl, NULL, pid, &callbacks, u));
  for (size_t off = 0; off < u->used;) {
    entry_head_t h;
    memcpy(&h, u->pool + off, sizeof(h));
    const uint8_t *regs = u->pool + off + sizeof(h);
    uint64_t sample[MAX_REGS];
    memcpy(sample, regs, 8u * h.n_regs);
    off += sizeof(h) + 8u * h.n_regs + ((h.stack_len + 7u) & ~(size_t)7u);
    u->n_frames = 0;
    if (ok) {
      u->tid = (pid_t)h.tid;
      to_dwarf(sample, u->dwarf);
      u->pc = sample[SAMPLE_PC];
      u->sp = sample[SAMPLE_SP];
      u->stack = regs + 8u * h.n_regs;
      u->stack_len = h.stack_len;
      (void)dw->dwfl_getthread_frames(dwfl, (pid_t)h.tid, on_frame, u); /* Partial walks count. */
    }
    if (u->n_frames < 2) {
      u->st.failed++;
      continue;
    }
    uint64_t root_first[EM_PROFILE_MAX_DEPTH];
    for (uint32_t i = 0; i < u->n_frames; i++) {
      root_first[i] = u->frames[u->n_frames - 1 - i];
    }
    u->st.unwound++;
    fn(ctx, h.log_index, root_first, u->n_frames);
  }
}

const em_unwind_stats_t *em_unwind_stats(const em_unwind_t *u) {
  return &u->st;
}
