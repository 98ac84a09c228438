"""The CUDA dialect: a thin layer over `CStyleRenderer` for GPU functions.

A GPU function (see "GPU concepts" in `compiler.loop.nodes`) becomes one `extern "C" __global__`
kernel per launch (`targets.cuda.launches`), each taking every argument (inputs, outputs,
workspaces, symbols, then the tensor maps its TMA copies and stores go through, as
`__grid_constant__` values) and bounded by `__launch_bounds__` of its block. Block and thread
bindings become `const int64_t` copies of `blockIdx`/`threadIdx` (a thread binding smaller
than the block is guarded), shared arrays `__shared__` arrays (or slices of dynamic shared
memory past 48 KiB), barriers `__syncthreads()`, shuffles `__shfl_*_sync` over the full warp,
asynchronous copies `cp.async` (16-byte ones bypass L1, `.cg`; 4- and 8-byte ones cannot, `.ca`).
16-bit floats are `__half`/`__nv_bfloat16` converted by the `cuda_fp16.h`/`cuda_bf16.h`
intrinsics; float32 math is the CUDA math library (`expf`, `erff`, ...). Vector values exist
only as `float2`/`float4` (and `int2`/`int4`, `uint2`/`uint4`) loads, stores and lanes: no
vector arithmetic; a vector of 16-bit floats is its bits (`uint32_t`, `uint2`, `uint4`), each
lane widened where it is read.

The source also builds with g++ and the CPU emulation header, which defines the CUDA names
used here; the CUDA headers are only included under nvcc (`__CUDACC__`). Inline PTX lives only
in small helpers (`_ptx_helper`), each with a C++ body under the emulator's `TUNEHUB_EMULATE`
that does the same thing at once: a `cp.async` copies (and zero-fills) immediately, commit and
wait are empty, and the barrier after the wait stays.
"""

from __future__ import annotations

import math
from typing import ClassVar

from tunehub.compiler import dtypes
from tunehub.compiler.ir import Binary, Call, Cast, Const, Expr, Load
from tunehub.compiler.loop import (
    BLOCK_KINDS,
    THREAD_KINDS,
    Decl,
    For,
    Function,
    as_expr,
    const_value,
    lanes,
    scalar,
    stmts,
)
from tunehub.compiler.render.cstyle import CStyleRenderer, rounded, widened
from tunehub.compiler.render.helpers import CODES, compute
from tunehub.targets.cuda.launches import Launch, guarded, launches, tensor_maps
from tunehub.targets.cuda.loop import (
    AsyncCopy,
    BulkGroup,
    Mbarrier,
    NamedBarrier,
    SharedMatrix,
    TensorCopy,
    Wgmma,
    Wmma,
    tensor_map,
)

_HALF = {
    "float16": {
        "load": "  return __half2float(x);",
        "store": "  return __float2half_rn(x);",
    },
    "bfloat16": {
        "load": "  return __bfloat162float(x);",
        "store": "  return __float2bfloat16_rn(x);",
    },
}
# Per 16-bit float type: the value of 16 bits, a pair's type, and two floats rounded to one.
_HALF_BITS = {
    "float16": ("__ushort_as_half", "__half2", "__floats2half2_rn"),
    "bfloat16": ("__ushort_as_bfloat16", "__nv_bfloat162", "__floats2bfloat162_rn"),
}
_VECTORS = {
    "float32x2": "float2",
    "float32x4": "float4",
    "int32x2": "int2",
    "int32x4": "int4",
    "uint32x2": "uint2",
    "uint32x4": "uint4",
}
_RAW_WORDS = {2: "uint32_t", 4: "uint2", 8: "uint4"}  # a 16-bit float vector's bits, by lanes
_HEADERS = {"float16": "cuda_fp16.h", "bfloat16": "cuda_bf16.h"}
_LANES = "xyzw"
_FULL_MASK = "0xffffffffu"
_SHUFFLES = {"shfl_xor": "__shfl_xor_sync", "shfl_down": "__shfl_down_sync"}
_DYNAMIC = "tunehub_shared"
_TENSOR_MAP = "TunehubTensorMap"  # the emulator defines its own (`cuda_emulate.h`)
_WGMMA_TYPES = {"float16": "f16", "bfloat16": "bf16"}
_WGMMA_SYNC = {
    "fence": "wgmma.fence.sync.aligned",
    "commit": "wgmma.commit_group.sync.aligned",
    "proxy_fence": "fence.proxy.async.shared::cta",
}


# Integers below 2^23 are exact in a float32 mantissa (see `CUDARenderer._expr_Cast`).
_MANTISSA = 1 << 23


def _below(expr: Expr, limit: int) -> bool:
    """Whether integer `expr` is provably in [0, limit): a constant, a mask by a constant
    below it (whatever the other side's sign), or a conversion of such between integers."""
    if isinstance(expr, Const):
        return isinstance(expr.value, int) and 0 <= expr.value < limit
    if isinstance(expr, Binary) and expr.op == "&":
        return any(isinstance(e, Const) and _below(e, limit) for e in (expr.a, expr.b))
    if isinstance(expr, Cast) and dtypes.is_int(expr.dtype) and dtypes.is_int(expr.x.dtype):
        return _below(expr.x, limit)
    return False


def _small_int(expr: Expr, limit: int) -> tuple[Expr, int] | None:
    """(u, c) where integer `expr` is `u - c` (or `u`, c = 0) with 0 <= u, c < limit."""
    if not dtypes.is_int(expr.dtype) or lanes(expr.dtype) > 1:
        return None
    u, c = expr, 0
    if isinstance(expr, Binary) and expr.op == "-" and isinstance(expr.b, Const):
        u, c = expr.a, int(expr.b.value)
    return (u, c) if 0 <= c < limit and _below(u, limit) else None


def _small_times_half(value: Expr) -> tuple[Expr, int, Load] | None:
    """(u, c, load) where float32 `value` is `float32(u - c) * float32(load)`, `load` a
    scalar float16 element of a buffer and `u - c` a `_small_int` below 1024."""
    if not (isinstance(value, Binary) and value.op == "*" and value.dtype == "float32"):
        return None
    for a, b in ((value.a, value.b), (value.b, value.a)):
        small, load = widened(a), widened(b)
        if a is small or not isinstance(load, Load) or load.dtype != "float16":
            continue
        found = _small_int(small, 1024)
        if found is not None:
            return (*found, load)
    return None


class CUDARenderer(CStyleRenderer):
    language = "cuda"
    helper_prefix = "static __device__ __forceinline__ "
    restrict = "__restrict__"
    restrict_reread = False
    storage_types: ClassVar[dict[str, str]] = {
        **CStyleRenderer.types,
        "float16": "__half",
        "bfloat16": "__nv_bfloat16",
    }
    float32_math: ClassVar[dict[str, str]] = {}
    barrier = "__syncthreads();"
    warp_barrier = "__syncwarp();"
    launch: Launch  # the kernel being printed

    def preamble(self, fn: Function) -> list[str]:
        used = {b.dtype for b in (*fn.inputs, *fn.outputs)} | {w.dtype for w in fn.workspaces}
        used |= {
            d for d in ("float16", "bfloat16") for h in self.helpers if h.endswith("_" + CODES[d])
        }
        tensor_cores = [s for s in stmts(fn.body) if isinstance(s, Wmma)]
        used |= {s.dtype for s in tensor_cores if s.op == "fragment"}
        used |= {s.dtype for s in stmts(fn.body) if isinstance(s, Wgmma) and s.op == "mma"}
        used |= {s.dtype for s in stmts(fn.body) if isinstance(s, Decl) and s.shared}
        lines = ["#include <math.h>", "#include <stdint.h>"]
        halves = [f"#include <{h}>" for d, h in _HEADERS.items() if d in used]
        halves += ["#include <mma.h>"] if tensor_cores else []
        if halves:
            lines += ["#ifdef __CUDACC__", *halves, "#endif"]
        if tensor_maps(fn):  # a CUtensorMap's 128 opaque bytes, as the driver encodes them
            struct = f"struct __align__(64) {_TENSOR_MAP} {{ unsigned long long opaque[16]; }};"
            lines += ["#ifndef TUNEHUB_EMULATE", struct, "#endif"]
        return [*lines, ""]

    def half_helpers(self, dtype: str, vectorized: bool) -> dict[str, str]:
        return _HALF[dtype]

    def loop_pragmas(self, loop: For, collapse: int, reduction: list[tuple[str, str]]) -> list[str]:
        if loop.kind in ("parallel", "vectorize"):
            raise ValueError(f"CUDA has no {loop.kind} loops: bind blocks and threads instead")
        if loop.kind == "unroll":
            factor = loop.factor or const_value(loop.extent)
            return [f"#pragma unroll {factor}" if factor else "#pragma unroll"]
        return []

    # ---------------------------------------------------------------- kernels

    def function(self, fn: Function) -> list[str]:
        if any(ws.per_thread for ws in fn.workspaces):
            raise ValueError("CUDA functions have no per-thread workspaces")
        params = ", ".join(
            [
                self.params(fn, workspaces=True),
                *(f"const __grid_constant__ {_TENSOR_MAP} {name}" for name in tensor_maps(fn)),
            ]
        )
        lines: list[str] = []
        for launch in launches(fn):
            self.launch = launch
            head = f"__launch_bounds__({launch.threads}) {launch.entry}({params})"
            lines.append(f'extern "C" __global__ void {head} {{')
            if launch.dynamic:  # wgmma's swizzle atoms need 1024 bytes (WMMA 32, cp.async 16)
                lines.append(f"{self.indent}extern __shared__ __align__(1024) float4 {_DYNAMIC}[];")
            lines += [*self.stmt(launch.body, 1), "}", ""]
        return lines[:-1]

    def bound_loop(self, loop: For, depth: int) -> list[str]:
        pad = self.indent * depth
        index = f"(int64_t){loop.kind}"
        if const_value(loop.start) != 0:
            index = f"{self.expr(loop.start)} + {index}"
        if loop.kind in BLOCK_KINDS:
            return [f"{pad}const int64_t {loop.var} = {index};", *self.stmt(loop.body, depth)]
        assert loop.kind in THREAD_KINDS
        head = "{"
        if guarded(loop, self.launch.block):
            head = f"if ({loop.kind} < {self.expr(loop.extent)}) {{"
        inner = self.indent * (depth + 1)
        return [
            f"{pad}{head}",
            f"{inner}const int64_t {loop.var} = {index};",
            *self.stmt(loop.body, depth + 1),
            f"{pad}}}",
        ]

    def shared_decl(self, stmt: Decl, depth: int) -> list[str]:
        pad = self.indent * depth
        half = dtypes.is_half(stmt.dtype)
        t = self.storage_types[stmt.dtype] if half else self.ctype(stmt.dtype)
        if self.launch.dynamic:
            offset = self.launch.shared_offsets[stmt.name]
            return [f"{pad}{t}* {stmt.name} = ({t}*)((unsigned char*){_DYNAMIC} + {offset});"]
        align = "__align__(32) " if half else ""  # WMMA loads want 32-byte aligned tiles
        return [f"{pad}__shared__ {align}{t} {stmt.name}[{math.prod(stmt.shape)}];"]

    def _stmt_Wmma(self, stmt: Wmma, depth: int) -> list[str]:
        pad, ns = self.indent * depth, "nvcuda::wmma::"
        if stmt.op == "fragment":
            use = {"a": "matrix_a", "b": "matrix_b", "acc": "accumulator"}[stmt.use]
            element = self.storage_types[stmt.dtype]
            layout = ""
            if stmt.use != "acc":
                major = stmt.layout or ("row" if stmt.use == "a" else "col")
                layout = f", {ns}{major}_major"
            return [f"{pad}{ns}fragment<{ns}{use}, 16, 16, 16, {element}{layout}> {stmt.frag};"]
        if stmt.op == "fill":
            return [f"{pad}{ns}fill_fragment({stmt.frag}, 0.0f);"]
        if stmt.op == "mma":
            args = f"{stmt.frag}, {stmt.a}, {stmt.b}, {stmt.frag}"
            return [f"{pad}{ns}mma_sync({args});"]
        at = f"{stmt.buffer} + {self.expr(stmt.offset)}"
        if stmt.op == "load":
            return [f"{pad}{ns}load_matrix_sync({stmt.frag}, {at}, {stmt.ld});"]
        layout = f"{ns}mem_row_major"
        return [f"{pad}{ns}store_matrix_sync({at}, {stmt.frag}, {stmt.ld}, {layout});"]

    def _stmt_AsyncCopy(self, stmt: AsyncCopy, depth: int) -> list[str]:
        pad = self.indent * depth
        if stmt.op == "commit":
            ptx = '"cp.async.commit_group;\\n" ::: "memory"'
            return [f"{pad}{self._ptx_helper('cp_async_commit', '', ptx)}();"]
        if stmt.op == "wait":
            ptx = f'"cp.async.wait_group {stmt.pending};\\n" ::: "memory"'
            return [f"{pad}{self._ptx_helper(f'cp_async_wait{stmt.pending}', '', ptx)}();"]
        assert stmt.src is not None
        buf = self._buffer(stmt.src.tensor)
        index = self._index(stmt.src.indices, tuple(as_expr(e) for e in buf.shape))
        size = stmt.size
        cache = "cg" if size == 16 else "ca"
        ptx = (
            f'"cp.async.{cache}.shared.global [%0], [%1], {size}, %2;\\n" :: '
            '"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src), "r"(bytes) : "memory"'
        )
        fallback = (
            "  __builtin_memcpy(dst, src, bytes);\n"
            f"  __builtin_memset((unsigned char*)dst + bytes, 0, {size} - bytes);"
        )
        params = "void* dst, const void* src, int bytes"
        helper = self._ptx_helper(f"cp_async{size}", params, ptx, fallback)
        bytes_ = str(size) if stmt.valid is None else f"(int)({self.expr(stmt.valid)})"
        dst = f"{stmt.buffer} + {self.expr(stmt.offset)}"
        return [f"{pad}{helper}({dst}, {self.name(buf.name)} + {index}, {bytes_});"]

    def _stmt_TensorCopy(self, stmt: TensorCopy, depth: int) -> list[str]:
        rank = len(stmt.box)
        coords = ", ".join(f"%{2 + d}" for d in range(rank))
        ints = [f"int c{d}" for d in range(rank)]
        names = ", ".join(f"c{d}" for d in range(rank))
        operands = (
            '      :: "r"((unsigned)__cvta_generic_to_shared(shared)), "l"((uint64_t)map), '
            + "".join(f'"r"(c{d}), ' for d in range(rank))
        )
        if stmt.store:
            name, bar = f"tensor_store{rank}d", ""
            ptx = (
                f'"cp.async.bulk.tensor.{rank}d.global.shared::cta.bulk_group'
                f' [%1, {{{coords}}}], [%0];\\n"\n' + operands.removesuffix(", ") + ' : "memory"'
            )
            fallback = f"  ::cuda_emu::tensor_store(shared, map, coords, {rank});"
        else:
            name, bar = f"tensor_copy{rank}d", ", int64_t* bar"
            ptx = (
                f'"cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile'
                f'.mbarrier::complete_tx::bytes [%0], [%1, {{{coords}}}], [%{2 + rank}];\\n"\n'
                + operands
                + '"r"((unsigned)__cvta_generic_to_shared(bar)) : "memory"'
            )
            fallback = f"  ::cuda_emu::tensor_copy(shared, map, coords, {rank}, bar);"
        fallback = f"  const int coords[{rank}] = {{{names}}};\n{fallback}"
        params = ", ".join([f"void* shared, const {_TENSOR_MAP}* map", *ints]) + bar
        helper = self._ptx_helper(name, params, ptx, fallback)
        args = [
            f"{stmt.buffer} + {self.expr(stmt.offset)}",
            f"&{tensor_map(stmt)}",
            *(f"(int)({self.expr(c)})" for c in stmt.coords),
        ]
        if not stmt.store:
            args.append(f"{stmt.barrier} + {self.expr(stmt.index)}")
        return [f"{self.indent * depth}{helper}({', '.join(args)});"]

    def _stmt_BulkGroup(self, stmt: BulkGroup, depth: int) -> list[str]:
        instruction = {
            "commit": "cp.async.bulk.commit_group",
            "wait_read": "cp.async.bulk.wait_group.read 0",
            "wait": "cp.async.bulk.wait_group 0",
        }[stmt.op]
        ptx = f'"{instruction};\\n" ::: "memory"'
        return [f"{self.indent * depth}{self._ptx_helper(f'bulk_{stmt.op}', '', ptx)}();"]

    def _stmt_NamedBarrier(self, stmt: NamedBarrier, depth: int) -> list[str]:
        ptx = '"bar.sync %0, %1;\\n" :: "r"(index), "r"(count) : "memory"'
        fallback = "  ::cuda_emu::named_barrier(index, count);"
        helper = self._ptx_helper("named_barrier", "unsigned index, unsigned count", ptx, fallback)
        index = f"(unsigned)({self.expr(stmt.index)})"
        return [f"{self.indent * depth}{helper}({index}, {stmt.count}u);"]

    def _stmt_Wgmma(self, stmt: Wgmma, depth: int) -> list[str]:
        pad = self.indent * depth
        if stmt.op == "mma":
            assert stmt.a is not None and stmt.b is not None
            a, b = self._descriptor(stmt.a), self._descriptor(stmt.b)
            mma = self._wgmma_helper(stmt)
            return [f"{pad}{mma}({stmt.acc} + {stmt.acc_offset}, {a}, {b});"]
        lines = []
        if stmt.op == "wait":
            ptx = f'"wgmma.wait_group.sync.aligned {stmt.pending};\\n" ::: "memory"'
            fallback = f"  ::cuda_emu::wgmma_wait({stmt.pending});"
            helper = self._ptx_helper(f"wgmma_wait{stmt.pending}", "", ptx, fallback)
        else:
            ptx = f'"{_WGMMA_SYNC[stmt.op]};\\n" ::: "memory"'
            fallback = "  ::cuda_emu::wgmma_commit();" if stmt.op == "commit" else ""
            helper = self._ptx_helper(f"wgmma_{stmt.op}", "", ptx, fallback)
        lines.append(f"{pad}{helper}();")
        if stmt.op in ("fence", "wait") and stmt.acc_size:
            lines.insert(
                len(lines) if stmt.op == "wait" else 0,
                f"{pad}{self._hold_helper(stmt.acc_size)}({stmt.acc});",
            )
        return lines

    def _stmt_Mbarrier(self, stmt: Mbarrier, depth: int) -> list[str]:
        pad = self.indent * depth
        if stmt.op == "fence_init":
            ptx = '"fence.mbarrier_init.release.cluster;\\n" ::: "memory"'
            return [f"{pad}{self._ptx_helper('mbarrier_fence_init', '', ptx)}();"]
        address = '"r"((unsigned)__cvta_generic_to_shared(bar))'
        if stmt.op == "init":
            ptx = (
                f'"mbarrier.init.shared::cta.b64 [%0], %1;\\n" :: {address}, "r"(count) : "memory"'
            )
            fallback = "  ::cuda_emu::mbarrier_init(bar, count);"
            params, extra = "int64_t* bar, unsigned count", f", {stmt.count}u"
        elif stmt.op == "wait":
            ptx = (
                '"{\\n.reg .pred done;\\nWAIT:\\n'
                "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\\n"
                '@!done bra WAIT;\\n}\\n"'
                f' :: {address}, "r"(parity) : "memory"'
            )
            fallback = "  ::cuda_emu::mbarrier_wait(bar, parity);"
            params, extra = (
                "int64_t* bar, unsigned parity",
                f", (unsigned)({self.expr(stmt.parity)})",
            )
        elif stmt.op == "expect":
            ptx = (
                '"mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\\n" :: '
                f'{address}, "r"(bytes) : "memory"'
            )
            fallback = "  ::cuda_emu::mbarrier_expect(bar, bytes);"
            params, extra = "int64_t* bar, unsigned bytes", f", {stmt.count}u"
        elif stmt.op == "arrive":
            ptx = f'"mbarrier.arrive.shared::cta.b64 _, [%0];\\n" :: {address} : "memory"'
            fallback = "  ::cuda_emu::mbarrier_arrive(bar);"
            params, extra = "int64_t* bar", ""
        else:
            ptx = (
                f'"cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\\n" :: {address} : "memory"'
            )
            fallback = "  ::cuda_emu::mbarrier_arrive(bar);"  # the copies have landed already
            params, extra = "int64_t* bar", ""
        helper = self._ptx_helper(f"mbarrier_{stmt.op}", params, ptx, fallback)
        return [f"{pad}{helper}({stmt.buffer} + {self.expr(stmt.index)}{extra});"]

    def _descriptor(self, matrix: SharedMatrix) -> str:
        """A call building the 64-bit matrix descriptor of `matrix` (128-byte swizzle, layout
        type 1 in bits 62-63; base offset 0, the tiles being 1024-byte aligned): its
        shared-window address, `lbo` and `sbo`, each in 16-byte units."""
        body = (
            "#ifdef TUNEHUB_EMULATE\n"
            "  uint64_t address = ::cuda_emu::shared_offset(p);\n"
            "#else\n"
            "  uint64_t address = (uint64_t)__cvta_generic_to_shared(p);\n"
            "#endif\n"
            "  return ((address & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) |\n"
            "         ((uint64_t)(sbo >> 4) << 32) | (1ull << 62);"
        )
        helper = self._helper(
            "wgmma_descriptor", "uint64_t", "const void* p, unsigned lbo, unsigned sbo", body
        )
        at = f"{matrix.buffer} + {self.expr(matrix.offset)}"
        return f"{helper}({at}, {matrix.lbo}u, {matrix.sbo}u)"

    def _wgmma_helper(self, stmt: Wgmma) -> str:
        """`wgmma.mma_async` of shape m64n`n`k16 with both factors in shared memory: the
        accumulators are its `n / 2` float registers per thread, named one by one."""
        assert stmt.a is not None and stmt.b is not None
        ty = _WGMMA_TYPES[stmt.dtype]
        trans = (int(not stmt.a.k_major), int(not stmt.b.k_major))
        name = f"wgmma_m64n{stmt.n}k16_{ty}_{trans[0]}{trans[1]}"
        count = stmt.n // 2
        registers = ", ".join(f"%{i}" for i in range(count))
        outputs = ", ".join(f'"+f"(d[{i}])' for i in range(count))
        instruction = (
            f"wgmma.mma_async.sync.aligned.m64n{stmt.n}k16.f32.{ty}.{ty} "
            f"{{{registers}}}, %{count}, %{count + 1}, p, 1, 1, {trans[0]}, {trans[1]};"
        )
        ptx = (
            f'"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{count + 2}, 0;\\n{instruction}\\n}}\\n"\n'
            f"      : {outputs}\n"
            '      : "l"(a), "l"(b), "n"(1)'
        )
        element = self.storage_types[stmt.dtype]
        fallback = f"  ::cuda_emu::wgmma<{element}>(d, {stmt.n}, a, b, {trans[0]}, {trans[1]});"
        params = "float* d, uint64_t a, uint64_t b"
        return self._ptx_helper(name, params, ptx, fallback)

    def _hold_helper(self, count: int) -> str:
        """Pins `count` accumulators in place: an empty asm that reads and writes each, so
        the compiler keeps their uses on the right side of a wgmma fence or wait."""
        body = (
            "#ifndef TUNEHUB_EMULATE\n"
            "#pragma unroll\n"
            f'  for (int i = 0; i < {count}; i++) asm volatile("" : "+f"(d[i])::"memory");\n'
            "#endif"
        )
        return self._helper(f"wgmma_hold{count}", "void", "float* d", body)

    def _ptx_helper(self, name: str, params: str, ptx: str, fallback: str = "") -> str:
        """A device helper running inline PTX `ptx` (the operands of `asm volatile`) on the
        GPU and the C++ `fallback` (nothing where empty) under the CPU emulator."""
        device = f"  asm volatile({ptx});"
        if fallback:
            body = f"#ifdef TUNEHUB_EMULATE\n{fallback}\n#else\n{device}\n#endif"
        else:
            body = f"#ifndef TUNEHUB_EMULATE\n{device}\n#endif"
        return self._helper(name, "void", params, body)

    def shuffle(self, fn: str, value: str, offset: str, dtype: str) -> str:
        dtype = compute(dtype)
        call = _SHUFFLES[fn]
        if dtypes.BITS[dtype] < 32 or dtype == "bool":
            wide = "int32_t" if dtypes.is_signed(dtype) else "uint32_t"
            inner = f"{call}({_FULL_MASK}, ({wide})({value}), (int)({offset}))"
            return f"(({self.types[dtype]}){inner})"
        return f"{call}({_FULL_MASK}, {value}, (int)({offset}))"

    # ---------------------------------------------------------------- vector values

    def ctype(self, dtype: str) -> str:
        """16-bit float vectors hold their bits (`lane_of` widens one lane at a time)."""
        if lanes(dtype) > 1 and dtypes.is_half(scalar(dtype)):
            if lanes(dtype) not in _RAW_WORDS:
                raise ValueError(f"CUDA has no vector type for {dtype}")
            return _RAW_WORDS[lanes(dtype)]
        dtype = compute(dtype)
        if lanes(dtype) == 1:
            return self.types[dtype]
        if dtype not in _VECTORS:
            raise ValueError(f"CUDA has no vector type for {dtype}")
        return _VECTORS[dtype]

    def _expr_Cast(self, expr: Cast) -> str:
        """A small integer `u - c` (0 <= u < 2^23) to float32 by its bits: `u` or'ed into the
        mantissa of 2^23, minus 2^23 + c, exact. Dequantizing a nibble then costs an `or` and
        an add at the full rate where `cvt` (I2F) runs at a fraction of it (16 per cycle per
        SM against 64 to 128 float adds on sm_80 and sm_90), which bounds an int4 GEMV below
        bandwidth."""
        found = _small_int(expr.x, _MANTISSA) if expr.dtype == "float32" else None
        if found is None:
            return super()._expr_Cast(expr)
        u, c = found
        bits = f"(0x4B000000u | {self.value(u, 'uint32')})"
        return f"(__uint_as_float{bits} - {_MANTISSA + c}.0f)"

    def _half_value(self, value: Expr, dtype: str) -> str:
        """A small integer `u - c` (0 <= u, c < 1024) times a float16 element, stored as
        float16, is computed in float16: `u` or'ed into the mantissa of 1024, minus 1024 + c,
        then `__hmul`. Both operands are exact in float16 and their float32 product is exact,
        so the one rounding is the same as float32 math rounded by the store, and the
        conversion (16 per cycle per SM, as `cvt`) is gone: the int4 prologue of a
        tensor-core tile converts no value."""
        found = _small_times_half(value) if dtype == "float16" else None
        if found is None or found[2].tensor in self.locals:
            return super()._half_value(value, dtype)
        u, c, scale = found
        small = f"__ushort_as_half((unsigned short)(0x6400u | {self.value(u, 'uint32')}))"
        bias = f"__ushort_as_half((unsigned short){0x6400 + c}u)"
        return f"__hmul(__hsub({small}, {bias}), {self._element(scale.tensor, scale.indices)})"

    def lane_of(self, vector_text: str, lane: int, dtype: str) -> str:
        element = scalar(dtype)
        if not dtypes.is_half(element):
            return f"{vector_text}.{_LANES[lane]}"
        word = vector_text if lanes(dtype) == 2 else f"{vector_text}.{_LANES[lane // 2]}"
        bits = f"(unsigned short)({word} >> 16)" if lane % 2 else f"(unsigned short){word}"
        from_bits = _HALF_BITS[element][0]
        return f"{self.half('load', element)}({from_bits}({bits}))"

    def _expr_Call(self, expr: Call) -> str:
        """`pack` makes 2, 4 or 8 16-bit floats into the words of a 4-, 8- or 16-byte store,
        a pair per word (one conversion instruction each, `cvt.rn.f16x2`)."""
        if expr.fn != "pack":
            return super()._expr_Call(expr)
        element, n = scalar(expr.dtype), lanes(expr.dtype)
        if n not in _RAW_WORDS or not dtypes.is_half(element) or len(expr.args) != n:
            raise ValueError(f"CUDA packs 2, 4 or 8 16-bit floats, not {expr.dtype}")
        _, kind, pair = _HALF_BITS[element]
        body = f"  {kind} h = {pair}(a, b);\n  return *reinterpret_cast<uint32_t*>(&h);"
        name = self._helper(f"pack_{CODES[element]}x2", "uint32_t", "float a, float b", body)
        values = [self.value(rounded(arg, element), "float32") for arg in expr.args]
        words = [f"{name}({a}, {b})" for a, b in zip(values[::2], values[1::2], strict=True)]
        return words[0] if n == 2 else f"make_{_RAW_WORDS[n]}({', '.join(words)})"

    def _lane_helper(self, kind: str, dtype: str) -> str:
        """Aligned vector loads and stores (the schedule guarantees the alignment)."""
        vt, n, element = self.ctype(dtype), lanes(dtype), scalar(dtype)
        st = self.storage_types[element]
        name = f"{kind}_{CODES[element]}x{n}"
        if kind == "vload":
            body = f"  return *reinterpret_cast<const {vt}*>(p);"
            return self._helper(name, vt, f"const {st}* p", body)
        if kind == "vstore":
            return self._helper(
                name, "void", f"{st}* p, {vt} v", f"  *reinterpret_cast<{vt}*>(p) = v;"
            )
        body = f"  return make_{vt}({', '.join(['x'] * n)});"
        return self._helper(name, vt, f"{self.types[compute(element)]} x", body)
