// cuda_emulate.h: build CUDA kernel source with a host C++ compiler and run it on the CPU.
//
//   g++ -std=c++20 -x c++ -include cuda_emulate.h -I stubs -shared -fPIC kernel.cu
//
// Why: development and CI machines have nvcc but no GPU. With this header the very source that
// nvcc turns into a cubin is compiled by g++, so the kernel's *logic* (indexing, tiling, shared
// memory staging, barriers, warp shuffles, tensor-core fragments, warpgroup MMAs) is checked
// against numpy on the CPU. Nothing here says anything about speed.
//
// Execution model (`cuda_emu::run`). Every CUDA thread of a block is a fiber with its own
// stack, run by a scheduler on the launching OS thread; blocks run one after the other, so
// `__shared__` is `static` storage and a grid of a million blocks reuses one block's fibers.
// The scheduler sets `threadIdx`/`blockIdx` before resuming a thread. `__syncthreads()` is a
// barrier over the block's live threads; warp-level operations (shuffles, votes, `__syncwarp`,
// WMMA) meet at a barrier over the warp's live lanes and exchange values through a per-warp
// buffer. A thread that returns leaves those barriers (as exited threads do on the GPU), so
// `if (i >= n) return;` before `__syncthreads()` works.
//
// Limits: no inline PTX (guard it with `#ifdef __CUDA_ARCH__` or `#ifndef TUNEHUB_EMULATE`; the
// CUDA renderer keeps its `cp.async` PTX in helpers whose C++ body under TUNEHUB_EMULATE copies
// at once, as `__pipeline_memcpy_async` below does);
// warp operations must be called by every live lane of the warp (their mask is not honoured);
// blocks of one launch cannot wait on each other (no grid sync, no spin locks between blocks);
// `extern __shared__` arrays are rewritten by the emulator's build step (`T name[]` cannot
// alias a run-time buffer in C++); fp16/bf16 arithmetic is float arithmetic rounded at each
// operation; WMMA fragments hold the whole tile in every lane; atomics are atomic only among
// the threads of one launch, which is all a kernel can see; wgmma operands must live in dynamic
// shared memory (see the warpgroup section below).
#pragma once

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <math.h>
#include <new>
#include <type_traits>
#include <utility>

#define TUNEHUB_EMULATE 1

// ---- qualifiers --------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __shared__ static
#define __forceinline__ inline __attribute__((always_inline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __grid_constant__

// A tensor map kernel parameter (TMA; see `tensor_copy`): over-aligned on the device only, as
// the host's parameter copies are not.
struct TunehubTensorMap {
  unsigned long long opaque[16];
};

// ---- built-in vector types ---------------------------------------------------------------
// Alignments follow CUDA's vector_types.h: 2- and 4-vectors are aligned to their size (up to
// 16 bytes), so `reinterpret_cast<float4*>` loads behave as on the device.
#define CUDA_EMU_VEC2(name, T, align)                                                          \
  struct __attribute__((aligned(align))) name {                                                \
    T x, y;                                                                                    \
  };                                                                                           \
  inline name make_##name(T x, T y) { return name{x, y}; }
#define CUDA_EMU_VEC3(name, T)                                                                 \
  struct name {                                                                                \
    T x, y, z;                                                                                 \
  };                                                                                           \
  inline name make_##name(T x, T y, T z) { return name{x, y, z}; }
#define CUDA_EMU_VEC4(name, T, align)                                                          \
  struct __attribute__((aligned(align))) name {                                                \
    T x, y, z, w;                                                                              \
  };                                                                                           \
  inline name make_##name(T x, T y, T z, T w) { return name{x, y, z, w}; }

CUDA_EMU_VEC2(char2, signed char, 2)
CUDA_EMU_VEC4(char4, signed char, 4)
CUDA_EMU_VEC2(uchar2, unsigned char, 2)
CUDA_EMU_VEC4(uchar4, unsigned char, 4)
CUDA_EMU_VEC2(short2, short, 4)
CUDA_EMU_VEC4(short4, short, 8)
CUDA_EMU_VEC2(ushort2, unsigned short, 4)
CUDA_EMU_VEC4(ushort4, unsigned short, 8)
CUDA_EMU_VEC2(int2, int, 8)
CUDA_EMU_VEC3(int3, int)
CUDA_EMU_VEC4(int4, int, 16)
CUDA_EMU_VEC2(uint2, unsigned int, 8)
CUDA_EMU_VEC3(uint3, unsigned int)
CUDA_EMU_VEC4(uint4, unsigned int, 16)
CUDA_EMU_VEC2(float2, float, 8)
CUDA_EMU_VEC3(float3, float)
CUDA_EMU_VEC4(float4, float, 16)
CUDA_EMU_VEC2(longlong2, long long, 16)
CUDA_EMU_VEC2(ulonglong2, unsigned long long, 16)
CUDA_EMU_VEC2(double2, double, 16)

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
      : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

// ---- thread identity -----------------------------------------------------------------------
// Plain globals: every CUDA thread of a launch runs on the launching OS thread (see below),
// and the scheduler sets them before it resumes a thread. All state here is `static`: an
// `inline` variable would be a unique symbol that the dynamic linker shares among every
// emulation library of a process, and that keeps them from ever being unloaded.
static uint3 threadIdx;
static uint3 blockIdx;
static dim3 blockDim;
static dim3 gridDim;
constexpr int warpSize = 32;

namespace cuda_emu {

constexpr std::size_t STACK_BYTES = 256 * 1024;  // per CUDA thread (WMMA tiles live there)
enum Wait {
  RUNNABLE = 0,
  AT_BLOCK_BARRIER = 1,
  AT_WARP_BARRIER = 2,
  AT_MBARRIER = 3,
  AT_NAMED_BARRIER = 4
};

// Threads that meet at barriers: the block (`__syncthreads`), or one warp.
struct Group {
  unsigned live = 0;     // members that have not exited
  unsigned arrived = 0;  // members waiting at the current barrier
};

struct Warp {
  Group group;
  unsigned live_mask = 0;
  alignas(16) unsigned char slot[32][16];  // one value per lane for shuffles and votes
  alignas(16) unsigned char tile[256 * 4];  // a WMMA product, computed a share per lane
};

// Switching between fibers. On x86-64, six callee-saved registers and the stack pointer,
// about 10 ns; elsewhere swapcontext, whose signal-mask system calls cost ~50 times more.
#if defined(__x86_64__) && !defined(CUDA_EMU_UCONTEXT)
extern "C" void cuda_emu_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl cuda_emu_switch
  .hidden cuda_emu_switch
  .type cuda_emu_switch, @function
cuda_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size cuda_emu_switch, .-cuda_emu_switch
)");

struct Context {
  void* sp = nullptr;
};

// A stack whose first switch "returns" into `entry` (as if called: rsp % 16 == 8 there).
inline void prepare(Context& c, unsigned char* stack, std::size_t size, void (*entry)()) {
  auto* top = reinterpret_cast<std::uintptr_t*>(stack + size);
  top[-1] = 0;                                        // entry's return address: never used
  top[-2] = reinterpret_cast<std::uintptr_t>(entry);  // popped by cuda_emu_switch's `ret`
  for (int r = 3; r <= 8; r++) top[-r] = 0;           // the six callee-saved registers
  c.sp = top - 8;
}

inline void switch_context(Context& from, Context& to) { cuda_emu_switch(&from.sp, to.sp); }
#else
struct Context {
  ucontext_t uc;
};

inline void prepare(Context& c, unsigned char* stack, std::size_t size, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}

inline void switch_context(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
#endif

// A wgmma the thread issued and has not waited for: it runs at the wait (see `wgmma`).
struct PendingMma {
  void (*run)(float*, int, std::uint64_t, std::uint64_t, int, int) = nullptr;
  float* d = nullptr;
  int n = 0, trans_a = 0, trans_b = 0;
  std::uint64_t a = 0, b = 0;
  unsigned group = 0;  // the commit that closes its group
};
constexpr unsigned MAX_PENDING_MMAS = 64;
constexpr unsigned MAX_TRANSACTION_BARRIERS = 64;

struct Fiber {
  Context context;
  unsigned char* stack = nullptr;
  bool finished = false;
  Wait wait = RUNNABLE;
  const void* awaited = nullptr;  // the mbarrier it waits on (AT_MBARRIER)
  PendingMma mmas[MAX_PENDING_MMAS];
  unsigned pending = 0;    // queued wgmmas
  unsigned committed = 0;  // wgmma groups committed in this block
};

struct Launch {
  unsigned threads = 0;  // per block
  Fiber* fibers = nullptr;
  Warp* warps = nullptr;
  Group block;
  unsigned running = 0;  // the thread (fiber) now running
  Context scheduler;
  void (*body)(void*) = nullptr;
  void* context = nullptr;
  unsigned char* dynamic_shared = nullptr;
  // Bytes of tensor copies each mbarrier's current phase still waits for (`mbarrier_expect`).
  struct Transactions {
    const void* bar;
    long long bytes;
  } transactions[MAX_TRANSACTION_BARRIERS];
  unsigned transaction_barriers = 0;
  unsigned named[16] = {};  // threads arrived at each named barrier (`bar.sync id, count`)
};

static Launch* current = nullptr;  // one launch at a time
static unsigned launches = 0;      // odd launches run the threads of a block in reverse order
static char error[512];

inline Warp& my_warp() { return current->warps[current->running / 32]; }
inline unsigned my_lane() { return current->running % 32; }
inline unsigned char* dynamic_shared() { return current->dynamic_shared; }

inline void release(Group& group, Wait wait, unsigned first, unsigned count) {
  group.arrived = 0;
  for (unsigned t = first; t < first + count; t++)
    if (current->fibers[t].wait == wait) current->fibers[t].wait = RUNNABLE;
}

// Arrive at `group`'s barrier: the last to arrive releases the others and goes on; the
// others yield to the scheduler until released.
inline void arrive(Group& group, Wait wait, unsigned first, unsigned count) {
  if (++group.arrived == group.live) {
    release(group, wait, first, count);
    return;
  }
  Fiber& self = current->fibers[current->running];
  self.wait = wait;
  switch_context(self.context, current->scheduler);
}

// An exited thread no longer holds up the barriers of its block and warp.
inline void leave(Group& group, Wait wait, unsigned first, unsigned count) {
  --group.live;
  if (group.arrived > 0 && group.arrived == group.live) release(group, wait, first, count);
}

inline unsigned warp_lanes(unsigned warp) {
  unsigned first = 32 * warp;
  return current->threads - first < 32 ? current->threads - first : 32;
}

inline void block_barrier() { arrive(current->block, AT_BLOCK_BARRIER, 0, current->threads); }

// `bar.sync index, count`: the count-th thread to arrive releases the others waiting there.
inline void named_barrier(unsigned index, unsigned count) {
  unsigned& arrived = current->named[index & 15];
  Fiber& self = current->fibers[current->running];
  if (++arrived == count) {
    arrived = 0;
    for (unsigned t = 0; t < current->threads; t++)
      if (current->fibers[t].wait == AT_NAMED_BARRIER && current->fibers[t].awaited == &arrived)
        current->fibers[t].wait = RUNNABLE;
    return;
  }
  self.wait = AT_NAMED_BARRIER;
  self.awaited = &arrived;
  switch_context(self.context, current->scheduler);
}

inline void warp_barrier() {
  unsigned warp = current->running / 32;
  arrive(current->warps[warp].group, AT_WARP_BARRIER, 32 * warp, warp_lanes(warp));
}

// Put `value` in this lane's slot, wait for the warp, read lane `source`'s slot (own value if
// that lane does not exist or has exited), and wait again so no slot is overwritten early.
template <class T>
T exchange(T value, int source) {
  static_assert(sizeof(T) <= 16 && std::is_trivially_copyable<T>::value, "shuffle type");
  Warp& warp = my_warp();
  std::memcpy(warp.slot[my_lane()], &value, sizeof(T));
  warp_barrier();
  T result = value;
  if (source >= 0 && source < 32 && (warp.live_mask >> source & 1u))
    std::memcpy(&result, warp.slot[source], sizeof(T));
  warp_barrier();
  return result;
}

// `combine` over every live lane's `value`, in lane order.
template <class T, class F>
T across_warp(T value, F combine, T initial) {
  Warp& warp = my_warp();
  std::memcpy(warp.slot[my_lane()], &value, sizeof(T));
  warp_barrier();
  T result = initial;
  for (unsigned lane = 0; lane < 32; lane++) {
    if (!(warp.live_mask >> lane & 1u)) continue;
    T other;
    std::memcpy(&other, warp.slot[lane], sizeof(T));
    result = combine(result, other, lane);
  }
  warp_barrier();
  return result;
}

inline int fail(const char* message) {
  std::snprintf(error, sizeof error, "%s", message);
  return 1;
}

template <class... P, std::size_t... I>
void invoke(void (*kernel)(P...), void** params, std::index_sequence<I...>) {
  kernel(*static_cast<std::remove_cv_t<P>*>(params[I])...);
}

// A fiber's life: the kernel, then leaving its barriers, then back to the scheduler for good.
inline void fiber_main() {
  Launch& launch = *current;
  launch.body(launch.context);
  unsigned t = launch.running, warp = t / 32;
  launch.fibers[t].finished = true;
  launch.warps[warp].live_mask &= ~(1u << t % 32);
  leave(launch.block, AT_BLOCK_BARRIER, 0, launch.threads);
  leave(launch.warps[warp].group, AT_WARP_BARRIER, 32 * warp, warp_lanes(warp));
  switch_context(launch.fibers[t].context, launch.scheduler);
}

// Run every thread of the current block to its end; false on a deadlock (threads waiting at
// barriers that the others never reach).
inline bool run_block(Launch& launch, bool reverse) {
  launch.block = Group{launch.threads, 0};
  launch.transaction_barriers = 0;
  for (unsigned& arrived : launch.named) arrived = 0;
  for (unsigned w = 0; w < (launch.threads + 31) / 32; w++) {
    unsigned lanes = warp_lanes(w);
    launch.warps[w].group = Group{lanes, 0};
    launch.warps[w].live_mask = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
  }
  for (unsigned t = 0; t < launch.threads; t++) {
    Fiber& f = launch.fibers[t];
    f.finished = false;
    f.pending = f.committed = 0;
    f.wait = RUNNABLE;
    prepare(f.context, f.stack, STACK_BYTES, fiber_main);
  }
  unsigned finished = 0;
  while (finished < launch.threads) {
    bool progressed = false;
    for (unsigned k = 0; k < launch.threads; k++) {
      unsigned t = reverse ? launch.threads - 1 - k : k;
      Fiber& f = launch.fibers[t];
      if (f.finished || f.wait != RUNNABLE) continue;
      launch.running = t;
      threadIdx = uint3{t % blockDim.x, t / blockDim.x % blockDim.y, t / (blockDim.x * blockDim.y)};
      switch_context(launch.scheduler, f.context);
      progressed = true;
      finished += f.finished;
    }
    if (!progressed) return false;
  }
  return true;
}

// The deadlock message: where the block's stuck threads wait, as runs of threads waiting alike
// (an mbarrier named by its byte offset in dynamic shared memory), the first few of them.
inline int deadlock(const Launch& launch) {
  static const char* const where[] = {"running", "__syncthreads", "a warp barrier", "mbarrier",
                                      "a named barrier"};
  int n = std::snprintf(error, sizeof error,
                        "deadlock in block (%u, %u, %u): threads wait at a barrier that the "
                        "other live threads of their block or warp never reach or complete:",
                        blockIdx.x, blockIdx.y, blockIdx.z);
  unsigned runs = 0;
  for (unsigned t = 0; t < launch.threads && runs < 6; runs++) {
    const Fiber& f = launch.fibers[t];
    unsigned last = t;
    auto alike = [&](const Fiber& g) {
      return g.finished == f.finished && g.wait == f.wait && g.awaited == f.awaited;
    };
    while (last + 1 < launch.threads && alike(launch.fibers[last + 1])) last++;
    if (!f.finished && n > 0 && static_cast<std::size_t>(n) < sizeof error) {
      long offset = f.wait == AT_MBARRIER
                        ? static_cast<const unsigned char*>(f.awaited) - launch.dynamic_shared
                        : -1;
      n += std::snprintf(error + n, sizeof error - n, " threads %u-%u at %s", t, last,
                         where[f.wait]);
      if (offset >= 0 && static_cast<std::size_t>(n) < sizeof error)
        n += std::snprintf(error + n, sizeof error - n, " %ld", offset);
    }
    t = last + 1;
  }
  return 1;
}

// Run `body(context)` as the kernel of every thread of every block; 0 or 1 (see `error`).
//
// Each CUDA thread of a block is a fiber (a user-level context with its own stack) on this OS
// thread; the blocks run one after the other, each reusing the block's fibers. A thread runs
// until it waits at a barrier or ends, then the next runnable one resumes: a barrier costs a
// context switch per thread (~10 ns) instead of an OS thread wake-up (~2 µs or more on a
// loaded machine), and the order is deterministic. Odd launches resume the threads in reverse
// order, so a missing barrier between a write and another thread's read shows up in one of
// two runs whichever thread comes first; a barrier that not every live thread reaches is
// reported as a deadlock instead of hanging.
inline int run(dim3 grid, dim3 block, std::size_t shared, void (*body)(void*), void* context) {
  unsigned long long threads = 1ull * block.x * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64)
    return fail("invalid block dimensions (at most 1024 threads, z at most 64)");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 ||
      grid.z > 65535)
    return fail("invalid grid dimensions");
  if (shared > 227 * 1024) return fail("more than 227 KiB of dynamic shared memory");
  if (current != nullptr) return fail("another launch is running");
  std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  std::size_t slot = STACK_BYTES + page;  // a guard page below each stack
  std::size_t bytes = slot * threads;
  void* stacks = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (stacks == MAP_FAILED) return fail("cannot map the threads' stacks");
  Launch launch;
  launch.threads = static_cast<unsigned>(threads);
  launch.fibers = new Fiber[launch.threads];
  launch.warps = new Warp[(launch.threads + 31) / 32];
  for (unsigned t = 0; t < launch.threads; t++) {
    unsigned char* guard = static_cast<unsigned char*>(stacks) + slot * t;
    mprotect(guard, page, PROT_NONE);
    launch.fibers[t].stack = guard + page;
  }
  launch.body = body;
  launch.context = context;
  // Zero-sized requests still get a valid, aligned pointer.
  launch.dynamic_shared =
      static_cast<unsigned char*>(::operator new(shared + 128, std::align_val_t(1024)));
  blockDim = block;
  gridDim = grid;
  current = &launch;
  bool reverse = launches++ & 1u;
  int status = 0;
  for (unsigned z = 0; z < grid.z && status == 0; z++)
    for (unsigned y = 0; y < grid.y && status == 0; y++)
      for (unsigned x = 0; x < grid.x && status == 0; x++) {
        blockIdx = uint3{x, y, z};
        if (!run_block(launch, reverse)) status = deadlock(launch);
      }
  current = nullptr;
  ::operator delete(launch.dynamic_shared, std::align_val_t(128));
  delete[] launch.warps;
  delete[] launch.fibers;
  munmap(stacks, bytes);
  return status;
}

// The kernel's parameters arrive as cuLaunchKernel takes them: an array of pointers, one to
// each argument's value, in declaration order.
template <class... P>
int launch(void (*kernel)(P...), const unsigned* grid, const unsigned* block, std::size_t shared,
           void** params) {
  struct Call {
    void (*kernel)(P...);
    void** params;
  } call{kernel, params};
  auto body = [](void* c) {
    Call& self = *static_cast<Call*>(c);
    invoke(self.kernel, self.params, std::index_sequence_for<P...>{});
  };
  return run(dim3(grid[0], grid[1], grid[2]), dim3(block[0], block[1], block[2]), shared, body,
             &call);
}

}  // namespace cuda_emu

// ---- synchronization ---------------------------------------------------------------------
inline void __syncthreads() { cuda_emu::block_barrier(); }
inline void __syncwarp(unsigned = 0xffffffffu) { cuda_emu::warp_barrier(); }
inline void __threadfence() {}
inline void __threadfence_block() {}
[[noreturn]] inline void __trap() { std::abort(); }
inline long long clock64() { return 0; }
inline unsigned __activemask() { return cuda_emu::my_warp().live_mask; }

// ---- warp shuffles and votes ---------------------------------------------------------------
template <class T>
T __shfl_sync(unsigned, T var, int src_lane, int width = warpSize) {
  int lane = static_cast<int>(cuda_emu::my_lane());
  return cuda_emu::exchange(var, (lane & ~(width - 1)) + (src_lane & (width - 1)));
}
template <class T>
T __shfl_up_sync(unsigned, T var, unsigned delta, int width = warpSize) {
  int lane = static_cast<int>(cuda_emu::my_lane());
  int source = lane - static_cast<int>(delta);
  return cuda_emu::exchange(var, source < (lane & ~(width - 1)) ? lane : source);
}
template <class T>
T __shfl_down_sync(unsigned, T var, unsigned delta, int width = warpSize) {
  int lane = static_cast<int>(cuda_emu::my_lane());
  int source = lane + static_cast<int>(delta);
  return cuda_emu::exchange(var, source >= (lane & ~(width - 1)) + width ? lane : source);
}
template <class T>
T __shfl_xor_sync(unsigned, T var, int lane_mask, int width = warpSize) {
  int lane = static_cast<int>(cuda_emu::my_lane());
  int source = lane ^ lane_mask;
  return cuda_emu::exchange(var, source >= (lane & ~(width - 1)) + width ? lane : source);
}

inline unsigned __ballot_sync(unsigned, int predicate) {
  return cuda_emu::across_warp(
      predicate ? 1u : 0u, [](unsigned acc, unsigned v, unsigned lane) { return acc | v << lane; },
      0u);
}
inline int __any_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }
inline int __all_sync(unsigned mask, int predicate) {
  return __ballot_sync(mask, !predicate) == 0;
}
inline unsigned __reduce_add_sync(unsigned, unsigned value) {
  return cuda_emu::across_warp(value, [](unsigned a, unsigned b, unsigned) { return a + b; }, 0u);
}
inline int __reduce_add_sync(unsigned, int value) {
  return cuda_emu::across_warp(value, [](int a, int b, unsigned) { return a + b; }, 0);
}
inline unsigned __reduce_max_sync(unsigned, unsigned value) {
  return cuda_emu::across_warp(
      value, [](unsigned a, unsigned b, unsigned) { return a > b ? a : b; }, 0u);
}
inline unsigned __reduce_min_sync(unsigned, unsigned value) {
  return cuda_emu::across_warp(
      value, [](unsigned a, unsigned b, unsigned) { return a < b ? a : b; }, 0xffffffffu);
}

// ---- memory --------------------------------------------------------------------------------
template <class T>
T __ldg(const T* p) { return *p; }
template <class T>
T __ldcg(const T* p) { return *p; }
template <class T>
T __ldca(const T* p) { return *p; }
template <class T>
T __ldcs(const T* p) { return *p; }
template <class T>
void __stcg(T* p, T v) { *p = v; }
template <class T>
void __stcs(T* p, T v) { *p = v; }

// cp.async without an asynchronous copy engine: the copy happens at once, so commit and wait
// have nothing left to do. `zfill` trailing bytes of the `size` are zeroed, as on the device.
inline void __pipeline_memcpy_async(void* dst, const void* src, std::size_t size,
                                    std::size_t zfill = 0) {
  std::memcpy(dst, src, size - zfill);
  std::memset(static_cast<char*>(dst) + (size - zfill), 0, zfill);
}
inline void __pipeline_commit() {}
inline void __pipeline_wait_prior(std::size_t) {}
inline std::size_t __cvta_generic_to_shared(const void* p) {
  return reinterpret_cast<std::size_t>(p);
}

// ---- atomics -------------------------------------------------------------------------------
// The value converts to the pointee's type, as CUDA's overloads convert it.
template <class T>
using Same = std::type_identity_t<T>;
template <class T>
T atomicAdd(T* p, Same<T> v) { return std::atomic_ref<T>(*p).fetch_add(v); }
template <class T>
T atomicSub(T* p, Same<T> v) { return std::atomic_ref<T>(*p).fetch_sub(v); }
template <class T>
T atomicExch(T* p, Same<T> v) { return std::atomic_ref<T>(*p).exchange(v); }
template <class T>
T atomicCAS(T* p, Same<T> compare, Same<T> v) {
  std::atomic_ref<T>(*p).compare_exchange_strong(compare, v);
  return compare;
}
template <class T>
T atomicMax(T* p, Same<T> v) {
  std::atomic_ref<T> ref(*p);
  T old = ref.load();
  while (old < v && !ref.compare_exchange_weak(old, v)) {
  }
  return old;
}
template <class T>
T atomicMin(T* p, Same<T> v) {
  std::atomic_ref<T> ref(*p);
  T old = ref.load();
  while (v < old && !ref.compare_exchange_weak(old, v)) {
  }
  return old;
}

// ---- math the device has and libm lacks -----------------------------------------------------
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanf(float x) { return std::tan(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __fadd_rn(float x, float y) { return x + y; }
inline float __fmul_rn(float x, float y) { return x * y; }
inline float __fmaf_rn(float x, float y, float z) { return std::fma(x, y, z); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline int __float2int_rz(float x) { return static_cast<int>(x); }
inline int __float2int_rn(float x) { return static_cast<int>(std::nearbyint(x)); }
inline float __int2float_rn(int x) { return static_cast<float>(x); }
inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
inline float __uint_as_float(unsigned x) { float f; std::memcpy(&f, &x, 4); return f; }
inline unsigned __float_as_uint(float x) { unsigned i; std::memcpy(&i, &x, 4); return i; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((1ull * a * b) >> 32);
}

#define CUDA_EMU_MINMAX(T)                                                                     \
  inline T min(T a, T b) { return b < a ? b : a; }                                             \
  inline T max(T a, T b) { return a < b ? b : a; }
CUDA_EMU_MINMAX(int)
CUDA_EMU_MINMAX(unsigned int)
CUDA_EMU_MINMAX(long)
CUDA_EMU_MINMAX(unsigned long)
CUDA_EMU_MINMAX(long long)
CUDA_EMU_MINMAX(unsigned long long)
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }

// ---- 16-bit floats -------------------------------------------------------------------------
namespace cuda_emu {

inline float half_bits_to_float(std::uint16_t h) {
  std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu, bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else {  // zero or subnormal: exact in float
    float value = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -value : value;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, as __float2half_rn does (overflow to infinity, NaN stays NaN).
inline std::uint16_t float_to_half_bits(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  std::uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;
  if (a >= 0x38800000u) {  // a normal half, or an overflow
    std::uint32_t r = (a + 0xfffu + ((a >> 13) & 1u)) >> 13;
    r -= 112u << 10;
    return sign | static_cast<std::uint16_t>(r >= 0x7c00u ? 0x7c00u : r);
  }
  std::uint32_t exponent = a >> 23;
  if (exponent < 102) return sign;  // below half the smallest subnormal
  std::uint32_t mantissa = (a & 0x7fffffu) | 0x800000u, shift = 126 - exponent;
  std::uint32_t q = mantissa >> shift, rest = mantissa & ((1u << shift) - 1);
  std::uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (q & 1u))) q++;
  return sign | static_cast<std::uint16_t>(q);
}

inline float bfloat_bits_to_float(std::uint16_t h) {
  std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline std::uint16_t float_to_bfloat_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

// A 16-bit float: storage of `bits`, arithmetic in float rounded back after each operation.
template <float (*ToFloat)(std::uint16_t), std::uint16_t (*FromFloat)(float)>
struct Half16 {
  std::uint16_t bits;
  Half16() = default;
  Half16(float f) : bits(FromFloat(f)) {}
  Half16(double d) : bits(FromFloat(static_cast<float>(d))) {}
  Half16(int i) : bits(FromFloat(static_cast<float>(i))) {}
  operator float() const { return ToFloat(bits); }
  static Half16 raw(std::uint16_t b) {
    Half16 h;
    h.bits = b;
    return h;
  }
  Half16& operator+=(Half16 o) { return *this = Half16(float(*this) + float(o)); }
  Half16& operator-=(Half16 o) { return *this = Half16(float(*this) - float(o)); }
  Half16& operator*=(Half16 o) { return *this = Half16(float(*this) * float(o)); }
  Half16& operator/=(Half16 o) { return *this = Half16(float(*this) / float(o)); }
  friend Half16 operator+(Half16 a, Half16 b) { return Half16(float(a) + float(b)); }
  friend Half16 operator-(Half16 a, Half16 b) { return Half16(float(a) - float(b)); }
  friend Half16 operator*(Half16 a, Half16 b) { return Half16(float(a) * float(b)); }
  friend Half16 operator/(Half16 a, Half16 b) { return Half16(float(a) / float(b)); }
  friend Half16 operator-(Half16 a) { return raw(a.bits ^ 0x8000u); }
  friend bool operator==(Half16 a, Half16 b) { return float(a) == float(b); }
  friend bool operator!=(Half16 a, Half16 b) { return float(a) != float(b); }
  friend bool operator<(Half16 a, Half16 b) { return float(a) < float(b); }
  friend bool operator<=(Half16 a, Half16 b) { return float(a) <= float(b); }
  friend bool operator>(Half16 a, Half16 b) { return float(a) > float(b); }
  friend bool operator>=(Half16 a, Half16 b) { return float(a) >= float(b); }
};

}  // namespace cuda_emu

using __half = cuda_emu::Half16<cuda_emu::half_bits_to_float, cuda_emu::float_to_half_bits>;
using __nv_bfloat16 =
    cuda_emu::Half16<cuda_emu::bfloat_bits_to_float, cuda_emu::float_to_bfloat_bits>;
using half = __half;
using nv_bfloat16 = __nv_bfloat16;
struct __attribute__((aligned(4))) __half2 {
  __half x, y;
};
struct __attribute__((aligned(4))) __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
using half2 = __half2;
using nv_bfloat162 = __nv_bfloat162;

inline float __half2float(__half h) { return float(h); }
inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline unsigned short __half_as_ushort(__half h) { return h.bits; }
inline __half __ushort_as_half(unsigned short b) { return __half::raw(b); }
inline float __bfloat162float(__nv_bfloat16 h) { return float(h); }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.bits; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short b) { return __nv_bfloat16::raw(b); }
inline __half2 __floats2half2_rn(float a, float b) { return __half2{__half(a), __half(b)}; }
inline __half2 __halves2half2(__half a, __half b) { return __half2{a, b}; }
inline float2 __half22float2(__half2 h) { return float2{float(h.x), float(h.y)}; }
inline float __low2float(__half2 h) { return float(h.x); }
inline float __high2float(__half2 h) { return float(h.y); }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
  return __nv_bfloat162{__nv_bfloat16(a), __nv_bfloat16(b)};
}
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return float2{float(h.x), float(h.y)}; }
template <class H>
H __hadd(H a, H b) { return a + b; }
template <class H>
H __hsub(H a, H b) { return a - b; }
template <class H>
H __hmul(H a, H b) { return a * b; }
template <class H>
H __hfma(H a, H b, H c) { return H(std::fma(float(a), float(b), float(c))); }
template <class H>
H __hmax(H a, H b) { return H(std::fmax(float(a), float(b))); }
template <class H>
H __hmin(H a, H b) { return H(std::fmin(float(a), float(b))); }

// ---- tensor cores (WMMA) -------------------------------------------------------------------
// Every lane holds the whole tile (the same values in every lane); element-wise loops over
// `x[0..num_elements)` therefore touch every element, as they do, spread over the lanes, on
// the device. `mma_sync` is warp-collective: the lanes share out the product's elements.
// Products accumulate in float (int for integer inputs); tf32 inputs are truncated to tf32's
// 10-bit mantissa.
namespace nvcuda {
namespace wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32 {};
}  // namespace precision

template <class T>
struct storage {
  using type = T;
};
template <>
struct storage<precision::tf32> {
  using type = float;
};

template <class Use, int M, int N, int K>
struct tile_shape;
template <int M, int N, int K>
struct tile_shape<matrix_a, M, N, K> {
  static constexpr int rows = M, cols = K;
};
template <int M, int N, int K>
struct tile_shape<matrix_b, M, N, K> {
  static constexpr int rows = K, cols = N;
};
template <int M, int N, int K>
struct tile_shape<accumulator, M, N, K> {
  static constexpr int rows = M, cols = N;
};

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  using element_type = typename storage<T>::type;
  static constexpr int rows = tile_shape<Use, M, N, K>::rows;
  static constexpr int cols = tile_shape<Use, M, N, K>::cols;
  static constexpr int num_elements = rows * cols;
  element_type x[num_elements];  // row-major, whatever the memory layout was
};

template <class Use, int M, int N, int K, class T, class L, class V>
void fill_fragment(fragment<Use, M, N, K, T, L>& f, const V& value) {
  for (auto& e : f.x) e = static_cast<typename fragment<Use, M, N, K, T, L>::element_type>(value);
}

template <class F, class P>
void load_tile(F& f, const P* p, unsigned ldm, bool row_major_memory) {
  for (int r = 0; r < F::rows; r++)
    for (int c = 0; c < F::cols; c++)
      f.x[r * F::cols + c] = p[row_major_memory ? r * ldm + c : c * ldm + r];
}

template <class Use, int M, int N, int K, class T, class P>
void load_matrix_sync(fragment<Use, M, N, K, T, row_major>& f, const P* p, unsigned ldm) {
  load_tile(f, p, ldm, true);
}
template <class Use, int M, int N, int K, class T, class P>
void load_matrix_sync(fragment<Use, M, N, K, T, col_major>& f, const P* p, unsigned ldm) {
  load_tile(f, p, ldm, false);
}
template <int M, int N, int K, class T, class P>
void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const P* p, unsigned ldm,
                      layout_t layout) {
  load_tile(f, p, ldm, layout == mem_row_major);
}

// The lowest live lane writes the tile; the warp then waits for it, as a collective store
// completes for the whole warp.
template <int M, int N, int K, class T, class P>
void store_matrix_sync(P* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm,
                       layout_t layout) {
  if (__builtin_ctz(cuda_emu::my_warp().live_mask) == static_cast<int>(cuda_emu::my_lane())) {
    for (int r = 0; r < M; r++)
      for (int c = 0; c < N; c++)
        p[layout == mem_row_major ? r * ldm + c : c * ldm + r] = static_cast<P>(f.x[r * N + c]);
  }
  cuda_emu::warp_barrier();
}

template <class E>
auto widen(E value) {
  if constexpr (std::is_integral<E>::value) {
    return static_cast<int>(value);
  } else {
    return static_cast<float>(value);
  }
}

inline float tf32(float value) {
  return __uint_as_float(__float_as_uint(value) & 0xffffe000u);
}

template <int M, int N, int K, class TA, class LA, class TB, class LB, class TC, class TD>
void mma_sync(fragment<accumulator, M, N, K, TD>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
              const fragment<matrix_b, M, N, K, TB, LB>& b,
              const fragment<accumulator, M, N, K, TC>& c) {
  constexpr bool is_tf32 = std::is_same<TA, precision::tf32>::value;
  using Acc = decltype(widen(a.x[0]));
  static_assert(sizeof(Acc) * M * N <= sizeof(cuda_emu::Warp::tile), "WMMA tile size");
  // Every lane holds the same fragments: each computes a share of the elements into the
  // warp's tile, and after a warp barrier all copy the whole product (d may be c).
  cuda_emu::Warp& warp = cuda_emu::my_warp();
  Acc* out = reinterpret_cast<Acc*>(warp.tile);
  unsigned lane = cuda_emu::my_lane(), lanes = __builtin_popcount(warp.live_mask);
  unsigned rank = __builtin_popcount(warp.live_mask & ((1u << lane) - 1u));
  for (unsigned e = rank; e < static_cast<unsigned>(M * N); e += lanes) {
    int i = static_cast<int>(e) / N, j = static_cast<int>(e) % N;
    Acc sum = static_cast<Acc>(c.x[e]);
    for (int k = 0; k < K; k++) {
      Acc x = widen(a.x[i * K + k]), y = widen(b.x[k * N + j]);
      if constexpr (is_tf32) {
        x = tf32(x);
        y = tf32(y);
      }
      sum += x * y;
    }
    out[e] = sum;
  }
  cuda_emu::warp_barrier();
  using D = typename fragment<accumulator, M, N, K, TD>::element_type;
  for (int e = 0; e < M * N; e++) d.x[e] = static_cast<D>(out[e]);
  cuda_emu::warp_barrier();
}

}  // namespace wmma
}  // namespace nvcuda

// ---- warpgroup tensor cores (sm_90 wgmma) ----------------------------------------------------
// Shared-window addresses are offsets into the launch's dynamic shared memory, which is where
// kernels using wgmma keep their tiles. A `wgmma.mma_async.m64nNk16` is queued and runs when
// a `wgmma.wait_group` lets no more of its group stay in flight: as late as the device may run
// it, so a tile refilled too early or an accumulator read before its wait gives a wrong
// answer here too. It then reads both factors through their matrix descriptors (128-byte
// swizzle) and adds into the thread's N/2 accumulators, laid out as on the device: warp w
// of the warpgroup holds rows 16w..16w+15; accumulator i of lane l is row
// 16w + l/4 + 8 * (i % 4 / 2), column 8 * (i / 4) + 2 * (l % 4) + i % 2.
namespace cuda_emu {

inline std::uint64_t shared_offset(const void* p) {
  auto offset = static_cast<const unsigned char*>(p) - dynamic_shared();
  if (offset < 0 || offset >= (1 << 18)) {
    std::fprintf(stderr, "cuda_emulate: a wgmma operand outside dynamic shared memory\n");
    std::abort();
  }
  return static_cast<std::uint64_t>(offset);
}

// Element (mn, k) of a 16-bit factor described by `desc`, in the 128-byte swizzled layout
// (layout type 1, the only one tunehub emits): rows of 128 bytes along k (K-major) or along
// M/N (`mn_major`), 8 rows to a 1024-byte atom; SBO steps between atoms along the rows'
// direction, LBO (M/N-major) between atoms along the 128-byte rows. The hardware then
// exchanges the 16-byte chunks of each row: address bits 4-6 ^= bits 7-9 (dynamic shared
// memory is 1024-byte aligned, here as on the device).
template <class T>
float descriptor_element(std::uint64_t desc, bool mn_major, unsigned mn, unsigned k) {
  if ((desc >> 62) != 1) {
    std::fprintf(stderr, "cuda_emulate: a wgmma descriptor without the 128-byte swizzle\n");
    std::abort();
  }
  std::uint64_t start = (desc & 0x3FFFu) << 4;
  std::uint64_t lbo = ((desc >> 16) & 0x3FFFu) << 4, sbo = ((desc >> 32) & 0x3FFFu) << 4;
  std::uint64_t at = mn_major ? start + (mn / 64) * lbo + (k / 8) * sbo + (k % 8) * 128 + (mn % 64) * 2
                              : start + (mn / 8) * sbo + (mn % 8) * 128 + k * 2;
  at ^= ((at >> 7) & 7) << 4;
  return static_cast<float>(*reinterpret_cast<const T*>(dynamic_shared() + at));
}

// The thread's 2 rows and n/4 columns are read once each, then multiplied.
template <class T>
void wgmma_now(float* d, int n, std::uint64_t a, std::uint64_t b, int trans_a, int trans_b) {
  unsigned t = current->running % 128, warp = t / 32, lane = t % 32;
  float rows[2][16], cols[128][16];
  for (unsigned r = 0; r < 2; r++)
    for (unsigned k = 0; k < 16; k++)
      rows[r][k] = descriptor_element<T>(a, trans_a, 16 * warp + lane / 4 + 8 * r, k);
  for (int c = 0; c < n / 4; c++)
    for (unsigned k = 0; k < 16; k++)
      cols[c][k] = descriptor_element<T>(b, trans_b, 8 * (c / 2) + 2 * (lane % 4) + c % 2, k);
  for (int i = 0; i < n / 2; i++) {
    const float* row = rows[i % 4 / 2];
    const float* col = cols[2 * (i / 4) + i % 2];
    float sum = 0.0f;
    for (unsigned k = 0; k < 16; k++) sum += row[k] * col[k];
    d[i] += sum;
  }
}

template <class T>
void wgmma(float* d, int n, std::uint64_t a, std::uint64_t b, int trans_a, int trans_b) {
  Fiber& self = current->fibers[current->running];
  if (self.pending == MAX_PENDING_MMAS) {
    std::fprintf(stderr, "cuda_emulate: more than %u wgmmas in flight\n", MAX_PENDING_MMAS);
    std::abort();
  }
  self.mmas[self.pending++] = PendingMma{&wgmma_now<T>, d, n, trans_a, trans_b, a, b,
                                         self.committed};
}

inline void wgmma_commit() { current->fibers[current->running].committed++; }

// Runs, in issue order, the queued wgmmas of every group but the newest `in_flight`.
inline void wgmma_wait(unsigned in_flight) {
  Fiber& self = current->fibers[current->running];
  unsigned kept = 0;
  for (unsigned i = 0; i < self.pending; i++) {
    PendingMma& op = self.mmas[i];
    if (op.group + in_flight < self.committed)
      op.run(op.d, op.n, op.a, op.b, op.trans_a, op.trans_b);
    else
      self.mmas[kept++] = op;
  }
  self.pending = kept;
}

// ---- mbarriers (sm_90) ------------------------------------------------------------------------
// The 64-bit object in shared memory holds, as here only: the arrivals still missing in the
// current phase (bits 0-30), the phase's parity (bit 31) and the arrivals per phase (bits
// 32-62); the bytes of tensor copies the phase still waits for are kept beside it
// (`Launch::transactions`). A phase completes when both reach 0. A thread waiting on a phase
// that has not completed sleeps until it does, so threads that wait on each other forever are
// reported as a deadlock.
inline void mbarrier_init(std::int64_t* bar, unsigned count) {
  *bar = static_cast<std::int64_t>((static_cast<std::uint64_t>(count) << 32) | count);
}

inline long long* mbarrier_pending(const std::int64_t* bar) {
  Launch& launch = *current;
  for (unsigned i = 0; i < launch.transaction_barriers; i++)
    if (launch.transactions[i].bar == bar) return &launch.transactions[i].bytes;
  return nullptr;
}

inline long long& mbarrier_bytes(const std::int64_t* bar) {
  Launch& launch = *current;
  if (long long* found = mbarrier_pending(bar)) return *found;
  if (launch.transaction_barriers == MAX_TRANSACTION_BARRIERS) {
    std::fprintf(stderr, "cuda_emulate: more than %u mbarriers with tensor copies\n",
                 MAX_TRANSACTION_BARRIERS);
    std::abort();
  }
  launch.transactions[launch.transaction_barriers] = {bar, 0};
  return launch.transactions[launch.transaction_barriers++].bytes;
}

// Completes the current phase once no arrival and no byte is missing: the waiters wake.
inline void mbarrier_settle(std::int64_t* bar) {
  auto word = static_cast<std::uint64_t>(*bar);
  std::uint64_t expected = word >> 32, phase = (word >> 31) & 1;
  const long long* bytes = mbarrier_pending(bar);
  if ((word & 0x7fffffffu) != 0 || (bytes != nullptr && *bytes != 0)) return;
  for (unsigned t = 0; t < current->threads; t++)
    if (current->fibers[t].wait == AT_MBARRIER && current->fibers[t].awaited == bar)
      current->fibers[t].wait = RUNNABLE;
  *bar = static_cast<std::int64_t>(expected << 32 | (phase ^ 1) << 31 | expected);
}

inline void mbarrier_arrive(std::int64_t* bar) {
  auto word = static_cast<std::uint64_t>(*bar);
  if ((word & 0x7fffffffu) == 0) {
    std::fprintf(stderr, "cuda_emulate: an mbarrier arrival beyond its count\n");
    std::abort();
  }
  *bar = static_cast<std::int64_t>(word - 1);
  mbarrier_settle(bar);
}

// The current phase also waits for `bytes` of tensor copies (`mbarrier.expect_tx`).
inline void mbarrier_expect(std::int64_t* bar, unsigned bytes) { mbarrier_bytes(bar) += bytes; }

// Until the phase of `parity` has completed: the current phase has the other parity.
inline void mbarrier_wait(std::int64_t* bar, unsigned parity) {
  Fiber& self = current->fibers[current->running];
  while (((static_cast<std::uint64_t>(*bar) >> 31) & 1) == (parity & 1)) {
    self.wait = AT_MBARRIER;
    self.awaited = bar;
    switch_context(self.context, current->scheduler);
  }
}

// ---- tensor memory access (sm_90 TMA) --------------------------------------------------------
// The host encodes a tensor map for the emulator as 16 words (`targets.cuda.tensor_map`): [0]
// the global address, [1] rank | element bytes << 8 | swizzle bytes << 16, [2..6] the
// dimensions and [11..15] the box, innermost first, [7..10] the byte strides of dimensions 1
// to 4. A copy lands at once: the box, element by element in its order (innermost fastest),
// out-of-range elements as zeros, into shared memory at `dst` with the swizzle applied to the
// address (bits 4-6 ^= bits 7-9, as `descriptor_element` reads it), then its bytes count
// against the mbarrier, which must have been told to expect them. A store (`tensor_store`)
// lands at once too, the box's elements inside the tensor read back the same way, so the
// bulk group's commit and waits have nothing left to wait for.
//
// `tensor_box` visits each element of the box at `coords`: its shared-memory address from
// `shared` (swizzled), its global address (null outside the tensor), its bytes.
template <class Visit>
void tensor_box(const void* shared, const void* map, const int* coords, unsigned rank,
                Visit visit) {
  const auto* w = static_cast<const std::uint64_t*>(map);
  std::uint64_t size = (w[1] >> 8) & 0xff, swizzle = (w[1] >> 16) & 0xffff;
  const std::uint64_t *dims = w + 2, *strides = w + 7, *box = w + 11;
  std::uint64_t start = shared_offset(shared), total = 1;
  for (unsigned d = 0; d < rank; d++) total *= box[d];
  if ((w[1] & 0xff) != rank || (swizzle != 0 && (box[0] * size != swizzle || start % 1024))) {
    std::fprintf(stderr, "cuda_emulate: a tensor copy whose map, box or address does not fit\n");
    std::abort();
  }
  for (std::uint64_t e = 0; e < total; e++) {
    unsigned char* global = reinterpret_cast<unsigned char*>(w[0]);
    bool inside = true;
    std::uint64_t rest = e;
    for (unsigned d = 0; d < rank; d++) {
      long long at = coords[d] + static_cast<long long>(rest % box[d]);
      rest /= box[d];
      inside = inside && at >= 0 && static_cast<std::uint64_t>(at) < dims[d];
      global += at * static_cast<long long>(d == 0 ? size : strides[d - 1]);
    }
    std::uint64_t at = start + e * size;
    if (swizzle) at ^= ((at >> 7) & 7) << 4;
    visit(dynamic_shared() + at, inside ? global : nullptr, size);
  }
}

inline void tensor_copy(void* dst, const void* map, const int* coords, unsigned rank,
                        std::int64_t* bar) {
  long long total = 0;
  tensor_box(dst, map, coords, rank, [&](unsigned char* shared, unsigned char* global, int size) {
    if (global != nullptr)
      std::memcpy(shared, global, size);
    else
      std::memset(shared, 0, size);
    total += size;
  });
  long long& bytes = mbarrier_bytes(bar);
  bytes -= total;
  if (bytes < 0) {
    std::fprintf(stderr, "cuda_emulate: a tensor copy's bytes were not expected first\n");
    std::abort();
  }
  mbarrier_settle(bar);
}

inline void tensor_store(const void* src, const void* map, const int* coords, unsigned rank) {
  tensor_box(src, map, coords, rank, [](unsigned char* shared, unsigned char* global, int size) {
    if (global != nullptr) std::memcpy(global, shared, size);
  });
}

}  // namespace cuda_emu

inline float __float_to_tf32(float value) {
  // cvt.rna.tf32.f32: round to nearest, ties away from zero, onto a 10-bit mantissa.
  unsigned bits = __float_as_uint(value);
  if ((bits & 0x7f800000u) != 0x7f800000u) bits += 0x1000u;
  return __uint_as_float(bits & 0xffffe000u);
}
