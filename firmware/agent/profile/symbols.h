/*
 * symbols.h - native symbols for a profiling window's distinct addresses, with elfutils'
 * libdwfl for the target's user-space code (its maps as /proc/PID/maps shows them, or as they
 * were snapshotted at the window's start when the process has exited since) and
 * /proc/kallsyms for kernel code. Keeps one Dwfl session per target process between windows
 * (libdwfl caches each binary's ELF and symbol table in its module), replaced when the target's
 * pid changes.
 *
 * An address no symbol covers becomes "module+0xOFFSET" (kind native, the binary named) or,
 * outside every module, its hex address (kind unknown); an unresolved kernel address is its
 * hex address in module "[kernel.kallsyms]". Every name and module is a profile's frame-text
 * (1..255 bytes of UTF-8, no control characters): a byte of a symbol or file name that is not
 * part of such a character becomes '?', a longer name is cut on a character boundary.
 *
 * libdw is not linked: it is opened (dlopen of EM_SYMBOLS_LIBDW) at the first resolve, and the
 * functions the profiler calls are looked up once into em_symbols_dw_t, for this module and the
 * unwinder (unwind.h). An agent that never opens a profiling window never maps libdw, libelf or
 * their compression libraries. Without the library (not installed, a function missing) user
 * addresses are resolved from the process's maps alone: "module+0xOFFSET" where a file is
 * mapped, the hex address elsewhere; em_symbols_dw_error() says why, for the profile's notes.
 *
 * Owns: the Dwfl session and a text arena (EM_SYMBOLS_ARENA_BYTES, allocated at
 * em_symbols_new()) the frames' strings point into until the next resolve; the libdw handle,
 * process-wide, opened once and never closed. Runs on a libuv worker thread: the caller makes
 * sure no other thread uses it meanwhile (the library's loading is safe from any thread).
 */
#ifndef EDGEMON_AGENT_SYMBOLS_H
#define EDGEMON_AGENT_SYMBOLS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <elfutils/libdwfl.h>

#include "edgemon/profile.h"

#define EM_SYMBOLS_ARENA_BYTES (1u << 20)
#define EM_SYMBOLS_LIBDW       "libdw.so.1" /* elfutils' soname since 0.138 (Debian: libdw1). */

/* The libdw functions the profiler calls, each a field of em_symbols_dw_t named as the function
 * and typed from libdwfl.h, so a call reads dw->dwfl_begin(...). */
#define EM_SYMBOLS_DW_FUNCTIONS(X)                                                                 \
  X(dwfl_begin)                                                                                    \
  X(dwfl_end)                                                                                      \
  X(dwfl_linux_proc_find_elf)                                                                      \
  X(dwfl_build_id_find_debuginfo)                                                                  \
  X(dwfl_report_begin)                                                                             \
  X(dwfl_report_end)                                                                               \
  X(dwfl_linux_proc_report)                                                                        \
  X(dwfl_linux_proc_maps_report)                                                                   \
  X(dwfl_addrmodule)                                                                               \
  X(dwfl_module_info)                                                                              \
  X(dwfl_module_addrinfo)                                                                          \
  X(dwfl_pid)                                                                                      \
  X(dwfl_attach_state)                                                                             \
  X(dwfl_thread_state_registers)                                                                   \
  X(dwfl_thread_state_register_pc)                                                                 \
  X(dwfl_frame_pc)                                                                                 \
  X(dwfl_getthread_frames)

#define EM_SYMBOLS_DW_FIELD(f) __typeof__(f) *f;
typedef struct {
  EM_SYMBOLS_DW_FUNCTIONS(EM_SYMBOLS_DW_FIELD)
} em_symbols_dw_t;
#undef EM_SYMBOLS_DW_FIELD

/*
 * libdw's functions, opened and looked up on the first call (from any thread; later calls
 * return the same answer). NULL when the library cannot be opened or lacks one of them:
 * em_symbols_dw_error() then says why. The table and the library stay for the process's life.
 */
const em_symbols_dw_t *em_symbols_dw(void);

/* Why em_symbols_dw() is NULL ("libdw.so.1: cannot open shared object file: ..."), NULL when
 * it is not or has not been called yet. Static text. */
const char *em_symbols_dw_error(void);

/* The file em_symbols_dw() opens instead of EM_SYMBOLS_LIBDW (copied; a path or a soname): for
 * tests, and a system whose elfutils has another name. Only before the first em_symbols_dw().
 * Returns 0, -EINVAL (NULL or 256 bytes or more) or -EALREADY (already loaded or tried). */
int em_symbols_dw_library(const char *file);

typedef struct em_symbols em_symbols_t;

/* proc_root is copied. Returns 0, -EINVAL or -ENOMEM. */
int em_symbols_new(em_symbols_t **out, const char *proc_root);
void em_symbols_free(em_symbols_t *s);

/* Empties the arena: frames of an earlier resolve are no longer valid. */
void em_symbols_begin(em_symbols_t *s);

/*
 * Resolves user addresses addrs[0..n) of process pid into out[0..n) (strings in the arena).
 * maps/maps_len: the process's /proc/PID/maps as read at the window's start, used when the
 * live one cannot be read (NULL, 0: none). Returns how many addresses no symbol covered (all of
 * them without libdw: module and offset at best).
 */
size_t em_symbols_user(em_symbols_t *s, pid_t pid, const char *maps, size_t maps_len,
                       const uint64_t *addrs, size_t n, em_profile_frame_t *out);

/*
 * The Dwfl session of process pid, its modules reported from the live maps (or the snapshot
 * maps/maps_len when the process is gone), as em_symbols_user() resolves with: the unwinder
 * (unwind.h) walks stacks over the same modules. NULL when none can be reported or libdw is
 * not there. Valid until the next call with another pid or em_symbols_free().
 */
Dwfl *em_symbols_session(em_symbols_t *s, pid_t pid, const char *maps, size_t maps_len);

/* Resolves kernel addresses addrs[0..n) (ascending) with /proc/kallsyms. Returns how many
 * stayed unresolved. */
size_t em_symbols_kernel(em_symbols_t *s, const uint64_t *addrs, size_t n, em_profile_frame_t *out);

#endif /* EDGEMON_AGENT_SYMBOLS_H */
