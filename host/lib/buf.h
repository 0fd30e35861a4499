/*
 * buf.h - a growable byte buffer with a hard cap, for every text or byte string the host
 * programs build (a JSON body, an HTTP answer, a message read from standard input), in the
 * manner of curl's dynbuf: the cap is set when the buffer is made, growth doubles within it,
 * and a write past the cap or a failed allocation is one error, kept until em_buf_reset(), that
 * the writer checks once at the end instead of at every write.
 *
 * The bytes are always NUL-terminated once something was allocated (data[len] == '\0'), so text
 * can be used as a C string. A write never takes len past max_bytes (lowering max_bytes later
 * refuses writes until len is back under it); an allocation is at most max_bytes + 1. A failed
 * write writes nothing of itself.
 *
 * Owns data (malloc'd). Not thread-safe: one buffer, one thread at a time.
 */
#ifndef EM_HOST_BUF_H
#define EM_HOST_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct {
  char *data;       /* The bytes, NUL-terminated; NULL until the first write. Owned. */
  size_t len;       /* Bytes held, the NUL not counted. */
  size_t cap;       /* Bytes allocated (len + 1 at least, once allocated). */
  int error;        /* 0, or -E2BIG (a write past max_bytes) or -ENOMEM; later writes fail. */
  size_t max_bytes; /* The hard cap of len. */
} em_buf_t;

/* An empty buffer whose len may reach max_bytes. Allocates nothing. */
void em_buf_init(em_buf_t *b, size_t max_bytes);
/* Frees the bytes; the buffer is empty again, its cap kept. NULL is a no-op. */
void em_buf_free(em_buf_t *b);
/* Empties the buffer and clears its error, keeping the allocation for the next use. */
void em_buf_reset(em_buf_t *b);
/* Cuts the bytes back to the first len (no-op past b->len) and clears the error: a writer
 * undoing what it wrote since len. */
void em_buf_rewind(em_buf_t *b, size_t len);

/* Appends n bytes of p (p may be NULL when n is 0). Returns 0, or the buffer's error
 * (-E2BIG, -ENOMEM), also when an earlier write set it. */
int em_buf_add(em_buf_t *b, const void *p, size_t n);
/* Appends the C string s. */
int em_buf_addstr(em_buf_t *b, const char *s);
/* Appends printf-formatted text, of any length within the cap. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
int em_buf_printf(em_buf_t *b, const char *fmt, ...);
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 0)))
#endif
int em_buf_vprintf(em_buf_t *b, const char *fmt, va_list ap);

/* Makes room for n more bytes (and the NUL) without writing them: em_buf_tail() is where they
 * go, em_buf_commit() counts them. Returns 0 or the buffer's error (-E2BIG when len + n would
 * pass max_bytes). */
int em_buf_reserve(em_buf_t *b, size_t n);
/* Where the next byte goes (valid after a successful em_buf_reserve()). */
char *em_buf_tail(em_buf_t *b);
/* Counts n bytes written at the tail, reserved before (n <= what was reserved). */
void em_buf_commit(em_buf_t *b, size_t n);

/* Hands the bytes to the caller (free() them; NULL when nothing was ever allocated) with their
 * length in *len when len is not NULL; the buffer is empty again, its cap kept. */
char *em_buf_take(em_buf_t *b, size_t *len);

/*
 * The doubling array beside the byte buffer: makes room for one more item in the array whose
 * pointer is at `items_ptr` (the address of a `T *`, NULL while empty) and whose allocated
 * length in items is *cap, when its n items fill it. It grows to twice *cap, or to first_cap
 * items when empty, and updates the pointer and *cap. item_bytes is sizeof(T). The caller
 * keeps n and its own cap on n. Returns 0 (also when there was room already), or -ENOMEM
 * (overflow or no memory) with the array and *cap as they were.
 */
int em_buf_grow_items(void *items_ptr, size_t *cap, size_t n, size_t item_bytes, size_t first_cap);

/*
 * The search of such an array kept sorted by name (strcmp order): name_at(items, i) is the
 * name of item i of n. Returns the index of `name` with *found true, or, with *found false, the
 * index where it would be inserted to keep the order. Binary search: O(log n) calls of name_at.
 */
size_t em_buf_find_name(const void *items, size_t n, const char *(*name_at)(const void *, size_t),
                        const char *name, bool *found);

#endif /* EM_HOST_BUF_H */
