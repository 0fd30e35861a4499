/*
 * edgemon/common/credentials.h - the MQTT credentials file the agent ([mqtt] credentials_file)
 * and the host tools (credentials_file, --credentials) read, one reader for all of them.
 *
 * Format: lines "username = NAME" (required) and "password = SECRET" (optional), each at most
 * once, the value being the rest of the line with surrounding blanks removed (no quoting);
 * blank lines and lines starting with '#' or ';' are ignored; at most 4 KiB, no NUL byte.
 *
 * The file holds a secret, so it must be a regular file owned by the reading process's
 * effective uid or by root, with no access at all for group or others (mode & 077 == 0);
 * anything else is refused before a byte is read. The password never appears in a message.
 *
 * Nothing allocates; buffers that held the secret are wiped before returning. No global state.
 * The header compiles on its own, as C11 and as C++.
 */
#ifndef EDGEMON_COMMON_CREDENTIALS_H
#define EDGEMON_COMMON_CREDENTIALS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EM_CREDENTIALS_MAX_SECRET 128u  /* Bytes of a username or password, NUL included. */
#define EM_CREDENTIALS_MAX_BYTES  4096u /* Largest file read. */

typedef struct {
  char username[EM_CREDENTIALS_MAX_SECRET];
  char password[EM_CREDENTIALS_MAX_SECRET]; /* "" when the file has no password line. */
} em_credentials_t;

/*
 * Called once per problem: `line` is the file's line (0 for a problem of the whole file), and
 * `msg` completes "credentials file 'PATH' ..." (e.g. "line 3: duplicate username (first on
 * line 1)"), without a trailing newline. Borrowed for the call.
 */
typedef void (*em_credentials_error_fn)(void *ctx, int line, const char *msg);

/*
 * Parses the text of a credentials file (text[0..len), need not be NUL-terminated) into *out,
 * reporting every problem to on_error (may be NULL). Returns 0, or -EINVAL when there was a
 * problem; *out is then zeroed.
 */
int em_credentials_parse(const char *text, size_t len, em_credentials_t *out,
                         em_credentials_error_fn on_error, void *ctx);

/*
 * Checks the open `fd` of a secret file (a credentials file, a TLS private key): a regular
 * file, owned by the effective uid or root, mode & 077 == 0. `who` names the refusing program
 * in messages ("the agent"; NULL: "this program"). Returns 0; -EPERM after reporting why not;
 * -errno when fstat() fails.
 */
int em_credentials_check_fd(int fd, const char *who, em_credentials_error_fn on_error, void *ctx);

/*
 * Checks (em_credentials_check_fd) and reads the file at `path` (see the top). Returns 0; -errno of
 * open() when it cannot be opened; -EPERM when it is not a regular file, is owned by another user
 * than the effective uid or root, or gives group or others access; -EFBIG past 4 KiB; -EINVAL when
 * its content is wrong. Each problem goes to on_error (may be NULL). *out is zeroed on failure.
 */
int em_credentials_read(const char *path, const char *who, em_credentials_t *out,
                        em_credentials_error_fn on_error, void *ctx);

#ifdef __cplusplus
}
#endif

#endif /* EDGEMON_COMMON_CREDENTIALS_H */
