"""The CPU stage schedules: the packed GEMM template of contractions, reductions, injective
maps and the fallback; the table of which applies to which stage class is
`targets.cpu.compiler`."""
