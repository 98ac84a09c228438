// Stands in for the CUDA toolkit header of this name: cuda_emulate.h (included first)
// provides everything kernels use from it.
#pragma once
