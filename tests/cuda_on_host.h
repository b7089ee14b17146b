// CUDA device code run on the host, for the tests (tests/test_cuda_on_host.cpp): the kernels
// that live in headers a host build compiles (cuda/mma_fragments.cuh, flash_mma_kernels.cuh,
// flash_kernels.cuh, chunked_kernels.cuh, embedding_kernels.cuh, optimizer_kernels.cuh,
// s4_kernels.cuh, edge_attention_kernels.cuh, attention_kernels.cuh, ssd_kernels.cuh,
// linear_attention_kernels.cuh, lstm_kernels.cuh, dropout_kernels.cuh, softmax_kernels.cuh,
// layer_norm_kernels.cuh, reduce_kernels.cuh, conv_kernels.cuh, elementwise_kernels.cuh,
// memory_kernels.cuh) run here: a functor per index through
// for_each_index, a kernel with a block as that many fibers, one block after another: threadIdx, blockIdx,
// blockDim and gridDim as the kernel expects, __syncthreads (and _or) a barrier of the block,
// __shfl_xor_sync an exchange within the caller's warp, and mma.sync a model written from the
// PTX ISA's fragment tables ("Matrix fragments for mma.m16n8k16" with .bf16, "... mma.m16n8k8"
// with .tf32), independently of the code under test. Dynamic shared memory is one buffer
// (blocks never run at once), ag::cuda::shared_bytes, which the including test defines; a
// kernel's fixed __shared__ arrays are function statics, one per kernel, for the same reason.
// The block's threads are fibers on the calling thread, switched at each barrier (Fibers,
// below), not OS threads, whose futex calls made the flash cases several times slower
// (measured in docs/performance.md, issue 45's section).
//
// What this checks is the code's logic — which lane holds what, which tile is loaded where,
// what is summed — not the hardware: not its accumulation order or rounding inside an mma
// (the model sums in double and rounds once), not bank conflicts, not timing, and not races
// between blocks (they never overlap here). The CUDA cases on a device see those.
//
// Include after every other header; the CUDA keywords it defines are for the device code
// included after it (end the file with tests/cuda_on_host_end.h). CUDA's unqualified math
// for device code (min, isfinite, exp of a float): the test gives the kernels' namespaces
// the using-declarations.
#pragma once
#include <cmath>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <vector>

#include "core/attention_math.h"
#include "core/sanitizer.h"

namespace ag::test::cuda_host {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};
inline Dim3 thread_index, block_index;  // the running fiber's, set at every switch
inline Dim3 block_dim, grid_dim;        // set before a launch's fibers start

// Switching between a block's fibers. On x86-64, a switch of our own: the callee-saved registers,
// the SSE and x87 control words and the stack pointer, nothing else — glibc's swapcontext also
// saves and restores the signal mask, a system call at every switch, which was most of the
// time these tests took (docs/performance.md, issue 45's section). Elsewhere, ucontext.
// Under ASan each switch is announced (__sanitizer_start_switch_fiber and _finish_), so that it
// knows which stack is running (core/sanitizer.h).

#if defined(__x86_64__)
// ag_cuda_host_switch(&from, to): pushes rbp, rbx, r12–r15 and the control words on the running
// stack, stores its pointer in *from, loads `to` and pops the same from there, returning into
// the context that `to` was saved from (or into a fresh stack's entry, laid out as if saved).
extern "C" void ag_cuda_host_switch(void** from, void* to);
asm(R"(
  .text
  .p2align 4
  .type ag_cuda_host_switch, @function
ag_cuda_host_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size ag_cuda_host_switch, .-ag_cuda_host_switch
)");
#endif

// A block's threads as fibers: run() starts them all and returns when all have
// returned. A fiber that waits (at a barrier) is not resumed until another wakes it,
// so each switch is one that makes progress; none runnable while some wait is a
// deadlock (a barrier not every thread reaches, as on a device), reported as such.
class Fibers {
 public:
  // A fiber's stack: the kernels' frames and the mma model's arrays (a few KB) with room,
  // above a page that faults, so that an overflow stops the test instead of writing
  // elsewhere. Small, because under ASan its shadow is cleared for every block (prepare).
  static constexpr size_t kStack = 64 * 1024;
  Fibers(unsigned n, std::function<void()> body) : body_(std::move(body)), fibers_(n) {}
  void run() {
    for (unsigned i = 0; i < fibers_.size(); ++i) prepare(fibers_[i].context, stack(i));
    Fibers* outer = current_;
    size_t finished = 0;
    while (finished < fibers_.size()) {
      bool ran = false;
      for (unsigned i = 0; i < fibers_.size(); ++i) {
        Fiber& f = fibers_[i];
        if (f.done || f.waiting) continue;
        current_ = this;
        index_ = i;
        thread_index = {i, 0, 0};
        switch_to_fiber(i);
        ran = true;
        if (f.done) ++finished;
      }
      if (!ran && finished < fibers_.size())
        throw std::runtime_error("cuda_on_host: every unfinished thread of the block waits at a barrier (deadlock)");
    }
    current_ = outer;
  }
  // The running fiber waits until wake(its index).
  void wait() {
    const unsigned i = index_;
    fibers_[i].waiting = true;
    switch_to_scheduler(i);
  }
  void wake(unsigned i) { fibers_[i].waiting = false; }
  unsigned running() const { return index_; }
  static Fibers& current() { return *current_; }

 private:
#if defined(__x86_64__)
  using Context = void*;  // the saved stack pointer
#else
  using Context = ucontext_t;
#endif
  struct Fiber {
    Context context{};
    bool done = false, waiting = false;
  };

  // A context that starts start() on `stack`.
#if defined(__x86_64__)
  void prepare(Context& context, void* stack) {
    // From the stack's top (16-aligned) down: a zero return address for start() (so that it is
    // entered with the stack as after a call), start() as the switch's return address, the six
    // registers (zero), the control words (MXCSR's and the x87's defaults).
#if AG_ADDRESS_SANITIZER
    // A stack used before keeps its last fiber's frames' poisoned red zones: cleared for the new one.
    __asan_unpoison_memory_region(stack, kStack);
#endif
    auto* top = reinterpret_cast<uint64_t*>(static_cast<char*>(stack) + kStack);
    uint64_t* sp = top - 9;
    sp[8] = 0;
    sp[7] = reinterpret_cast<uint64_t>(&Fibers::start);
    for (int r = 1; r <= 6; ++r) sp[r] = 0;
    sp[0] = 0x1F80u | (uint64_t{0x037F} << 32);
    context = sp;
  }
#else
  // Apart from run()'s loop: getcontext returns twice in principle, and a variable live across
  // it may be clobbered.
  __attribute__((noinline)) void prepare(Context& context, void* stack) {
    if (getcontext(&context) != 0) throw std::runtime_error("getcontext failed");
    context.uc_stack.ss_sp = stack;
    context.uc_stack.ss_size = kStack;
    context.uc_link = nullptr;
    makecontext(&context, &Fibers::start, 0);
  }
#endif
  // Saves the running context in `from` and resumes `to`, whose stack starts at `to_bottom` (for
  // ASan); returns when something switches back to `from`. The scheduler (run()) switches to a
  // fiber, a fiber back to the scheduler; a finished fiber's switch is never returned to (ASan
  // may then drop its fake frames).
  static void switch_context(Context& from, Context& to, const void* to_bottom, size_t to_size, bool finished) {
#if AG_ADDRESS_SANITIZER
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(finished ? nullptr : &fake, to_bottom, to_size);
#else
    (void)to_bottom, (void)to_size, (void)finished;
#endif
#if defined(__x86_64__)
    ag_cuda_host_switch(&from, to);
#else
    swapcontext(&from, &to);
#endif
#if AG_ADDRESS_SANITIZER
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  }
  void switch_to_fiber(unsigned i) { switch_context(scheduler_, fibers_[i].context, stack(i), kStack, false); }
  void switch_to_scheduler(unsigned i, bool finished = false) {
    switch_context(fibers_[i].context, scheduler_, scheduler_bottom_, scheduler_size_, finished);
  }
  // Fiber i's stack, kept for every later block (mapped once per thread index).
  static void* stack(unsigned i) {
    static std::vector<char*> stacks;
    static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    while (stacks.size() <= i) {
      void* mapped = mmap(nullptr, page + kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (mapped == MAP_FAILED || mprotect(mapped, page, PROT_NONE) != 0)
        throw std::runtime_error("cuda_on_host: a fiber's stack could not be mapped");
      stacks.push_back(static_cast<char*>(mapped) + page);
    }
    return stacks[i];
  }
  // A fiber's first code: on entering, the switch from the scheduler finishes; the body runs;
  // the fiber, done, switches back for good.
  static void start() {
    Fibers* self = current_;
    const unsigned i = self->index_;
#if AG_ADDRESS_SANITIZER
    // Where the scheduler's stack is (the thread's own), for the switches back to it.
    __sanitizer_finish_switch_fiber(nullptr, &self->scheduler_bottom_, &self->scheduler_size_);
#endif
    self->body_();
    self->fibers_[i].done = true;
    self->switch_to_scheduler(i, true);
    std::abort();  // never resumed
  }
  inline static Fibers* current_ = nullptr;
  std::function<void()> body_;
  std::vector<Fiber> fibers_;
  Context scheduler_{};
  unsigned index_ = 0;
  const void* scheduler_bottom_ = nullptr;  // the scheduler's stack, as ASan reports it on a first switch
  size_t scheduler_size_ = 0;
};

// A barrier for n fibers, reusable: the last to arrive runs `last`, wakes the others
// and goes on. generation() counts the openings.
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) { waiting_.reserve(static_cast<size_t>(n)); }
  template <class F> void arrive(F&& last) {
    Fibers& fibers = Fibers::current();
    if (static_cast<int>(waiting_.size()) + 1 < n_) {
      waiting_.push_back(fibers.running());
      fibers.wait();
      return;
    }
    last();
    ++generation_;
    for (const unsigned i : waiting_) fibers.wake(i);
    waiting_.clear();
  }
  uint64_t generation() const { return generation_; }

 private:
  int n_;
  std::vector<unsigned> waiting_;
  uint64_t generation_ = 0;
};

// One warp's meeting place: its barrier and each lane's registers for the operation at
// hand. One barrier an operation: what the lanes take back (d, value) is kept twice, by the
// barrier's generation's parity, so a lane's next operation never overwrites what a slower
// lane has yet to read (the one after it can: by then every lane has arrived again); what
// they leave (a, b, c, value) is read by the last to arrive before any lane goes on.
struct Warp {
  Barrier barrier{32};
  uint32_t a[32][4] = {}, b[32][2] = {};
  float c[32][4] = {}, d[2][32][4] = {};
  double value[2][32] = {};  // a float or a double shuffled (a float converts exactly)
};

// The block now running: its barrier, its warps.
class Block {
 public:
  explicit Block(int threads) : barrier_(threads), warps_((threads + 31) / 32) {}

  void sync() {
    barrier_.arrive([] {});
  }
  bool sync_or(bool predicate) {  // __syncthreads_or: every thread gets whether any passed true
    any_next_ = any_next_ || predicate;
    barrier_.arrive([&] {
      any_ = any_next_;
      any_next_ = false;
    });
    const bool result = any_;
    barrier_.arrive([] {});  // nobody reads any_ after the next sync_or changes it
    return result;
  }
  template <class T> T shfl_xor(T v, int lane_mask) {
    Warp& w = warp();
    const int lane = static_cast<int>(thread_index.x % 32);
    const uint64_t parity = w.barrier.generation() % 2;
    w.value[parity][lane] = static_cast<double>(v);
    w.barrier.arrive([] {});
    return static_cast<T>(w.value[parity][lane ^ lane_mask]);
  }
  // One lane's part of mma.sync with depth K (16: bf16 m16n8k16, 8: tf32 m16n8k8): the
  // lanes leave their registers, the last to arrive multiplies for all, each takes its D.
  template <int K> void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    Warp& w = warp();
    const int lane = static_cast<int>(thread_index.x % 32);
    const uint64_t parity = w.barrier.generation() % 2;
    for (int i = 0; i < 4; ++i) w.a[lane][i] = a[i], w.c[lane][i] = c[i];
    for (int i = 0; i < 2; ++i) w.b[lane][i] = b[i];
    w.barrier.arrive([&w, parity] { multiply<K>(w, w.d[parity]); });
    for (int i = 0; i < 4; ++i) c[i] = w.d[parity][lane][i];
  }

 private:
  Warp& warp() { return warps_[thread_index.x / 32]; }
  static float float_of(uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
  // D = A·B + C from the 32 lanes' registers, lane = 4g + t:
  //   m16n8k16 .bf16, two per register, the lower index in the lower half:
  //     a0 = A[g][2t, 2t+1], a1 = A[g+8][2t, 2t+1], a2 = A[g][2t+8, 2t+9], a3 = A[g+8][2t+8, 2t+9];
  //     b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g]
  //   m16n8k8 .tf32, one per register (the hardware reads 19 bits: the low 13 are dropped
  //     here, so an operand left unrounded shows): a0 = A[g][t], a1 = A[g+8][t],
  //     a2 = A[g][t+4], a3 = A[g+8][t+4]; b0 = B[t][g], b1 = B[t+4][g]
  //   both: c0, c1 = C[g][2t, 2t+1], c2, c3 = C[g+8][2t, 2t+1]
  template <int K> static void multiply(const Warp& w, float (&d)[32][4]) {
    double A[16][K], B[K][8];
    const auto half = [](uint32_t r, int upper) {
      return static_cast<double>(float_of((upper ? r >> 16 : r & 0xFFFFu) << 16));
    };
    const auto tf32 = [](uint32_t r) { return static_cast<double>(float_of(r & 0xFFFFE000u)); };
    for (int l = 0; l < 32; ++l) {
      const int g = l / 4, t = l % 4;
      if constexpr (K == 16) {
        for (int u = 0; u < 2; ++u) {
          A[g][2 * t + u] = half(w.a[l][0], u);
          A[g + 8][2 * t + u] = half(w.a[l][1], u);
          A[g][2 * t + 8 + u] = half(w.a[l][2], u);
          A[g + 8][2 * t + 8 + u] = half(w.a[l][3], u);
          B[2 * t + u][g] = half(w.b[l][0], u);
          B[2 * t + 8 + u][g] = half(w.b[l][1], u);
        }
      } else {
        A[g][t] = tf32(w.a[l][0]);
        A[g + 8][t] = tf32(w.a[l][1]);
        A[g][t + 4] = tf32(w.a[l][2]);
        A[g + 8][t + 4] = tf32(w.a[l][3]);
        B[t][g] = tf32(w.b[l][0]);
        B[t + 4][g] = tf32(w.b[l][1]);
      }
    }
    for (int l = 0; l < 32; ++l) {
      const int g = l / 4, t = l % 4;
      for (int e = 0; e < 4; ++e) {
        double sum = w.c[l][e];
        for (int k = 0; k < K; ++k) sum += A[g + 8 * (e / 2)][k] * B[k][2 * t + e % 2];
        d[l][e] = static_cast<float>(sum);
      }
    }
  }

  Barrier barrier_;
  std::vector<Warp> warps_;
  bool any_ = false, any_next_ = false;
};
inline Block* block = nullptr;  // the one running

// body() as a kernel of `blocks` blocks of `threads` threads, one block after another.
template <class Body> void launch(unsigned blocks, unsigned threads, Body&& body) {
  grid_dim = {blocks, 1, 1};
  block_dim = {threads, 1, 1};
  for (unsigned b = 0; b < blocks; ++b) {
    Block running(static_cast<int>(threads));
    block = &running;
    block_index = {b, 0, 0};
    Fibers(threads, body).run();
    block = nullptr;
  }
}

// f(i) for every i < count, as cuda/launch.cuh's for_each_index runs a functor on a device
// (one thread per index, grid-stride) — here in an order drawn afresh for each call, since a
// device promises none: a functor whose result hangs on the order (two indices writing one
// element, one reading what another writes) shows as a difference from the reference.
template <class F> void for_each_index(int64_t count, const F& f) {
  static std::mt19937_64 rng(20261206);
  std::vector<int64_t> order(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) order[static_cast<size_t>(i)] = i;
  std::shuffle(order.begin(), order.end(), rng);
  for (const int64_t i : order) f(i);
}
// The host as the `dev` of the launch code written once for any device (cuda/launch.cuh's Gpu on
// a GPU):
//   dev(n, f)                                       every index once, in a shuffled order;
//   dev.blocks(kernel, tasks, threads, bytes, args…)  the kernel on min(tasks, 3) blocks of fibers
//                                                   (the kernels stride over their tasks: fewer
//                                                   blocks than a device's compute the same, and
//                                                   three still stride), its shared memory checked
//                                                   against the buffer's kSharedBytes;
//   dev.scratch<T>(count)                           memory held while dev lives, every byte 0xFF
//                                                   (NaN in floating point: a read before a write shows).
inline constexpr size_t kSharedBytes = 160 * 1024;  // ag::cuda::shared_bytes, which the test defines
class Device {
 public:
  template <class F> void operator()(int64_t n, const F& f) const { for_each_index(n, f); }
  template <class... Params, class... Args>
  void blocks(void (*kernel)(Params...), int64_t tasks, int threads, size_t bytes, Args... args) const {
    if (tasks == 0) return;
    if (bytes > kSharedBytes) throw std::runtime_error("a kernel asks more shared memory than the host's buffer");
    launch(static_cast<unsigned>(std::min<int64_t>(tasks, 3)), static_cast<unsigned>(threads),
           [&] { kernel(args...); });
  }
  template <class T> T* scratch(int64_t count) {
    held_.emplace_back(static_cast<size_t>(count > 0 ? count : 1) * sizeof(T), static_cast<unsigned char>(0xFF));
    return reinterpret_cast<T*>(held_.back().data());
  }

 private:
  std::vector<std::vector<unsigned char>> held_;
};

}  // namespace ag::test::cuda_host

// The seams of cuda/mma_fragments.cuh for a host build.
namespace ag::cuda::mma {
struct bf16 {
  uint16_t bits;
};
inline int lane() { return static_cast<int>(ag::test::cuda_host::thread_index.x % 32); }
inline uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
inline float float_of(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline uint16_t bits_of(bf16 x) { return x.bits; }
inline bf16 round_bf16(float x) {  // to nearest, ties to even (finite x)
  uint32_t u = bits_of(x);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(u >> 16)};
}
inline uint32_t pair_at(const bf16* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
}  // namespace ag::cuda::mma

// The CUDA keywords and intrinsics the device code uses (undefined again by tests/cuda_on_host_end.h).
#define __global__
#define __device__
#define __host__
#define __shared__ static  // a kernel's fixed shared arrays: one per function, as blocks run one at a time
#define __launch_bounds__(threads)
#define __align__(bytes) __attribute__((aligned(bytes)))
#define threadIdx ag::test::cuda_host::thread_index
#define blockIdx ag::test::cuda_host::block_index
#define blockDim ag::test::cuda_host::block_dim
#define gridDim ag::test::cuda_host::grid_dim
inline void __syncthreads() { ag::test::cuda_host::block->sync(); }
inline int __syncthreads_or(int predicate) { return ag::test::cuda_host::block->sync_or(predicate != 0) ? 1 : 0; }
template <class T> T __shfl_xor_sync(unsigned, T v, int lane_mask) {  // float and double
  return ag::test::cuda_host::block->shfl_xor(v, lane_mask);
}
// atomicMin on an integer: one thing runs at a time here (a block's fibers switch only at barriers,
// a functor's indices run one after another), so a plain min is atomic.
inline unsigned long long atomicMin(unsigned long long* address, unsigned long long value) {
  const unsigned long long old = *address;
  if (value < old) *address = value;
  return old;
}
struct alignas(16) uint4 {  // CUDA's: 16 bytes, 16-byte aligned (the kernels copy tiles 16 bytes at a time)
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

#include "cuda/mma_fragments.cuh"

namespace ag::test::cuda_host {
// The fragments' operand formats with the model in place of mma.sync.
struct HostBf16 : ag::cuda::mma::Bf16 {
  static void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) { block->mma<16>(c, a, b); }
};
struct HostTf32 : ag::cuda::mma::Tf32 {
  static void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) { block->mma<8>(c, a, b); }
};
}  // namespace ag::test::cuda_host
