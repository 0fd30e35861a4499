/*
 * decode.c - `edgemon-cli decode`: one CBOR message, or every record of a recording, as JSON
 * (the codec's field names) or as CBOR diagnostic notation (RFC 8949 section 8). A flight
 * recording (kind 5) is read with em_flight_decode() and printed with em_flight_to_json(), a
 * stack profile (kind 6) with em_profile_decode() and em_profile_to_json().
 *
 * The input is a file or standard input. When it starts with the recording magic "EMREC\0" it
 * is a recording (host/lib/recording.h): a named file is streamed record by record through
 * em_rec_reader_new()/em_rec_read(), so its size is not limited; standard input cannot be
 * rewound after the magic was looked at, so it is read into memory (at most STDIN_CAP_BYTES)
 * and walked with em_rec_parse(), after the same header checks em_rec_reader_new() makes.
 * Anything else is one message of at most EM_REC_MAX_PAYLOAD bytes.
 *
 * In a recording, births are fed to a dict.h registry keyed by the device id of the topic
 * (edgemon/v1/<device>/...), so a later data message of the same session prints its values
 * by metric name; a data message whose session's birth was not seen keeps alias numbers.
 *
 * Owns, for the call: the input buffer, one decode scratch buffer of EM_PROTO_SCRATCH_MAX, one
 * JSON buffer grown to the longest line, the registry and the reader. Single-threaded.
 */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include <buf.h>
#include <diag.h>
#include <dict.h>
#include <edgemon/flight.h>
#include <edgemon/json_write.h>
#include <edgemon/profile.h>
#include <edgemon/proto.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <recording.h>

#define CMD "decode"

/* Recordings on standard input are held in memory; a named file is streamed instead. */
#define STDIN_CAP_BYTES (256u * 1024u * 1024u)
/* Bytes read from the input at a time. */
#define READ_CHUNK_BYTES (64u * 1024u)
/* One message's JSON: far above what the largest message (a 1 MiB profile) prints. */
#define JSON_MAX_BYTES (64u * 1024u * 1024u)

/* The recording magic: the first 6 bytes of a recording's header. */
static const uint8_t rec_magic[6] = {'E', 'M', 'R', 'E', 'C', 0x00};

typedef enum { MODE_JSON, MODE_DIAG } decode_mode_t;

/* What one run of the command holds. */
typedef struct {
  decode_mode_t mode;
  const char *name;   /* The input as the messages name it: the path, or "stdin". */
  void *scratch;      /* EM_PROTO_SCRATCH_MAX bytes for em_proto_decode(). */
  em_buf_t json;      /* Line buffer for the JSON printers, written from its start. */
  em_dict_t *dict;    /* Births seen so far in a recording. */
  bool warned_dict;   /* An out-of-memory in the registry was reported once. */
  bool output_failed; /* A write to stdout failed: stop, exit EM_CLI_INPUT. */
} decode_t;

static void usage(FILE *out) {
  fprintf(out,
          "usage: edgemon-cli decode [FILE|-] [--json|--diag]\n"
          "\n"
          "Prints an edgemon message (CBOR, as published on edgemon/v1/<device>/...) or every\n"
          "record of a recording made by `edgemon-cli record`. FILE defaults to '-', standard\n"
          "input. A file starting with \"EMREC\\0\" is a recording; anything else is one\n"
          "message of at most %u bytes.\n"
          "\n"
          "options:\n"
          "  --json   (default) one line of JSON with field names, checked against the schema.\n"
          "           In a recording each record is a line\n"
          "             {\"topic\":T,\"recv_time_ns\":N,\"message\":{...}}\n"
          "           or, for a payload the schema refuses,\n"
          "             {\"topic\":T,\"recv_time_ns\":N,\"error\":\"why\",\"offset\":BYTE}\n"
          "           (BYTE counts from the start of the payload; an empty payload, which\n"
          "           clears a retained message, prints \"message\":null). Data values are\n"
          "           keyed by metric name once the device's birth for that session was seen\n"
          "           earlier in the recording, else by alias number.\n"
          "  --diag   CBOR diagnostic notation (RFC 8949 section 8) of the bytes as they are,\n"
          "           then the schema check. In a recording each record is a line\n"
          "             {\"topic\": T, \"recv_time_ns\": N, \"payload\": <notation>}\n"
          "           with \", \"error\": \"why\", \"offset\": BYTE\" added before the '}' for an\n"
          "           invalid payload (payload as h'..' when it is not well-formed CBOR).\n"
          "  -h, --help  this text.\n"
          "\n"
          "A single invalid message prints 'edgemon-cli decode: FILE: invalid message at byte\n"
          "N: why' on stderr (with --diag, after the notation when the CBOR is well-formed).\n"
          "Recordings on standard input are read into memory (at most %u MiB); name the file\n"
          "to stream a larger one.\n"
          "\n"
          "exit status:\n"
          "  0  every message is valid\n"
          "  1  a message (or a record of the recording) is invalid\n"
          "  2  bad arguments\n"
          "  4  the input cannot be used: missing, unreadable, empty, too large, not a\n"
          "     recording of a supported version, or a truncated or corrupt recording (the\n"
          "     records before the damage are printed first); also when standard output\n"
          "     cannot be written (a closed pipe ends the command quietly)\n",
          EM_REC_MAX_PAYLOAD, STDIN_CAP_BYTES / (1024u * 1024u));
}

/* ---- input -------------------------------------------------------------------------------- */

/*
 * Reads all of f into a malloc'd buffer, at most cap bytes; *too_big is set (and reading
 * stops) when there is more. Returns 0 or a negative errno.
 */
static int read_all(FILE *f, size_t cap, uint8_t **out, size_t *out_len, bool *too_big) {
  *out = NULL;
  *out_len = 0;
  *too_big = false;
  em_buf_t b;
  em_buf_init(&b, cap + 1); /* One byte past cap says that there is more. */
  while (b.len < b.max_bytes) {
    size_t want = b.max_bytes - b.len < READ_CHUNK_BYTES ? b.max_bytes - b.len : READ_CHUNK_BYTES;
    if (em_buf_reserve(&b, want) != 0) {
      em_buf_free(&b);
      return -ENOMEM;
    }
    errno = 0;
    size_t got = fread(em_buf_tail(&b), 1, want, f);
    em_buf_commit(&b, got);
    if (got == 0) {
      if (ferror(f)) {
        int err = errno ? errno : EIO;
        em_buf_free(&b);
        return -err;
      }
      break;
    }
  }
  *too_big = b.len > cap;
  *out = (uint8_t *)em_buf_take(&b, out_len);
  return 0;
}

static bool is_recording(const uint8_t *buf, size_t len) {
  return len >= sizeof(rec_magic) && memcmp(buf, rec_magic, sizeof(rec_magic)) == 0;
}

/* ---- output ------------------------------------------------------------------------------- */

/* Ends a line on stdout and notes a failed write (EPIPE included: SIGPIPE is ignored). */
static void end_line(decode_t *dc) {
  fputc('\n', stdout);
  if (fflush(stdout) != 0 || ferror(stdout)) {
    if (!dc->output_failed && errno != EPIPE) {
      em_cli_error(CMD, "cannot write to standard output: %s", strerror(errno));
    }
    dc->output_failed = true;
  }
}

/* Writes s[0..n) as a JSON string; bytes that are not UTF-8 become U+FFFD. */
static void put_json_string(const char *str, size_t n) {
  fputc('"', stdout);
  em_json_escape(str, n, EM_JSON_ESC_DEL | EM_JSON_UTF8_ESCAPE, em_json_file_sink, stdout);
  fputc('"', stdout);
}

/* Makes dc->json hold at least need bytes from its start (a printer's length and its NUL).
 * Returns 0, or -ENOMEM (also past JSON_MAX_BYTES). */
static int json_room(decode_t *dc, size_t need) {
  em_buf_reset(&dc->json);
  return em_buf_reserve(&dc->json, need - 1) == 0 ? 0 : -ENOMEM;
}

/* The message as one line of JSON in dc->json (grown as needed). Returns 0 or -ENOMEM. */
static int to_json(decode_t *dc, const em_msg_t *msg, em_device_t *names, size_t *out_len) {
  em_proto_alias_name_fn fn = names ? em_dict_alias_name : NULL;
  for (;;) {
    int rc = em_proto_to_json_named(msg, fn, names, dc->json.data, dc->json.cap, out_len);
    if (rc != EM_PROTO_ENOSPACE) {
      return rc;
    }
    if (json_room(dc, *out_len + 1) != 0) {
      return -ENOMEM;
    }
  }
}

/* A flight recording (kind 5: edgemon/flight.h) or a stack profile (kind 6: edgemon/profile.h),
 * which em_proto_decode() refuses with EKIND, as one line of JSON in dc->json (grown as
 * needed). Returns 0, or the decoder's code (*off the byte at fault) or -ENOMEM. */
static int forensics_to_json(decode_t *dc, const uint8_t *buf, size_t len, size_t *off,
                             size_t *out_len) {
  size_t f_len = em_flight_scratch_bytes(len);
  size_t p_len = em_profile_scratch_bytes(len);
  size_t scratch_len = f_len > p_len ? f_len : p_len;
  void *scratch = malloc(scratch_len);
  em_flight_t f;
  em_profile_t p;
  int rc = scratch ? em_flight_decode(buf, len, &f, scratch, scratch_len, off) : -ENOMEM;
  bool profile = false;
  if (rc == EM_PROTO_EKIND || rc == EM_PROTO_ETOOBIG) {
    /* Each kind has its own cap: past the recording's, the bytes may still be a profile. */
    size_t flight_off = *off;
    int prc = em_profile_decode(buf, len, &p, scratch, scratch_len, off);
    if (prc == EM_PROTO_EKIND && rc == EM_PROTO_ETOOBIG) {
      *off = flight_off; /* Neither: too large for a recording, and not a profile. */
    } else {
      rc = prc;
      profile = true;
    }
  }
  while (rc == 0) {
    int jrc = profile ? em_profile_to_json(&p, dc->json.data, dc->json.cap, out_len)
                      : em_flight_to_json(&f, dc->json.data, dc->json.cap, out_len);
    if (jrc != EM_PROTO_ENOSPACE) {
      break;
    }
    if (json_room(dc, *out_len + 1) != 0) {
      rc = -ENOMEM;
      break;
    }
  }
  free(scratch);
  return rc;
}

/*
 * Decodes one payload of any kind: a telemetry or command message into *msg, or a flight
 * recording or stack profile as JSON in dc->json (*forensic set, *json_len its length). Each
 * kind is held to its own cap: a payload over EM_PROTO_MAX_MESSAGE_BYTES can only be a
 * recording or a profile (up to EM_FLIGHT_MAX_BYTES, EM_PROFILE_MAX_BYTES), so it goes to
 * their decoders, and when it is neither, the answer is ETOOBIG. Returns 0 or the decoder's
 * code (*off the byte at fault).
 */
static int decode_any(decode_t *dc, const uint8_t *buf, size_t len, em_msg_t *msg, size_t *off,
                      size_t *json_len, bool *forensic) {
  *forensic = false;
  *json_len = 0;
  *off = 0;
  int rc = EM_PROTO_EKIND;
  bool message_sized = len <= EM_PROTO_MAX_MESSAGE_BYTES;
  if (message_sized) {
    rc = em_proto_decode(buf, len, msg, dc->scratch, EM_PROTO_SCRATCH_MAX, off);
  }
  if (rc != EM_PROTO_EKIND) {
    return rc;
  }
  rc = forensics_to_json(dc, buf, len, off, json_len);
  if (rc == EM_PROTO_EKIND && !message_sized) {
    *off = 0;
    return EM_PROTO_ETOOBIG; /* Too large for a message, and neither a recording nor a profile. */
  }
  *forensic = rc == 0;
  return rc;
}

/* Writes the diagnostic notation of buf[0..len) to stdout. Returns 0 (printed) or the
 * em_diag_print() code (nothing printed). */
static int put_diag(const uint8_t *buf, size_t len) {
  char *text = NULL;
  size_t text_len = 0;
  FILE *mem = open_memstream(&text, &text_len);
  if (!mem) {
    return -errno;
  }
  int rc = em_diag_print(buf, len, mem, NULL);
  if (fclose(mem) != 0 && rc == 0) {
    rc = -ENOMEM;
  }
  if (rc == 0) {
    fwrite(text, 1, text_len, stdout);
  }
  free(text);
  return rc;
}

/* ---- one message -------------------------------------------------------------------------- */

static int decode_message(decode_t *dc, const uint8_t *buf, size_t len) {
  if (dc->mode == MODE_DIAG && put_diag(buf, len) == 0) {
    end_line(dc);
  }
  em_msg_t msg;
  size_t off = 0;
  size_t n = 0;
  bool flight = false;
  int rc = decode_any(dc, buf, len, &msg, &off, &n, &flight);
  if (rc != 0) {
    em_cli_error(CMD, "%s: invalid message at byte %zu: %s", dc->name, off, em_proto_strerror(rc));
    return dc->output_failed ? EM_CLI_INPUT : EM_CLI_FAIL;
  }
  if (dc->mode == MODE_JSON) {
    rc = flight ? 0 : to_json(dc, &msg, NULL, &n);
    if (rc != 0) {
      em_cli_error(CMD, "%s: %s", dc->name, em_proto_strerror(rc));
      return EM_CLI_INPUT;
    }
    fwrite(dc->json.data, 1, n, stdout);
    end_line(dc);
  }
  return dc->output_failed ? EM_CLI_INPUT : EM_CLI_OK;
}

/* ---- recordings --------------------------------------------------------------------------- */

/* Where the records come from: a streaming reader (named file) or memory (standard input). */
typedef struct {
  em_rec_reader_t *reader;
  const uint8_t *mem;
  size_t mem_len;
  size_t pos;      /* mem: offset of the next record. */
  uint64_t offset; /* Offset of the record returned last or failed on. */
} source_t;

/* Next record: 1, 0 at the end, or a negative EM_REC_E* / errno code (offset in s->offset). */
static int source_next(source_t *s, em_rec_entry_t *e) {
  if (s->reader) {
    int rc = em_rec_read(s->reader, e);
    s->offset = em_rec_offset(s->reader);
    return rc;
  }
  s->offset = s->pos;
  if (s->pos == s->mem_len) {
    return 0;
  }
  long n = em_rec_parse(s->mem + s->pos, s->mem_len - s->pos, e);
  if (n < 0) {
    return (int)n;
  }
  s->pos += (size_t)n;
  return 1;
}

/* The device id of an edgemon/v1/<device>/... topic into id[EM_PROTO_MAX_NAME_BYTES + 1];
 * false when the topic has no such segment. */
static bool topic_device(const em_rec_entry_t *e, char *id) {
  static const char prefix[] = "edgemon/v1/";
  size_t plen = sizeof(prefix) - 1;
  if (e->topic_len <= plen || memcmp(e->topic, prefix, plen) != 0) {
    return false;
  }
  const char *start = e->topic + plen;
  size_t rest = e->topic_len - plen;
  const char *slash = memchr(start, '/', rest);
  size_t n = slash ? (size_t)(slash - start) : rest;
  if (n == 0 || n > EM_PROTO_MAX_NAME_BYTES || memchr(start, '\0', n)) {
    return false;
  }
  memcpy(id, start, n);
  id[n] = '\0';
  return true;
}

/* Feeds a valid message to the registry; returns the device whose birth names the message's
 * data values, or NULL. */
static em_device_t *learn(decode_t *dc, const em_rec_entry_t *e, const em_msg_t *msg) {
  char id[EM_PROTO_MAX_NAME_BYTES + 1];
  if (msg->kind == EM_MSG_CMD || !topic_device(e, id)) {
    return NULL;
  }
  em_device_t *dev = em_dict_device(dc->dict, id, true);
  if (!dev || em_dict_update(dev, msg) != 0) {
    if (!dc->warned_dict) {
      em_cli_error(CMD, "out of memory for the device registry; values keep alias numbers");
      dc->warned_dict = true;
    }
    return NULL;
  }
  if (msg->kind == EM_MSG_DATA && em_dict_knows_session(dev, msg->u.data.head.session)) {
    return dev;
  }
  return NULL;
}

/* Prints one record. Returns 0 for a valid one, EM_CLI_FAIL for an invalid payload, or
 * EM_CLI_INPUT when nothing more can be done (out of memory). */
static int decode_record(decode_t *dc, const em_rec_entry_t *e) {
  em_msg_t msg;
  size_t off = 0;
  int rc = 0;
  bool empty = e->payload_len == 0;
  size_t flight_len = 0;
  bool flight = false;
  if (!empty) {
    rc = decode_any(dc, e->payload, e->payload_len, &msg, &off, &flight_len, &flight);
  }
  em_device_t *names = !empty && rc == 0 && !flight ? learn(dc, e, &msg) : NULL;

  if (dc->mode == MODE_JSON) {
    fputs("{\"topic\":", stdout);
    put_json_string(e->topic, e->topic_len);
    printf(",\"recv_time_ns\":%" PRIu64 ",", e->recv_time_ns);
    if (empty) {
      fputs("\"message\":null}", stdout);
    } else if (rc != 0) {
      fputs("\"error\":", stdout);
      const char *why = em_proto_strerror(rc);
      put_json_string(why, strlen(why));
      printf(",\"offset\":%zu}", off);
    } else {
      size_t n = flight_len;
      int jrc = flight ? 0 : to_json(dc, &msg, names, &n);
      if (jrc != 0) {
        fputs("\"message\":null}", stdout);
        end_line(dc);
        em_cli_error(CMD, "%s: %s", dc->name, em_proto_strerror(jrc));
        return EM_CLI_INPUT;
      }
      fputs("\"message\":", stdout);
      fwrite(dc->json.data, 1, n, stdout);
      fputc('}', stdout);
    }
  } else {
    fputs("{\"topic\": ", stdout);
    put_json_string(e->topic, e->topic_len);
    printf(", \"recv_time_ns\": %" PRIu64 ", \"payload\": ", e->recv_time_ns);
    if (put_diag(e->payload, e->payload_len) != 0) {
      fputs("h'", stdout);
      for (size_t i = 0; i < e->payload_len; i++) {
        printf("%02x", e->payload[i]);
      }
      fputc('\'', stdout);
    }
    if (!empty && rc != 0) {
      fputs(", \"error\": ", stdout);
      const char *why = em_proto_strerror(rc);
      put_json_string(why, strlen(why));
      printf(", \"offset\": %zu", off);
    }
    fputc('}', stdout);
  }
  end_line(dc);
  return !empty && rc != 0 ? EM_CLI_FAIL : EM_CLI_OK;
}

/* Decodes every record; src is ready at the first record. */
static int decode_recording(decode_t *dc, source_t *src) {
  int rc = em_dict_new(&dc->dict);
  if (rc != 0) {
    em_cli_error(CMD, "%s", strerror(-rc));
    return EM_CLI_INPUT;
  }
  int status = EM_CLI_OK;
  for (;;) {
    em_rec_entry_t e;
    rc = source_next(src, &e);
    if (rc == 0) {
      break;
    }
    if (rc < 0) {
      em_cli_error(CMD, "%s: bad recording at byte %" PRIu64 ": %s", dc->name, src->offset,
                   em_rec_strerror(rc));
      return EM_CLI_INPUT;
    }
    int one = decode_record(dc, &e);
    if (dc->output_failed || one == EM_CLI_INPUT) {
      return EM_CLI_INPUT;
    }
    if (one != EM_CLI_OK) {
      status = one;
    }
  }
  if (status == EM_CLI_FAIL) {
    em_cli_error(CMD, "%s: some records hold invalid messages", dc->name);
  }
  return status;
}

/* A recording on standard input, already in memory: the header checks of em_rec_reader_new(),
 * then the records. */
static int decode_recording_mem(decode_t *dc, const uint8_t *buf, size_t len) {
  if (len < EM_REC_HEADER_SIZE) {
    em_cli_error(CMD, "%s: %s", dc->name, em_rec_strerror(EM_REC_EMAGIC));
    return EM_CLI_INPUT;
  }
  if (buf[6] != EM_REC_VERSION || buf[7] != 0) {
    em_cli_error(CMD, "%s: %s", dc->name, em_rec_strerror(EM_REC_EVERSION));
    return EM_CLI_INPUT;
  }
  source_t src = {.mem = buf, .mem_len = len, .pos = EM_REC_HEADER_SIZE};
  return decode_recording(dc, &src);
}

static int decode_recording_file(decode_t *dc, const char *path) {
  source_t src = {0};
  int rc = em_rec_reader_new(&src.reader, path);
  if (rc != 0) {
    em_cli_error(CMD, "%s: %s", dc->name, em_rec_strerror(rc));
    return EM_CLI_INPUT;
  }
  int status = decode_recording(dc, &src);
  em_rec_reader_free(src.reader);
  return status;
}

/* ---- entry -------------------------------------------------------------------------------- */

int em_cli_decode(int argc, char **argv) {
  static const struct option opts[] = {
      {"json", no_argument, NULL, 'j'},
      {"diag", no_argument, NULL, 'd'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  bool json = false, diag = false;
  optind = 1;
  opterr = 0;
  for (;;) {
    /* GNU getopt_long permutes, so options may also follow the file ("decode m.cbor --diag"). */
    int c = getopt_long(argc, argv, "h", opts, NULL);
    if (c == -1) {
      break;
    }
    switch (c) {
    case 'j':
      json = true;
      break;
    case 'd':
      diag = true;
      break;
    case 'h':
      usage(stdout);
      return EM_CLI_OK;
    default:
      if (optopt != 0) {
        return em_cli_usage_error(CMD, "unknown option '-%c'", optopt);
      }
      return em_cli_usage_error(CMD, "unknown option '%s'", argv[optind - 1]);
    }
  }
  if (argc - optind > 1) {
    return em_cli_usage_error(CMD, "one input at a time ('%s' and '%s')", argv[optind],
                              argv[optind + 1]);
  }
  const char *path = optind < argc ? argv[optind] : NULL;
  if (json && diag) {
    return em_cli_usage_error(CMD, "--json and --diag exclude each other");
  }
  if (!path) {
    path = "-";
  }
  bool from_stdin = strcmp(path, "-") == 0;

  decode_t dc = {.mode = diag ? MODE_DIAG : MODE_JSON, .name = from_stdin ? "stdin" : path};
  uint8_t *buf = NULL;
  size_t len = 0;
  int status = EM_CLI_INPUT;

  FILE *f = stdin;
  if (!from_stdin) {
    errno = 0;
    f = fopen(path, "rb");
    if (!f) {
      em_cli_error(CMD, "%s: %s", path, strerror(errno));
      return EM_CLI_INPUT;
    }
  }
  bool too_big = false;
  int rc = read_all(f, from_stdin ? STDIN_CAP_BYTES : EM_REC_MAX_PAYLOAD, &buf, &len, &too_big);
  if (!from_stdin) {
    fclose(f);
  }
  if (rc != 0) {
    em_cli_error(CMD, "%s: cannot read: %s", dc.name, strerror(-rc));
    goto done;
  }
  if (len == 0) {
    em_cli_error(CMD, "%s: empty input", dc.name);
    goto done;
  }

  dc.scratch = malloc(EM_PROTO_SCRATCH_MAX);
  em_buf_init(&dc.json, JSON_MAX_BYTES);
  if (!dc.scratch || json_room(&dc, READ_CHUNK_BYTES) != 0) {
    em_cli_error(CMD, "%s", strerror(ENOMEM));
    goto done;
  }

  if (is_recording(buf, len)) {
    if (!from_stdin) {
      /* Stream it: a recording may be far larger than what was read. */
      free(buf);
      buf = NULL;
      status = decode_recording_file(&dc, path);
    } else if (too_big) {
      em_cli_error(CMD, "%s: recording larger than %u MiB on standard input; name the file",
                   dc.name, STDIN_CAP_BYTES / (1024u * 1024u));
    } else {
      status = decode_recording_mem(&dc, buf, len);
    }
    goto done;
  }
  if (too_big || len > EM_REC_MAX_PAYLOAD) {
    em_cli_error(CMD, "%s: larger than %u bytes, too large for one message", dc.name,
                 EM_REC_MAX_PAYLOAD);
    goto done;
  }
  status = decode_message(&dc, buf, len);

done:
  em_dict_free(dc.dict);
  em_buf_free(&dc.json);
  free(dc.scratch);
  free(buf);
  return status;
}
