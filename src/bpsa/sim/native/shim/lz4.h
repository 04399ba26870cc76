// The two LZ4 calls of Verilator's FST writer, without the LZ4 library (a fresh machine has
// no lz4.h): a valid LZ4 block that stores its input as literals, uncompressed. The FST
// writer compresses only the hierarchy block with it; GTKWave and Surfer read it as usual.
#ifndef BPSA_LZ4_SHIM_H
#define BPSA_LZ4_SHIM_H

#include <cstring>

static inline int LZ4_compressBound(int size) { return size + size / 255 + 16; }

// One sequence of literals and no match (LZ4 block format): the token's high nibble holds the
// literal count (15 and more: continued in bytes of 255 and a remainder), then the literals.
static inline int LZ4_compress_default(const char *src, char *dst, int size, int capacity) {
    if (capacity < LZ4_compressBound(size))
        return 0;
    unsigned char *out = reinterpret_cast<unsigned char *>(dst);
    int n = 0;
    if (size < 15) {
        out[n++] = static_cast<unsigned char>(size << 4);
    } else {
        out[n++] = 0xF0;
        int rest = size - 15;
        for (; rest >= 255; rest -= 255)
            out[n++] = 255;
        out[n++] = static_cast<unsigned char>(rest);
    }
    std::memcpy(out + n, src, static_cast<size_t>(size));
    return n + size;
}

#endif
