/*
 * crc32c.h - CRC-32C (Castagnoli), the checksum of every record edgemon writes to disk: the
 * agent's spool (firmware/agent/transport/spool.c) and edgemon-cli's recordings
 * (host/RECORDING.md). Reflected polynomial 0x82F63B78, initial value and final xor 0xFFFFFFFF: the
 * CRC of "123456789" is 0xE3069283, as in RFC 3720 (iSCSI) and ext4.
 */
#ifndef EDGEMON_CRC32C_H
#define EDGEMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32C of buf[0..len), continuing from `crc` (0 for a fresh start): em_crc32c(em_crc32c(0,
 * a, n), b, m) is the CRC of a followed by b. Thread-safe (the table is constant). */
uint32_t em_crc32c(uint32_t crc, const void *buf, size_t len);

#endif /* EDGEMON_CRC32C_H */
