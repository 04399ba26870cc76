// The zlib calls of Verilator's FST writer, without zlib's headers (not on every fresh
// machine): "compression" that never wins, so the writer stores every block it would deflate
// uncompressed (it keeps the smaller of the two). Waveforms are larger, and readable as usual.
#ifndef BPSA_ZLIB_SHIM_H
#define BPSA_ZLIB_SHIM_H

#include <cstring>

typedef unsigned char Bytef;
typedef unsigned long uLong;
typedef unsigned long uLongf;
#define Z_OK 0
#define Z_BUF_ERROR (-5)

static inline uLong compressBound(uLong size) { return size + 1; }

static inline int compress2(Bytef *dst, uLongf *dst_len, const Bytef *src, uLong size, int) {
    if (*dst_len < size + 1)
        return Z_BUF_ERROR;
    std::memcpy(dst, src, size);
    dst[size] = 0;
    *dst_len = size + 1;    // longer than the input: the writer keeps the input
    return Z_OK;
}

#endif
