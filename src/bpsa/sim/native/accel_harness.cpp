// The whole accelerator under Verilator with a C++ clock loop, an AXI4 memory behind its DMA
// port and an AXI4-Lite master, exposed to Python (ctypes) at transaction granularity.
// Verilator names the ports with "__" escaped as "___05F" (axil__awaddr: axil___05Fawaddr).
// Random ready / valid stalls on every memory channel come from a seeded generator, so the
// fast path still shows that back-pressure never changes a result.
#include <cstdint>
#include <cstring>
#include <deque>
#include <random>
#include <vector>

#include "Vaccelerator.h"
#include "verilated.h"
#ifdef BPSA_TRACE
#include "verilated_fst_c.h"
#endif

namespace {

// The memory bus is dma_data_width bits: a scalar (64 bits) or a VlWide of 32-bit words
// (128, 256 bits); a beat is moved byte by byte through these.
template <typename T>
void put_beat(T &sig, const uint8_t *src, unsigned n) {
    uint64_t v = 0;
    std::memcpy(&v, src, n);
    sig = v;
}
template <std::size_t N>
void put_beat(VlWide<N> &sig, const uint8_t *src, unsigned) {
    for (std::size_t w = 0; w < N; w++) {
        uint32_t v = 0;
        std::memcpy(&v, src + 4 * w, 4);
        sig[w] = v;
    }
}
template <typename T>
uint8_t beat_byte(const T &sig, unsigned i) { return uint8_t(uint64_t(sig) >> (8 * i)); }
template <std::size_t N>
uint8_t beat_byte(const VlWide<N> &sig, unsigned i) { return uint8_t(sig[i / 4] >> (8 * (i % 4))); }

struct Burst {
    uint64_t addr;
    unsigned beats;
    unsigned id;
};

Vaccelerator *make_top(VerilatedContext &ctx) {
#ifdef BPSA_TRACE
    ctx.traceEverOn(true);    // before the model is built, or it has no trace hooks
#endif
    return new Vaccelerator(&ctx);
}

struct Sim {
    static constexpr unsigned kBeat = sizeof(Vaccelerator::mem___05Fwdata);   // bytes a beat
    VerilatedContext ctx;
    Vaccelerator *top;
    std::vector<uint8_t> mem;
    uint64_t cycles = 0;
    std::mt19937_64 rng;
    double stall;             // probability that a memory channel stalls in a cycle
    std::deque<Burst> reads, writes;
    std::deque<unsigned> responses;
    bool r_valid = false, b_valid = false;
    uint8_t r_data[kBeat] = {};
    bool r_last = false;
    unsigned r_resp = 0, r_id = 0;
#ifdef BPSA_TRACE
    VerilatedFstC *fst = nullptr;
    uint64_t trace_first = 0, trace_last = 0;   // the cycles traced: [first, last]

    void dump(uint64_t time) {
        if (fst && cycles >= trace_first && cycles <= trace_last)
            fst->dump(time);
    }
#else
    void dump(uint64_t) {}
#endif

    Sim(uint64_t mem_bytes, uint64_t seed, double stall_prob)
        : top(make_top(ctx)), mem(mem_bytes, 0), rng(seed), stall(stall_prob) {}
    ~Sim() {
        top->final();
#ifdef BPSA_TRACE
        if (fst)
            fst->close();
        delete fst;
#endif
        delete top;
    }

    bool go() { return stall <= 0.0 || std::uniform_real_distribution<double>(0, 1)(rng) >= stall; }

    // One clock cycle: the memory drives its outputs, the design settles, the handshakes of
    // this cycle are taken, then the rising edge.
    void tick() {
        Vaccelerator &t = *top;
        t.mem___05Farready = reads.size() < 4 && go();
        t.mem___05Fawready = writes.size() < 4 && go();
        t.mem___05Fwready = !writes.empty() && go();
        if (!r_valid && !reads.empty() && go()) {
            Burst &b = reads.front();
            r_valid = true;
            r_last = b.beats == 1;
            r_id = b.id;
            if (b.addr + kBeat <= mem.size()) {
                std::memcpy(r_data, &mem[b.addr], kBeat);
                r_resp = 0;
            } else {
                std::memset(r_data, 0, kBeat);
                r_resp = 2;    // SLVERR
            }
        }
        t.mem___05Frvalid = r_valid;
        put_beat(t.mem___05Frdata, r_data, kBeat);
        t.mem___05Frlast = r_last;
        t.mem___05Frresp = r_resp;
        t.mem___05Frid = r_id;
        if (!b_valid && !responses.empty() && go())
            b_valid = true;
        t.mem___05Fbvalid = b_valid;
        t.mem___05Fbresp = 0;
        t.mem___05Fbid = responses.empty() ? 0 : responses.front();
        t.clk = 0;
        t.eval();
        dump(2 * cycles);
        if (t.mem___05Farvalid && t.mem___05Farready)
            reads.push_back({t.mem___05Faraddr, unsigned(t.mem___05Farlen) + 1u, unsigned(t.mem___05Farid)});
        if (t.mem___05Fawvalid && t.mem___05Fawready)
            writes.push_back({t.mem___05Fawaddr, unsigned(t.mem___05Fawlen) + 1u, unsigned(t.mem___05Fawid)});
        if (t.mem___05Frvalid && t.mem___05Frready) {
            Burst &b = reads.front();
            b.addr += kBeat;
            if (--b.beats == 0)
                reads.pop_front();
            r_valid = false;
        }
        if (t.mem___05Fwvalid && t.mem___05Fwready) {
            Burst &b = writes.front();
            uint64_t strb = t.mem___05Fwstrb;
            for (unsigned i = 0; i < kBeat; i++)
                if ((strb >> i) & 1 && b.addr + i < mem.size())
                    mem[b.addr + i] = beat_byte(t.mem___05Fwdata, i);
            b.addr += kBeat;
            if (--b.beats == 0) {
                responses.push_back(b.id);
                writes.pop_front();
            }
        }
        if (t.mem___05Fbvalid && t.mem___05Fbready) {
            responses.pop_front();
            b_valid = false;
        }
        t.clk = 1;
        t.eval();
        dump(2 * cycles + 1);
        cycles++;
    }
};

}  // namespace

extern "C" {

void *bpsa_new(uint64_t mem_bytes, uint64_t seed, double stall) {
    Sim *s = new Sim(mem_bytes, seed, stall);
    Vaccelerator &t = *s->top;
    t.axil___05Fawvalid = t.axil___05Fwvalid = t.axil___05Farvalid = 0;
    t.axil___05Fbready = t.axil___05Frready = 0;
    t.rst = 1;
    for (int i = 0; i < 4; i++)
        s->tick();
    t.rst = 0;
    s->tick();
    return s;
}

void bpsa_free(void *p) { delete static_cast<Sim *>(p); }

void bpsa_set_stall(void *p, double stall) { static_cast<Sim *>(p)->stall = stall; }

// Traces cycles [first, last] into the FST file `path`; returns 0, or -1 when the library was
// built without tracing.
int bpsa_trace(void *p, const char *path, uint64_t first, uint64_t last) {
#ifdef BPSA_TRACE
    Sim &s = *static_cast<Sim *>(p);
    s.fst = new VerilatedFstC;
    s.top->trace(s.fst, 99);
    s.fst->open(path);
    s.trace_first = first;
    s.trace_last = last;
    return 0;
#else
    (void)p; (void)path; (void)first; (void)last;
    return -1;
#endif
}

uint64_t bpsa_cycles(void *p) { return static_cast<Sim *>(p)->cycles; }

// Returns the response (0 OKAY, 2 SLVERR, ...) and the data through *data; -1 on a timeout.
int bpsa_read32(void *p, uint32_t addr, uint32_t *data) {
    Sim &s = *static_cast<Sim *>(p);
    Vaccelerator &t = *s.top;
    t.axil___05Faraddr = addr;
    t.axil___05Farvalid = 1;
    t.axil___05Frready = 1;
    for (int i = 0; i < 10000; i++) {
        t.clk = 0;
        t.eval();
        bool ar = t.axil___05Farvalid && t.axil___05Farready;
        bool r = t.axil___05Frvalid;
        uint32_t value = t.axil___05Frdata;
        int resp = t.axil___05Frresp;
        s.tick();
        if (ar)
            t.axil___05Farvalid = 0;
        if (r) {
            t.axil___05Frready = 0;
            *data = value;
            return resp;
        }
    }
    return -1;
}

int bpsa_write32(void *p, uint32_t addr, uint32_t data) {
    Sim &s = *static_cast<Sim *>(p);
    Vaccelerator &t = *s.top;
    t.axil___05Fawaddr = addr;
    t.axil___05Fawvalid = 1;
    t.axil___05Fwdata = data;
    t.axil___05Fwstrb = 0xF;
    t.axil___05Fwvalid = 1;
    t.axil___05Fbready = 1;
    for (int i = 0; i < 10000; i++) {
        t.clk = 0;
        t.eval();
        bool aw = t.axil___05Fawvalid && t.axil___05Fawready;
        bool w = t.axil___05Fwvalid && t.axil___05Fwready;
        bool b = t.axil___05Fbvalid;
        int resp = t.axil___05Fbresp;
        s.tick();
        if (aw)
            t.axil___05Fawvalid = 0;
        if (w)
            t.axil___05Fwvalid = 0;
        if (b) {
            t.axil___05Fbready = 0;
            return resp;
        }
    }
    return -1;
}

int bpsa_read_mem(void *p, uint64_t addr, uint64_t n, uint8_t *out) {
    Sim &s = *static_cast<Sim *>(p);
    if (addr + n > s.mem.size())
        return -1;
    std::memcpy(out, &s.mem[addr], n);
    return 0;
}

int bpsa_write_mem(void *p, uint64_t addr, uint64_t n, const uint8_t *in) {
    Sim &s = *static_cast<Sim *>(p);
    if (addr + n > s.mem.size())
        return -1;
    std::memcpy(&s.mem[addr], in, n);
    return 0;
}

// Runs up to `cycles` cycles, or until the interrupt is high when `until_irq`; returns the
// cycles run.
uint64_t bpsa_run(void *p, uint64_t cycles, int until_irq) {
    Sim &s = *static_cast<Sim *>(p);
    for (uint64_t i = 0; i < cycles; i++) {
        if (until_irq && s.top->irq)
            return i;
        s.tick();
    }
    return cycles;
}

}  // extern "C"
