"""The CPU's packed GEMM template of contraction stages, lowered to loop IR, in its parts:

* `tiling`: what a config decides before any loop is built (tile, blocks, axis groups, k);
* `relayout`: the copies that lay the sides' tensors and the output out as the loops walk them;
* `packing`: the panels each side is packed into, and the packer that evaluates it there;
* `microkernel`: the register tile of vector accumulators and its k loop of fmas;
* `stores`: a finished tile through the stage's epilogue into the output;
* `template`: the blocks that tie them together.

Packing, the relayout copies and the stores take narrow inputs (a k group, lanes, panel
layouts, an output), so that another contraction template can bring its own tiling and
microkernel and share them. `targets.cpu.schedule.contraction` owns the knobs and
constraints; the module doc there describes the loop structure.
"""
