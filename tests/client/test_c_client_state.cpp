// test_c_client_state.cpp - the level readers of edgemon_client.h used from C++17 (a ROS 2
// node): em_client_level / em_client_state on a page formatted and written with proto's
// em_state_page_init / em_state_page_write, and a level push packed with em_push_pack received
// through em_client_subscribe / em_client_wait_change. test_c_client_state.c covers the rest.
extern "C" {
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
}

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "edgemon/wire.h"
#include "edgemon_client.h"

#include "bound_socket.h"

namespace {

em_state_record_t degraded() {
  em_state_record_t rec;
  std::memset(&rec, 0, sizeof(rec));
  rec.level = EM_LEVEL_DEGRADED;
  rec.prev_level = EM_LEVEL_NOMINAL;
  rec.changes = 3;
  rec.since_mono_ns = 5000000000123ull;
  rec.since_wall_ns = 1718000000123456789ull;
  rec.value = 41.5;
  rec.bound = NAN;
  std::snprintf(rec.rule, sizeof(rec.rule), "infer.p99");
  std::snprintf(rec.stage, sizeof(rec.stage), "infer");
  std::snprintf(rec.reason, sizeof(rec.reason), "p99 41.5 ms > 33 ms");
  return rec;
}

void check(const em_client_state_t &got, const em_state_record_t &want) {
  assert_int_equal(got.level, static_cast<int>(want.level));
  assert_int_equal(got.prev_level, static_cast<int>(want.prev_level));
  assert_int_equal(got.changes, want.changes);
  assert_int_equal(got.since_mono_ns, want.since_mono_ns);
  assert_int_equal(got.since_wall_ns, want.since_wall_ns);
  assert_true(got.value == want.value);
  assert_true(std::isnan(got.bound));
  assert_string_equal(got.rule, want.rule);
  assert_string_equal(got.stage, want.stage);
  assert_string_equal(got.reason, want.reason);
}

// A temporary directory with the page (mapped read-write) and the agent's span socket.
class Agent {
public:
  Agent() {
    char dir[] = "/tmp/em-cpp-state-XXXXXX";
    assert_non_null(mkdtemp(dir));
    dir_ = dir;
    page_path_ = dir_ + "/state";
    sock_path_ = dir_ + "/spans.sock";
    int fd = open(page_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, EM_STATE_PAGE_BYTES), 0);
    void *map = mmap(nullptr, EM_STATE_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(map != MAP_FAILED);
    close(fd);
    page_ = static_cast<uint8_t *>(map);
    em_state_record_t rec = degraded();
    assert_int_equal(em_state_page_init(page_, 4242, &rec), 0);
    sock_ = bound_socket(sock_path_.c_str(), SOCK_DGRAM);
  }
  ~Agent() {
    munmap(page_, EM_STATE_PAGE_BYTES);
    close(sock_);
    unlink(sock_path_.c_str());
    unlink(page_path_.c_str());
    rmdir(dir_.c_str());
  }
  Agent(const Agent &) = delete;
  Agent &operator=(const Agent &) = delete;

  uint8_t *page() {
    return page_;
  }
  int sock() const {
    return sock_;
  }
  const char *page_path() const {
    return page_path_.c_str();
  }
  const char *sock_path() const {
    return sock_path_.c_str();
  }

private:
  std::string dir_, page_path_, sock_path_;
  uint8_t *page_ = nullptr;
  int sock_ = -1;
};

void page_and_push_from_cpp(void **) {
  Agent agent;
  em_client_t c;
  assert_int_equal(em_client_open(&c, agent.sock_path()), 0);
  assert_int_equal(em_client_set_state_path(&c, agent.page_path()), 0);

  em_state_record_t rec = degraded();
  assert_int_equal(em_client_level(&c), EM_CLIENT_LEVEL_DEGRADED);
  em_client_state_t got;
  assert_int_equal(em_client_state(&c, &got), 0);
  check(got, rec);
  assert_int_equal(got.agent_pid, 4242);
  assert_int_equal(got.seq, 0);
  rec.level = EM_LEVEL_CRITICAL;
  assert_int_equal(em_state_page_write(agent.page(), &rec), 0);
  assert_int_equal(em_client_level(&c), EM_CLIENT_LEVEL_CRITICAL);

  assert_int_equal(em_client_subscribe(&c), 0);
  uint8_t buf[128];
  sockaddr_un from;
  socklen_t from_len = sizeof(from);
  ssize_t n =
      recvfrom(agent.sock(), buf, sizeof(buf), 0, reinterpret_cast<sockaddr *>(&from), &from_len);
  assert_int_equal(n, EM_SPAN_DGRAM_BYTES);
  em_span_t span;
  assert_int_equal(em_span_unpack(buf, static_cast<size_t>(n), &span), 0);
  assert_int_equal(span.kind, EM_DGRAM_SUBSCRIBE);
  uint8_t push[EM_PUSH_DGRAM_BYTES];
  assert_int_equal(em_push_pack(&rec, 99, push), 0);
  assert_int_equal(sendto(agent.sock(), push, sizeof(push), 0,
                          reinterpret_cast<const sockaddr *>(&from), from_len),
                   static_cast<ssize_t>(sizeof(push)));
  assert_int_equal(em_client_wait_change(&c, 5000, &got), 0);
  check(got, rec);
  assert_int_equal(got.agent_pid, 99);
  assert_int_equal(em_client_wait_change(&c, 20, &got), -ETIMEDOUT);
  assert_int_equal(em_client_unsubscribe(&c), 0);
  n = recv(agent.sock(), buf, sizeof(buf), 0);
  assert_int_equal(n, EM_SPAN_DGRAM_BYTES);
  assert_int_equal(em_span_unpack(buf, static_cast<size_t>(n), &span), 0);
  assert_int_equal(span.kind, EM_DGRAM_UNSUBSCRIBE);
  em_client_close(&c);
}

} // namespace

int main() {
  const CMUnitTest tests[] = {
      cmocka_unit_test(page_and_push_from_cpp),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
