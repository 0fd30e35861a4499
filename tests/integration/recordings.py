"""The recording format of host/RECORDING.md, written and read in Python for the CLI tests,
independently of the C code in host/lib/recording.c."""

import struct

MAGIC = b"EMREC\x00"
HEADER = MAGIC + b"\x01\x00"
FIXED = struct.Struct("<QHBBI")  # recv_time_ns, topic_len, flags, reserved, payload_len


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data):
    """CRC-32C (Castagnoli): check value 0xE3069283 for b"123456789"."""
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def encode_record(topic, payload, t_ns=1_795_262_400_000_000_000, retained=False):
    """One record: fixed part, topic, payload, CRC-32C of all of it."""
    topic = topic.encode() if isinstance(topic, str) else topic
    body = FIXED.pack(t_ns, len(topic), 1 if retained else 0, 0, len(payload)) + topic + payload
    return body + struct.pack("<I", crc32c(body))


def recording(*records):
    """A whole file from encoded records."""
    return HEADER + b"".join(records)


def parse_recording(data):
    """Returns (records, error, offset): records as dicts; error None for a clean end, else
    "magic", "version", "truncated", "limit" or "crc" at the record starting at offset."""
    if len(data) < 8 or data[:6] != MAGIC:
        return [], "magic", 0
    if data[6] != 1 or data[7] != 0:
        return [], "version", 0
    records, at = [], 8
    while at < len(data):
        if len(data) - at < FIXED.size:
            return records, "truncated", at
        t, tlen, flags, reserved, plen = FIXED.unpack_from(data, at)
        if tlen == 0 or tlen > 1024 or plen > 1024 * 1024 or reserved or flags & ~1:
            return records, "limit", at
        end = at + FIXED.size + tlen + plen + 4
        if end > len(data):
            return records, "truncated", at
        (crc,) = struct.unpack_from("<I", data, end - 4)
        if crc32c(data[at:end - 4]) != crc:
            return records, "crc", at
        topic = data[at + FIXED.size:at + FIXED.size + tlen].decode()
        payload = data[at + FIXED.size + tlen:end - 4]
        records.append({"t": t, "retained": bool(flags & 1), "topic": topic,
                        "kind": topic.split("/")[3] if topic.count("/") >= 3 else "",
                        "payload": payload, "offset": at})
        at = end
    return records, None, at
