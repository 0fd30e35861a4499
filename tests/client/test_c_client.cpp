// test_c_client.cpp - the header-only C client (firmware/client/c/edgemon_client.h) used from a
// C++17 translation unit, the way a ROS 2 node uses it, against a real AF_UNIX SOCK_DGRAM
// receiver. Datagrams are decoded with em_span_unpack (proto's wire.h, extern "C") and every
// field is checked. Covered: the header compiling as C++ under the project's warnings; spans
// (begin/end, EM_CLIENT_SPAN, record, heartbeat) decoding field by field; a scope guard built
// on the C API sending its span when the scope is left by an exception; an absent agent and a
// full queue counted without blocking; GPU spans (begin/end, EM_CLIENT_GPU_SPAN) compiling as
// C++ and sending their CPU span where no CUDA context is current (test_c_client_gpu.c times
// the GPU side against a stand-in driver). test_c_client.c covers the rest of the semantics.
extern "C" {
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
}

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "edgemon/wire.h"
#include "edgemon_client.h"

#include "bound_socket.h"

namespace {

// A bound receiver in a fresh temporary directory; removed by the destructor.
class Receiver {
public:
  Receiver() {
    char dir[] = "/tmp/em-cpp-client-XXXXXX";
    assert_non_null(mkdtemp(dir));
    dir_ = dir;
    path_ = dir_ + "/spans.sock";
    fd_ = bound_socket(path_.c_str(), SOCK_DGRAM);
  }
  ~Receiver() {
    close(fd_);
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  Receiver(const Receiver &) = delete;
  Receiver &operator=(const Receiver &) = delete;

  const char *path() const {
    return path_.c_str();
  }

  em_span_t recv_span() const {
    uint8_t buf[256];
    ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    assert_int_equal(n, EM_SPAN_DGRAM_BYTES);
    em_span_t span;
    assert_int_equal(em_span_unpack(buf, static_cast<size_t>(n), &span), 0);
    return span;
  }

  size_t drain() const {
    size_t count = 0;
    uint8_t buf[256];
    while (::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT) == EM_SPAN_DGRAM_BYTES) {
      count++;
    }
    return count;
  }

private:
  std::string dir_;
  std::string path_;
  int fd_ = -1;
};

// What a C++ user writes on top of the C API: the span is sent when the scope ends, however.
class ScopedSpan {
public:
  ScopedSpan(em_client_t *client, const char *stage) : span_(em_client_span_begin(client, stage)) {}
  ~ScopedSpan() {
    (void)em_client_span_end(&span_);
  }
  ScopedSpan(const ScopedSpan &) = delete;
  ScopedSpan &operator=(const ScopedSpan &) = delete;

private:
  em_client_span_t span_;
};

void check(const em_span_t &got, em_dgram_kind_t kind, uint64_t frame_id, const char *stage) {
  assert_int_equal(got.kind, kind);
  assert_int_equal(got.pid, static_cast<uint32_t>(getpid()));
  assert_true(got.frame_id == frame_id);
  assert_string_equal(got.stage, stage);
}

void cpp_spans_decode_field_by_field(void **) {
  Receiver r;
  em_client_t c;
  assert_int_equal(em_client_open(&c, r.path()), 0);
  em_client_set_frame(&c, 9);
  const std::string stage = "infer";

  uint64_t before = em_client_now_ns();
  em_client_span_t s = em_client_span_begin(&c, stage.c_str());
  usleep(1000);
  assert_int_equal(em_client_span_end(&s), 0);
  uint64_t after = em_client_now_ns();
  em_span_t got = r.recv_span();
  check(got, EM_DGRAM_SPAN, 9, "infer");
  assert_true(before <= got.start_ns && got.start_ns + got.duration_ns <= after);
  assert_true(got.duration_ns >= 1000000);

  EM_CLIENT_SPAN(&c, "postprocess") {
    usleep(500);
  }
  got = r.recv_span();
  check(got, EM_DGRAM_SPAN, 9, "postprocess");
  assert_true(got.duration_ns >= 500000);

  assert_int_equal(em_client_record_frame(&c, "camera.rx", UINT64_MAX, 1, UINT64_MAX), 0);
  got = r.recv_span();
  check(got, EM_DGRAM_SPAN, UINT64_MAX, "camera.rx");
  assert_true(got.start_ns == 1 && got.duration_ns == UINT64_MAX);

  assert_int_equal(em_client_heartbeat(&c, "watchdog"), 0);
  got = r.recv_span();
  check(got, EM_DGRAM_HEARTBEAT, 9, "watchdog");
  assert_true(got.duration_ns == 0);
  assert_true(c.sent == 4 && em_client_dropped_total(&c) == 0);
  em_client_close(&c);
}

void cpp_scope_guard_sends_when_left_by_an_exception(void **) {
  Receiver r;
  em_client_t c;
  assert_int_equal(em_client_open(&c, r.path()), 0);
  bool caught = false;
  try {
    ScopedSpan span(&c, "throws");
    throw std::runtime_error("stage failed");
  } catch (const std::runtime_error &) {
    caught = true;
  }
  assert_true(caught);
  check(r.recv_span(), EM_DGRAM_SPAN, 0, "throws");
  em_client_close(&c);
}

void cpp_absent_agent_and_full_queue_never_block(void **) {
  em_client_t absent;
  assert_int_equal(em_client_open(&absent, "/nonexistent/edgemon/spans.sock"), 0);
  for (int i = 0; i < 100; i++) {
    assert_true(em_client_record(&absent, "x", 1, 2) < 0);
  }
  assert_true(absent.dropped[EM_CLIENT_DROP_NO_AGENT] == 100 && absent.sent == 0);
  assert_true(absent.connect_attempts == 1);
  em_client_close(&absent);

  Receiver r;
  em_client_t c;
  assert_int_equal(em_client_open(&c, r.path()), 0);
  const int attempted = 10000;
  for (int i = 0; i < attempted; i++) {
    int rc = em_client_record(&c, "burst", 1, 2);
    assert_true(rc == 0 || rc == -EAGAIN);
  }
  assert_true(c.dropped[EM_CLIENT_DROP_QUEUE_FULL] > 0);
  assert_true(c.sent + em_client_dropped_total(&c) == static_cast<uint64_t>(attempted));
  assert_true(r.drain() == c.sent);
  assert_int_equal(em_client_record(&c, "bad name", 1, 2), -EINVAL);
  assert_true(c.dropped[EM_CLIENT_DROP_INVALID_STAGE] == 1);
  em_client_close(&c);
}

// No CUDA context is current in this thread (nothing here makes one), whether or not a driver is
// installed: the GPU spans send their CPU span only, and say why.
void cpp_gpu_spans_send_their_cpu_span_without_a_context(void **) {
  Receiver r;
  em_client_t c;
  assert_int_equal(em_client_open(&c, r.path()), 0);
  em_client_set_frame(&c, 5);
  em_client_gpu_span_t g = em_client_gpu_span_begin(&c, "infer", nullptr);
  assert_int_equal(em_client_gpu_span_end(&g), 0);
  check(r.recv_span(), EM_DGRAM_SPAN, 5, "infer");
  EM_CLIENT_GPU_SPAN(&c, "post", nullptr) {
    em_client_set_frame(&c, 6);
  }
  check(r.recv_span(), EM_DGRAM_SPAN, 6, "post");
  assert_non_null(c.gpu_off);
  assert_int_equal(em_client_gpu_poll(&c), 0);
  assert_true(em_client_gpu_pending(&c) == 0 && c.gpu_counters[EM_CLIENT_GPU_RECORDED] == 0);
  assert_true(r.drain() == 0);
  em_client_close(&c);
}

} // namespace

int main() {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(cpp_spans_decode_field_by_field),
      cmocka_unit_test(cpp_scope_guard_sends_when_left_by_an_exception),
      cmocka_unit_test(cpp_absent_agent_and_full_queue_never_block),
      cmocka_unit_test(cpp_gpu_spans_send_their_cpu_span_without_a_context),
  };
  return cmocka_run_group_tests(tests, nullptr, nullptr);
}
