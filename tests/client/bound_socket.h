/*
 * bound_socket.h - the socket the client tests bind where the agent's span socket would be:
 * an AF_UNIX socket of a given type bound at a path. A datagram socket gets a 5 s receive
 * timeout, so that a datagram that never comes fails the test instead of hanging it.
 *
 * Header-only, for the C and the C++ tests alike. It asserts through cmocka: include
 * <cmocka.h> (and its prerequisites) first. The caller owns the returned descriptor.
 */
#ifndef EDGEMON_TESTS_CLIENT_BOUND_SOCKET_H
#define EDGEMON_TESTS_CLIENT_BOUND_SOCKET_H

#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>

/* A new socket of `type` (SOCK_DGRAM, SOCK_STREAM) bound at `path`; fails the test otherwise. */
static inline int bound_socket(const char *path, int type) {
  struct sockaddr_un addr;
  size_t len = strlen(path);
  int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  assert_true(len < sizeof(addr.sun_path));
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, path, len + 1);
  assert_int_equal(bind(fd, (const struct sockaddr *)&addr, sizeof(addr)), 0);
  if (type == SOCK_DGRAM) {
    struct timeval timeout = {5, 0};
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout)), 0);
  }
  return fd;
}

#endif
