"""The CPU's packed GEMM template of contraction stages, lowered to loop IR.
`targets.cpu.schedule.contraction` owns the knobs and constraints; the module doc there
describes the loop structure.
"""
