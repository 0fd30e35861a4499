/*
 * profile_pprof.h - a stack profile (edgemon/profile.h) as pprof's profile.proto
 * (github.com/google/pprof, proto/profile.proto), uncompressed: what `go tool pprof FILE` and
 * other pprof readers open (gzip is optional for them).
 *
 * The mapping: three sample types, samples/count, cpu/nanoseconds (samples times the period)
 * and off_cpu/nanoseconds; period_type cpu/nanoseconds with period round(1e9 / hz); the
 * default sample type cpu. One Function and one Location per frame of the frame table (ids =
 * index + 1; a Python frame whose module is "file.py:LINE" gets filename file.py and line
 * LINE; a kernel frame without a module the filename "[kernel]"), one Sample per stack with
 * its locations leaf first and a `stage` label when its stage is known. time_nanos is the
 * window's start, duration_nanos its length; the comments carry the trigger, the sampling
 * clock and what was lost, every note, and what the size cap cut.
 *
 * Owns nothing beyond the call: the bytes go into the caller's em_pb_t (host/lib/pb.h).
 */
#ifndef EM_CLI_PROFILE_PPROF_H
#define EM_CLI_PROFILE_PPROF_H

#include <edgemon/profile.h>
#include <pb.h>

/* The period written for hz (ns between samples, rounded), 0 for hz 0. */
uint64_t em_profile_pprof_period_ns(uint32_t hz);

/*
 * Appends the Profile message for `p` to pb (a fresh writer: the message is the whole
 * output). A Function's name is p's frame name, its system_name the same frame's in `system`
 * (the names as sent, when p's were made readable: em_profile_readable), or p's when NULL.
 * Returns 0, -ENOMEM, -EOVERFLOW (past the writer's cap) or -EINVAL.
 */
int em_profile_pprof(em_pb_t *pb, const em_profile_t *p, const em_profile_frame_t *system);

#endif /* EM_CLI_PROFILE_PPROF_H */
