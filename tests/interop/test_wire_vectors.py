"""Interop test of the board-local wire records (proto/WIRE.md) against the golden vectors.

This module holds an independent decoder (and encoder) of the span datagram, the level push
datagram, the state page, and span ring v2 (ring header and slots, a reader draining it, the
register / hard miss / ack datagrams), the deadline page, the model datagram v2, the profile request
page v1 and the Python stacks datagram v2, written from proto/WIRE.md with
the standard library's struct module only. It checks that every proto/vectors/wire/<name>.bin decodes to its <name>.json,
that encoding the JSON gives back the same bytes, and that truncated or garbled copies are
refused with the error WIRE.md names, in the documented order.

Run with: /usr/bin/python3 -m pytest -q tests/interop/test_wire_vectors.py
"""

import json
import math
import mmap
import re
import shutil
import struct
from pathlib import Path

import pytest

VECTORS = Path(__file__).resolve().parents[2] / 'proto' / 'vectors' / 'wire'

SPAN = struct.Struct('<2sBBIQQQ32s')
BODY = struct.Struct('<BBHIQQdd32s32s136s')
PUSH_HEAD = struct.Struct('<2sBBIQ')
PAGE_HEAD = struct.Struct('<4sHHII')
SEQ = struct.Struct('<I')

SPAN_BYTES = 64
PUSH_BYTES = 256
PAGE_BYTES = 256
BODY_OFFSET = 16
PAGE_READ_TRIES = 64

KINDS = {1: 'span', 2: 'heartbeat', 3: 'subscribe', 4: 'unsubscribe'}
KIND_CODES = {name: code for code, name in KINDS.items()}
LEVELS = ['NOMINAL', 'WARN', 'DEGRADED', 'CRITICAL']
STAGE_RE = re.compile(rb'[A-Za-z0-9_.:-]{1,31}')
PRINTABLE_RE = re.compile(rb'[\x20-\x7e]*')

REQUIRED = {'span', 'heartbeat', 'subscribe', 'span_max_stage', 'push', 'page', 'ring_header',
            'ring_3_slots', 'ring_register', 'ring_hard_miss', 'ring_ack', 'deadline_page',
            'model', 'model_no_labels', 'model_max_fields', 'profile_page', 'pystacks'}

# Model datagram v2 (WIRE.md "Model identity"): header, name, version, 8 label slots, reserved.
MODEL_HEAD = struct.Struct('<2sBBIIB3s64s32s')
MODEL_LABEL = struct.Struct('<16s32s')
MODEL_BYTES = 512
MODEL_MAX_LABELS = 8
MODEL_LABELS_AT = 112
MODEL_RESERVED_AT = 496
LABEL_KEY_RE = re.compile(rb'[A-Za-z_][A-Za-z0-9_]{0,14}')
NAME_RE = re.compile(rb'[\x20-\x7e]+')

RING_HEAD = struct.Struct('<4sHHHHIIIQQQI76s')
RING_SLOT = struct.Struct('<IB3sQQQ32s')
RING_DGRAM = struct.Struct('<2sBBIQQQ32s')
DEADLINE_HEAD = struct.Struct('<4sHHIII44s')
DEADLINE_ENTRY = struct.Struct('<32sQ')

RING_HEADER_BYTES = 128
RING_SLOT_BYTES = 64
RING_MIN_SLOTS = 64
RING_MAX_SLOTS = 65536
RING_BATCH = 64
RING_STATES = {1: 'open', 2: 'closed'}
RING_STATE_CODES = {name: code for code, name in RING_STATES.items()}
RING_DGRAM_KINDS = {5: 'ring_register', 6: 'hard_miss', 17: 'ring_ack'}
RING_DGRAM_CODES = {name: code for code, name in RING_DGRAM_KINDS.items()}
DEADLINE_PAGE_BYTES = 2624
DEADLINE_MAX_ENTRIES = 64


class WireError(Exception):
    """A record refused by the decoder; .code is the WIRE.md name (ESIZE, EMAGIC, ...)."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


# ---- Decoder, from WIRE.md ----


def text_field(raw, rule):
    """Validates a NUL-terminated, NUL-padded field; returns its text as str."""
    nul = raw.find(b'\0')
    if nul < 0:
        raise WireError('ESTRING')
    text, padding = raw[:nul], raw[nul:]
    if padding.count(0) != len(padding):
        raise WireError('ESTRING')
    if rule == 'stage':
        ok = STAGE_RE.fullmatch(text) is not None
    elif rule == 'stage_or_empty':
        ok = text == b'' or STAGE_RE.fullmatch(text) is not None
    else:
        ok = PRINTABLE_RE.fullmatch(text) is not None
    if not ok:
        raise WireError('ESTRING')
    return text.decode('ascii')


def check_head(magic, want_magic, version, want_version, kind=None, kinds=None):
    """The checks every record of WIRE.md opens with, in its order: magic, version, kind."""
    if magic != want_magic:
        raise WireError('EMAGIC')
    if version != want_version:
        raise WireError('EVERSION')
    if kinds is not None and kind not in kinds:
        raise WireError('EKIND')


def decode_span(buf):
    if len(buf) != SPAN_BYTES:
        raise WireError('ESIZE')
    magic, version, kind, pid, frame_id, start_ns, duration_ns, stage = SPAN.unpack(buf)
    check_head(magic, b'EM', version, 1, kind, KINDS)
    if kind in (1, 2):
        name = text_field(stage, 'stage')
    else:
        if stage != bytes(32):
            raise WireError('ESTRING')
        name = ''
    return {'kind': KINDS[kind], 'pid': pid, 'frame_id': frame_id, 'start_ns': start_ns,
            'duration_ns': duration_ns, 'stage': name}


def decode_body(body):
    assert len(body) == BODY.size
    (level, prev_level, reserved, changes, since_mono_ns, since_wall_ns, value, bound, rule,
     stage, reason) = BODY.unpack(body)
    if level > 3 or prev_level > 3 or reserved != 0:
        raise WireError('ERANGE')
    return {
        'level': LEVELS[level],
        'prev_level': LEVELS[prev_level],
        'changes': changes,
        'since_mono_ns': since_mono_ns,
        'since_wall_ns': since_wall_ns,
        'value': None if math.isnan(value) else value,
        'bound': None if math.isnan(bound) else bound,
        'rule': text_field(rule, 'printable'),
        'stage': text_field(stage, 'stage_or_empty'),
        'reason': text_field(reason, 'printable'),
    }


def decode_push(buf):
    if len(buf) != PUSH_BYTES:
        raise WireError('ESIZE')
    magic, version, kind, agent_pid, reserved = PUSH_HEAD.unpack_from(buf, 0)
    check_head(magic, b'EM', version, 1, kind, (16,))
    if reserved != 0:
        raise WireError('ERANGE')
    rec = decode_body(bytes(buf[BODY_OFFSET:]))
    rec.update(kind='level_push', agent_pid=agent_pid)
    return rec


def check_page_header(page):
    magic, version, size, _seq, agent_pid = PAGE_HEAD.unpack_from(page, 0)
    check_head(magic, b'EMST', version, 1)
    if size != PAGE_BYTES:
        raise WireError('ESIZE')
    return agent_pid


def read_page(page):
    """The seqlock reader of WIRE.md on a buffer or mmap; returns the record with seq."""
    if len(page) != PAGE_BYTES:
        raise WireError('ESIZE')
    agent_pid = check_page_header(page)
    for _ in range(PAGE_READ_TRIES):
        (s1,) = SEQ.unpack_from(page, 8)
        if s1 & 1:
            continue
        body = bytes(page[BODY_OFFSET:PAGE_BYTES])
        (s2,) = SEQ.unpack_from(page, 8)
        if s1 != s2:
            continue
        rec = decode_body(body)
        rec.update(kind='state_page', agent_pid=agent_pid, seq=s1)
        return rec
    raise WireError('EBUSY')


# ---- Span ring v2 and the deadline page, from WIRE.md ----


def ring_bytes(slot_count):
    return RING_HEADER_BYTES + slot_count * RING_SLOT_BYTES


def decode_ring_header(buf, ring_len=None):
    """The header's checks in WIRE.md's order; ring_len: the whole ring's length, if known."""
    if len(buf) < RING_HEADER_BYTES or (ring_len is None and len(buf) != RING_HEADER_BYTES):
        raise WireError('ESIZE')
    (magic, version, header_size, slot_size, reserved, slot_count, pid, tid, start_time, head,
     lost, state, tail) = RING_HEAD.unpack_from(buf, 0)
    check_head(magic, b'EMRG', version, 2)
    if header_size != RING_HEADER_BYTES or slot_size != RING_SLOT_BYTES:
        raise WireError('ESIZE')
    if not RING_MIN_SLOTS <= slot_count <= RING_MAX_SLOTS or slot_count & (slot_count - 1):
        raise WireError('ERANGE')
    if ring_len is not None and ring_len != ring_bytes(slot_count):
        raise WireError('ESIZE')
    if reserved != 0 or tail != bytes(len(tail)) or state not in RING_STATES:
        raise WireError('ERANGE')
    return {'kind': 'ring_header', 'slot_count': slot_count, 'pid': pid, 'tid': tid,
            'start_time': start_time, 'head': head, 'lost': lost, 'state': RING_STATES[state]}


def decode_slot(raw, position):
    """A slot copy valid for `position`, decoded; None when WIRE.md says it is not valid."""
    seq, kind, reserved, frame_id, start_ns, duration_ns, stage = RING_SLOT.unpack(raw)
    if seq != (position + 1) % 2**32 or kind not in (1, 2) or reserved != bytes(3):
        return None
    try:
        name = text_field(stage, 'stage')
    except WireError:
        return None
    return {'position': position, 'seq': seq, 'kind': KINDS[kind], 'frame_id': frame_id,
            'start_ns': start_ns, 'duration_ns': duration_ns, 'stage': name}


def slot_offset(slot_count, position):
    return RING_HEADER_BYTES + (position % slot_count) * RING_SLOT_BYTES


def decode_ring(buf):
    """A whole ring: the header, and every position of the last lap below head, which must
    all be valid slots."""
    if len(buf) < RING_HEADER_BYTES:
        raise WireError('ESIZE')
    ring = decode_ring_header(bytes(buf[:RING_HEADER_BYTES]), len(buf))
    n, head = ring['slot_count'], ring['head']
    slots = []
    for q in range(max(0, head - n), head):
        off = slot_offset(n, q)
        slot = decode_slot(bytes(buf[off:off + RING_SLOT_BYTES]), q)
        if slot is None:
            raise WireError('EBADSLOT')
        slots.append(slot)
    ring.update(kind='ring', slots=slots)
    return ring


class RingReader:
    """WIRE.md's reader: next, seen and the counts, drained over a buffer or mmap."""

    def __init__(self, slot_count, start):
        self.n = slot_count
        self.next = self.seen = start
        self.folded = []
        self.overwritten = self.bad_slot = self.bad_head = 0

    def drain(self, mem, final):
        (h,) = struct.unpack_from('<Q', mem, 32)
        if h < self.seen or h - self.seen > 2**32:
            self.bad_head += 1
            self.next = self.seen = h
            return
        limit = h if final else self.seen
        if limit - self.next > self.n:
            self.overwritten += limit - self.n - self.next
            self.next = limit - self.n
        while self.next < limit:
            batch = range(self.next, min(limit, self.next + RING_BATCH))
            copies = [bytes(mem[slot_offset(self.n, q):slot_offset(self.n, q) + RING_SLOT_BYTES])
                      for q in batch]
            (h2,) = struct.unpack_from('<Q', mem, 32)
            for q, raw in zip(batch, copies):
                slot = decode_slot(raw, q)
                if not final and q + self.n <= h2 + 1:
                    self.overwritten += 1
                elif slot is None:
                    self.bad_slot += 1
                else:
                    self.folded.append(slot)
            self.next = batch[-1] + 1
        self.seen = h


def decode_ring_dgram(buf):
    if len(buf) != SPAN_BYTES:
        raise WireError('ESIZE')
    magic, version, kind, pid, a, b, c, stage = RING_DGRAM.unpack(buf)
    check_head(magic, b'EM', version, 2, kind, RING_DGRAM_KINDS)
    d = {'kind': RING_DGRAM_KINDS[kind], 'pid': pid}
    if kind == 6:
        d.update(frame_id=a, start_ns=b, duration_ns=c, stage=text_field(stage, 'stage'))
        return d
    if stage != bytes(32):
        raise WireError('ERANGE')
    d['start'] = a
    if kind == 5:
        if b != 0 or c != 0:
            raise WireError('ERANGE')
    else:
        d.update(status=b - 2**64 if b >= 2**63 else b, ring_id=c)
    return d


def read_deadline_page(page):
    """The seqlock reader of WIRE.md on a buffer or mmap; returns the entries with seq."""
    if len(page) != DEADLINE_PAGE_BYTES:
        raise WireError('ESIZE')
    magic, version, _count, _seq, agent_pid, ring_slots, reserved = DEADLINE_HEAD.unpack_from(
        page, 0)
    check_head(magic, b'EMDL', version, 1)
    if reserved != bytes(len(reserved)):
        raise WireError('ERANGE')
    for _ in range(PAGE_READ_TRIES):
        (s1,) = SEQ.unpack_from(page, 8)
        if s1 & 1:
            continue
        (count,) = struct.unpack_from('<H', page, 6)
        body = bytes(page[64:DEADLINE_PAGE_BYTES])
        (s2,) = SEQ.unpack_from(page, 8)
        if s1 != s2:
            continue
        if count > DEADLINE_MAX_ENTRIES:
            raise WireError('ERANGE')
        entries = []
        for i in range(count):
            stage, deadline_ns = DEADLINE_ENTRY.unpack_from(body, 40 * i)
            entries.append({'stage': text_field(stage, 'stage'), 'deadline_ns': deadline_ns})
        return {'kind': 'deadline_page', 'seq': s1, 'agent_pid': agent_pid,
                'ring_slots': ring_slots, 'entries': entries}
    raise WireError('EBUSY')


def model_text(raw):
    """A model datagram text field: NUL inside, zero padding (ESTRING); its bytes."""
    nul = raw.find(b'\0')
    if nul < 0 or raw[nul:].count(0) != len(raw) - nul:
        raise WireError('ESTRING')
    return raw[:nul]


def decode_model(buf):
    if len(buf) != MODEL_BYTES:
        raise WireError('ESIZE')
    magic, version, kind, pid, generation, n, reserved, name, ver = MODEL_HEAD.unpack_from(buf)
    check_head(magic, b'EM', version, 2, kind, (7,))
    if n > MODEL_MAX_LABELS:
        raise WireError('ELIMIT')
    if reserved != bytes(3) or any(buf[MODEL_LABELS_AT + 48 * n:]):
        raise WireError('ERANGE')
    texts = [model_text(name), model_text(ver)]
    for i in range(n):
        key, value = MODEL_LABEL.unpack_from(buf, MODEL_LABELS_AT + 48 * i)
        texts += [model_text(key), model_text(value)]
    # The schema's rules (em_proto_model_check): name 1..63, version and values 1..31
    # printable, keys Prometheus label names of 1..15 bytes not starting with "__".
    for i, text in enumerate(texts):
        is_key = i >= 2 and i % 2 == 0
        ok = (LABEL_KEY_RE.fullmatch(text) is not None and not text.startswith(b'__')
              if is_key else NAME_RE.fullmatch(text) is not None)
        if not ok:
            raise WireError('ESTRING')
    keys = texts[2::2]
    for a, b in zip(keys, keys[1:]):
        if a >= b:
            raise WireError('EDUPLICATE' if a == b else 'EINVAL')
    labels = [[k.decode('ascii'), v.decode('ascii')] for k, v in zip(keys, texts[3::2])]
    return {'kind': 'model', 'pid': pid, 'generation': generation,
            'name': texts[0].decode('ascii'), 'version': texts[1].decode('ascii'),
            'labels': labels}


def encode_model(d):
    buf = bytearray(MODEL_BYTES)
    MODEL_HEAD.pack_into(buf, 0, b'EM', 2, 7, d['pid'], d['generation'], len(d['labels']),
                         b'', d['name'].encode('ascii'), d['version'].encode('ascii'))
    for i, (key, value) in enumerate(d['labels']):
        MODEL_LABEL.pack_into(buf, MODEL_LABELS_AT + 48 * i, key.encode('ascii'),
                              value.encode('ascii'))
    return bytes(buf)


# ---- Profile request page v1 and Python stacks datagram v2, from WIRE.md ----

PROFILE_PAGE = struct.Struct('<4sHHIIQQ32s')
PYSTACKS_HEAD = struct.Struct('<2sBBIIIHHI8s')
PYSAMPLE_HEAD = struct.Struct('<IQH')
PYSTACKS_MAX_BYTES = 65507
PYSTACKS_MAX_STRINGS = 4096
PYSTACKS_MAX_DEPTH = 256


def decode_profile_page(buf):
    if len(buf) != PROFILE_PAGE.size:
        raise WireError('ESIZE')
    magic, version, size, window, hz, start, end, reserved = PROFILE_PAGE.unpack(buf)
    check_head(magic, b'EMPR', version, 1)
    if size != 64 or not 1 <= hz <= 1000 or end < start or any(reserved):
        raise WireError('ERANGE')
    return {'kind': 'profile_page', 'window': window, 'hz': hz, 'start_ns': start,
            'end_ns': end}


def encode_profile_page(d):
    return PROFILE_PAGE.pack(b'EMPR', 1, 64, d['window'], d['hz'], d['start_ns'], d['end_ns'],
                             b'')


def frame_text(raw):
    """1..255 bytes of UTF-8 with no control character (below 0x20, or 0x7f): ESTRING."""
    try:
        text = raw.decode('utf-8')
    except UnicodeDecodeError:
        raise WireError('ESTRING') from None
    if not text or any(ord(c) < 0x20 or ord(c) == 0x7f for c in text):
        raise WireError('ESTRING')
    return text


def decode_pystacks(buf):
    if not PYSTACKS_HEAD.size <= len(buf) <= PYSTACKS_MAX_BYTES:
        raise WireError('ESIZE')
    (magic, version, kind, pid, window, cut, n_strings, n_samples, str_bytes,
     reserved) = PYSTACKS_HEAD.unpack_from(buf)
    check_head(magic, b'EM', version, 2, kind, (8,))
    if any(reserved):
        raise WireError('ERANGE')
    if n_strings > PYSTACKS_MAX_STRINGS:
        raise WireError('ELIMIT')
    if str_bytes > len(buf) - PYSTACKS_HEAD.size:
        raise WireError('ESIZE')
    end = PYSTACKS_HEAD.size + str_bytes
    off = PYSTACKS_HEAD.size
    strings = []
    for _ in range(n_strings):
        if off >= end or buf[off] > end - off - 1:
            raise WireError('ESIZE')
        strings.append(frame_text(bytes(buf[off + 1:off + 1 + buf[off]])))
        off += 1 + buf[off]
    if off != end:
        raise WireError('ESIZE')
    samples = []
    for _ in range(n_samples):
        if len(buf) - off < PYSAMPLE_HEAD.size:
            raise WireError('ESIZE')
        tid, time_ns, depth = PYSAMPLE_HEAD.unpack_from(buf, off)
        if not 1 <= depth <= PYSTACKS_MAX_DEPTH:
            raise WireError('ERANGE')
        off += PYSAMPLE_HEAD.size
        if (len(buf) - off) // 2 < depth:
            raise WireError('ESIZE')
        frames = list(struct.unpack_from(f'<{depth}H', buf, off))
        off += 2 * depth
        if any(f >= n_strings for f in frames):
            raise WireError('ERANGE')
        samples.append({'tid': tid, 'time_ns': time_ns, 'frames': frames})
    if off != len(buf):
        raise WireError('ESIZE')
    return {'kind': 'pystacks', 'pid': pid, 'window': window, 'samples_cut': cut,
            'strings': strings, 'samples': samples}


def encode_pystacks(d):
    table = b''.join(bytes([len(t.encode())]) + t.encode() for t in d['strings'])
    out = PYSTACKS_HEAD.pack(b'EM', 2, 8, d['pid'], d['window'], d['samples_cut'],
                             len(d['strings']), len(d['samples']), len(table), b'') + table
    for s in d['samples']:
        out += PYSAMPLE_HEAD.pack(s['tid'], s['time_ns'], len(s['frames']))
        out += struct.pack(f'<{len(s["frames"])}H', *s['frames'])
    return out


def decode_file(name, data):
    if name.startswith('profile_page'):
        return decode_profile_page(data)
    if name.startswith('pystacks'):
        return decode_pystacks(data)
    if name.startswith('model'):
        return decode_model(data)
    if name.startswith('deadline_page'):
        return read_deadline_page(data)
    if name.startswith('ring_header'):
        return decode_ring_header(data)
    if name.startswith('ring_') and name[5:6].isdigit():
        return decode_ring(data)
    if name.startswith('ring_'):
        return decode_ring_dgram(data)
    if name.startswith('page'):
        return read_page(data)
    if name.startswith('push'):
        return decode_push(data)
    return decode_span(data)


# ---- Encoder, from WIRE.md (what a Python client sends) ----


def nan_or(v):
    return math.nan if v is None else float(v)


def encode_span(d):
    return SPAN.pack(b'EM', 1, KIND_CODES[d['kind']], d['pid'], d['frame_id'], d['start_ns'],
                     d['duration_ns'], d['stage'].encode('ascii'))


def encode_body(d):
    return BODY.pack(LEVELS.index(d['level']), LEVELS.index(d['prev_level']), 0, d['changes'],
                     d['since_mono_ns'], d['since_wall_ns'], nan_or(d['value']),
                     nan_or(d['bound']), d['rule'].encode('ascii'), d['stage'].encode('ascii'),
                     d['reason'].encode('ascii'))


def encode_ring_header(d):
    return RING_HEAD.pack(b'EMRG', 2, RING_HEADER_BYTES, RING_SLOT_BYTES, 0, d['slot_count'],
                          d['pid'], d['tid'], d['start_time'], d['head'], d['lost'],
                          RING_STATE_CODES[d['state']], bytes(76))


def encode_slot(d):
    return RING_SLOT.pack(d['seq'], KIND_CODES[d['kind']], bytes(3), d['frame_id'],
                          d['start_ns'], d['duration_ns'], d['stage'].encode('ascii'))


def encode_ring(d):
    """The ring a Python writer makes: header, then its slots, the others zero."""
    mem = bytearray(ring_bytes(d['slot_count']))
    mem[:RING_HEADER_BYTES] = encode_ring_header(d)
    for slot in d['slots']:
        off = slot_offset(d['slot_count'], slot['position'])
        mem[off:off + RING_SLOT_BYTES] = encode_slot(slot)
    return bytes(mem)


def encode_ring_dgram(d):
    kind = RING_DGRAM_CODES[d['kind']]
    if kind == 6:
        return RING_DGRAM.pack(b'EM', 2, kind, d['pid'], d['frame_id'], d['start_ns'],
                               d['duration_ns'], d['stage'].encode('ascii'))
    status = d.get('status', 0) % 2**64
    return RING_DGRAM.pack(b'EM', 2, kind, d['pid'], d['start'], status, d.get('ring_id', 0),
                           b'')


def encode_deadline_page(d):
    page = bytearray(DEADLINE_PAGE_BYTES)
    page[:64] = DEADLINE_HEAD.pack(b'EMDL', 1, len(d['entries']), d['seq'], d['agent_pid'],
                                   d['ring_slots'], b'')
    for i, e in enumerate(d['entries']):
        DEADLINE_ENTRY.pack_into(page, 64 + 40 * i, e['stage'].encode('ascii'), e['deadline_ns'])
    return bytes(page)


def encode_file(d):
    if d['kind'] == 'profile_page':
        return encode_profile_page(d)
    if d['kind'] == 'pystacks':
        return encode_pystacks(d)
    if d['kind'] == 'model':
        return encode_model(d)
    if d['kind'] == 'ring_header':
        return encode_ring_header(d)
    if d['kind'] == 'ring':
        return encode_ring(d)
    if d['kind'] in RING_DGRAM_CODES:
        return encode_ring_dgram(d)
    if d['kind'] == 'deadline_page':
        return encode_deadline_page(d)
    if d['kind'] == 'state_page':
        return PAGE_HEAD.pack(b'EMST', 1, PAGE_BYTES, d['seq'], d['agent_pid']) + encode_body(d)
    if d['kind'] == 'level_push':
        return PUSH_HEAD.pack(b'EM', 1, 16, d['agent_pid'], 0) + encode_body(d)
    return encode_span(d)


# ---- Tests ----


def vector_names():
    return sorted(p.stem for p in VECTORS.glob('*.bin'))


def load(name):
    data = (VECTORS / f'{name}.bin').read_bytes()
    expected = json.loads((VECTORS / f'{name}.json').read_text())
    return data, expected


def test_required_vectors_exist_each_with_its_json():
    bins = {p.stem for p in VECTORS.glob('*.bin')}
    jsons = {p.stem for p in VECTORS.glob('*.json')}
    assert REQUIRED <= bins
    assert bins == jsons


@pytest.mark.parametrize('name', vector_names())
def test_vector_decodes_to_its_json(name):
    data, expected = load(name)
    assert decode_file(name, data) == expected


@pytest.mark.parametrize('name', vector_names())
def test_encoding_the_json_gives_the_vector_bytes(name):
    data, expected = load(name)
    assert encode_file(expected) == data


def test_nan_means_none_and_page_is_seq_2():
    _, page = load('page')
    assert page['value'] is None and page['seq'] == 2
    _, recovered = load('push_recovered')
    assert recovered['value'] is None and recovered['bound'] is None


@pytest.mark.parametrize('name', vector_names())
def test_truncated_and_extended_copies_fail_with_esize(name):
    data, _ = load(name)
    for cut in range(len(data)):
        assert refusal(decode_file, name, data[:cut]) == 'ESIZE', cut
    assert refusal(decode_file, name, data + b'\0') == 'ESIZE'


def patched(data, offset, raw):
    return data[:offset] + raw + data[offset + len(raw):]


def patched_refusal(name, decode, offset, raw):
    """The code decode() refuses vector `name` with once raw is written at offset."""
    data, _ = load(name)
    return refusal(decode, patched(data, offset, raw))


def refusal(decode, *args):
    """The code of the WireError that decode(*args) raises; the test fails when it raises none."""
    with pytest.raises(WireError) as err:
        decode(*args)
    return err.value.code


SPAN_GARBLES = [
    ('magic0', 0, b'X', 'EMAGIC'),
    ('magic1', 1, b'E', 'EMAGIC'),
    ('version 0', 2, b'\x00', 'EVERSION'),
    ('version 2', 2, b'\x02', 'EVERSION'),
    ('kind 0', 3, b'\x00', 'EKIND'),
    ('kind 5', 3, b'\x05', 'EKIND'),
    ('kind 16', 3, b'\x10', 'EKIND'),
    ('stage byte outside alphabet', 32, b' ', 'ESTRING'),
    ('stage without NUL', 32, b'a' * 32, 'ESTRING'),
    ('stage padding not zero', 63, b'\x01', 'ESTRING'),
]

BODY_GARBLES = [
    ('level 4', 0, b'\x04', 'ERANGE'),
    ('prev_level 255', 1, b'\xff', 'ERANGE'),
    ('reserved u16', 2, b'\x01\x00', 'ERANGE'),
    ('rule tab', 40, b'\t', 'ESTRING'),
    ('rule without NUL', 40, b'r' * 32, 'ESTRING'),
    ('rule padding', 71, b'x', 'ESTRING'),
    ('stage bad byte', 72, b'/', 'ESTRING'),
    ('stage without NUL', 72, b's' * 32, 'ESTRING'),
    ('reason DEL', 104, b'\x7f', 'ESTRING'),
    ('reason high byte', 104, b'\xc3', 'ESTRING'),
    ('reason without NUL', 104, b'x' * 136, 'ESTRING'),
    ('reason padding', 239, b'x', 'ESTRING'),
]


@pytest.mark.parametrize('name', ['span', 'heartbeat', 'span_max_stage'])
@pytest.mark.parametrize('what,offset,raw,code', SPAN_GARBLES)
def test_garbled_span_is_refused(name, what, offset, raw, code):
    assert patched_refusal(name, decode_span, offset, raw) == code, what


@pytest.mark.parametrize('name', ['subscribe', 'unsubscribe'])
def test_subscribe_with_a_stage_is_refused(name):
    data, _ = load(name)
    for offset in range(32, 64):
        assert refusal(decode_span, patched(data, offset, b'a')) == 'ESTRING'


def test_span_error_order():
    data, expected = load('span')
    bad = patched(patched(patched(patched(data, 0, b'X'), 2, b'\x07'), 3, b'\x09'), 32, b'!')
    steps = [(0, data[0:1], 'EMAGIC'), (2, data[2:3], 'EVERSION'), (3, data[3:4], 'EKIND'),
             (32, data[32:33], 'ESTRING')]
    for offset, good, code in steps:
        assert refusal(decode_span, bad + b'\0') == 'ESIZE'
        assert refusal(decode_span, bad) == code
        bad = patched(bad, offset, good)
    assert decode_span(bad) == expected


@pytest.mark.parametrize('name', ['push', 'push_recovered', 'push_max_fields'])
@pytest.mark.parametrize('what,offset,raw,code', BODY_GARBLES + [
    ('push magic', -16, b'EN', 'EMAGIC'),
    ('push version', -14, b'\x02', 'EVERSION'),
    ('push kind 1', -13, b'\x01', 'EKIND'),
    ('push kind 17', -13, b'\x11', 'EKIND'),
    ('push reserved', -1, b'\x01', 'ERANGE'),
])
def test_garbled_push_is_refused(name, what, offset, raw, code):
    assert patched_refusal(name, decode_push, BODY_OFFSET + offset, raw) == code, what


@pytest.mark.parametrize('what,offset,raw,code', BODY_GARBLES + [
    ('page magic', -16, b'EMSX', 'EMAGIC'),
    ('page version', -12, b'\x02\x00', 'EVERSION'),
    ('page size', -10, b'\x00\x10', 'ESIZE'),
])
def test_garbled_page_is_refused(what, offset, raw, code):
    assert patched_refusal('page', read_page, BODY_OFFSET + offset, raw) == code, what


def record_names():
    """The vectors that are one record: a whole ring and the deadline page also hold bytes
    WIRE.md gives no meaning to (slots not written yet, entries past count)."""
    return [name for name in vector_names() if name not in ('ring_3_slots', 'deadline_page')]


@pytest.mark.parametrize('name', record_names())
def test_any_accepted_single_byte_change_reencodes_identically(name):
    """No byte is ignored: a changed record is refused, or it re-encodes to itself.

    The one exception is the payload of a NaN value or bound ("none"), which the decoder
    reports as None; there the changed bytes must still be a NaN.
    """
    data, _ = load(name)
    for offset in range(len(data)):
        for value in (0x00, 0x01, 0x20, 0x2d, 0x41, 0x7e, 0x7f, 0x80, 0xff, data[offset] ^ 1):
            changed = patched(data, offset, bytes([value]))
            try:
                decoded = decode_file(name, changed)
            except WireError:
                continue
            encoded = encode_file(decoded)
            for field, field_offset in (('value', 24), ('bound', 32)):
                if field in decoded and decoded[field] is None:
                    start = BODY_OFFSET + field_offset
                    assert math.isnan(struct.unpack_from('<d', changed, start)[0])
                    encoded = patched(encoded, start, changed[start:start + 8])
            assert encoded == changed, (offset, value)


def test_page_read_through_mmap(tmp_path):
    path = tmp_path / 'state'
    shutil.copyfile(VECTORS / 'page.bin', path)
    with open(path, 'r+b') as f:
        mm = mmap.mmap(f.fileno(), PAGE_BYTES)
    try:
        _, expected = load('page')
        assert read_page(mm) == expected
        mm[8:12] = SEQ.pack(3)  # A writer between its two counter stores.
        assert refusal(read_page, mm) == 'EBUSY'
        mm[8:12] = SEQ.pack(4)
        assert read_page(mm)['seq'] == 4
    finally:
        mm.close()


# ---- Span ring v2 ----


def test_ring_vectors_decode_as_the_c_writer_made_them():
    _, header = load('ring_header')
    assert header['slot_count'] == 1024 and header['head'] == 0 and header['state'] == 'open'
    data, ring = load('ring_3_slots')
    assert len(data) == ring_bytes(64) and ring['head'] == 3
    assert [s['seq'] for s in ring['slots']] == [1, 2, 3]
    assert ring['slots'][1]['kind'] == 'heartbeat' and ring['slots'][1]['duration_ns'] == 0
    assert data[slot_offset(64, 3):] == bytes(len(data) - slot_offset(64, 3))


RING_HEADER_GARBLES = [
    ('magic', 0, b'X', 'EMAGIC'),
    ('magic last byte', 3, b'S', 'EMAGIC'),
    ('version 1', 4, b'\x01\x00', 'EVERSION'),
    ('version 0x0102', 4, b'\x02\x01', 'EVERSION'),
    ('header_size 64', 6, b'\x40\x00', 'ESIZE'),
    ('slot_size 32', 8, b'\x20\x00', 'ESIZE'),
    ('slot_count 32', 12, b'\x20\x00\x00\x00', 'ERANGE'),
    ('slot_count 96', 12, b'\x60\x00\x00\x00', 'ERANGE'),
    ('slot_count 2^17', 12, b'\x00\x00\x02\x00', 'ERANGE'),
    ('reserved u16', 10, b'\x01', 'ERANGE'),
    ('reserved tail first', 52, b'\x01', 'ERANGE'),
    ('reserved tail last', 127, b'\xff', 'ERANGE'),
    ('state 0', 48, b'\x00', 'ERANGE'),
    ('state 3', 48, b'\x03', 'ERANGE'),
    ('state high byte', 51, b'\x01', 'ERANGE'),
]


@pytest.mark.parametrize('what,offset,raw,code', RING_HEADER_GARBLES)
def test_garbled_ring_header_is_refused(what, offset, raw, code):
    assert patched_refusal('ring_header', decode_ring_header, offset, raw) == code, what


def test_ring_length_must_match_its_slot_count():
    data, _ = load('ring_3_slots')
    for bad in (data[:-1], data + b'\0', data[:-64], data + bytes(64), data[:128]):
        assert refusal(decode_ring, bad) == 'ESIZE'
    # A 128-slot header on 64 slots' bytes.
    assert refusal(decode_ring, patched(data, 12, b'\x80')) == 'ESIZE'


def test_ring_header_checks_in_documented_order():
    data, expected = load('ring_header')
    steps = [(0, 'EMAGIC'), (4, 'EVERSION'), (6, 'ESIZE'), (12, 'ERANGE'), (10, 'ERANGE'),
             (48, 'ERANGE')]
    bad = bytearray(data)
    for offset, _ in steps:
        bad[offset] ^= 0x55
    for offset, code in steps:
        assert refusal(decode_ring_header, bytes(bad)) == code, offset
        bad[offset] = data[offset]
    assert decode_ring_header(bytes(bad)) == expected


def reader_over(data, start=0, final=False, drains=2):
    reader = RingReader(64, start)
    for _ in range(drains - 1):
        reader.drain(data, False)
    reader.drain(data, final)
    return reader


def test_python_reader_folds_the_c_writers_slots_one_drain_late():
    data, ring = load('ring_3_slots')
    reader = RingReader(64, 0)
    reader.drain(data, False)
    assert reader.folded == [] and reader.seen == 3
    reader.drain(data, False)
    assert reader.folded == ring['slots']
    assert (reader.overwritten, reader.bad_slot, reader.bad_head) == (0, 0, 0)


SLOT_GARBLES = [
    ('seq of the previous lap', 0, struct.pack('<I', (2 - 64) % 2**32)),
    ('seq 0', 0, b'\x00'),
    ('seq high byte', 3, b'\x01'),
    ('kind 0', 4, b'\x00'),
    ('kind 3', 4, b'\x03'),
    ('kind 17', 4, b'\x11'),
    ('reserved', 6, b'\x01'),
    ('empty stage', 32, b'\x00'),
    ('stage byte', 33, b' '),
    ('stage without NUL', 32, b'a' * 32),
    ('stage padding', 63, b'x'),
]


@pytest.mark.parametrize('what,offset,raw', SLOT_GARBLES)
def test_scribbled_slot_is_counted_bad_never_folded(what, offset, raw):
    data, ring = load('ring_3_slots')
    bad = patched(data, slot_offset(64, 1) + offset, raw)
    reader = reader_over(bad, final=True)
    assert reader.bad_slot == 1, what
    assert reader.folded == [ring['slots'][0], ring['slots'][2]]
    assert len(reader.folded) + reader.overwritten + reader.bad_slot == 3


def test_any_single_byte_change_in_a_written_slot_is_refused_or_reencodes():
    data, _ = load('ring_3_slots')
    for position in range(3):
        base = slot_offset(64, position)
        for offset in range(RING_SLOT_BYTES):
            for value in (0x00, 0x01, 0x20, 0x41, 0x7f, 0xff, data[base + offset] ^ 1):
                raw = patched(data[base:base + RING_SLOT_BYTES], offset, bytes([value]))
                slot = decode_slot(raw, position)
                if slot is not None:
                    assert encode_slot(slot) == raw, (position, offset, value)


def test_lapped_and_scribbled_heads_are_counted():
    data, _ = load('ring_3_slots')
    head_at = lambda h: patched(data, 32, struct.pack('<Q', h))  # noqa: E731
    reader = RingReader(64, 0)
    reader.drain(data, False)
    reader.drain(head_at(2), False)  # Backwards.
    assert reader.bad_head == 1 and reader.next == reader.seen == 2
    reader = RingReader(64, 0)
    reader.drain(data, False)
    reader.drain(head_at(3 + 2**32 + 1), False)  # Too far.
    assert reader.bad_head == 1 and reader.folded == []
    reader = RingReader(64, 0)
    reader.drain(head_at(66), False)  # A head past a whole lap that the slots do not back:
    reader.drain(head_at(66), False)  # 2 lapped, 2 in the margin, the other 62 bad seqs.
    assert (reader.overwritten, reader.bad_slot, reader.folded) == (4, 62, [])


def test_python_writer_makes_the_c_writers_ring():
    """A Python client writing with pack_into and the head last makes the same bytes."""
    data, ring = load('ring_3_slots')
    mem = bytearray(ring_bytes(64))
    mem[:RING_HEADER_BYTES] = encode_ring_header(dict(ring, head=0))
    for position, slot in enumerate(ring['slots']):
        mem[slot_offset(64, position):slot_offset(64, position + 1)] = encode_slot(slot)
        struct.pack_into('<Q', mem, 32, position + 1)
    assert bytes(mem) == data


# ---- v2 datagrams ----

RING_DGRAM_GARBLES = [
    ('magic', 0, b'X', 'EMAGIC'),
    ('version 1', 2, b'\x01', 'EVERSION'),
    ('version 3', 2, b'\x03', 'EVERSION'),
    ('kind 1', 3, b'\x01', 'EKIND'),
    ('kind 7', 3, b'\x07', 'EKIND'),
    ('kind 16', 3, b'\x10', 'EKIND'),
]


@pytest.mark.parametrize('name', ['ring_register', 'ring_hard_miss', 'ring_ack'])
@pytest.mark.parametrize('what,offset,raw,code', RING_DGRAM_GARBLES)
def test_garbled_ring_dgram_is_refused(name, what, offset, raw, code):
    assert patched_refusal(name, decode_ring_dgram, offset, raw) == code, what


def test_ring_dgram_reserved_and_stage_fields():
    register, _ = load('ring_register')
    for offset in range(16, 64):
        assert refusal(decode_ring_dgram, patched(register, offset, b'\x01')) == 'ERANGE', offset
    ack, expected = load('ring_ack')
    for offset in range(32, 64):
        assert refusal(decode_ring_dgram, patched(ack, offset, b'\x01')) == 'ERANGE', offset
    miss, _ = load('ring_hard_miss')
    for offset, raw in ((32, b'\x00'), (33, b' '), (63, b'x'), (32, b'a' * 32)):
        assert refusal(decode_ring_dgram, patched(miss, offset, raw)) == 'ESTRING'
    _, refused = load('ring_ack_refused')
    assert refused['status'] == -24 and expected['status'] == 0


def test_v1_span_is_not_a_v2_datagram():
    span, _ = load('span')
    assert refusal(decode_ring_dgram, span) == 'EVERSION'


# ---- Deadline page ----

DEADLINE_GARBLES = [
    ('magic', 0, b'EMDX', 'EMAGIC'),
    ('version 2', 4, b'\x02', 'EVERSION'),
    ('reserved', 20, b'\x01', 'ERANGE'),
    ('reserved last', 63, b'\x01', 'ERANGE'),
    ('count 65', 6, b'\x41\x00', 'ERANGE'),
    ('entry 0 bad byte', 64, b' ', 'ESTRING'),
    ('entry 1 empty', 104, b'\x00', 'ESTRING'),
    ('entry 1 padding', 104 + 31, b'x', 'ESTRING'),
    ('odd seq', 8, b'\x03', 'EBUSY'),
]


@pytest.mark.parametrize('what,offset,raw,code', DEADLINE_GARBLES)
def test_garbled_deadline_page_is_refused(what, offset, raw, code):
    assert patched_refusal('deadline_page', read_deadline_page, offset, raw) == code, what


def test_deadline_page_single_byte_changes_in_use_are_refused_or_reencode():
    data, _ = load('deadline_page')
    for offset in range(64 + 2 * 40):
        for value in (0x00, 0x01, 0x20, 0x41, 0x7f, 0xff, data[offset] ^ 1):
            changed = patched(data, offset, bytes([value]))
            try:
                page = read_deadline_page(changed)
            except WireError:
                continue
            if len(page['entries']) == 2:
                assert encode_deadline_page(page) == changed, (offset, value)


def test_deadline_page_read_through_mmap(tmp_path):
    path = tmp_path / 'deadlines'
    shutil.copyfile(VECTORS / 'deadline_page.bin', path)
    with open(path, 'r+b') as f:
        mm = mmap.mmap(f.fileno(), DEADLINE_PAGE_BYTES)
    try:
        _, expected = load('deadline_page')
        assert read_deadline_page(mm) == expected
        mm[8:12] = SEQ.pack(3)
        assert refusal(read_deadline_page, mm) == 'EBUSY'
        mm[8:12] = SEQ.pack(4)
        assert read_deadline_page(mm)['seq'] == 4
    finally:
        mm.close()


# ---- Model datagram v2 ----


@pytest.mark.parametrize('what,data,code', [
    ('magic', lambda b: patched(b, 0, b'EN'), 'EMAGIC'),
    ('version 1', lambda b: patched(b, 2, b'\x01'), 'EVERSION'),
    ('kind 5', lambda b: patched(b, 3, b'\x05'), 'EKIND'),
    ('9 labels', lambda b: patched(b, 12, b'\x09'), 'ELIMIT'),
    ('reserved after n_labels', lambda b: patched(b, 13, b'\x01'), 'ERANGE'),
    ('reserved tail', lambda b: patched(b, 511, b'\x01'), 'ERANGE'),
    ('unused slot', lambda b: patched(b, MODEL_LABELS_AT + 48 * 2, b'x'), 'ERANGE'),
    ('name without NUL', lambda b: patched(b, 16, b'n' * 64), 'ESTRING'),
    ('byte after the NUL', lambda b: patched(b, 16 + 40, b'x'), 'ESTRING'),
    ('empty name', lambda b: patched(b, 16, bytes(64)), 'ESTRING'),
    ('tab in version', lambda b: patched(b, 80, b'1\t4'), 'ESTRING'),
    ('key with a dash', lambda b: patched(b, MODEL_LABELS_AT, b'si-e'), 'ESTRING'),
    ('key starting with a digit', lambda b: patched(b, MODEL_LABELS_AT, b'1ite'), 'ESTRING'),
    ('key starting with __', lambda b: patched(b, MODEL_LABELS_AT, b'__te'), 'ESTRING'),
    ('empty value', lambda b: patched(b, MODEL_LABELS_AT + 16, bytes(32)), 'ESTRING'),
    ('keys not ascending', lambda b: patched(b, MODEL_LABELS_AT, b'wite'), 'EINVAL'),
    ('a key twice', lambda b: patched(b, MODEL_LABELS_AT, b'variant'), 'EDUPLICATE'),
])
def test_garbled_model_is_refused(what, data, code):
    raw, _ = load('model')
    assert refusal(decode_model, data(raw)) == code, what


def test_model_error_order():
    raw, _ = load('model')
    # Every later check broken too: the first in WIRE.md's order is the one reported.
    bad = bytearray(raw)
    bad[MODEL_LABELS_AT:MODEL_LABELS_AT + 4] = b'1-__'  # ESTRING (key)
    bad[16:80] = b'n' * 64  # ESTRING (name framing)
    bad[511] = 1  # ERANGE
    bad[12] = 9  # ELIMIT
    bad[3] = 8  # EKIND
    order = [(3, 7, 'EKIND'), (12, 2, 'ELIMIT'), (511, 0, 'ERANGE')]
    for offset, fix, code in order:
        assert refusal(decode_model, bytes(bad)) == code
        bad[offset] = fix
    assert refusal(decode_model, bytes(bad)) == 'ESTRING'


def test_model_vectors_hold_the_documented_bytes():
    raw, d = load('model')
    assert raw[:4] == b'EM\x02\x07' and raw[12] == len(d['labels']) == 2
    assert raw[16:16 + len('mobilenet_v3_small')] == b'mobilenet_v3_small'
    assert raw[MODEL_LABELS_AT:MODEL_LABELS_AT + 5] == b'site\0'
    raw, d = load('model_max_fields')
    assert len(d['name']) == 63 and len(d['version']) == 31 and len(d['labels']) == 8
    assert [k for k, _ in d['labels']] == sorted(k for k, _ in d['labels'])


@pytest.mark.parametrize('what,offset,raw,code', [
    ('magic', 0, b'EMPX', 'EMAGIC'),
    ('version 2', 4, b'\x02\x00', 'EVERSION'),
    ('size field', 6, b'\x40\x01', 'ERANGE'),
    ('hz 0', 12, bytes(4), 'ERANGE'),
    ('hz 1001', 12, (1001).to_bytes(4, 'little'), 'ERANGE'),
    ('end before start', 24, bytes(8), 'ERANGE'),
    ('reserved', 63, b'\x01', 'ERANGE'),
])
def test_garbled_profile_page_is_refused(what, offset, raw, code):
    assert patched_refusal('profile_page', decode_profile_page, offset, raw) == code, what


STRINGS_AT = 32


@pytest.mark.parametrize('what,data,code', [
    ('version 1', lambda b: patched(b, 2, b'\x01'), 'EVERSION'),
    ('kind 7', lambda b: patched(b, 3, b'\x07'), 'EKIND'),
    ('reserved', lambda b: patched(b, 31, b'\x01'), 'ERANGE'),
    ('4097 strings', lambda b: patched(b, 16, (4097).to_bytes(2, 'little')), 'ELIMIT'),
    ('strings_bytes past the end', lambda b: patched(b, 20, b'\xff\xff'), 'ESIZE'),
    ('a string of length 0', lambda b: patched(b, STRINGS_AT, b'\x00'), 'ESTRING'),
    ('a newline in a string', lambda b: patched(b, STRINGS_AT + 1, b'\n'), 'ESTRING'),
    ('a lone continuation byte', lambda b: patched(b, STRINGS_AT + 1, b'\x80'), 'ESTRING'),
    ('an overlong slash', lambda b: patched(b, STRINGS_AT + 1, b'\xc0\xaf'), 'ESTRING'),
    ('one string fewer', lambda b: patched(b, 16, b'\x04'), 'ESIZE'),
    ('one sample more', lambda b: patched(b, 18, b'\x04'), 'ESIZE'),
    ('one sample fewer', lambda b: patched(b, 18, b'\x02'), 'ESIZE'),
    ('index out of the table', lambda b: patched(b, len(b) - 2, b'\x05\x00'), 'ERANGE'),
    ('depth 0', lambda b: patched(b, len(b) - 6, bytes(2)), 'ERANGE'),
    ('depth 257', lambda b: patched(b, len(b) - 6, (257).to_bytes(2, 'little')), 'ERANGE'),
])
def test_garbled_pystacks_is_refused(what, data, code):
    raw, _ = load('pystacks')
    assert refusal(decode_pystacks, data(raw)) == code, what


def test_pystacks_vector_holds_the_documented_bytes():
    raw, d = load('pystacks')
    assert raw[:4] == b'EM\x02\x08' and len(d['strings']) == 5 and len(d['samples']) == 3
    assert raw[STRINGS_AT] == len('<module> (/app/serve.py:40)')
    assert d['strings'][4] == '\u00fcber (/app/\u00fc.py:1)'
    # The last sample: tid 4250, depth 2, frames 0 and 4, closing the datagram.
    assert raw[-18:] == struct.pack('<IQHHH', 4250, 1520202020, 2, 0, 4)
    raw, d = load('profile_page')
    assert raw[:8] == b'EMPR\x01\x00\x40\x00' and d['hz'] == 99 and d['window'] == 3
