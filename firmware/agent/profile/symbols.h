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
 * Owns: the Dwfl session and a text arena (EM_SYMBOLS_ARENA_BYTES, allocated at
 * em_symbols_new()) the frames' strings point into until the next resolve. Runs on a libuv
 * worker thread: the caller makes sure no other thread uses it meanwhile.
 */
#ifndef EDGEMON_AGENT_SYMBOLS_H
#define EDGEMON_AGENT_SYMBOLS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <elfutils/libdwfl.h>

#include "edgemon/profile.h"

#define EM_SYMBOLS_ARENA_BYTES (1u << 20)

typedef struct em_symbols em_symbols_t;

/* proc_root is copied. Returns 0, -EINVAL or -ENOMEM. */
int em_symbols_new(em_symbols_t **out, const char *proc_root);
void em_symbols_free(em_symbols_t *s);

/* Empties the arena: frames of an earlier resolve are no longer valid. */
void em_symbols_begin(em_symbols_t *s);

/*
 * Resolves user addresses addrs[0..n) of process pid into out[0..n) (strings in the arena).
 * maps/maps_len: the process's /proc/PID/maps as read at the window's start, used when the
 * live one cannot be read (NULL, 0: none). Returns how many addresses no symbol covered.
 */
size_t em_symbols_user(em_symbols_t *s, pid_t pid, const char *maps, size_t maps_len,
                       const uint64_t *addrs, size_t n, em_profile_frame_t *out);

/*
 * The Dwfl session of process pid, its modules reported from the live maps (or the snapshot
 * maps/maps_len when the process is gone), as em_symbols_user() resolves with: the unwinder
 * (unwind.h) walks stacks over the same modules. NULL when none can be reported. Valid until
 * the next call with another pid or em_symbols_free().
 */
Dwfl *em_symbols_session(em_symbols_t *s, pid_t pid, const char *maps, size_t maps_len);

/* Resolves kernel addresses addrs[0..n) (ascending) with /proc/kallsyms. Returns how many
 * stayed unresolved. */
size_t em_symbols_kernel(em_symbols_t *s, const uint64_t *addrs, size_t n, em_profile_frame_t *out);

#endif /* EDGEMON_AGENT_SYMBOLS_H */
