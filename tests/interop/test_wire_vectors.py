"""Interop test of the board-local wire records (proto/WIRE.md) against the golden vectors.

This module holds an independent decoder (and encoder) of the span datagram, the level push
datagram and the state page, written from proto/WIRE.md with the standard library's struct
module only. It checks that every proto/vectors/wire/<name>.bin decodes to its <name>.json,
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

REQUIRED = {'span', 'heartbeat', 'subscribe', 'span_max_stage', 'push', 'page'}


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


def decode_span(buf):
    if len(buf) != SPAN_BYTES:
        raise WireError('ESIZE')
    magic, version, kind, pid, frame_id, start_ns, duration_ns, stage = SPAN.unpack(buf)
    if magic != b'EM':
        raise WireError('EMAGIC')
    if version != 1:
        raise WireError('EVERSION')
    if kind not in KINDS:
        raise WireError('EKIND')
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
    if magic != b'EM':
        raise WireError('EMAGIC')
    if version != 1:
        raise WireError('EVERSION')
    if kind != 16:
        raise WireError('EKIND')
    if reserved != 0:
        raise WireError('ERANGE')
    rec = decode_body(bytes(buf[BODY_OFFSET:]))
    rec.update(kind='level_push', agent_pid=agent_pid)
    return rec


def check_page_header(page):
    magic, version, size, _seq, agent_pid = PAGE_HEAD.unpack_from(page, 0)
    if magic != b'EMST':
        raise WireError('EMAGIC')
    if version != 1:
        raise WireError('EVERSION')
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


def decode_file(name, data):
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


def encode_file(d):
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
        with pytest.raises(WireError) as err:
            decode_file(name, data[:cut])
        assert err.value.code == 'ESIZE', cut
    with pytest.raises(WireError) as err:
        decode_file(name, data + b'\0')
    assert err.value.code == 'ESIZE'


def patched(data, offset, raw):
    return data[:offset] + raw + data[offset + len(raw):]


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
    data, _ = load(name)
    with pytest.raises(WireError) as err:
        decode_span(patched(data, offset, raw))
    assert err.value.code == code, what


@pytest.mark.parametrize('name', ['subscribe', 'unsubscribe'])
def test_subscribe_with_a_stage_is_refused(name):
    data, _ = load(name)
    for offset in range(32, 64):
        with pytest.raises(WireError) as err:
            decode_span(patched(data, offset, b'a'))
        assert err.value.code == 'ESTRING'


def test_span_error_order():
    data, expected = load('span')
    bad = patched(patched(patched(patched(data, 0, b'X'), 2, b'\x07'), 3, b'\x09'), 32, b'!')
    steps = [(0, data[0:1], 'EMAGIC'), (2, data[2:3], 'EVERSION'), (3, data[3:4], 'EKIND'),
             (32, data[32:33], 'ESTRING')]
    for offset, good, code in steps:
        with pytest.raises(WireError) as err:
            decode_span(bad + b'\0')
        assert err.value.code == 'ESIZE'
        with pytest.raises(WireError) as err:
            decode_span(bad)
        assert err.value.code == code
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
    data, _ = load(name)
    with pytest.raises(WireError) as err:
        decode_push(patched(data, BODY_OFFSET + offset, raw))
    assert err.value.code == code, what


@pytest.mark.parametrize('what,offset,raw,code', BODY_GARBLES + [
    ('page magic', -16, b'EMSX', 'EMAGIC'),
    ('page version', -12, b'\x02\x00', 'EVERSION'),
    ('page size', -10, b'\x00\x10', 'ESIZE'),
])
def test_garbled_page_is_refused(what, offset, raw, code):
    data, _ = load('page')
    with pytest.raises(WireError) as err:
        read_page(patched(data, BODY_OFFSET + offset, raw))
    assert err.value.code == code, what


@pytest.mark.parametrize('name', vector_names())
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
        with pytest.raises(WireError) as err:
            read_page(mm)
        assert err.value.code == 'EBUSY'
        mm[8:12] = SEQ.pack(4)
        assert read_page(mm)['seq'] == 4
    finally:
        mm.close()
